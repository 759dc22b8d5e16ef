//! Where request payloads come from: a per-worker source the binary provides.
//!
//! The worker crate does not know how prompts are made (synthetic text, files, datasets,
//! tokenizers all live in the binary); it asks a [`RequestSource`] for the payload of a
//! slot. Sources are deterministic in the slot, so the same seed gives the same prompts
//! whatever the number of workers.

use llmsurge_proto::WorkerConfig;
use std::sync::Arc;

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// The prompt of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    /// A single user prompt (or the whole prompt of a completions request).
    Text(String),
    /// A conversation.
    Messages(Vec<Message>),
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
}

/// Produces the payload of each slot.
pub trait RequestSource: Send {
    /// The payload of `slot`, or `None` when a finite dataset has no such slot.
    fn request(&mut self, slot: u64) -> Result<Option<PreparedRequest>, String>;

    /// Nanoseconds from `t0` (before any time scale) at which `slot` is due, when the
    /// data carries its own schedule (a trace); `None` leaves it to the arrival clock.
    fn offset_ns(&self, _slot: u64) -> Option<u64> {
        None
    }
}

/// Builds a worker's source from its configuration; errors are one line for the user.
pub type SourceFactory = dyn Fn(&WorkerConfig) -> Result<Box<dyn RequestSource>, String>;
