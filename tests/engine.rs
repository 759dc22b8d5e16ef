//! `llmsurge benchmark run` end to end: every profile's counts, metric accuracy, worker
//! count independence, worker death, Ctrl-C, and usage errors.

mod adaptive;
mod charts;
mod conversations;
mod data;
mod default_mock;
mod edge;
mod failures;
mod faults;
mod fd_limit;
mod formats_media;
mod formats_pooling;
mod formats_typed;
mod fresh_prompts;
mod gates;
mod lifecycle;
mod lora;
mod merge;
mod metrics;
mod misbehaving;
mod profiles;
mod repeat;
mod reports;
mod requests;
mod secrets;
mod server_metrics;
mod server_report;
mod sessions;
mod shards;
mod signals;
mod sticky_sessions;
pub(crate) mod tls;
mod traffic;
mod transport;
mod truth;
mod usage;
