//! The prepared table: rows of a file or dataset, validated and measured in the
//! coordinator, written once as msgpack, and read once by every worker during its
//! handshake. Requests then come from memory (no round trip to the coordinator).

use super::hub::History;
use super::sampler::SlotSampler;
use llmsurge_proto::{Sampling, TableSpec, ThinkTime};
use llmsurge_worker::{
    MediaPart, Message, PreparedRequest, Prompt, RequestSource, SessionPlan, Turn,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Bumped when [`Row`] changes shape.
pub const TABLE_VERSION: u32 = 2;

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
    /// The row as a multi-turn session (`--data-args '{"sessions": true}'`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<RowSession>,
}

/// A conversation row replayed as a multi-turn session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowSession {
    /// The system prompt opening every turn.
    pub system: Option<String>,
    /// The turns, one per user message.
    pub turns: Vec<RowTurn>,
}

/// One turn of a [`RowSession`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowTurn {
    /// The new user message.
    pub user: String,
    /// Its length under the run's tokenizer.
    pub prompt_tokens: u32,
    /// Output tokens to ask for: the recorded reply's length, else the default.
    pub output_tokens: Option<u32>,
    /// The recorded reply, kept only for `history=recorded` (the live history needs
    /// none, and a large dataset's replies would be copied into every worker).
    pub reply: Option<String>,
}

/// How a session table's rows run (the same for every row).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableSessions {
    /// Which replies the history carries.
    pub history: History,
    /// The think time between turns, if any.
    pub think_time: Option<ThinkTime>,
    /// The seed think times are drawn from (with the session and turn).
    pub seed: u64,
    /// Send the session id as the OpenAI `user` field.
    pub session_user: bool,
    /// Send the session id in the configured session header.
    #[serde(default)]
    pub session_header: bool,
}

/// The request prompt of a row's prompt.
pub fn prompt_of(prompt: &RowPrompt) -> Prompt {
    match prompt {
        RowPrompt::Text(t) => Prompt::Text(t.clone()),
        RowPrompt::Messages(m) => Prompt::Messages(
            m.iter()
                .map(|m| Message::text(&m.role, m.content.clone()))
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
    /// Present when every row is a session.
    #[serde(default)]
    sessions: Option<TableSessions>,
}

/// A table file that is removed when dropped (the coordinator owns it for the run).
#[derive(Debug)]
pub struct TableFileGuard {
    /// The private directory (mode 0700) holding the file; removed with it on drop.
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl TableFileGuard {
    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes `rows` (sessions when `sessions` says how they run) to a new table file in the
/// temporary directory.
pub fn write_table(
    rows: &[Row],
    sessions: Option<&TableSessions>,
) -> Result<TableFileGuard, String> {
    let file = TableFile {
        version: TABLE_VERSION,
        rows: rows.to_vec(),
        sessions: sessions.cloned(),
    };
    write_prepared("table", "data", &file)
}

/// Writes `file`, a prepared file of `kind` (`table`, `trace`, `agent`; `what` names it
/// in errors), as msgpack to a new file in the temporary directory.
pub fn write_prepared(
    kind: &str,
    what: &str,
    file: &impl Serialize,
) -> Result<TableFileGuard, String> {
    let bytes = rmp_serde::to_vec_named(file)
        .map_err(|e| format!("cannot encode the prepared {what}: {e}"))?;
    // A private directory of our own (mode 0700, a fresh random name) and a file created
    // exclusively in it (mode 0600): no other local user can read the prompts, or plant
    // a symlink that this write would follow.
    let dir = tempfile::Builder::new()
        .prefix("llmsurge-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .map_err(|e| {
            format!("cannot create a private temporary directory for the prepared {what}: {e}")
        })?;
    let path = dir.path().join(format!("{kind}.msgpack"));
    crate::safe_file::create_new(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes))
        .map_err(|e| {
            format!(
                "cannot write the prepared {what} to {}: {e}",
                path.display()
            )
        })?;
    Ok(TableFileGuard { _dir: dir, path })
}

/// Reads a file [`write_prepared`] wrote, refusing one whose version (`version_of`) is
/// not `version`: a worker of another build.
pub fn read_prepared<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &str,
    version: u32,
    version_of: impl Fn(&T) -> u32,
) -> Result<T, String> {
    let bytes = std::fs::read(path)
        .map_err(|e| format!("cannot read the prepared {what} {}: {e}", path.display()))?;
    let file: T = rmp_serde::from_slice(&bytes).map_err(|e| {
        format!(
            "the prepared {what} in {} cannot be decoded: {e}",
            path.display()
        )
    })?;
    let found = version_of(&file);
    if found != version {
        return Err(format!(
            "the prepared {what} in {} has version {found}, expected {version}",
            path.display()
        ));
    }
    Ok(file)
}

/// Reads a table file: its rows, and how they run as sessions if they are.
pub fn read_table(path: &Path) -> Result<(Vec<Row>, Option<TableSessions>), String> {
    let file: TableFile = read_prepared(path, "data", TABLE_VERSION, |f: &TableFile| f.version)?;
    Ok((file.rows, file.sessions))
}

/// A worker's source over a prepared table.
#[derive(Debug)]
pub struct TableSource {
    rows: Vec<Row>,
    /// Each row's images, made once so a request shares them instead of copying.
    media: Vec<Vec<MediaPart>>,
    sampler: SlotSampler,
    /// Set when every row is a session: session `i` is the sampler's row `i`.
    sessions: Option<TableSessions>,
}

impl TableSource {
    /// Loads the table of `spec`.
    pub fn open(spec: &TableSpec) -> Result<Self, String> {
        let (rows, sessions) = read_table(&spec.path)?;
        Ok(Self::new(rows, spec.sampling, sessions))
    }

    /// A source over `rows`, run as sessions when `sessions` is set.
    pub fn new(rows: Vec<Row>, sampling: Sampling, sessions: Option<TableSessions>) -> Self {
        let n = rows.len() as u64;
        let media = rows.iter().map(|r| image_parts(&r.images)).collect();
        Self {
            rows,
            media,
            sampler: SlotSampler::new(n, sampling),
            sessions,
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

    fn has_sessions(&self) -> bool {
        self.sessions.is_some()
    }

    fn session(&mut self, id: u64) -> Result<Option<SessionPlan>, String> {
        let Some(opts) = &self.sessions else {
            return Ok(None);
        };
        // Session i is row i of the sampled order, as request i would be: the schedule
        // does not depend on which worker runs it.
        let Some(r) = self.sampler.row(id) else {
            return Ok(None);
        };
        let Some(session) = self
            .rows
            .get(r as usize)
            .and_then(|row| row.session.as_ref())
        else {
            return Err(format!("the prepared data's row {r} is not a session"));
        };
        let id_text = format!("llmsurge-session-{id}");
        let user = opts.session_user.then(|| id_text.clone());
        // One string shared by every turn of the session.
        // Always made: router affinity (`--affinity`) keys on it even without the header.
        let key: Option<std::sync::Arc<str>> = Some(id_text.into());
        let turns = session
            .turns
            .iter()
            .enumerate()
            .map(|(k, t)| {
                let k = u32::try_from(k).unwrap_or(u32::MAX);
                Turn {
                    request: PreparedRequest {
                        prompt: Prompt::Text(t.user.clone()),
                        prompt_tokens: Some(t.prompt_tokens),
                        max_tokens: t.output_tokens,
                        model: None,
                        user: user.clone(),
                        session: key.clone(),
                    },
                    think_ns: match &opts.think_time {
                        Some(think) if k > 0 => {
                            super::synthetic::draw_think(think, opts.seed, id, k)
                        }
                        _ => 0,
                    },
                    recorded_reply: match opts.history {
                        History::Recorded => t.reply.clone(),
                        History::Live => None,
                    },
                    tool_result: None,
                    tool_result_tokens: 0,
                    after: None,
                    parent_session: None,
                }
            })
            .collect();
        Ok(Some(SessionPlan {
            system: session.system.clone(),
            // Not counted when the data was prepared: the first turn's usage gives it.
            system_tokens: None,
            turns,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prepared_file_is_private_and_gone_with_its_guard() {
        use std::os::unix::fs::PermissionsExt;
        let guard = write_prepared("table", "data", &vec![1u32, 2, 3]).expect("written");
        let path = guard.path().to_path_buf();
        let dir = path.parent().expect("a directory").to_path_buf();
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        assert_eq!(mode(&path), 0o600, "{}", path.display());
        // A fresh random directory each time: nothing another user could have planted.
        let other = write_prepared("table", "data", &vec![1u32]).expect("written");
        assert_ne!(other.path().parent(), Some(dir.as_path()));
        drop(guard);
        assert!(!dir.exists(), "{} left behind", dir.display());
    }

    #[test]
    fn tables_round_trip_through_their_file() {
        let rows = vec![
            Row {
                prompt: RowPrompt::Text("hello".into()),
                prompt_tokens: 1,
                output_tokens: Some(4),
                images: vec!["https://example.com/a.png".into()],
                session: None,
            },
            Row {
                prompt: RowPrompt::Messages(vec![RowMessage {
                    role: "user".into(),
                    content: "hi".into(),
                }]),
                prompt_tokens: 1,
                output_tokens: None,
                images: vec![],
                session: None,
            },
        ];
        let guard = write_table(&rows, None).expect("write");
        assert_eq!(
            read_table(guard.path()).expect("read"),
            (rows.clone(), None)
        );
        let path = guard.path().to_path_buf();
        drop(guard);
        assert!(!path.exists(), "removed with its guard");
        let mut source = TableSource::new(rows, Sampling::default(), None);
        let first = source.request(0).expect("request").expect("a row");
        assert!(matches!(
            &first.prompt,
            Prompt::Media { text, parts } if text == "hello" && parts.len() == 1
        ));
    }

    #[test]
    fn session_tables_plan_one_session_per_row() {
        let turn = |user: &str, reply: Option<&str>| RowTurn {
            user: user.into(),
            prompt_tokens: 2,
            output_tokens: Some(5),
            reply: reply.map(String::from),
        };
        let row = |system: Option<&str>| Row {
            prompt: RowPrompt::Text("a".into()),
            prompt_tokens: 1,
            output_tokens: Some(5),
            images: vec![],
            session: Some(RowSession {
                system: system.map(String::from),
                turns: vec![turn("a", Some("ra")), turn("b", None)],
            }),
        };
        let opts = TableSessions {
            history: History::Recorded,
            think_time: Some(ThinkTime {
                kind: llmsurge_proto::ThinkKind::Fixed,
                mean_ns: 3_000_000,
            }),
            seed: 1,
            session_user: true,
            session_header: false,
        };
        let rows = vec![row(Some("sys")), row(None)];
        let guard = write_table(&rows, Some(&opts)).expect("write");
        let (back, sessions) = read_table(guard.path()).expect("read");
        assert_eq!((back, sessions.as_ref()), (rows.clone(), Some(&opts)));
        let mut source = TableSource::new(rows, Sampling::default(), sessions);
        assert!(source.has_sessions());
        let plan = source.session(0).expect("plan").expect("row 0");
        assert_eq!(plan.system.as_deref(), Some("sys"));
        let thinks: Vec<u64> = plan.turns.iter().map(|t| t.think_ns).collect();
        assert_eq!(
            thinks,
            [0, 3_000_000],
            "no think time before the first turn"
        );
        assert_eq!(plan.turns[0].recorded_reply.as_deref(), Some("ra"));
        assert_eq!(plan.turns[1].request.max_tokens, Some(5));
        assert_eq!(
            plan.turns[1].request.user.as_deref(),
            Some("llmsurge-session-0")
        );
        assert_eq!(
            source.session(1).expect("plan").expect("row 1").system,
            None
        );
        assert_eq!(source.session(2).expect("plan"), None, "one pass: two rows");
        let live = TableSessions {
            history: History::Live,
            ..opts
        };
        let mut source = TableSource::new(vec![row(None)], Sampling::default(), Some(live));
        let plan = source.session(0).expect("plan").expect("row 0");
        assert!(plan.turns.iter().all(|t| t.recorded_reply.is_none()));
    }
}
