//! Resolves the agentic client flags (`--cancel`, `--max-prefill-concurrency`,
//! `--prompt-token-ids`) into the workers' behaviour.

use super::UsageError;
use super::args::{RequestFormatArg, RunArgs};
use llmsurge_proto::ClientBehaviour;
use llmsurge_proto::agentic::{CancelAfter, CancelSpec};

/// The client behaviours of every benchmark of the run; `stream`: whether its responses
/// are streamed (as resolved: never for embeddings and ranking).
pub fn resolve_behaviour(args: &RunArgs, stream: bool) -> Result<ClientBehaviour, UsageError> {
    let a = &args.agentic;
    // A reply in one body has no first token: a cancel timed from it would never fire.
    if let Some(CancelSpec {
        after: CancelAfter::AfterFirstToken(_),
        ..
    }) = a.cancel
        && !stream
    {
        return Err(UsageError(
            "--cancel after=ttft+...: the responses are not streamed (--stream false, or a request format that answers in one body), so no first token comes and no request would be cancelled; time it from the send (after=500ms)".into(),
        ));
    }
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
