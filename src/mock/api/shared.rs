//! The shared generation core of the API formats: the prompt shapes several formats
//! accept (chat messages, completions prompts), the token counts of a response, the
//! byte writers every format's hot path uses (words, numbers), and OpenAI's error body,
//! which every endpoint answers with (Anthropic's handler reshapes it). Each format
//! module (`openai`, `responses`, `anthropic`, `embeddings`, `rerank`, `media`) builds on
//! this one and on `model`; none imports another format.

use bytes::{BufMut, BytesMut};
use serde::{Deserialize, Serialize};

pub use crate::mock::model::plan::FinishReason;
use crate::mock::model::prefix_cache::PromptBlocks;
use crate::mock::model::tokenizer;

/// A chat message (or a Responses input item); only its texts matter to the mock.
#[derive(Debug, Deserialize)]
pub struct Message {
    /// A string, or an array of parts of which the `text` ones count.
    #[serde(default)]
    pub content: Option<Content>,
    /// Chat: the tool calls an assistant message resends; their arguments count.
    #[serde(default)]
    pub tool_calls: Vec<ChatToolCall>,
    /// Responses: a `function_call` item's arguments.
    #[serde(default)]
    pub arguments: Option<String>,
    /// Responses: a `function_call_output` item's result.
    #[serde(default)]
    pub output: Option<String>,
}

/// One entry of an assistant message's `tool_calls`.
#[derive(Debug, Deserialize)]
pub struct ChatToolCall {
    /// The function called and its arguments.
    pub function: ChatFunction,
}

/// `{"name": …, "arguments": …}` of a chat tool call.
#[derive(Debug, Deserialize)]
pub struct ChatFunction {
    /// The arguments, a JSON text.
    #[serde(default)]
    pub arguments: String,
}

impl Message {
    /// Calls `f` with each text of the message as a prompt counts it: its content's, a
    /// resent tool call's arguments, a tool result's.
    pub fn for_each_text(&self, mut f: impl FnMut(&str)) {
        if let Some(content) = &self.content {
            content.for_each_text(&mut f);
        }
        self.for_each_tool_text(f);
    }

    /// Calls `f` with the texts of a resent tool call or a tool result outside its
    /// content (chat's `tool_calls`, Responses' `arguments` and `output`).
    pub fn for_each_tool_text(&self, mut f: impl FnMut(&str)) {
        for call in &self.tool_calls {
            f(&call.function.arguments);
        }
        self.arguments.iter().chain(&self.output).for_each(|t| f(t));
    }
}

/// Message content in either of its OpenAI shapes.
#[derive(Debug)]
pub enum Content {
    /// `"content": "text"`
    Text(String),
    /// `"content": [{"type": "text", "text": "..."}, {"type": "image_url", ...}]`
    Parts(Vec<Part>),
}

/// By the JSON's own type, where `#[serde(untagged)]` would copy the value into a buffer
/// and try each shape in turn, for every message of every request.
impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Shape;
        impl<'de> serde::de::Visitor<'de> for Shape {
            type Value = Content;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of content parts")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Content, E> {
                Ok(Content::Text(v.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Content, E> {
                Ok(Content::Text(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Content, A::Error> {
                Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
                    .map(Content::Parts)
            }
        }
        d.deserialize_any(Shape)
    }
}

/// One part of a multi-part message content.
#[derive(Debug, Deserialize)]
pub struct Part {
    /// The text of a text part; absent for other kinds.
    #[serde(default)]
    pub text: Option<String>,
    /// An `image_url` part's image.
    #[serde(default)]
    pub image_url: Option<ImageUrl>,
    /// An `input_audio` part's clip.
    #[serde(default)]
    pub input_audio: Option<InputAudio>,
    /// Anthropic: a `tool_result` block's result (a text or text blocks).
    #[serde(default)]
    pub content: Option<Box<Content>>,
    /// Anthropic: a resent `tool_use` block's arguments (an object; its JSON counts).
    #[serde(default)]
    pub input: Option<serde_json::Value>,
}

impl Part {
    /// Calls `f` with each text of the part: a text part's, a tool result's, a tool
    /// call's arguments as JSON.
    pub fn for_each_text(&self, f: &mut dyn FnMut(&str)) {
        if let Some(t) = &self.text {
            f(t);
        }
        if let Some(content) = &self.content {
            content.each_text(f);
        }
        if let Some(input) = &self.input {
            f(&input.to_string());
        }
    }
}

/// `{"url": …}` of an `image_url` part.
#[derive(Debug, Deserialize)]
pub struct ImageUrl {
    /// A data URL or a URL to fetch (the mock does not fetch).
    pub url: String,
}

/// `{"data": …, "format": "wav"}` of an `input_audio` part.
#[derive(Debug, Deserialize)]
pub struct InputAudio {
    /// The audio file in base64.
    pub data: String,
}

impl Content {
    /// Calls `f` with each text piece.
    pub fn for_each_text(&self, mut f: impl FnMut(&str)) {
        self.each_text(&mut f);
    }

    /// [`Content::for_each_text`] through one closure type, as a tool result's content
    /// nests content.
    fn each_text(&self, f: &mut dyn FnMut(&str)) {
        match self {
            Content::Text(t) => f(t),
            Content::Parts(parts) => parts.iter().for_each(|p| p.for_each_text(f)),
        }
    }
}

/// A completions prompt in any of its OpenAI shapes.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// One text prompt.
    Text(String),
    /// A batch of text prompts.
    Texts(Vec<String>),
    /// One prompt as token ids.
    Ids(Vec<u32>),
    /// A batch of token-id prompts.
    IdBatches(Vec<Vec<u32>>),
}

impl Prompt {
    /// Number of prompts in the batch.
    pub fn batch_len(&self) -> usize {
        match self {
            Prompt::Text(_) | Prompt::Ids(_) => 1,
            Prompt::Texts(v) => v.len(),
            Prompt::IdBatches(v) => v.len(),
        }
    }

    /// The prompt of a one-prompt batch (empty for a larger batch, which is refused).
    pub fn blocks(&self) -> PromptBlocks {
        let mut blocks = PromptBlocks::default();
        let ids = |blocks: &mut PromptBlocks, ids: &[u32]| {
            ids.iter().for_each(|id| blocks.push(&id.to_le_bytes()));
        };
        match self {
            Prompt::Text(t) => blocks.push_text(t),
            Prompt::Texts(v) if v.len() == 1 => blocks.push_text(&v[0]),
            Prompt::Ids(given) => ids(&mut blocks, given),
            Prompt::IdBatches(v) if v.len() == 1 => ids(&mut blocks, &v[0]),
            Prompt::Texts(_) | Prompt::IdBatches(_) => {}
        }
        blocks
    }

    /// Total prompt tokens across the batch.
    pub fn count(&self) -> u64 {
        match self {
            Prompt::Text(t) => tokenizer::count(t),
            Prompt::Texts(v) => v.iter().map(|t| tokenizer::count(t)).sum(),
            Prompt::Ids(ids) => ids.len() as u64,
            Prompt::IdBatches(v) => v.iter().map(|ids| ids.len() as u64).sum(),
        }
    }
}

/// What every generation request body says besides its prompt, whatever its API: the
/// handler turns any of them into one generation through this.
pub trait GenerationRequest {
    /// Served model name; the first one when absent.
    fn model(&self) -> Option<&str>;
    /// Whether to stream as SSE.
    fn streaming(&self) -> bool;
    /// vLLM's extension: generate exactly the cap.
    fn ignore_eos(&self) -> bool;
    /// vLLM's extension: generate at least this many tokens before any end of sequence.
    fn min_tokens(&self) -> Option<u32>;
    /// The output cap asked for, under the API's own field name.
    fn cap(&self) -> Option<u64>;
    /// Whether a stream ends with usage (always, for the APIs whose final event has it).
    fn include_usage(&self) -> bool;
    /// The names of the functions the request offers to call (`tools`), in order.
    fn tools(&self) -> Vec<String>;
}

/// One entry of a request's `tools`: chat's `{"type":"function","function":{"name":…}}`,
/// or Responses' and Anthropic's `{"name":…}`; only the name matters to the mock.
#[derive(Debug, Deserialize)]
pub struct OfferedTool {
    /// Responses' and Anthropic's name.
    #[serde(default)]
    name: Option<String>,
    /// Chat's function, with its name.
    #[serde(default)]
    function: Option<OfferedFunction>,
}

/// `{"name": …}` of a chat tool's `function`.
#[derive(Debug, Deserialize)]
pub struct OfferedFunction {
    #[serde(default)]
    name: Option<String>,
}

impl OfferedTool {
    /// The name a call of this tool (the `k`th offered) uses: its own, when it has one
    /// of the characters OpenAI allows (`[A-Za-z0-9_-]`, up to 64; so it needs no JSON
    /// escaping), else `tool_{k}` (a built-in tool such as `web_search` has none).
    pub fn call_name(&self, k: usize) -> String {
        let own = self
            .function
            .as_ref()
            .and_then(|f| f.name.as_deref())
            .or(self.name.as_deref());
        match own {
            Some(n)
                if (1..=64).contains(&n.len())
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
            {
                n.to_string()
            }
            _ => format!("tool_{k}"),
        }
    }
}

/// Declares a generation request body: the fields every generation API shares
/// (`model`, `stream`, `ignore_eos`), then the API's own, and its
/// [`GenerationRequest`] with the API's `cap` and `include_usage` read from `$r`.
macro_rules! generation_request {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)*
        }
        cap($r:ident) = $cap:expr;
        include_usage($u:ident) = $usage:expr;
    ) => {
        $(#[$meta])*
        #[derive(Debug, ::serde::Deserialize)]
        pub struct $name {
            /// Served model name; the first one when absent.
            #[serde(default)]
            pub model: Option<String>,
            /// Stream as SSE.
            #[serde(default)]
            pub stream: Option<bool>,
            /// vLLM extension: generate exactly the cap.
            #[serde(default)]
            pub ignore_eos: Option<bool>,
            /// vLLM extension: no end of sequence before this many tokens.
            #[serde(default)]
            pub min_tokens: Option<u32>,
            /// Functions the model may call; their names are what a call names.
            #[serde(default)]
            pub tools: Option<Vec<$crate::mock::api::shared::OfferedTool>>,
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $crate::mock::api::shared::GenerationRequest for $name {
            fn model(&self) -> Option<&str> {
                self.model.as_deref()
            }
            fn streaming(&self) -> bool {
                self.stream.unwrap_or(false)
            }
            fn ignore_eos(&self) -> bool {
                self.ignore_eos.unwrap_or(false)
            }
            fn min_tokens(&self) -> Option<u32> {
                self.min_tokens
            }
            fn cap(&self) -> Option<u64> {
                let $r = self;
                $cap
            }
            fn include_usage(&self) -> bool {
                let $u = self;
                $usage
            }
            fn tools(&self) -> Vec<String> {
                self.tools.iter().flatten().enumerate().map(|(k, t)| t.call_name(k)).collect()
            }
        }
    };
}
pub(crate) use generation_request;

/// Which OpenAI endpoint a generation answers; decides object names and chunk shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions`
    Chat,
    /// `/v1/completions`
    Completions,
    /// `/v1/responses`
    Responses,
    /// `/v1/messages`
    Anthropic,
    /// `/v1/audio/transcriptions`, of a clip of this many whole seconds (rounded up),
    /// which a whole response reports as its usage.
    Transcription(u64),
}

/// Token counts of a response.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt: u64,
    /// Content tokens.
    pub content: u64,
    /// Reasoning tokens (included in completion_tokens).
    pub reasoning: u64,
}

/// A tool call the mock answers with instead of text (`--tool-call-rate`): the function
/// it calls and its arguments, `{"query":"…"}` of the planned output tokens. The
/// arguments are streamed as pieces of a JSON string, one word per token, the first
/// carrying the opening `{"query":"` and the last the closing `"}`, so every piece is a
/// counted token and the pieces join into valid JSON.
#[derive(Debug)]
pub struct ToolCall {
    /// The function's name (one of those the request offered).
    pub name: String,
    /// The call's id: `call_…` (OpenAI), `toolu_…` (Anthropic), `fc_…` (Responses item).
    pub id: String,
    /// Tokens of the arguments.
    total: u32,
    /// Tokens written so far.
    written: std::cell::Cell<u32>,
}

impl ToolCall {
    /// A call of one of the `offered` functions (their call names), decided by `seq`,
    /// with `tokens` tokens of arguments.
    pub fn new(seq: u64, offered: &[String], tokens: u32) -> Self {
        let k = seq % offered.len().max(1) as u64;
        ToolCall {
            name: offered
                .get(k as usize)
                .cloned()
                .unwrap_or_else(|| format!("tool_{k}")),
            id: Self::id_of(seq),
            total: tokens,
            written: std::cell::Cell::new(0),
        }
    }

    /// The id of request `seq`'s call, before its format's prefix (`call_`, `toolu_`).
    pub fn id_of(seq: u64) -> String {
        format!("{seq:016x}")
    }

    /// Whether no piece was written yet (the next chunk opens the call).
    pub fn opening(&self) -> bool {
        self.written.get() == 0
    }

    /// Writes the arguments' next pieces, one per word, escaped inside a JSON string.
    pub fn write_pieces(&self, out: &mut BytesMut, words: impl Iterator<Item = &'static str>) {
        for w in words {
            let n = self.written.get();
            out.put_slice(if n == 0 {
                br#"{\"query\":\""#.as_slice()
            } else {
                b" "
            });
            out.put_slice(w.as_bytes());
            self.written.set(n + 1);
            if n + 1 == self.total {
                out.put_slice(br#"\"}"#);
            }
        }
    }

    /// The whole arguments as a JSON object (Anthropic's `input`), not a string.
    pub fn write_object(out: &mut BytesMut, words: impl Iterator<Item = &'static str>) {
        out.put_slice(br#"{"query":""#);
        let mut first = true;
        for w in words {
            if !first {
                out.put_u8(b' ');
            }
            first = false;
            out.put_slice(w.as_bytes());
        }
        out.put_slice(br#""}"#);
    }
}

/// Writes each of `words` with a leading space (the mock's words need no JSON escaping).
pub fn write_words(out: &mut BytesMut, words: impl Iterator<Item = &'static str>) {
    for w in words {
        out.put_u8(b' ');
        out.put_slice(w.as_bytes());
    }
}

/// A buffer for [`fmt_u64`].
pub fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

/// `n` as 16 lowercase hex digits (`{n:016x}`), without formatting machinery.
pub fn hex16(n: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, d) in out.iter_mut().enumerate() {
        *d = b"0123456789abcdef"[(n >> (60 - 4 * i) & 0xf) as usize];
    }
    out
}

/// Decimal digits of `n` in `buf`, without allocating.
pub fn fmt_u64(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// An OpenAI error body: `{"error": {"message", "type", "param": null, "code"}}`.
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    /// The error.
    pub error: ErrorDetail<'a>,
}

/// The inside of an error body.
#[derive(Debug, Serialize)]
pub struct ErrorDetail<'a> {
    /// Human-readable explanation.
    pub message: &'a str,
    /// OpenAI's error type (`invalid_request_error`, `server_error`, ...).
    #[serde(rename = "type")]
    pub kind: &'a str,
    /// Always null here.
    pub param: Option<&'a str>,
    /// A stable machine-readable code.
    pub code: &'a str,
}

/// An error body as bytes.
pub fn error_json(message: &str, kind: &str, code: &str) -> Vec<u8> {
    let body = ErrorBody {
        error: ErrorDetail {
            message,
            kind,
            param: None,
            code,
        },
    };
    // Serializing plain strings cannot fail; fall back to a fixed body rather than panic.
    serde_json::to_vec(&body).unwrap_or_else(|_| br#"{"error":{"message":"error","type":"server_error","param":null,"code":"internal_error"}}"#.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(m: &Message) -> Vec<String> {
        let mut out = Vec::new();
        m.for_each_text(|t| out.push(t.to_string()));
        out
    }

    #[test]
    fn content_is_read_by_its_json_type() {
        let parse = |json: &str| serde_json::from_str::<Message>(json);
        let text = parse(r#"{"role":"user","content":"hello there"}"#).expect("a string");
        assert!(matches!(text.content, Some(Content::Text(_))));
        assert_eq!(texts(&text), ["hello there"]);
        let parts = parse(
            r#"{"role":"user","content":[{"type":"text","text":"a b"},{"type":"image_url","image_url":{"url":"data:x"}},{"type":"text","text":"c"}]}"#,
        )
        .expect("parts");
        assert!(matches!(&parts.content, Some(Content::Parts(p)) if p.len() == 3));
        assert_eq!(texts(&parts), ["a b", "c"]);
        // An assistant turn that only calls a tool has a null content.
        let null = parse(
            r#"{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}"#,
        )
        .expect("null");
        assert!(null.content.is_none());
        assert_eq!(texts(&null), ["{}"]);
        // Anthropic's tool result nests content, a string or blocks.
        let nested = parse(
            r#"{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"r"}]},{"type":"tool_result","content":"s"}]}"#,
        )
        .expect("nested");
        assert_eq!(texts(&nested), ["r", "s"]);
        let wrong = parse(r#"{"role":"user","content":5}"#).expect_err("a number");
        assert!(
            wrong
                .to_string()
                .contains("expected a string or an array of content parts"),
            "{wrong}"
        );
    }

    #[test]
    fn hex16_is_the_formatted_hex() {
        for n in [0, 1, 0xabc, u64::MAX, 0x0123_4567_89ab_cdef] {
            assert_eq!(hex16(n), format!("{n:016x}").as_bytes(), "{n}");
        }
    }
}
