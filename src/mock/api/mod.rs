//! The middle layer of the mock: the API formats, over the model below and under the
//! HTTP layer above. `shared` is the generation core (prompt shapes, usage, byte
//! writers, the error body); `events` the typed-event open/close-block shape the
//! Responses and Anthropic streams share; then one module per format (`openai`: chat,
//! completions and transcription chunks; `responses`; `anthropic`; `embeddings`;
//! `rerank`; `media`: images, audio and multipart forms), none importing another; and
//! `formatter` on top, which picks a format's writer for the HTTP body.

pub mod anthropic;
pub mod embeddings;
pub mod events;
pub mod formatter;
pub mod media;
pub mod openai;
pub mod rerank;
pub mod responses;
pub mod shared;
