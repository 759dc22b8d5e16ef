//! Resolves the agentic client flags (`--cancel`, ...) into the workers' behaviour.

use super::UsageError;
use super::args::RunArgs;
use llmsurge_proto::ClientBehaviour;

/// The client behaviours of every benchmark of the run.
pub fn resolve_behaviour(args: &RunArgs) -> Result<ClientBehaviour, UsageError> {
    let a = &args.agentic;
    Ok(ClientBehaviour {
        cancel: a.cancel,
        max_prefill_concurrency: a.max_prefill_concurrency,
    })
}
