//! The data pipeline: workload specs and the request sources workers draw from.
//!
//! A spec is resolved in the coordinator (parsed, validated) and travels to the workers
//! inside their configuration; each worker builds its own source with
//! [`source_factory`], which generates payloads deterministically from (seed, slot), so
//! no request ever waits on the coordinator.

pub mod synthetic;

use llmsurge_proto::{DataSpec, WorkerConfig};
use llmsurge_worker::RequestSource;

/// Parses `--data`: a synthetic spec as `k=v,...` or a JSON object.
pub fn parse_data_spec(raw: &str, run_seed: u64) -> Result<DataSpec, String> {
    synthetic::parse_spec(raw, run_seed).map(DataSpec::Synthetic)
}

/// Builds a worker's source from its configuration (the worker's [`SourceFactory`]).
///
/// [`SourceFactory`]: llmsurge_worker::SourceFactory
pub fn source_factory(cfg: &WorkerConfig) -> Result<Box<dyn RequestSource>, String> {
    match &cfg.data {
        DataSpec::Synthetic(spec) => Ok(Box::new(synthetic::SyntheticSource::new(spec.clone()))),
    }
}
