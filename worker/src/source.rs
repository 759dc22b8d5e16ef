//! Where request payloads come from: a per-worker source the binary provides.
//!
//! The worker crate does not know how prompts are made (synthetic text, files, datasets,
//! tokenizers all live in the binary); it asks a [`RequestSource`] for the payload of a
//! slot. Sources are deterministic in the slot, so the same seed gives the same prompts
//! whatever the number of workers.

use bytes::Bytes;
use llmsurge_proto::{AudioInfo, ImageInfo, ImageKind, RequestMedia, WorkerConfig};
use std::sync::Arc;

/// One image or audio clip of a multimodal request. The encoded bytes are shared (a
/// source generates each distinct medium once), so a clone is a reference count.
#[derive(Clone, Debug, PartialEq)]
pub enum MediaPart {
    /// An `image_url` part.
    Image {
        /// A `data:` URL of the encoded image, or a URL the server fetches itself.
        url: Arc<str>,
        /// Width in pixels (0 when unknown, for an external URL).
        width: u32,
        /// Height in pixels (0 when unknown).
        height: u32,
        /// Encoded bytes (before base64; 0 for an external URL).
        bytes: u64,
    },
    /// A WAV clip: an `input_audio` part in chat, the uploaded file of a transcription.
    Audio {
        /// The WAV file.
        wav: Bytes,
        /// The same file in base64, for JSON bodies.
        base64: Arc<str>,
        /// Its duration.
        seconds: f64,
    },
}

impl Eq for MediaPart {}

impl MediaPart {
    /// Bytes this part adds to a JSON body.
    pub fn json_len(&self) -> usize {
        match self {
            MediaPart::Image { url, .. } => url.len() + 64,
            MediaPart::Audio { base64, .. } => base64.len() + 80,
        }
    }
}

/// One chat message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text (a tool message's: the tool's result).
    pub content: String,
    /// An `assistant` message: the tool call it made; a `tool` message: the call it
    /// answers. `None` for plain text.
    pub tool_call: Option<Box<ToolCall>>,
}

impl Message {
    /// A plain text message.
    pub fn text(role: &str, content: String) -> Self {
        Message {
            role: role.into(),
            content,
            tool_call: None,
        }
    }
}

/// A tool call a server answered with, as a session resends it: every format names the
/// call by an id, the function by name, and its arguments as a JSON text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolCall {
    /// The call's id (`tool_call_id`, `call_id`, `tool_use_id` of the result).
    pub id: String,
    /// The function called.
    pub name: String,
    /// The arguments, a JSON object as text (streamed ones joined).
    pub arguments: String,
    /// Where the answer carried it (chat's call index, Responses' output index,
    /// Anthropic's block index), so a stream's pieces of a second call stay out of it.
    pub part: u64,
}

/// The prompt of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    /// A single user prompt (or the whole prompt of a completions request).
    Text(String),
    /// A conversation.
    Messages(Vec<Message>),
    /// A batch of texts: the inputs of one embeddings request.
    Batch(Vec<String>),
    /// A query and the documents to rank against it (rerank and score).
    Ranking {
        /// The query.
        query: String,
        /// The documents.
        documents: Vec<String>,
    },
    /// A user prompt with images or audio after its text (multimodal chat, or the
    /// audio of a transcription).
    Media {
        /// The text part (may be empty).
        text: String,
        /// The media, in order.
        parts: Vec<MediaPart>,
    },
    /// A completions prompt as token ids (`--prompt-token-ids`): its length is exact on
    /// the server whatever its tokenizer does to text.
    TokenIds(Vec<u32>),
}

impl Prompt {
    /// Bytes of text in the prompt (to size a body before writing it).
    pub fn text_len(&self) -> usize {
        match self {
            Prompt::Text(t) => t.len(),
            Prompt::Messages(m) => m.iter().map(|m| m.content.len() + 32).sum(),
            Prompt::Batch(v) => v.iter().map(|t| t.len() + 4).sum(),
            Prompt::Ranking { query, documents } => {
                query.len() + documents.iter().map(|t| t.len() + 4).sum::<usize>()
            }
            Prompt::Media { text, parts } => {
                text.len() + parts.iter().map(MediaPart::json_len).sum::<usize>()
            }
            // Up to 10 digits and a comma each.
            Prompt::TokenIds(ids) => ids.len() * 11,
        }
    }

    /// The prompt's texts in order, as one text (for a format that takes one).
    pub fn joined(&self) -> String {
        match self {
            Prompt::Text(t) => t.clone(),
            Prompt::Messages(m) => m
                .iter()
                .map(|m| m.content.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            Prompt::Batch(v) => v.join("\n"),
            Prompt::Ranking { query, documents } => {
                let mut all = vec![query.as_str()];
                all.extend(documents.iter().map(String::as_str));
                all.join("\n")
            }
            Prompt::Media { text, .. } => text.clone(),
            // Formats that take text get the ids as words: never sent so (the CLI
            // allows token ids with completions only).
            Prompt::TokenIds(ids) => ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" "),
        }
    }

    /// How many inputs one request carries: texts to embed, documents to rank, else 1.
    pub fn inputs(&self) -> usize {
        match self {
            Prompt::Batch(v) => v.len(),
            Prompt::Ranking { documents, .. } => documents.len(),
            _ => 1,
        }
    }

    /// The prompt's texts as a batch (one per input).
    pub fn texts(&self) -> Vec<&str> {
        match self {
            Prompt::Text(t) => vec![t.as_str()],
            Prompt::Messages(m) => m.iter().map(|m| m.content.as_str()).collect(),
            Prompt::Batch(v) => v.iter().map(String::as_str).collect(),
            Prompt::Ranking { documents, .. } => documents.iter().map(String::as_str).collect(),
            Prompt::Media { text, .. } => vec![text.as_str()],
            // No text to batch (never sent in a batch format: see `joined`).
            Prompt::TokenIds(_) => Vec::new(),
        }
    }
}

impl Prompt {
    /// The media of a multimodal prompt (none for the others).
    pub fn media(&self) -> &[MediaPart] {
        match self {
            Prompt::Media { parts, .. } => parts,
            _ => &[],
        }
    }
}

/// The payload of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedRequest {
    /// The prompt.
    pub prompt: Prompt,
    /// The prompt's length under the run's tokenizer, when known.
    pub prompt_tokens: Option<u32>,
    /// Output tokens to ask for (`max_tokens`), if any.
    pub max_tokens: Option<u32>,
    /// The model name for this request (a LoRA adapter, say); `None` sends the run's
    /// configured model.
    pub model: Option<Arc<str>>,
    /// Sticky routing: the OpenAI `user` field to send (a session id, so a KV-aware
    /// router keeps a session on one replica); `None` sends none.
    pub user: Option<String>,
    /// Sticky routing: the session id sent in the backend's session header (when one
    /// is configured: `session_header=NAME`); `None` sends none. Shared by a session's
    /// turns, so a turn costs a reference count, not a string.
    pub session: Option<Arc<str>>,
}

impl PreparedRequest {
    /// The sizes of the request's media for its record; `None` (no allocation) for a
    /// request without media.
    pub fn media_info(&self) -> Option<Box<RequestMedia>> {
        let parts = self.prompt.media();
        if parts.is_empty() {
            return None;
        }
        let mut media = RequestMedia::default();
        let known = |n: u32| (n > 0).then_some(n);
        for part in parts {
            match part {
                MediaPart::Image {
                    url,
                    width,
                    height,
                    bytes,
                } => media.images.push(ImageInfo {
                    format: ImageKind::of_url(url),
                    width: known(*width),
                    height: known(*height),
                    bytes: *bytes,
                }),
                MediaPart::Audio { wav, seconds, .. } => {
                    media.audio = Some(AudioInfo {
                        seconds: *seconds,
                        bytes: wav.len() as u64,
                    });
                }
            }
        }
        Some(Box::new(media))
    }
}

/// One turn of a multi-turn session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    /// The turn's new user message (as its prompt), its output length and model.
    pub request: PreparedRequest,
    /// The pause between the previous turn's end and this turn's send (0 for the first).
    pub think_ns: u64,
    /// `history=recorded`: the dataset's reply, resent in later turns instead of the one
    /// received.
    pub recorded_reply: Option<String>,
    /// The data's `tool_result_tokens`: the tool's result sent (a `tool` message) after
    /// this turn when the server answered it with a tool call.
    pub tool_result: Option<String>,
    /// The tool result's length under the run's tokenizer (0 without one): a later
    /// turn's prompt length counts it.
    pub tool_result_tokens: u32,
    /// Agent traces: the turns (indices) that must all end before this one, which then
    /// waits `think_ns` and is sent as its own prompt (no history); `None` for a linear
    /// session, where a turn waits for the previous one.
    pub after: Option<Vec<u32>>,
    /// Agent traces: a sub-agent's call names its parent conversation's key (its own
    /// is its request's `session`); `None` for the trace's main agent and sessions.
    pub parent_session: Option<Arc<str>>,
}

/// A multi-turn session: turns run one after another on one worker, each carrying the
/// history of the earlier ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionPlan {
    /// A system prompt opening every turn's messages.
    pub system: Option<String>,
    /// The system prompt's length under the run's tokenizer, when known.
    pub system_tokens: Option<u32>,
    /// The turns, in order.
    pub turns: Vec<Turn>,
}

/// A session under way: its plan and the history its next turn resends. The pacer opens
/// it and prepares turn 1 (rate-based starts); the request loop runs the rest.
#[derive(Debug)]
pub struct SessionState {
    /// The session's index in the schedule.
    pub id: u64,
    /// The turns, in order.
    turns: Vec<Turn>,
    /// The next turn to send.
    next: usize,
    /// The system prompt, then each sent turn's user message and its reply.
    history: Vec<Message>,
    /// The history's length in tokens (see [`SessionState::next_request`]), when known.
    history_tokens: Option<u32>,
    /// The prompt length the turn just sent asked, when known.
    asked: Option<u32>,
}

impl SessionState {
    /// A session about to send its first turn; the system prompt opens its history.
    pub fn new(id: u64, plan: SessionPlan) -> Self {
        let history_tokens = match plan.system {
            Some(_) => plan.system_tokens,
            None => Some(0),
        };
        let history = plan
            .system
            .into_iter()
            .map(|content| Message::text("system", content))
            .collect();
        Self {
            id,
            turns: plan.turns,
            next: 0,
            history,
            history_tokens,
            asked: None,
        }
    }

    /// The conversations of the session (router affinity): each key its turns carry,
    /// with the parent conversation's key of a sub-agent's turn.
    pub fn conversations(&self) -> impl Iterator<Item = (&Arc<str>, Option<&Arc<str>>)> {
        self.turns
            .iter()
            .filter_map(|t| Some((t.request.session.as_ref()?, t.parent_session.as_ref())))
    }

    /// Whether the session is an agent trace's graph (see [`Turn::after`]).
    pub fn is_graph(&self) -> bool {
        self.turns.first().is_some_and(|t| t.after.is_some())
    }

    /// A graph's turns, each sent as its own prompt when its dependencies ended.
    pub fn graph_turns(&self) -> &[Turn] {
        &self.turns
    }

    /// Turns in all.
    pub fn turns(&self) -> u32 {
        u32::try_from(self.turns.len()).unwrap_or(u32::MAX)
    }

    /// The session's think time: its first turn's pause that is not zero (a recorded
    /// gap, for a graph), 0 when it never pauses.
    pub fn think_ns(&self) -> u64 {
        self.turns
            .iter()
            .map(|t| t.think_ns)
            .find(|&t| t > 0)
            .unwrap_or(0)
    }

    /// The index of the next turn to send and its think time (0 for the first turn);
    /// `None` when every turn was sent.
    pub fn upcoming(&self) -> Option<(u32, u64)> {
        let turn = self.turns.get(self.next)?;
        let k = u32::try_from(self.next).unwrap_or(u32::MAX);
        Some((k, if k == 0 { 0 } else { turn.think_ns }))
    }

    /// Adds the next turn's user message to the history and returns its request: the
    /// whole history so far, then the new message.
    pub fn next_request(&mut self) -> Option<PreparedRequest> {
        let turn = self.turns.get(self.next)?;
        self.next += 1;
        if turn.after.is_some() {
            // A graph's call carries its own prompt (its conversation so far).
            return Some(turn.request.clone());
        }
        self.history
            .push(Message::text("user", turn.request.prompt.joined()));
        // The history so far and the new message: what the server counts, but for the
        // tokens its chat template adds. Every turn carries it, so a turn that fails
        // before the server's usage came still says what it asked (a request log line
        // and an OTLP span that replay); a completed turn's usage overrides it.
        self.asked = self
            .history_tokens
            .zip(turn.request.prompt_tokens)
            .map(|(h, p)| h.saturating_add(p));
        Some(PreparedRequest {
            prompt: Prompt::Messages(self.history.clone()),
            prompt_tokens: self.asked,
            max_tokens: turn.request.max_tokens,
            model: turn.request.model.clone(),
            user: turn.request.user.clone(),
            session: turn.request.session.clone(),
        })
    }

    /// Appends the reply of the turn just sent: the dataset's recorded one
    /// (`history=recorded`), else the text actually received. A reply that was a tool
    /// call is resent as that call, followed by the tool's result, as an agent loop does
    /// before the next user message; without a planned result the call is left out (an
    /// API refuses a call with no answer). `tokens` is what the server counted of the
    /// turn: its prompt (`None` when its usage did not say) and its output; with them
    /// the history's length is known for the next turn.
    pub fn push_reply(
        &mut self,
        received: Option<String>,
        tool_call: Option<ToolCall>,
        tokens: (Option<u32>, u32),
    ) {
        let turn = self.next.checked_sub(1).and_then(|k| self.turns.get_mut(k));
        let (recorded, result, asked_output, result_tokens) = match turn {
            Some(t) => (
                t.recorded_reply.take(),
                t.tool_result.take(),
                t.request.max_tokens,
                t.tool_result_tokens,
            ),
            None => (None, None, None, 0),
        };
        let (prompt, output) = tokens;
        // A recorded reply is resent instead of the received one: its length is the
        // output the turn asked (the dataset's reply's).
        let reply_tokens = match &recorded {
            Some(_) => asked_output.unwrap_or(output),
            None => output,
        };
        let tool_tokens = if tool_call.is_some() && result.is_some() {
            result_tokens
        } else {
            0
        };
        self.history_tokens = prompt
            .or(self.asked)
            .map(|p| p.saturating_add(reply_tokens).saturating_add(tool_tokens));
        let content = recorded.or(received).unwrap_or_default();
        match (tool_call, result) {
            (Some(call), Some(result)) => {
                let call = Box::new(call);
                self.history.push(Message {
                    role: "assistant".into(),
                    content,
                    tool_call: Some(call.clone()),
                });
                self.history.push(Message {
                    role: "tool".into(),
                    content: result,
                    tool_call: Some(call),
                });
            }
            _ => self.history.push(Message::text("assistant", content)),
        }
    }
}

/// Produces the payload of each slot.
pub trait RequestSource: Send {
    /// The payload of `slot`, or `None` when a finite dataset has no such slot.
    fn request(&mut self, slot: u64) -> Result<Option<PreparedRequest>, String>;

    /// Nanoseconds from `t0` (before any time scale) at which `slot` is due, when the
    /// data carries its own schedule (a trace); `None` leaves it to the arrival clock.
    /// For a source of sessions the index is the session's (an agent trace's start).
    fn offset_ns(&self, _slot: u64) -> Option<u64> {
        None
    }

    /// Whether this source makes multi-turn sessions (then the worker asks
    /// [`RequestSource::session`], not [`RequestSource::request`]).
    fn has_sessions(&self) -> bool {
        false
    }

    /// The plan of session `id` (deterministic in `id`, so the schedule is the same
    /// whatever the number of workers), or `None` when a finite dataset has no such
    /// session.
    fn session(&mut self, _id: u64) -> Result<Option<SessionPlan>, String> {
        Ok(None)
    }
}

/// Builds a worker's source from its configuration; errors are one line for the user.
pub type SourceFactory = dyn Fn(&WorkerConfig) -> Result<Box<dyn RequestSource>, String>;

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(prompt_tokens: u32, max_tokens: u32, tool: Option<(&str, u32)>) -> Turn {
        Turn {
            request: PreparedRequest {
                prompt: Prompt::Text("message".into()),
                prompt_tokens: Some(prompt_tokens),
                max_tokens: Some(max_tokens),
                model: None,
                user: None,
                session: None,
            },
            think_ns: 0,
            recorded_reply: None,
            tool_result: tool.map(|(t, _)| t.to_string()),
            tool_result_tokens: tool.map_or(0, |(_, n)| n),
            after: None,
            parent_session: None,
        }
    }

    /// Every turn says its prompt length: the system prompt and first message, then the
    /// history as the server counted it, the reply, a tool result sent, the new message;
    /// without the server's count, the length the turn itself asked.
    #[test]
    fn every_turn_says_its_prompt_length() {
        let plan = SessionPlan {
            system: Some("system".into()),
            system_tokens: Some(7),
            turns: vec![
                turn(10, 4, Some(("result", 6))),
                turn(20, 5, None),
                turn(30, 6, None),
            ],
        };
        let mut s = SessionState::new(0, plan);
        let asked = |r: Option<PreparedRequest>| r.expect("a turn").prompt_tokens;
        assert_eq!(asked(s.next_request()), Some(17));
        let call = ToolCall {
            id: "c".into(),
            name: "f".into(),
            arguments: "{}".into(),
            part: 0,
        };
        // The server counted 19 (its template) and sent 4 tokens, a tool call answered.
        s.push_reply(Some("reply".into()), Some(call), (Some(19), 4));
        assert_eq!(asked(s.next_request()), Some(19 + 4 + 6 + 20));
        // No usage: the turn's own count stands for the server's.
        s.push_reply(Some("reply".into()), None, (None, 5));
        assert_eq!(asked(s.next_request()), Some(49 + 5 + 30));
        // Without the system prompt's length nothing is known until the server says.
        let mut unknown = SessionState::new(
            1,
            SessionPlan {
                system: Some("system".into()),
                system_tokens: None,
                turns: vec![turn(10, 4, None), turn(20, 5, None)],
            },
        );
        assert_eq!(asked(unknown.next_request()), None);
        unknown.push_reply(Some("reply".into()), None, (Some(18), 4));
        assert_eq!(asked(unknown.next_request()), Some(18 + 4 + 20));
    }
}
