//! Resolves the agentic client flags (`--cancel`, `--max-prefill-concurrency`,
//! `--prompt-token-ids`) into the workers' behaviour.

use super::UsageError;
use super::args::{RequestFormatArg, RunArgs};
use llmsurge_proto::ClientBehaviour;

/// The client behaviours of every benchmark of the run.
pub fn resolve_behaviour(args: &RunArgs) -> Result<ClientBehaviour, UsageError> {
    let a = &args.agentic;
    let prompt_token_ids = if a.prompt_token_ids {
        if args.target.request_format != RequestFormatArg::Completions {
            return Err(UsageError(
                "--prompt-token-ids needs --request-format completions (only a completions prompt can be a list of token ids)".into(),
            ));
        }
        let processor = crate::data::tokenizer::resolve_processor(&args.data.processor)
            .map_err(|e| UsageError(format!("--processor {e}")))?;
        Some(processor)
    } else {
        None
    };
    Ok(ClientBehaviour {
        cancel: a.cancel,
        max_prefill_concurrency: a.max_prefill_concurrency,
        prompt_token_ids,
    })
}
