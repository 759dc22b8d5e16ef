//! OpenAI wire types: request bodies the mock reads, and the response bodies and SSE
//! chunks it writes. Chunks are formatted with a small byte writer from prefixes built
//! once per request, never through `serde_json::Value`: this is the hot path.

use bytes::{BufMut, BytesMut};
use serde::{Deserialize, Serialize};

use super::media::MediaCount;
use super::prefix_cache::PromptBlocks;
use super::tokenizer;

/// `stream_options` of a request.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Ask for a final usage chunk.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// A chat message; only the content matters to the mock.
#[derive(Debug, Deserialize)]
pub struct Message {
    /// A string, or an array of parts of which the `text` ones count.
    #[serde(default)]
    pub content: Option<Content>,
}

/// Message content in either of its OpenAI shapes.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// `"content": "text"`
    Text(String),
    /// `"content": [{"type": "text", "text": "..."}, {"type": "image_url", ...}]`
    Parts(Vec<Part>),
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
        match self {
            Content::Text(t) => f(t),
            Content::Parts(parts) => parts.iter().filter_map(|p| p.text.as_deref()).for_each(f),
        }
    }
}

/// The prompt of chat messages: the tokens of every text content, and those of every
/// image and audio part (see [`super::media`]), which are counted too.
pub fn message_blocks(messages: &[Message]) -> (PromptBlocks, MediaCount) {
    let mut blocks = PromptBlocks::default();
    let mut media = MediaCount::default();
    for content in messages.iter().filter_map(|m| m.content.as_ref()) {
        match content {
            Content::Text(t) => blocks.push_text(t),
            Content::Parts(parts) => {
                for p in parts {
                    if let Some(t) = &p.text {
                        blocks.push_text(t);
                    }
                    if let Some(image) = &p.image_url {
                        media.image(&image.url, &mut blocks);
                    }
                    if let Some(audio) = &p.input_audio {
                        media.audio_base64(&audio.data, &mut blocks);
                    }
                }
            }
        }
    }
    (blocks, media)
}

/// `POST /v1/chat/completions`
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// Served model name; the first one when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Stream as SSE.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Output cap (legacy name).
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Output cap (current name; wins over `max_tokens`).
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    /// vLLM extension: generate exactly the cap.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
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

/// `POST /v1/completions`
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    /// Served model name; the first one when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// The prompt.
    pub prompt: Prompt,
    /// Stream as SSE.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Output cap.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// vLLM extension: generate exactly the cap.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
}

/// `POST /v1/embeddings`
#[derive(Debug, Deserialize)]
pub struct EmbeddingRequest {
    /// Served model name; the first one when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// What to embed: same shapes as a completions prompt, one vector per entry.
    pub input: Prompt,
    /// Vector length (default `EMBEDDING_DIM`).
    #[serde(default)]
    pub dimensions: Option<usize>,
}

/// `POST /tokenize`: a prompt or chat messages.
#[derive(Debug, Deserialize)]
pub struct TokenizeRequest {
    /// Served model name; the first one when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// Text to tokenize.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Chat messages to tokenize (their contents, in order).
    #[serde(default)]
    pub messages: Option<Vec<Message>>,
}

/// `POST /tokenize` response (vLLM's shape).
#[derive(Debug, Serialize)]
pub struct TokenizeResponse {
    /// Number of tokens.
    pub count: usize,
    /// The context window.
    pub max_model_len: u32,
    /// Token ids.
    pub tokens: Vec<u32>,
}

/// `POST /detokenize`
#[derive(Debug, Deserialize)]
pub struct DetokenizeRequest {
    /// Served model name; the first one when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// Token ids.
    pub tokens: Vec<u32>,
}

/// `POST /detokenize` response.
#[derive(Debug, Serialize)]
pub struct DetokenizeResponse {
    /// The text of the tokens.
    pub prompt: String,
}

/// Length of the mock's embedding vectors unless the request asks for `dimensions`.
pub const EMBEDDING_DIM: usize = 256;

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

/// The writer of a typed-event API, when the response is one.
#[derive(Debug)]
enum Typed {
    /// OpenAI chat or completions chunks.
    None,
    /// Responses API events.
    Responses(super::responses::Writer),
    /// Anthropic Messages events.
    Anthropic(super::anthropic::Writer),
}

/// Why generation ended, as OpenAI names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// The model chose to stop.
    Stop,
    /// `max_tokens` was reached.
    Length,
}

impl FinishReason {
    fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
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

/// Writes the chunks and bodies of one response; built once per request.
#[derive(Debug)]
pub struct Formatter {
    api: Api,
    /// `{"id":"…","object":"…","created":…,"model":"…"` (the object left open).
    envelope: Vec<u8>,
    /// Chunks carry `"usage":null` when the client asked for a usage chunk, as OpenAI's do.
    usage_null: bool,
    typed: Typed,
    /// End a stream with nothing: no finish chunk, no usage, no `[DONE]`.
    no_end: bool,
}

impl Formatter {
    /// `model_json` is the model name already JSON-quoted.
    pub fn new(
        api: Api,
        streaming: bool,
        seq: u64,
        created: u64,
        model_json: &str,
        usage_null: bool,
    ) -> Self {
        let (prefix, object) = match (api, streaming) {
            (Api::Chat, true) => ("chatcmpl", "chat.completion.chunk"),
            (Api::Chat, false) => ("chatcmpl", "chat.completion"),
            // vLLM's transcription chunks; a whole transcription has no envelope.
            (Api::Transcription(_), _) => ("trsc", "transcription.chunk"),
            (Api::Completions, _) => ("cmpl", "text_completion"),
            // Built with `typed`; the envelope is not used.
            (Api::Responses | Api::Anthropic, _) => ("resp", "response"),
        };
        let envelope = format!(
            r#"{{"id":"{prefix}-{seq:016x}","object":"{object}","created":{created},"model":{model_json}"#
        );
        Formatter {
            api,
            envelope: envelope.into_bytes(),
            usage_null,
            typed: Typed::None,
            no_end: false,
        }
    }

    /// A formatter whose streams end without their final chunks when `no_end`
    /// (`--no-final-event`).
    pub fn without_end(mut self, no_end: bool) -> Self {
        self.no_end = no_end;
        self
    }

    /// A formatter for the Responses API.
    pub fn responses(w: super::responses::Writer) -> Self {
        Formatter {
            api: Api::Responses,
            envelope: Vec::new(),
            usage_null: false,
            typed: Typed::Responses(w),
            no_end: false,
        }
    }

    /// A formatter for Anthropic's Messages API.
    pub fn anthropic(w: super::anthropic::Writer) -> Self {
        Formatter {
            api: Api::Anthropic,
            envelope: Vec::new(),
            usage_null: false,
            typed: Typed::Anthropic(w),
            no_end: false,
        }
    }

    /// Ends a stream: the finish chunk, the usage chunk when asked for (always, for the
    /// typed APIs, whose final event carries usage) and the end marker.
    pub fn end_stream(
        &self,
        out: &mut BytesMut,
        finish: FinishReason,
        usage: Usage,
        include_usage: bool,
    ) {
        match &self.typed {
            Typed::Responses(w) => return w.end_stream(out, finish, usage),
            Typed::Anthropic(w) => return w.end_stream(out, finish, usage),
            Typed::None if self.no_end => return,
            Typed::None => {}
        }
        self.finish_chunk(out, finish);
        if include_usage {
            self.usage_chunk(out, usage);
        }
        Self::done(out);
    }

    fn open_choice(&self, out: &mut BytesMut) {
        out.put_slice(b"data: ");
        out.put_slice(&self.envelope);
        out.put_slice(br#","choices":[{"index":0,"#);
    }

    fn close_choice(&self, out: &mut BytesMut, finish: Option<FinishReason>) {
        out.put_slice(br#","logprobs":null,"finish_reason":"#);
        match finish {
            Some(f) => {
                out.put_u8(b'"');
                out.put_slice(f.as_str().as_bytes());
                out.put_u8(b'"');
            }
            None => out.put_slice(b"null"),
        }
        out.put_slice(b"}]");
        if self.usage_null {
            out.put_slice(br#","usage":null"#);
        }
        out.put_slice(b"}\n\n");
    }

    /// One SSE chunk carrying `words` (each written with a leading space). `first` adds
    /// `"role":"assistant"` to a chat delta; `reasoning` uses `reasoning_content`.
    pub fn token_chunk(
        &self,
        out: &mut BytesMut,
        words: impl Iterator<Item = &'static str>,
        first: bool,
        reasoning: bool,
    ) {
        match &self.typed {
            Typed::Responses(w) => return w.token_chunk(out, words, first, reasoning),
            Typed::Anthropic(w) => return w.token_chunk(out, words, first, reasoning),
            Typed::None => {}
        }
        self.open_choice(out);
        match self.api {
            Api::Chat | Api::Transcription(_) => {
                out.put_slice(br#""delta":{"#);
                if first {
                    out.put_slice(br#""role":"assistant","#);
                }
                out.put_slice(if reasoning {
                    br#""reasoning_content":""#.as_slice()
                } else {
                    br#""content":""#
                });
                write_words(out, words);
                out.put_slice(b"\"}");
            }
            _ => {
                out.put_slice(br#""text":""#);
                write_words(out, words);
                out.put_u8(b'"');
            }
        }
        self.close_choice(out, None);
    }

    /// The chunk carrying `finish_reason` (an empty delta or text).
    pub fn finish_chunk(&self, out: &mut BytesMut, finish: FinishReason) {
        self.open_choice(out);
        out.put_slice(match self.api {
            Api::Chat | Api::Transcription(_) => br#""delta":{}"#.as_slice(),
            _ => br#""text":"""#,
        });
        self.close_choice(out, Some(finish));
    }

    /// The usage chunk: `choices: []` and the token counts.
    pub fn usage_chunk(&self, out: &mut BytesMut, usage: Usage) {
        out.put_slice(b"data: ");
        out.put_slice(&self.envelope);
        out.put_slice(br#","choices":[],"#);
        write_usage(out, usage);
        out.put_slice(b"}\n\n");
    }

    /// The end of a stream.
    pub fn done(out: &mut BytesMut) {
        out.put_slice(b"data: [DONE]\n\n");
    }

    /// A malformed event: a chunk cut inside its JSON.
    pub fn garbage_chunk(&self, out: &mut BytesMut) {
        match &self.typed {
            Typed::Responses(w) => return w.garbage_chunk(out),
            Typed::Anthropic(w) => return w.garbage_chunk(out),
            Typed::None => {}
        }
        self.open_choice(out);
        out.put_slice(match self.api {
            Api::Chat | Api::Transcription(_) => br#""delta":{"content":"x""#.as_slice(),
            _ => br#""text":"x""#,
        });
        out.put_slice(b"\n\n");
    }

    /// A whole non-streaming response body.
    pub fn full_body(
        &self,
        out: &mut BytesMut,
        content: impl Iterator<Item = &'static str>,
        reasoning: impl Iterator<Item = &'static str>,
        finish: FinishReason,
        usage: Usage,
    ) {
        match &self.typed {
            Typed::Responses(w) => return w.full_body(out, content, reasoning, finish, usage),
            Typed::Anthropic(w) => return w.full_body(out, content, reasoning, finish, usage),
            Typed::None => {}
        }
        if let Api::Transcription(seconds) = self.api {
            // vLLM (Whisper) reports the audio duration as a whole transcription's usage.
            out.put_slice(br#"{"text":""#);
            write_words(out, content);
            out.put_slice(br#"","usage":{"type":"duration","seconds":"#);
            out.put_slice(fmt_u64(&mut itoa_buf(), seconds));
            out.put_slice(b"}}");
            return;
        }
        out.put_slice(&self.envelope);
        out.put_slice(br#","choices":[{"index":0,"#);
        match self.api {
            Api::Chat => {
                out.put_slice(br#""message":{"role":"assistant","content":""#);
                write_words(out, content);
                out.put_u8(b'"');
                if usage.reasoning > 0 {
                    out.put_slice(br#","reasoning_content":""#);
                    write_words(out, reasoning);
                    out.put_u8(b'"');
                }
                out.put_u8(b'}');
            }
            _ => {
                out.put_slice(br#""text":""#);
                write_words(out, content);
                out.put_u8(b'"');
            }
        }
        out.put_slice(br#","logprobs":null,"finish_reason":""#);
        out.put_slice(finish.as_str().as_bytes());
        out.put_slice(br#""}],"#);
        write_usage(out, usage);
        out.put_u8(b'}');
    }
}

pub(crate) fn write_words(out: &mut BytesMut, words: impl Iterator<Item = &'static str>) {
    for w in words {
        out.put_u8(b' ');
        out.put_slice(w.as_bytes());
    }
}

fn write_usage(out: &mut BytesMut, usage: Usage) {
    let completion = usage.content + usage.reasoning;
    let mut num = itoa_buf();
    out.put_slice(br#""usage":{"prompt_tokens":"#);
    out.put_slice(fmt_u64(&mut num, usage.prompt));
    out.put_slice(br#","completion_tokens":"#);
    out.put_slice(fmt_u64(&mut num, completion));
    out.put_slice(br#","total_tokens":"#);
    out.put_slice(fmt_u64(&mut num, usage.prompt + completion));
    if usage.reasoning > 0 {
        out.put_slice(br#","completion_tokens_details":{"reasoning_tokens":"#);
        out.put_slice(fmt_u64(&mut num, usage.reasoning));
        out.put_u8(b'}');
    }
    out.put_u8(b'}');
}

pub(crate) fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

/// Decimal digits of `n` in `buf`, without allocating.
pub(crate) fn fmt_u64(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
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

    #[test]
    fn mock_fmt_u64_writes_digits() {
        let mut b = itoa_buf();
        assert_eq!(fmt_u64(&mut b, 0), b"0");
        assert_eq!(fmt_u64(&mut b, 1234567), b"1234567");
        assert_eq!(fmt_u64(&mut b, u64::MAX), u64::MAX.to_string().as_bytes());
    }

    #[test]
    fn mock_chunks_are_valid_json() {
        let f = Formatter::new(Api::Chat, true, 7, 1700000000, "\"m\"", true);
        let mut out = BytesMut::new();
        f.token_chunk(&mut out, ["the", "model"].into_iter(), true, false);
        f.finish_chunk(&mut out, FinishReason::Length);
        f.usage_chunk(
            &mut out,
            Usage {
                prompt: 3,
                content: 2,
                reasoning: 1,
            },
        );
        let text = std::str::from_utf8(&out).expect("utf8");
        for event in text.split_terminator("\n\n") {
            let json = event.strip_prefix("data: ").expect("data prefix");
            let v: serde_json::Value = serde_json::from_str(json).expect("valid json");
            assert_eq!(v["id"], "chatcmpl-0000000000000007");
        }
        let mut whole = BytesMut::new();
        Formatter::new(Api::Completions, false, 1, 1, "\"m\"", false).full_body(
            &mut whole,
            ["a"].into_iter(),
            std::iter::empty(),
            FinishReason::Stop,
            Usage {
                prompt: 1,
                content: 1,
                reasoning: 0,
            },
        );
        let v: serde_json::Value = serde_json::from_slice(&whole).expect("valid json");
        assert_eq!(v["choices"][0]["text"], " a");
    }
}
