//! Request formats: one module per API behind the [`Format`] trait.
//!
//! A format knows its endpoint, how to write a request body from a [`PreparedRequest`]
//! (and the body's content type, so a multipart upload fits as well as JSON), and how to
//! read a streamed event or a whole response into the one timing/usage record the
//! metrics use ([`ChunkInfo`] with [`Usage`]). The transport (`backend`) knows none of
//! this. Adding a format is its module plus one line in [`for_config`].
//!
//! Parsing runs for every streamed token, so the readers borrow from the event and keep
//! no strings: the metrics only need to know which fields are there and non-empty.

pub mod anthropic;
pub mod embeddings;
pub mod openai;
pub mod openai_text;
pub mod rerank;
pub mod responses;
pub mod transcription;

use crate::source::PreparedRequest;
use bytes::Bytes;
use llmsurge_proto::{BackendConfig, RequestFormat};
use std::borrow::Cow;

pub use openai::{ChunkInfo, StreamEvent, Usage};

/// Per-stream state a format may keep between events (where the API defines an event
/// sequence, whether it has started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamState {
    /// The stream's opening event arrived.
    pub started: bool,
}

/// One request format: the body it sends and how its responses are read.
pub trait Format: std::fmt::Debug + Send + Sync {
    /// The endpoint path, appended to the base URL.
    fn path(&self) -> &'static str;

    /// The `Content-Type` of the request body (a multipart format returns its
    /// `multipart/form-data; boundary=…`, which it owns).
    fn content_type(&self) -> &str {
        "application/json"
    }

    /// Extra headers every request of this format carries (an API version, say).
    fn headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// The header carrying the API key, and its value.
    fn api_key_header(&self, key: &str) -> (&'static str, String) {
        ("authorization", format!("Bearer {key}"))
    }

    /// The body of one request.
    fn build(&self, req: &PreparedRequest) -> Bytes;

    /// Reads the data of one streamed event.
    fn parse_event(&self, data: &[u8], state: &mut StreamState) -> Result<StreamEvent, String>;

    /// Reads a whole non-streaming response.
    fn parse_full(&self, body: &[u8]) -> Result<ChunkInfo, String>;

    /// The event that ends a complete stream, for the error of a stream cut before it.
    fn final_event(&self) -> &'static str;

    /// Whether a stream that ends without its final event, after a chunk marked
    /// `finished`, is complete (OpenAI chat/completions: yes; event-typed APIs: no).
    fn finished_is_complete(&self) -> bool {
        false
    }

    /// The message of an error response body, or the start of the body.
    fn error_message(&self, body: &[u8]) -> String {
        openai::error_message(body)
    }

    /// The output text one streamed event carries, for multi-turn sessions (a turn
    /// resends the reply that actually streamed back). The event is parsed again, and
    /// only when a session asks, so a run without sessions keeps no text. `None`: this
    /// format does not carry a reply sessions can resend.
    fn event_reply(&self, _data: &[u8]) -> Option<String> {
        None
    }

    /// The output text of a whole (non-streamed) response, as [`Format::event_reply`].
    fn full_reply(&self, _body: &[u8]) -> Option<String> {
        None
    }
}

/// The format of a backend configuration: the one registration point.
pub fn for_config(cfg: &BackendConfig) -> Box<dyn Format> {
    match cfg.request_format {
        RequestFormat::Chat | RequestFormat::Completions => {
            Box::new(openai_text::OpenAiText::new(cfg))
        }
        RequestFormat::Responses => Box::new(responses::Responses::new(cfg)),
        RequestFormat::Anthropic => Box::new(anthropic::Anthropic::new(cfg)),
        RequestFormat::Embeddings => Box::new(embeddings::Embeddings::new(cfg)),
        RequestFormat::Rerank => Box::new(rerank::Rerank::new(cfg, rerank::Shape::Rerank)),
        RequestFormat::Score => Box::new(rerank::Rerank::new(cfg, rerank::Shape::Score)),
        RequestFormat::Transcription => Box::new(transcription::Transcription::new(cfg)),
    }
}

/// The constant part of a JSON body (model, format fields, the user's `extra_body`),
/// serialised once; each request writes only its own fields after it.
#[derive(Clone, Debug)]
pub(crate) struct JsonPrefix {
    /// `"model":…,` — the configured model, unless a request names its own.
    model: Vec<u8>,
    /// Every other constant field, each followed by a comma.
    prefix: Vec<u8>,
    /// Keys the user's `extra_body` sets, which the request must not write again.
    overridden: Vec<String>,
}

impl JsonPrefix {
    /// The prefix of a generating format: `stream` as configured, and `ignore_eos` when
    /// asked for, beside the format's `fields`, the model and `extra_body` (see
    /// [`JsonPrefix::new`]).
    pub(crate) fn generating(
        cfg: &BackendConfig,
        mut fields: serde_json::Map<String, serde_json::Value>,
        per_request: &[&str],
    ) -> Self {
        fields.insert("stream".into(), cfg.stream.into());
        if cfg.ignore_eos {
            fields.insert("ignore_eos".into(), true.into());
        }
        Self::new(cfg, fields, per_request)
    }

    /// `fields` are the format's constant fields; `extra_body` overrides them and any of
    /// `per_request` (written once, from `extra_body`, and then skipped per request).
    pub(crate) fn new(
        cfg: &BackendConfig,
        fields: serde_json::Map<String, serde_json::Value>,
        per_request: &[&str],
    ) -> Self {
        let mut fields = fields;
        fields.insert("model".into(), cfg.model.clone().into());
        for (k, v) in &cfg.extra_body {
            fields.insert(k.clone(), v.clone());
        }
        let mut model = Vec::with_capacity(64);
        if let Some(v) = fields.get("model") {
            write_field(&mut model, "model", v);
        }
        let mut prefix = Vec::with_capacity(256);
        let mut overridden = Vec::new();
        for (k, v) in &fields {
            if k == "model" {
                continue;
            }
            if per_request.contains(&k.as_str()) {
                overridden.push(k.clone());
            }
            write_field(&mut prefix, k, v);
        }
        Self {
            model,
            prefix,
            overridden,
        }
    }

    /// Whether the user's `extra_body` sets `key`.
    pub(crate) fn overrides(&self, key: &str) -> bool {
        self.overridden.iter().any(|k| k == key)
    }

    /// A body opened with `{`, the model and the constant fields; `extra` is room for
    /// the request's own fields.
    pub(crate) fn open(&self, req: &PreparedRequest, extra: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.model.len() + self.prefix.len() + extra + 64);
        out.push(b'{');
        match &req.model {
            Some(name) => write_field(&mut out, "model", &**name),
            None => out.extend_from_slice(&self.model),
        }
        out.extend_from_slice(&self.prefix);
        out
    }
}

/// The wire struct of a whole (unstreamed) JSON answer of embeddings, rerank and score,
/// or transcription: the format's own fields beside the server's `error`.
pub(crate) trait WholeAnswer<'a>: serde::Deserialize<'a> {
    /// The server's `error`, sent in place of an answer.
    fn error(&self) -> Option<&openai::WireError<'a>>;
    /// What the answer says, or why it is none (`body` for the message).
    fn info(self, body: &[u8]) -> Result<ChunkInfo, String>;
}

/// Reads a whole answer as `W`: JSON that does not parse and an `error` object fail
/// alike in every format; then `W` says what the answer holds.
pub(crate) fn parse_whole<'a, W: WholeAnswer<'a>>(body: &'a [u8]) -> Result<ChunkInfo, String> {
    let whole: W =
        serde_json::from_slice(body).map_err(|e| format!("malformed JSON response ({e})"))?;
    if let Some(err) = whole.error() {
        return Err(err.message());
    }
    whole.info(body)
}

/// The `usage` of a pooling answer (embeddings, rerank, score): no output tokens.
#[derive(serde::Deserialize)]
pub(crate) struct PoolingUsage {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    /// Jina/Cohere and vLLM's rerank give only this.
    #[serde(default)]
    total_tokens: Option<u32>,
}

impl PoolingUsage {
    /// A pooling answer's information: whole, with its prompt count when it has one.
    pub(crate) fn finished(usage: Option<Self>) -> ChunkInfo {
        ChunkInfo {
            usage: usage.map(|u| Usage {
                prompt_tokens: u.prompt_tokens.or(u.total_tokens),
                completion_tokens: None,
            }),
            finished: true,
            ..ChunkInfo::default()
        }
    }
}

/// Closes a body whose every field ends in a comma.
pub(crate) fn close(mut out: Vec<u8>) -> Bytes {
    if out.last() == Some(&b',') {
        out.pop();
    }
    out.push(b'}');
    Bytes::from(out)
}

/// `"key":value,`.
pub(crate) fn write_field<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, key: &str, value: &T) {
    write_json(out, key);
    out.push(b':');
    write_json(out, value);
    out.push(b',');
}

/// A JSON value.
pub(crate) fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Serialising a string or a JSON value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// A number field, without going through serde.
pub(crate) fn write_u32_field(out: &mut Vec<u8>, key: &str, n: u32) {
    write_json(out, key);
    out.push(b':');
    out.extend_from_slice(n.to_string().as_bytes());
    out.push(b',');
}

/// The start of an event or body for an error message.
pub(crate) fn shown(data: &[u8]) -> String {
    String::from_utf8_lossy(&data[..data.len().min(80)]).into_owned()
}

/// Checks an event is UTF-8 once (fast on ASCII), so the JSON parse can borrow strings
/// without a check per string.
pub(crate) fn event_text(data: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(data).map_err(|e| format!("malformed SSE event ({e}): {}", shown(data)))
}

/// The `type` of an event as a borrowed string (escapes, which no event name has, would
/// make it owned).
pub(crate) type Kind<'a> = Cow<'a, str>;

/// A configuration for unit tests: `format` to model `m` at an unused local port.
#[cfg(test)]
pub(crate) fn test_config(format: RequestFormat, stream: bool) -> BackendConfig {
    BackendConfig {
        base_url: "http://127.0.0.1:1".into(),
        request_format: format,
        model: "m".into(),
        stream,
        api_key: None,
        headers: vec![],
        params: vec![],
        extra_body: serde_json::Map::new(),
        http2: false,
        request_timeout: std::time::Duration::from_secs(1),
        connect_timeout: std::time::Duration::from_secs(1),
        tls: Default::default(),
        ttft_timeout: None,
        idle_timeout: None,
        ignore_eos: false,
        session_header: None,
        request_id: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{Message, Prompt};

    use super::test_config as cfg;

    fn req(prompt: Prompt, max: Option<u32>) -> PreparedRequest {
        PreparedRequest {
            prompt,
            prompt_tokens: None,
            max_tokens: max,
            model: None,
            user: None,
            session: None,
        }
    }

    fn body(format: RequestFormat, r: &PreparedRequest) -> serde_json::Value {
        let f = for_config(&cfg(format, true));
        serde_json::from_slice(&f.build(r)).expect("valid JSON")
    }

    fn conversation() -> Prompt {
        Prompt::Messages(vec![
            Message {
                role: "system".into(),
                content: "be brief".into(),
            },
            Message {
                role: "user".into(),
                content: "hi".into(),
            },
        ])
    }

    #[test]
    fn every_format_writes_a_per_request_model() {
        for format in [
            RequestFormat::Chat,
            RequestFormat::Completions,
            RequestFormat::Responses,
            RequestFormat::Anthropic,
            RequestFormat::Embeddings,
            RequestFormat::Rerank,
            RequestFormat::Score,
        ] {
            let mut r = req(Prompt::Text("x".into()), Some(2));
            assert_eq!(body(format, &r)["model"], "m", "{format:?}");
            r.model = Some("adapter-1".into());
            let raw = for_config(&cfg(format, true)).build(&r);
            let s = std::str::from_utf8(&raw).expect("utf8");
            assert_eq!(s.matches("\"model\"").count(), 1, "{s}");
            assert_eq!(body(format, &r)["model"], "adapter-1", "{format:?}");
        }
    }

    #[test]
    fn responses_and_anthropic_bodies() {
        let r = req(conversation(), Some(7));
        assert_eq!(
            body(RequestFormat::Responses, &r),
            serde_json::json!({"model": "m", "stream": true, "max_output_tokens": 7,
                "input": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]})
        );
        assert_eq!(
            body(RequestFormat::Anthropic, &r),
            serde_json::json!({"model": "m", "stream": true, "max_tokens": 7, "system": "be brief",
                "messages": [{"role": "user", "content": "hi"}]})
        );
        // max_tokens is required by the Messages API: sent even when no length is asked.
        let v = body(
            RequestFormat::Anthropic,
            &req(Prompt::Text("x".into()), None),
        );
        assert_eq!(v["max_tokens"], anthropic::DEFAULT_MAX_TOKENS);
        assert!(
            body(
                RequestFormat::Responses,
                &req(Prompt::Text("x".into()), None)
            )
            .get("max_output_tokens")
            .is_none()
        );
    }

    #[test]
    fn embeddings_and_ranking_bodies() {
        let batch = req(Prompt::Batch(vec!["a".into(), "b".into()]), None);
        assert_eq!(
            body(RequestFormat::Embeddings, &batch),
            serde_json::json!({"model": "m", "encoding_format": "float", "input": ["a", "b"]})
        );
        let ranking = req(
            Prompt::Ranking {
                query: "q".into(),
                documents: vec!["d1".into(), "d2".into()],
            },
            None,
        );
        assert_eq!(
            body(RequestFormat::Rerank, &ranking),
            serde_json::json!({"model": "m", "query": "q", "documents": ["d1", "d2"], "top_n": 2})
        );
        assert_eq!(
            body(RequestFormat::Score, &ranking),
            serde_json::json!({"model": "m", "text_1": "q", "text_2": ["d1", "d2"]})
        );
    }

    fn stream(format: RequestFormat, events: &[&str]) -> Vec<Result<StreamEvent, String>> {
        let f = for_config(&cfg(format, true));
        let mut state = StreamState::default();
        events
            .iter()
            .map(|e| f.parse_event(e.as_bytes(), &mut state))
            .collect()
    }

    fn chunk(content: bool, reasoning: bool) -> Result<StreamEvent, String> {
        Ok(StreamEvent::Chunk(ChunkInfo {
            content,
            reasoning,
            ..ChunkInfo::default()
        }))
    }

    #[test]
    fn responses_events_parse() {
        let got = stream(
            RequestFormat::Responses,
            &[
                r#"{"type":"response.created","sequence_number":0,"response":{"id":"r","status":"in_progress","output":[]}}"#,
                r#"{"type":"response.reasoning_summary_text.delta","delta":"think"}"#,
                r#"{"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":"Hi"}"#,
                r#"{"type":"response.output_text.annotation.added","annotation":{}}"#,
                r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":5,"output_tokens":2,"total_tokens":7}}}"#,
            ],
        );
        assert_eq!(got[0], chunk(false, false));
        assert_eq!(got[1], chunk(false, true));
        assert_eq!(got[2], chunk(true, false));
        assert_eq!(got[3], chunk(false, false), "an unknown type is skipped");
        assert_eq!(
            got[4],
            Ok(StreamEvent::Last(ChunkInfo {
                finished: true,
                usage: Some(Usage {
                    prompt_tokens: Some(5),
                    completion_tokens: Some(2)
                }),
                ..ChunkInfo::default()
            }))
        );
        let early = stream(
            RequestFormat::Responses,
            &[r#"{"type":"response.output_text.delta","delta":"x"}"#],
        );
        assert!(
            early[0]
                .as_ref()
                .is_err_and(|e| e.contains("before response.created"))
        );
        let failed = stream(
            RequestFormat::Responses,
            &[
                r#"{"type":"error","code":"x","message":"overloaded"}"#,
                "not json",
            ],
        );
        assert_eq!(failed[0], Ok(StreamEvent::Error("overloaded".into())));
        assert!(failed[1].as_ref().is_err_and(|e| e.contains("malformed")));
    }

    #[test]
    fn anthropic_events_parse() {
        let got = stream(
            RequestFormat::Anthropic,
            &[
                r#"{"type":"ping"}"#,
                r#"{"type":"message_start","message":{"id":"msg","type":"message","role":"assistant","content":[],"usage":{"input_tokens":25,"output_tokens":1}}}"#,
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#,
                r#"{"type":"brand_new_event","x":1}"#,
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
                r#"{"type":"message_stop"}"#,
            ],
        );
        assert_eq!(got[0], chunk(false, false));
        assert!(
            matches!(&got[1], Ok(StreamEvent::Chunk(i)) if i.usage.is_some_and(|u| u.prompt_tokens == Some(25) && u.completion_tokens.is_none()))
        );
        assert_eq!(got[3], chunk(false, true));
        assert_eq!(got[4], chunk(true, false));
        assert_eq!(got[5], chunk(false, false), "an unknown type is skipped");
        assert!(
            matches!(&got[6], Ok(StreamEvent::Chunk(i)) if i.finished && i.usage.is_some_and(|u| u.completion_tokens == Some(15)))
        );
        assert_eq!(got[7], Ok(StreamEvent::Last(ChunkInfo::default())));
        let early = stream(
            RequestFormat::Anthropic,
            &[r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}"#],
        );
        assert!(
            early[0]
                .as_ref()
                .is_err_and(|e| e.contains("before message_start"))
        );
        let err = stream(
            RequestFormat::Anthropic,
            &[r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#],
        );
        assert_eq!(err[0], Ok(StreamEvent::Error("Overloaded".into())));
    }

    #[test]
    fn whole_responses_parse() {
        let parse =
            |format, body: &str| for_config(&cfg(format, false)).parse_full(body.as_bytes());
        let r = parse(
            RequestFormat::Responses,
            r#"{"id":"r","object":"response","status":"completed","output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"t"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi","annotations":[]}]}],"usage":{"input_tokens":3,"output_tokens":4}}"#,
        )
        .expect("responses");
        assert!(r.content && r.reasoning && r.finished);
        assert_eq!(r.usage.and_then(|u| u.completion_tokens), Some(4));
        let a = parse(
            RequestFormat::Anthropic,
            r#"{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}"#,
        )
        .expect("anthropic");
        assert!(a.content && !a.reasoning && a.finished);
        let e = parse(
            RequestFormat::Embeddings,
            r#"{"object":"list","data":[{"embedding":[0.1]}],"usage":{"prompt_tokens":9,"total_tokens":9}}"#,
        )
        .expect("embeddings");
        assert!(!e.content);
        assert_eq!(e.usage.and_then(|u| u.prompt_tokens), Some(9));
        assert!(
            parse(
                RequestFormat::Rerank,
                r#"{"results":[],"usage":{"total_tokens":4}}"#
            )
            .is_ok()
        );
        assert!(parse(RequestFormat::Score, r#"{"results":[]}"#).is_err());
        assert!(parse(RequestFormat::Embeddings, r#"{"data":[]}"#).is_err());
        let err = r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#;
        assert_eq!(parse(RequestFormat::Anthropic, err), Err("bad".into()));
        for format in [
            RequestFormat::Responses,
            RequestFormat::Anthropic,
            RequestFormat::Embeddings,
        ] {
            assert!(parse(format, "<html>").is_err_and(|e| e.contains("malformed JSON")));
        }
    }
}
