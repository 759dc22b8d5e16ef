//! The prepared table: rows of a file or dataset, validated and measured in the
//! coordinator, written once as msgpack, and read once by every worker during its
//! handshake. Requests then come from memory (no round trip to the coordinator).

use super::sampler::SlotSampler;
use llmsurge_proto::{Sampling, TableSpec};
use llmsurge_worker::{MediaPart, Message, PreparedRequest, Prompt, RequestSource};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Bumped when [`Row`] changes shape.
pub const TABLE_VERSION: u32 = 1;

/// One chat message of a row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// The prompt of a row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowPrompt {
    /// One user prompt.
    Text(String),
    /// A conversation (system, user and assistant turns).
    Messages(Vec<RowMessage>),
}

impl RowPrompt {
    /// All the text of the prompt, for counting.
    pub fn texts(&self) -> Vec<&str> {
        match self {
            RowPrompt::Text(t) => vec![t.as_str()],
            RowPrompt::Messages(m) => m.iter().map(|m| m.content.as_str()).collect(),
        }
    }
}

/// One prepared request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// The prompt.
    pub prompt: RowPrompt,
    /// Its length under the run's tokenizer (message contents added up).
    pub prompt_tokens: u32,
    /// Output tokens to ask for, when the row says.
    pub output_tokens: Option<u32>,
    /// Images sent after the prompt's text: URLs, or data URLs of image files read when
    /// the data was loaded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
}

/// The request prompt of a row's prompt.
pub fn prompt_of(prompt: &RowPrompt) -> Prompt {
    match prompt {
        RowPrompt::Text(t) => Prompt::Text(t.clone()),
        RowPrompt::Messages(m) => Prompt::Messages(
            m.iter()
                .map(|m| Message {
                    role: m.role.clone(),
                    content: m.content.clone(),
                })
                .collect(),
        ),
    }
}

impl Row {
    /// The request of the row; `media` are its images, shared (see [`TableSource`]).
    fn prepared(&self, media: &[MediaPart]) -> PreparedRequest {
        let prompt = if media.is_empty() {
            prompt_of(&self.prompt)
        } else {
            // A row with images is one user message: its text, then its images.
            Prompt::Media {
                text: self.prompt.texts().join("\n"),
                parts: media.to_vec(),
            }
        };
        PreparedRequest {
            prompt,
            prompt_tokens: Some(self.prompt_tokens),
            max_tokens: self.output_tokens,
            model: None,
            user: None,
            session: None,
        }
    }
}

/// The image parts of a row's image URLs. A data URL is decoded once, here, for its exact
/// bytes and pixel size (the request log records them); a URL the server fetches has
/// neither (0).
fn image_parts(images: &[String]) -> Vec<MediaPart> {
    use base64::Engine;
    images
        .iter()
        .map(|url| {
            let decoded = url
                .split_once(";base64,")
                .and_then(|(_, b64)| base64::engine::general_purpose::STANDARD.decode(b64).ok());
            let (width, height) = decoded
                .as_deref()
                .and_then(super::media::image_dimensions)
                .unwrap_or((0, 0));
            MediaPart::Image {
                bytes: decoded.map_or(0, |d| d.len() as u64),
                url: std::sync::Arc::from(url.as_str()),
                width,
                height,
            }
        })
        .collect()
}

#[derive(Serialize, Deserialize)]
struct TableFile {
    version: u32,
    rows: Vec<Row>,
}

/// A table file that is removed when dropped (the coordinator owns it for the run).
#[derive(Debug)]
pub struct TableFileGuard {
    path: PathBuf,
}

impl TableFileGuard {
    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TableFileGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes `rows` to a new table file in the temporary directory.
pub fn write_table(rows: &[Row]) -> Result<TableFileGuard, String> {
    let bytes = rmp_serde::to_vec_named(&TableFile {
        version: TABLE_VERSION,
        rows: rows.to_vec(),
    })
    .map_err(|e| format!("cannot encode the prepared data: {e}"))?;
    write_bytes("table", &bytes)
}

/// Writes a prepared file of `kind` (`table`, `trace`) to the temporary directory.
pub fn write_bytes(kind: &str, bytes: &[u8]) -> Result<TableFileGuard, String> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "llmsurge-{}-{n}.{kind}.msgpack",
        std::process::id()
    ));
    let guard = TableFileGuard { path };
    std::fs::write(&guard.path, bytes).map_err(|e| {
        format!(
            "cannot write the prepared data to {}: {e}",
            guard.path.display()
        )
    })?;
    Ok(guard)
}

/// Reads a table file.
pub fn read_table(path: &Path) -> Result<Vec<Row>, String> {
    let bytes = std::fs::read(path)
        .map_err(|e| format!("cannot read the prepared data {}: {e}", path.display()))?;
    let file: TableFile = rmp_serde::from_slice(&bytes)
        .map_err(|e| format!("the prepared data {} is corrupt: {e}", path.display()))?;
    if file.version != TABLE_VERSION {
        return Err(format!(
            "the prepared data {} has version {}, expected {TABLE_VERSION}",
            path.display(),
            file.version
        ));
    }
    Ok(file.rows)
}

/// A worker's source over a prepared table.
#[derive(Debug)]
pub struct TableSource {
    rows: Vec<Row>,
    /// Each row's images, made once so a request shares them instead of copying.
    media: Vec<Vec<MediaPart>>,
    sampler: SlotSampler,
}

impl TableSource {
    /// Loads the table of `spec`.
    pub fn open(spec: &TableSpec) -> Result<Self, String> {
        let rows = read_table(&spec.path)?;
        Ok(Self::new(rows, spec.sampling))
    }

    /// A source over `rows`.
    pub fn new(rows: Vec<Row>, sampling: Sampling) -> Self {
        let n = rows.len() as u64;
        let media = rows.iter().map(|r| image_parts(&r.images)).collect();
        Self {
            rows,
            media,
            sampler: SlotSampler::new(n, sampling),
        }
    }
}

impl RequestSource for TableSource {
    fn request(&mut self, slot: u64) -> Result<Option<PreparedRequest>, String> {
        Ok(self.sampler.row(slot).and_then(|r| {
            let r = r as usize;
            let media = self.media.get(r).map_or(&[][..], Vec::as_slice);
            self.rows.get(r).map(|row| row.prepared(media))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_round_trip_through_their_file() {
        let rows = vec![
            Row {
                prompt: RowPrompt::Text("hello".into()),
                prompt_tokens: 1,
                output_tokens: Some(4),
                images: vec!["https://example.com/a.png".into()],
            },
            Row {
                prompt: RowPrompt::Messages(vec![RowMessage {
                    role: "user".into(),
                    content: "hi".into(),
                }]),
                prompt_tokens: 1,
                output_tokens: None,
                images: vec![],
            },
        ];
        let guard = write_table(&rows).expect("write");
        assert_eq!(read_table(guard.path()).expect("read"), rows);
        let path = guard.path().to_path_buf();
        drop(guard);
        assert!(!path.exists(), "removed with its guard");
        let mut source = TableSource::new(rows, Sampling::default());
        let first = source.request(0).expect("request").expect("a row");
        assert!(matches!(
            &first.prompt,
            Prompt::Media { text, parts } if text == "hello" && parts.len() == 1
        ));
    }
}
