//! OpenAI's chat and completions formats (and vLLM's transcription chunks, which share
//! the chat delta): request bodies the mock reads, and the response bodies and SSE
//! chunks it writes, plus the `/tokenize` and `/detokenize` bodies. Chunks are
//! formatted with a small byte writer from prefixes built once per request, never
//! through `serde_json::Value`: this is the hot path.

use bytes::{BufMut, BytesMut};
use serde::{Deserialize, Serialize};

use super::shared::{
    Api, FinishReason, Message, Prompt, ToolCall, Usage, fmt_u64, generation_request, hex16,
    itoa_buf, write_words,
};

/// `stream_options` of a request.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Ask for a final usage chunk.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

impl StreamOptions {
    /// Whether `options` ask for a final usage chunk.
    fn usage(options: &Option<StreamOptions>) -> bool {
        options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }
}

generation_request! {
    /// `POST /v1/chat/completions`
    pub struct ChatRequest {
        /// The conversation.
        pub messages: Vec<Message>,
        /// Streaming options.
        #[serde(default)]
        pub stream_options: Option<StreamOptions>,
        /// Output cap (legacy name).
        #[serde(default)]
        pub max_tokens: Option<u64>,
        /// Output cap (current name; wins over `max_tokens`).
        #[serde(default)]
        pub max_completion_tokens: Option<u64>,
    }
    cap(r) = r.max_completion_tokens.or(r.max_tokens);
    include_usage(r) = StreamOptions::usage(&r.stream_options);
}

generation_request! {
    /// `POST /v1/completions`
    pub struct CompletionRequest {
        /// The prompt.
        pub prompt: Prompt,
        /// Streaming options.
        #[serde(default)]
        pub stream_options: Option<StreamOptions>,
        /// Output cap.
        #[serde(default)]
        pub max_tokens: Option<u64>,
    }
    cap(r) = r.max_tokens;
    include_usage(r) = StreamOptions::usage(&r.stream_options);
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

/// An SSE data line's start.
const DATA: &[u8] = b"data: ";
/// The one choice of a chunk or body, left open.
const CHOICE: &[u8] = br#","choices":[{"index":0,"#;
/// The end of a chunk whose choice has not finished, with and without `"usage":null`.
const UNFINISHED: &[u8] = b",\"logprobs\":null,\"finish_reason\":null}]}\n\n";
const UNFINISHED_USAGE_NULL: &[u8] =
    b",\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n";

/// Writes the chunks and bodies of one chat, completions or transcription response;
/// built once per request.
#[derive(Debug)]
pub struct Writer {
    api: Api,
    /// `data: {"id":"…","object":"…","created":…,"model":"…","choices":[{"index":0,`:
    /// every chunk with a choice opens with it, so it is built once per request.
    head: Vec<u8>,
    /// Where the envelope, `{"id":…"model":"…"` (the object left open), is in `head`.
    envelope: std::ops::Range<usize>,
    /// Chunks carry `"usage":null` when the client asked for a usage chunk, as OpenAI's do.
    usage_null: bool,
    /// End a stream with nothing: no finish chunk, no usage, no `[DONE]`.
    no_end: bool,
    /// The tool call the answer is (chat only), if the plan made one.
    tool: Option<ToolCall>,
}

impl Writer {
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
        // Pieces copied in, not `format!`: this runs once per request at tens of
        // thousands a second.
        let mut head = Vec::with_capacity(128 + model_json.len());
        head.extend_from_slice(DATA);
        head.extend_from_slice(br#"{"id":""#);
        head.extend_from_slice(prefix.as_bytes());
        head.push(b'-');
        head.extend_from_slice(&hex16(seq));
        head.extend_from_slice(br#"","object":""#);
        head.extend_from_slice(object.as_bytes());
        head.extend_from_slice(br#"","created":"#);
        head.extend_from_slice(fmt_u64(&mut itoa_buf(), created));
        head.extend_from_slice(br#","model":"#);
        head.extend_from_slice(model_json.as_bytes());
        let envelope = DATA.len()..head.len();
        head.extend_from_slice(CHOICE);
        Writer {
            api,
            head,
            envelope,
            usage_null,
            no_end: false,
            tool: None,
        }
    }

    /// Answers with `tool` (`tool_calls`) instead of text; chat only, so other APIs
    /// ignore it.
    pub fn with_tool_call(mut self, tool: Option<ToolCall>) -> Self {
        self.tool = tool.filter(|_| self.api == Api::Chat);
        self
    }

    /// A writer whose streams end without their final chunks when `no_end`
    /// (`--no-final-event`).
    pub fn without_end(mut self, no_end: bool) -> Self {
        self.no_end = no_end;
        self
    }

    /// Ends a stream: the finish chunk, the usage chunk when asked for and the end
    /// marker.
    pub fn end_stream(
        &self,
        out: &mut BytesMut,
        finish: FinishReason,
        usage: Usage,
        include_usage: bool,
    ) {
        if self.no_end {
            return;
        }
        self.finish_chunk(out, finish);
        if include_usage {
            self.usage_chunk(out, usage);
        }
        Self::done(out);
    }

    /// `{"id":…"model":"…"`, the object left open.
    fn envelope(&self) -> &[u8] {
        &self.head[self.envelope.clone()]
    }

    fn open_choice(&self, out: &mut BytesMut) {
        out.put_slice(&self.head);
    }

    fn close_choice(&self, out: &mut BytesMut, finish: Option<FinishReason>) {
        let Some(f) = finish else {
            // A token chunk's ending, whole.
            out.put_slice(if self.usage_null {
                UNFINISHED_USAGE_NULL
            } else {
                UNFINISHED
            });
            return;
        };
        out.put_slice(br#","logprobs":null,"finish_reason":""#);
        out.put_slice(f.as_str().as_bytes());
        out.put_slice(b"\"}]");
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
        self.open_choice(out);
        match self.api {
            Api::Chat | Api::Transcription(_) => {
                out.put_slice(br#""delta":{"#);
                if first {
                    out.put_slice(br#""role":"assistant","#);
                }
                if let (Some(tool), false) = (&self.tool, reasoning) {
                    Self::tool_call_open(out, tool, tool.opening());
                    tool.write_pieces(out, words);
                    out.put_slice(br#""}}]}"#);
                    self.close_choice(out, None);
                    return;
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
        out.put_slice(DATA);
        out.put_slice(self.envelope());
        out.put_slice(br#","choices":[],"#);
        write_usage(out, usage);
        out.put_slice(b"}\n\n");
    }

    /// `"tool_calls":[{"index":0,` and the call's id, type and name when `head` (its
    /// first chunk, or a whole message), then `"function":{…"arguments":"` left open.
    fn tool_call_open(out: &mut BytesMut, tool: &ToolCall, head: bool) {
        out.put_slice(br#""tool_calls":[{"index":0,"#);
        if head {
            out.put_slice(br#""id":"call_"#);
            out.put_slice(tool.id.as_bytes());
            out.put_slice(br#"","type":"function","function":{"name":""#);
            out.put_slice(tool.name.as_bytes());
            out.put_slice(br#"","arguments":""#);
        } else {
            out.put_slice(br#""function":{"arguments":""#);
        }
    }

    /// The end of a stream.
    pub fn done(out: &mut BytesMut) {
        out.put_slice(b"data: [DONE]\n\n");
    }

    /// A malformed event: a chunk cut inside its JSON.
    pub fn garbage_chunk(&self, out: &mut BytesMut) {
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
        if let Api::Transcription(seconds) = self.api {
            // vLLM (Whisper) reports the audio duration as a whole transcription's usage.
            out.put_slice(br#"{"text":""#);
            write_words(out, content);
            out.put_slice(br#"","usage":{"type":"duration","seconds":"#);
            out.put_slice(fmt_u64(&mut itoa_buf(), seconds));
            out.put_slice(b"}}");
            return;
        }
        out.put_slice(self.envelope());
        out.put_slice(CHOICE);
        match self.api {
            Api::Chat => {
                match &self.tool {
                    Some(tool) => {
                        out.put_slice(br#""message":{"role":"assistant","content":null,"#);
                        Self::tool_call_open(out, tool, true);
                        tool.write_pieces(out, content);
                        out.put_slice(br#""}}]"#);
                    }
                    None => {
                        out.put_slice(br#""message":{"role":"assistant","content":""#);
                        write_words(out, content);
                        out.put_u8(b'"');
                    }
                }
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
        let f = Writer::new(Api::Chat, true, 7, 1700000000, "\"m\"", true);
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
        Writer::new(Api::Completions, false, 1, 1, "\"m\"", false).full_body(
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
