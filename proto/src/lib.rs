//! What crosses a process boundary in llmsurge.
//!
//! Theory of operation: the coordinator and its workers share two channels. The
//! shared-memory block ([`shm`]) holds what every process must see at once: the start
//! instant, the stop flags, the strategy clock (slots claimed with atomic operations) and
//! the group-wide concurrency. The IPC socket carries length-prefixed msgpack frames
//! ([`frame`]) of the [`messages`]: configuration one way, batched request transitions
//! ([`record`]) and histogram deltas ([`metrics`]) the other. Timestamps are monotonic
//! nanoseconds ([`clock`]), common to every process of the host.
//!
//! This crate holds types and encodings only, plus what every process shares: the
//! open-file limit each raises at startup ([`fdlimit`]), the target's credentials and
//! headers for every request to it ([`credentials`]), the plain-HTTP client builder
//! and the one-line error chain ([`http`]), how much of a server's answers is read
//! ([`limits`]); it decides no I/O policy (when to flush, what to do on EOF): that
//! belongs to the worker and the coordinator.

pub mod affinity;
pub mod agentic;
pub mod clock;
pub mod config;
pub mod credentials;
pub mod fdlimit;
pub mod frame;
pub mod http;
pub mod inert;
pub mod limits;
pub mod messages;
pub mod metrics;
pub mod record;
pub mod redact;
pub mod seed;
pub mod shm;
pub mod trace_context;

pub use agentic::{AgentNames, CancelAfter, CancelAt, CancelSpec, TraceNames};
pub use clock::{ClockAnchor, MonoNanos};
pub use config::{
    AgentTraceSpec, Arrivals, BackendConfig, ClientBehaviour, DataSpec, ImageFormat, LoraModel,
    LoraSpec, MeasureWindow, MediaSpec, REQUEST_ID_HEADER, RequestFormat, SamplerKind, Sampling,
    Schedule, Secret, Shard, SyntheticSpec, TableSpec, ThinkKind, ThinkTime, TokenizerRef,
    TraceSpec, WorkerConfig, new_run_tag, request_id_prefix,
};
pub use frame::{FrameError, FrameIoError, FrameReader, FrameWriter, decode_frame, encode_frame};
pub use messages::{FromWorker, ModelMetrics, PROTOCOL_VERSION, ToWorker, UpdateBatch};
pub use metrics::{
    Distribution, EncodedMetrics, Metric, MetricSet, StatusClass, decode_histogram,
    encode_compressed,
};
pub use record::{
    AudioInfo, ErrorKind, FinishReason, GraphStep, ImageInfo, ImageKind, ItlSpan, Phase,
    RequestError, RequestMedia, RequestRecord, RequestStarted, RequestStatus, SessionTag,
    TokenSource,
};
pub use redact::{REDACTED, Redaction};
pub use shm::{SharedRegion, ShmLayout};
pub use trace_context::{TRACEPARENT_HEADER, TraceIds};
