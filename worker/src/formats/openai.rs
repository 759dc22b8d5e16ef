//! The OpenAI chat/completions wire format: request bodies and response parsing, shared
//! by the `chat` and `completions` formats (the other formats reuse its field readers).
//!
//! The constant part of every body (model, stream options, user `extra_body`) is
//! serialised once; a request only writes its prompt and lengths. Responses are parsed
//! with borrowed fields, reading only what the metrics need.

use super::wire::{JsonPrefix, close, write_field, write_json, write_u32_field};
use crate::source::{MediaPart, Message, PreparedRequest, Prompt};
use bytes::Bytes;
use llmsurge_proto::{BackendConfig, FinishReason, RequestFormat};
use serde::Deserialize;
use std::borrow::Cow;

/// Keys a request body sets per request; `extra_body` may override them.
const PER_REQUEST_KEYS: [&str; 5] = [
    "messages",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
];

/// Builds request bodies for one backend configuration.
#[derive(Clone, Debug)]
pub struct BodyTemplate {
    /// The model, `stream` (with `stream_options` when streaming) and the user's
    /// `extra_body`, serialised once.
    prefix: JsonPrefix,
    format: RequestFormat,
    /// The user's `extra_body` sets the prompt (`messages` or `prompt`) itself.
    prompt_overridden: bool,
    /// The user's `extra_body` sets `max_tokens` (or `max_completion_tokens`) itself.
    max_tokens_overridden: bool,
    /// `--min-tokens`: write vLLM's `min_tokens` equal to `max_tokens` (unless the
    /// user's `extra_body` sets it).
    min_tokens: bool,
}

impl BodyTemplate {
    /// Prepares the constant part of every body.
    pub fn new(cfg: &BackendConfig) -> Self {
        let mut fields = serde_json::Map::new();
        if cfg.stream {
            fields.insert(
                "stream_options".into(),
                serde_json::json!({"include_usage": true}),
            );
        }
        let prefix = JsonPrefix::generating(cfg, fields, &PER_REQUEST_KEYS);
        let prompt_key = if cfg.request_format == RequestFormat::Chat {
            "messages"
        } else {
            "prompt"
        };
        Self {
            prompt_overridden: prefix.overrides(prompt_key),
            max_tokens_overridden: prefix.overrides("max_tokens")
                || prefix.overrides("max_completion_tokens"),
            min_tokens: cfg.min_tokens && !prefix.overrides("min_tokens"),
            prefix,
            format: cfg.request_format,
        }
    }

    /// The body of one request.
    pub fn build(&self, req: &PreparedRequest) -> Bytes {
        let mut out = self.prefix.open(req, req.prompt.text_len() + 96);
        match self.format {
            _ if self.prompt_overridden => {}
            RequestFormat::Chat => {
                out.extend_from_slice(b"\"messages\":[");
                match &req.prompt {
                    Prompt::Text(t) => write_message(&mut out, "user", t),
                    Prompt::Media { text, parts } => {
                        write_media_message(&mut out, text, parts);
                    }
                    Prompt::Messages(msgs) => {
                        for (i, m) in msgs.iter().enumerate() {
                            if i > 0 {
                                out.push(b',');
                            }
                            write_chat_message(&mut out, m);
                        }
                    }
                    other => write_message(&mut out, "user", &other.joined()),
                }
                out.extend_from_slice(b"],");
            }
            _ => {
                out.extend_from_slice(b"\"prompt\":");
                match &req.prompt {
                    Prompt::Text(t) => write_json(&mut out, t),
                    Prompt::TokenIds(ids) => write_token_ids(&mut out, ids),
                    other => write_json(&mut out, &other.joined()),
                }
                out.push(b',');
            }
        }
        if let (Some(n), false) = (req.max_tokens, self.max_tokens_overridden) {
            write_u32_field(&mut out, "max_tokens", n);
            if self.format == RequestFormat::Chat {
                write_u32_field(&mut out, "max_completion_tokens", n);
            }
            self.prefix.write_ignore_eos(&mut out);
            // A gateway may drop `ignore_eos` and pass this on: the length then holds.
            if self.min_tokens {
                write_u32_field(&mut out, "min_tokens", n);
            }
        }
        if let Some(user) = &req.user {
            write_field(&mut out, "user", user);
        }
        close(out)
    }
}

/// `[id,id,...]`: a completions prompt as token ids.
fn write_token_ids(out: &mut Vec<u8>, ids: &[u32]) {
    out.push(b'[');
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(id.to_string().as_bytes());
    }
    out.push(b']');
}

/// A message of a conversation: text, or a tool call and its result in chat's shape
/// (the assistant's `tool_calls`, then a `tool` message naming the call's id).
fn write_chat_message(out: &mut Vec<u8>, m: &Message) {
    let Some(call) = &m.tool_call else {
        return write_message(out, &m.role, &m.content);
    };
    out.push(b'{');
    if m.role == "assistant" {
        out.extend_from_slice(b"\"role\":\"assistant\",\"content\":");
        match m.content.as_str() {
            "" => out.extend_from_slice(b"null"),
            text => write_json(out, text),
        }
        out.extend_from_slice(b",\"tool_calls\":[{");
        write_field(out, "id", &call.id);
        out.extend_from_slice(b"\"type\":\"function\",\"function\":{");
        write_field(out, "name", &call.name);
        out.extend_from_slice(b"\"arguments\":");
        write_json(out, &call.arguments);
        out.extend_from_slice(b"}}]}");
    } else {
        out.extend_from_slice(b"\"role\":\"tool\",");
        write_field(out, "tool_call_id", &call.id);
        out.extend_from_slice(b"\"content\":");
        write_json(out, &m.content);
        out.push(b'}');
    }
}

fn write_message(out: &mut Vec<u8>, role: &str, content: &str) {
    out.extend_from_slice(b"{\"role\":");
    write_json(out, role);
    out.extend_from_slice(b",\"content\":");
    write_json(out, content);
    out.push(b'}');
}

/// A user message whose content is a text part followed by `image_url` and
/// `input_audio` parts (OpenAI's multimodal chat shape, which vLLM and SGLang read).
pub(crate) fn write_media_message(out: &mut Vec<u8>, text: &str, parts: &[MediaPart]) {
    out.extend_from_slice(b"{\"role\":\"user\",\"content\":[");
    let mut first = true;
    if !text.is_empty() {
        out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
        write_json(out, text);
        out.push(b'}');
        first = false;
    }
    for part in parts {
        if !first {
            out.push(b',');
        }
        first = false;
        match part {
            MediaPart::Image { url, .. } => {
                out.extend_from_slice(b"{\"type\":\"image_url\",\"image_url\":{\"url\":");
                write_plain_or_json(out, url);
                out.extend_from_slice(b"}}");
            }
            MediaPart::Audio { base64, .. } => {
                out.extend_from_slice(b"{\"type\":\"input_audio\",\"input_audio\":{\"data\":");
                write_plain_or_json(out, base64);
                out.extend_from_slice(b",\"format\":\"wav\"}}");
            }
        }
    }
    out.extend_from_slice(b"]}");
}

/// A JSON string; a data URL or base64 (megabytes of characters that need no escape)
/// is copied as it is instead of going through the escaper.
fn write_plain_or_json(out: &mut Vec<u8>, s: &str) {
    if s.len() > 256
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'+' | b'/' | b'=' | b':' | b';' | b',' | b'-' | b'.')
        })
    {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        write_json(out, s);
    }
}

/// Token counts from a `usage` object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// Prompt tokens as the server counted them.
    #[serde(default)]
    pub prompt_tokens: Option<u32>,
    /// Output tokens as the server counted them.
    #[serde(default)]
    pub completion_tokens: Option<u32>,
    /// Of the output tokens, the reasoning ones, when the server says
    /// (`completion_tokens_details.reasoning_tokens`).
    #[serde(
        default,
        rename = "completion_tokens_details",
        deserialize_with = "reasoning_detail"
    )]
    pub reasoning_tokens: Option<u32>,
}

/// A `…_tokens_details` object (null or absent alike), for its `reasoning_tokens`.
#[derive(Deserialize)]
pub(crate) struct TokensDetails {
    #[serde(default)]
    pub(crate) reasoning_tokens: Option<u32>,
}

/// `reasoning_tokens` out of a `…_tokens_details` object that may be null.
pub(crate) fn reasoning_detail<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<u32>, D::Error> {
    let details: Option<TokensDetails> = Deserialize::deserialize(d)?;
    Ok(details.and_then(|d| d.reasoning_tokens))
}

/// What one streamed event says, as far as the metrics care.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkInfo {
    /// The chunk carries output text.
    pub content: bool,
    /// The chunk carries reasoning text.
    pub reasoning: bool,
    /// The chunk carries a tool call's tokens (its function's name or arguments).
    pub tool: bool,
    /// The chunk ends a choice (`finish_reason` set).
    pub finished: bool,
    /// Why the output ended, when the chunk says.
    pub finish: Option<FinishReason>,
    /// The chunk carries usage.
    pub usage: Option<Usage>,
}

/// A parsed `data:` payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    /// `[DONE]`.
    Done,
    /// A completion chunk.
    Chunk(ChunkInfo),
    /// The stream's final event, which may carry what a chunk does (usage, say).
    Last(ChunkInfo),
    /// The server reported an error inside the stream.
    Error(String),
}

// The wire structs below keep no strings: every token's chunk goes through them, and the
// metrics only need to know which fields are there and non-empty.

#[derive(Deserialize)]
struct WireChunk<'a> {
    #[serde(default)]
    choices: FirstChoice,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default, borrow)]
    error: Option<WireError<'a>>,
}

#[derive(Default, Deserialize)]
struct WireChoice {
    #[serde(default)]
    delta: Option<WireDelta>,
    #[serde(default)]
    message: Option<WireDelta>,
    #[serde(default)]
    text: StrField,
    #[serde(default)]
    finish_reason: FinishField,
}

#[derive(Default, Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: StrField,
    #[serde(default)]
    reasoning_content: StrField,
    #[serde(default)]
    reasoning: StrField,
    /// Tool-call deltas: allocated only in chunks that carry them.
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

/// One entry of `tool_calls`, read for whether it carries a name or arguments.
#[derive(Default, Deserialize)]
struct WireToolCall {
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Default, Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: StrField,
    #[serde(default)]
    arguments: StrField,
}

impl WireDelta {
    /// Whether the delta carries tool-call tokens.
    fn has_tool_call(&self) -> bool {
        self.tool_calls.as_deref().is_some_and(|calls| {
            calls.iter().any(|c| {
                c.function
                    .as_ref()
                    .is_some_and(|f| f.name.non_empty || f.arguments.non_empty)
            })
        })
    }
}

/// The first element of `choices` (one request asks for one choice); the others are
/// skipped. A plain `Vec` field would allocate for every token.
#[derive(Default)]
struct FirstChoice(Option<WireChoice>);

impl<'de> Deserialize<'de> for FirstChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = FirstChoice;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<WireChoice>()?;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(FirstChoice(first))
            }
        }
        d.deserialize_seq(Visitor)
    }
}

/// A string-or-null field, read for whether it is non-empty.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StrField {
    pub(crate) non_empty: bool,
}

impl<'de> Deserialize<'de> for StrField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = StrField;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_none<E>(self) -> Result<StrField, E> {
                Ok(StrField::default())
            }
            fn visit_unit<E>(self) -> Result<StrField, E> {
                Ok(StrField::default())
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<StrField, D::Error> {
                d.deserialize_str(self)
            }
            fn visit_str<E>(self, v: &str) -> Result<StrField, E> {
                Ok(StrField {
                    non_empty: !v.is_empty(),
                })
            }
        }
        d.deserialize_option(Visitor)
    }
}

/// A `finish_reason` (or `stop_reason`) string-or-null, read into its kind without
/// keeping the string.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FinishField(pub(crate) Option<FinishReason>);

impl<'de> Deserialize<'de> for FinishField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = FinishField;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_none<E>(self) -> Result<FinishField, E> {
                Ok(FinishField(None))
            }
            fn visit_unit<E>(self) -> Result<FinishField, E> {
                Ok(FinishField(None))
            }
            fn visit_some<D: serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<FinishField, D::Error> {
                d.deserialize_str(self)
            }
            fn visit_str<E>(self, v: &str) -> Result<FinishField, E> {
                Ok(FinishField(Some(FinishReason::from_wire(v))))
            }
        }
        d.deserialize_option(Visitor)
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum WireError<'a> {
    Object {
        #[serde(default, borrow)]
        message: Option<Cow<'a, str>>,
    },
    Text(#[serde(borrow)] Cow<'a, str>),
}

impl WireError<'_> {
    pub(crate) fn message(&self) -> String {
        match self {
            WireError::Object { message } => message
                .as_deref()
                .unwrap_or("unspecified error")
                .to_string(),
            WireError::Text(t) => t.to_string(),
        }
    }
}

fn chunk_info(chunk: &WireChunk<'_>) -> ChunkInfo {
    let mut info = ChunkInfo {
        usage: chunk.usage,
        ..ChunkInfo::default()
    };
    if let Some(choice) = &chunk.choices.0 {
        let delta = choice.delta.as_ref().or(choice.message.as_ref());
        info.content = choice.text.non_empty || delta.is_some_and(|d| d.content.non_empty);
        info.reasoning =
            delta.is_some_and(|d| d.reasoning_content.non_empty || d.reasoning.non_empty);
        info.tool = delta.is_some_and(WireDelta::has_tool_call);
        info.finished = choice.finish_reason.0.is_some();
        info.finish = choice.finish_reason.0;
    }
    info
}

/// Parses the data of one SSE event.
pub fn parse_stream_event(data: &[u8]) -> Result<StreamEvent, String> {
    let trimmed = data.trim_ascii();
    if trimmed == b"[DONE]" {
        return Ok(StreamEvent::Done);
    }
    let shown = || String::from_utf8_lossy(&trimmed[..trimmed.len().min(80)]).into_owned();
    // One UTF-8 check of the whole event (fast on ASCII) instead of one per string, which
    // `from_slice` does and which costs more than the rest of the parse on short tokens.
    let text = std::str::from_utf8(trimmed)
        .map_err(|e| format!("malformed SSE event ({e}): {}", shown()))?;
    let chunk: WireChunk<'_> = serde_json::from_str(text)
        .map_err(|e| format!("malformed SSE event ({e}): {}", shown()))?;
    if let Some(err) = &chunk.error {
        return Ok(StreamEvent::Error(err.message()));
    }
    Ok(StreamEvent::Chunk(chunk_info(&chunk)))
}

/// Parses a whole non-streaming response.
pub fn parse_full_response(body: &[u8]) -> Result<ChunkInfo, String> {
    let chunk: WireChunk<'_> =
        serde_json::from_slice(body).map_err(|e| format!("malformed JSON response ({e})"))?;
    if let Some(err) = &chunk.error {
        return Err(err.message());
    }
    Ok(chunk_info(&chunk))
}

/// The output text of a chat or completions chunk or response: the first choice's
/// `delta.content`, `message.content` or `text`. Only multi-turn sessions call it.
pub fn reply_text(data: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(data).ok()?;
    let choice = v.get("choices")?.get(0)?;
    let text = choice
        .get("delta")
        .or_else(|| choice.get("message"))
        .and_then(|d| d.get("content"))
        .or_else(|| choice.get("text"))?;
    text.as_str().map(str::to_string)
}

/// The `error.message` of an error response body, or the start of the body.
pub fn error_message(body: &[u8]) -> String {
    if let Ok(chunk) = serde_json::from_slice::<WireChunk<'_>>(body)
        && let Some(err) = chunk.error
    {
        return err.message();
    }
    String::from_utf8_lossy(&body[..body.len().min(200)])
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Message;

    use super::super::wire::test_config as backend;

    fn text(t: &str, max: Option<u32>) -> PreparedRequest {
        PreparedRequest {
            prompt: Prompt::Text(t.into()),
            prompt_tokens: None,
            max_tokens: max,
            model: None,
            user: None,
            session: None,
        }
    }

    fn body(t: &BodyTemplate, r: &PreparedRequest) -> serde_json::Value {
        serde_json::from_slice(&t.build(r)).expect("valid JSON")
    }

    #[test]
    fn chat_body_is_exact() {
        let t = BodyTemplate::new(&backend(RequestFormat::Chat, true));
        let b = t.build(&text("hi \"you\"", Some(8)));
        assert_eq!(
            std::str::from_utf8(&b).expect("utf8"),
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi \"you\""}],"max_tokens":8,"max_completion_tokens":8}"#
        );
    }

    #[test]
    fn min_tokens_follows_max_tokens() {
        let mut cfg = backend(RequestFormat::Chat, false);
        cfg.min_tokens = true;
        let v = body(&BodyTemplate::new(&cfg), &text("p", Some(12)));
        assert_eq!(v["min_tokens"], 12);
        assert_eq!(v["max_tokens"], 12);
        assert!(
            body(&BodyTemplate::new(&cfg), &text("p", None))
                .get("min_tokens")
                .is_none()
        );
        cfg.extra_body.insert("min_tokens".into(), 3.into());
        assert_eq!(
            body(&BodyTemplate::new(&cfg), &text("p", Some(12)))["min_tokens"],
            3
        );
    }

    #[test]
    fn completions_body_and_no_max_tokens() {
        let mut cfg = backend(RequestFormat::Completions, false);
        cfg.ignore_eos = true;
        let t = BodyTemplate::new(&cfg);
        // No length asked, no ignore_eos: with it, vLLM would generate to its limit.
        let v = body(&t, &text("p", None));
        assert_eq!(
            v,
            serde_json::json!({"model": "m", "stream": false, "prompt": "p"})
        );
        assert_eq!(body(&t, &text("p", Some(5)))["ignore_eos"], true);
        let msgs = PreparedRequest {
            prompt: Prompt::Messages(vec![
                Message::text("system", "s".into()),
                Message::text("user", "u".into()),
            ]),
            prompt_tokens: None,
            max_tokens: Some(3),
            model: None,
            user: None,
            session: None,
        };
        assert_eq!(body(&t, &msgs)["prompt"], "s\nu");
        assert_eq!(body(&t, &msgs)["max_tokens"], 3);
        assert!(body(&t, &msgs).get("max_completion_tokens").is_none());
    }

    #[test]
    fn extra_body_merges_and_overrides() {
        let mut cfg = backend(RequestFormat::Chat, true);
        cfg.extra_body.insert("temperature".into(), 0.5.into());
        cfg.extra_body.insert("max_tokens".into(), 99.into());
        cfg.extra_body.insert("model".into(), "other".into());
        let t = BodyTemplate::new(&cfg);
        let raw = t.build(&text("x", Some(8)));
        let v: serde_json::Value = serde_json::from_slice(&raw).expect("json");
        assert_eq!(v["temperature"], 0.5);
        assert_eq!(v["max_tokens"], 99);
        assert!(v.get("max_completion_tokens").is_none());
        assert_eq!(v["model"], "other");
        let s = std::str::from_utf8(&raw).expect("utf8");
        assert_eq!(s.matches("\"max_tokens\"").count(), 1, "{s}");
        assert_eq!(s.matches("\"model\"").count(), 1, "{s}");
    }

    #[test]
    fn a_request_may_name_its_own_model() {
        for format in [RequestFormat::Chat, RequestFormat::Completions] {
            let t = BodyTemplate::new(&backend(format, true));
            let mut req = text("x", Some(2));
            req.model = Some("adapter-1".into());
            let raw = t.build(&req);
            let s = std::str::from_utf8(&raw).expect("utf8");
            assert_eq!(s.matches("\"model\"").count(), 1, "{s}");
            assert_eq!(body(&t, &req)["model"], "adapter-1");
            assert_eq!(body(&t, &text("x", Some(2)))["model"], "m");
        }
    }

    #[test]
    fn stream_events_parse() {
        let chat =
            br#"{"id":"x","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#;
        assert_eq!(
            parse_stream_event(chat),
            Ok(StreamEvent::Chunk(ChunkInfo {
                content: true,
                ..Default::default()
            }))
        );
        let role_only = br#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#;
        assert_eq!(
            parse_stream_event(role_only),
            Ok(StreamEvent::Chunk(ChunkInfo::default()))
        );
        let reasoning = br#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#;
        assert_eq!(
            parse_stream_event(reasoning),
            Ok(StreamEvent::Chunk(ChunkInfo {
                reasoning: true,
                ..Default::default()
            }))
        );
        let text = br#"{"choices":[{"text":"a","finish_reason":"length"}]}"#;
        assert_eq!(
            parse_stream_event(text),
            Ok(StreamEvent::Chunk(ChunkInfo {
                content: true,
                finished: true,
                finish: Some(FinishReason::Length),
                ..Default::default()
            }))
        );
        let usage = br#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#;
        let Ok(StreamEvent::Chunk(info)) = parse_stream_event(usage) else {
            panic!("usage chunk")
        };
        assert_eq!(
            info.usage,
            Some(Usage {
                prompt_tokens: Some(5),
                completion_tokens: Some(7),
                reasoning_tokens: None,
            })
        );
        // The reasoning part of the count (OpenAI, the mock); a null details object is none.
        for (usage, reasoning) in [
            (
                &br#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"completion_tokens_details":{"reasoning_tokens":3}}}"#[..],
                Some(3),
            ),
            (
                br#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"completion_tokens_details":null}}"#,
                None,
            ),
        ] {
            let Ok(StreamEvent::Chunk(info)) = parse_stream_event(usage) else {
                panic!("usage chunk")
            };
            assert_eq!(info.usage.and_then(|u| u.reasoning_tokens), reasoning);
        }
        assert_eq!(parse_stream_event(b" [DONE] "), Ok(StreamEvent::Done));
        assert_eq!(
            parse_stream_event(br#"{"error":{"message":"boom","type":"x"}}"#),
            Ok(StreamEvent::Error("boom".into()))
        );
        assert!(parse_stream_event(br#"{"choices": [{"delta": {"content": "x""#).is_err());
    }

    #[test]
    fn stream_events_are_checked_as_strictly_as_a_full_parse() {
        // Wrong types and bad UTF-8 are malformed, even in fields read only for presence.
        for bad in [
            &br#"{"choices":[{"delta":{"content":5}}]}"#[..],
            br#"{"choices":[{"finish_reason":true}]}"#,
            br#"{"choices":{"delta":{}}}"#,
            b"{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}",
            b"{\"id\":\"\xc3\",\"choices\":[]}",
        ] {
            assert!(
                parse_stream_event(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // Only the first choice counts; null fields are absent; escapes are fine.
        let two = br#"{"choices":[{"delta":{"content":null},"finish_reason":null},{"delta":{"content":"x"},"finish_reason":"stop"}]}"#;
        assert_eq!(
            parse_stream_event(two),
            Ok(StreamEvent::Chunk(ChunkInfo::default()))
        );
        let escaped = br#"{"choices":[{"delta":{"content":"\u00e9\n"},"finish_reason":""}]}"#;
        assert_eq!(
            parse_stream_event(escaped),
            Ok(StreamEvent::Chunk(ChunkInfo {
                content: true,
                finished: true,
                finish: Some(FinishReason::Other),
                ..Default::default()
            }))
        );
    }

    #[test]
    fn error_bodies_give_their_message() {
        assert_eq!(
            error_message(br#"{"error":{"message":"slow down","type":"rate_limit"}}"#),
            "slow down"
        );
        assert_eq!(error_message(b"plain failure\n"), "plain failure");
    }

    #[test]
    fn full_responses_parse() {
        let chat = br#"{"choices":[{"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
        let info = parse_full_response(chat).expect("chat");
        assert!(info.content && info.finished);
        assert_eq!(info.usage.and_then(|u| u.completion_tokens), Some(2));
    }
}
