//! `llmsurge benchmark run` end to end: every profile's counts, metric accuracy, worker
//! count independence, worker death, Ctrl-C, and usage errors.

mod data;
mod failures;
mod metrics;
mod profiles;
mod usage;
