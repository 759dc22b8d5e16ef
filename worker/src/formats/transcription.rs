//! `transcription`: `POST /v1/audio/transcriptions`, a multipart/form-data upload of a
//! WAV file (`file`) with `model` (and `stream=true` when streaming).
//!
//! vLLM streams chat-completion-chunk-shaped events (`"object":"transcription.chunk"`,
//! `choices[0].delta.content`, a `finish_reason` on the last choice, usage when
//! `stream_include_usage=true`), then `data: [DONE]`. OpenAI's own streaming models send
//! typed events instead (`transcript.text.delta`, then `transcript.text.done` with the
//! usage); both are read. A whole response is `{"text": …, "usage": …}`, where usage is
//! `{"type":"tokens","input_tokens":…,"output_tokens":…}` (OpenAI) or
//! `{"type":"duration","seconds":…}` (vLLM, Whisper), which carries no tokens.
//!
//! The body is built by hand into one buffer with a boundary chosen once per run: no
//! multipart crate, and no copy beyond the WAV itself.

use super::format::{Format, StreamState, WholeAnswer, parse_whole};
use super::openai::{ChunkInfo, StreamEvent, Usage};
use crate::source::{MediaPart, PreparedRequest};
use bytes::Bytes;
use llmsurge_proto::BackendConfig;
use serde::Deserialize;

/// The transcription format.
#[derive(Clone, Debug)]
pub struct Transcription {
    boundary: String,
    content_type: String,
    /// The form fields after the file, written once: model, stream, the user's
    /// `extra_body` as text fields, and the closing boundary.
    tail: Vec<u8>,
    /// The configured model, for a request that names none.
    model: String,
}

impl Transcription {
    /// Chooses the run's boundary and writes the constant fields.
    pub fn new(cfg: &BackendConfig) -> Self {
        let boundary = format!("llmsurge-{:016x}", run_token());
        let content_type = format!("multipart/form-data; boundary={boundary}");
        let mut tail = Vec::with_capacity(256);
        let mut text_field = |name: &str, value: &str| {
            tail.extend_from_slice(
                format!(
                    "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
                )
                .as_bytes(),
            );
        };
        if cfg.stream {
            text_field("stream", "true");
            // vLLM's form field for a final usage chunk.
            text_field("stream_include_usage", "true");
        }
        for (k, v) in &cfg.extra_body {
            let value = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            text_field(k, &value);
        }
        tail.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        Self {
            boundary,
            content_type,
            tail,
            model: cfg.model.clone(),
        }
    }
}

/// A token unique enough per run for a multipart boundary (the clock and the pid; a
/// boundary only has to be absent from the parts, which 16 hex digits make certain).
fn run_token() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 40) ^ 0x9e37_79b9_7f4a_7c15
}

impl Format for Transcription {
    fn path(&self) -> &'static str {
        "/v1/audio/transcriptions"
    }

    fn content_type(&self) -> &str {
        &self.content_type
    }

    fn build(&self, req: &PreparedRequest) -> Bytes {
        let wav = req.prompt.media().iter().find_map(|p| match p {
            MediaPart::Audio { wav, .. } => Some(wav),
            MediaPart::Image { .. } => None,
        });
        let wav_len = wav.map_or(0, Bytes::len);
        let model = req.model.as_deref().unwrap_or(&self.model);
        let mut out = Vec::with_capacity(wav_len + self.tail.len() + 320);
        let b = &self.boundary;
        out.extend_from_slice(
            format!(
                "--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"audio.wav\"\r\nContent-Type: audio/wav\r\n\r\n"
            )
            .as_bytes(),
        );
        if let Some(wav) = wav {
            out.extend_from_slice(wav);
        }
        out.extend_from_slice(
            format!(
                "\r\n--{b}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n{model}\r\n"
            )
            .as_bytes(),
        );
        out.extend_from_slice(&self.tail);
        Bytes::from(out)
    }

    fn parse_event(&self, data: &[u8], _: &mut StreamState) -> Result<StreamEvent, String> {
        let trimmed = data.trim_ascii();
        if trimmed == b"[DONE]" {
            return Ok(StreamEvent::Done);
        }
        let text = super::wire::event_text(trimmed)?;
        let typed: Typed<'_> = serde_json::from_str(text)
            .map_err(|e| format!("malformed SSE event ({e}): {}", super::wire::shown(trimmed)))?;
        match typed.kind.as_deref() {
            Some("transcript.text.delta") => Ok(StreamEvent::Chunk(ChunkInfo {
                content: typed.delta.non_empty,
                ..ChunkInfo::default()
            })),
            Some("transcript.text.done") => Ok(StreamEvent::Last(ChunkInfo {
                finished: true,
                usage: typed.usage.and_then(WireUsage::tokens),
                ..ChunkInfo::default()
            })),
            // vLLM's chunks are chat chunks under another `object`.
            _ => super::openai::parse_stream_event(trimmed),
        }
    }

    fn parse_full(&self, body: &[u8]) -> Result<ChunkInfo, String> {
        parse_whole::<TranscriptionAnswer<'_>>(body)
    }

    fn final_event(&self) -> &'static str {
        "[DONE]"
    }

    fn finished_is_complete(&self) -> bool {
        // As chat: a stream whose last choice finished is whole without `[DONE]`.
        true
    }
}

/// The fields of a typed (OpenAI) transcription event.
#[derive(Deserialize)]
struct Typed<'a> {
    #[serde(default, rename = "type", borrow)]
    kind: Option<super::wire::Kind<'a>>,
    #[serde(default)]
    delta: super::openai::StrField,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// A whole (unstreamed) transcription: its `text`.
#[derive(Deserialize)]
struct TranscriptionAnswer<'a> {
    #[serde(default)]
    text: Option<super::openai::StrField>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    error: Option<super::openai::WireError<'a>>,
}

impl<'a> WholeAnswer<'a> for TranscriptionAnswer<'a> {
    fn error(&self) -> Option<&super::openai::WireError<'a>> {
        self.error.as_ref()
    }

    fn info(self, body: &[u8]) -> Result<ChunkInfo, String> {
        let Some(text) = self.text else {
            return Err(format!(
                "transcription response without `text`: {}",
                super::wire::shown(body)
            ));
        };
        Ok(ChunkInfo {
            content: text.non_empty,
            finished: true,
            usage: self.usage.and_then(WireUsage::tokens),
            ..ChunkInfo::default()
        })
    }
}

/// A transcription usage in any of its shapes.
#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    completion_tokens: Option<u32>,
}

impl WireUsage {
    /// Token counts, if the usage has any (a `duration` usage has none).
    fn tokens(self) -> Option<Usage> {
        let u = Usage {
            prompt_tokens: self.input_tokens.or(self.prompt_tokens),
            completion_tokens: self.output_tokens.or(self.completion_tokens),
            reasoning_tokens: None,
        };
        (u.prompt_tokens.is_some() || u.completion_tokens.is_some()).then_some(u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Prompt;
    use std::sync::Arc;

    fn cfg(stream: bool) -> BackendConfig {
        BackendConfig {
            model: "whisper".into(),
            ..super::super::wire::test_config(llmsurge_proto::RequestFormat::Transcription, stream)
        }
    }

    #[test]
    fn transcription_body_is_one_multipart_form() {
        let f = Transcription::new(&cfg(true));
        let wav = Bytes::from_static(b"RIFF....WAVEdata");
        let req = PreparedRequest {
            prompt: Prompt::Media {
                text: String::new(),
                parts: vec![MediaPart::Audio {
                    wav: wav.clone(),
                    base64: Arc::from(""),
                    seconds: 1.0,
                }],
            },
            prompt_tokens: None,
            max_tokens: None,
            model: None,
            user: None,
            session: None,
        };
        let body = f.build(&req);
        let text = String::from_utf8_lossy(&body);
        let b = f
            .content_type()
            .strip_prefix("multipart/form-data; boundary=")
            .expect("boundary");
        assert!(text.starts_with(&format!("--{b}\r\n")), "{text}");
        assert!(text.ends_with(&format!("--{b}--\r\n")), "{text}");
        assert!(text.contains(
            "filename=\"audio.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF....WAVEdata\r\n"
        ));
        assert!(text.contains("name=\"model\"\r\n\r\nwhisper\r\n"));
        assert!(text.contains("name=\"stream\"\r\n\r\ntrue\r\n"));
        let plain =
            String::from_utf8_lossy(&Transcription::new(&cfg(false)).build(&req)).into_owned();
        assert!(!plain.contains("stream"), "{plain}");
    }

    #[test]
    fn transcription_responses_parse() {
        let f = Transcription::new(&cfg(true));
        let mut st = StreamState::default();
        let chunk = r#"{"id":"t","object":"transcription.chunk","created":1,"model":"w","choices":[{"delta":{"content":" hi"},"finish_reason":null}]}"#;
        assert!(matches!(
            f.parse_event(chunk.as_bytes(), &mut st),
            Ok(StreamEvent::Chunk(i)) if i.content && !i.finished
        ));
        let usage = r#"{"object":"transcription.chunk","choices":[],"usage":{"prompt_tokens":125,"completion_tokens":9}}"#;
        assert!(matches!(
            f.parse_event(usage.as_bytes(), &mut st),
            Ok(StreamEvent::Chunk(i)) if i.usage.is_some_and(|u| u.completion_tokens == Some(9))
        ));
        assert_eq!(f.parse_event(b"[DONE]", &mut st), Ok(StreamEvent::Done));
        let done = r#"{"type":"transcript.text.done","text":"hi","usage":{"type":"tokens","input_tokens":14,"output_tokens":45}}"#;
        assert!(matches!(
            f.parse_event(done.as_bytes(), &mut st),
            Ok(StreamEvent::Last(i)) if i.usage.is_some_and(|u| u.prompt_tokens == Some(14))
        ));
        assert!(f.parse_event(b"nope", &mut st).is_err());
        let whole = f
            .parse_full(br#"{"text":"hello","usage":{"type":"duration","seconds":5}}"#)
            .expect("whole");
        assert!(whole.content && whole.finished && whole.usage.is_none());
        assert!(f.parse_full(b"<html>").is_err());
        assert!(f.parse_full(br#"{"object":"x"}"#).is_err());
        assert_eq!(
            f.parse_full(br#"{"error":{"message":"bad audio"}}"#),
            Err("bad audio".into())
        );
    }
}
