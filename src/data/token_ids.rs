//! `--prompt-token-ids`: wraps a worker's source so each completions prompt goes out as
//! the token ids of its text under the run's tokenizer; the prompt length the client
//! records is then exactly what the server receives.

use super::tokenizer::Tokenizer;
use llmsurge_worker::{PreparedRequest, Prompt, RequestSource, SessionPlan};

/// A source whose text prompts become token ids.
pub struct TokenIdsSource {
    inner: Box<dyn RequestSource>,
    tokenizer: Tokenizer,
}

impl std::fmt::Debug for TokenIdsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIdsSource")
            .field("tokenizer", &self.tokenizer)
            .finish_non_exhaustive()
    }
}

impl TokenIdsSource {
    /// Wraps `inner`, encoding under `tokenizer`.
    pub fn new(inner: Box<dyn RequestSource>, tokenizer: Tokenizer) -> Self {
        Self { inner, tokenizer }
    }

    fn encode(&self, req: &mut PreparedRequest) {
        let text = match &req.prompt {
            Prompt::Text(t) => t.clone(),
            // Media cannot be ids; token ids are already ids.
            Prompt::Media { .. } | Prompt::TokenIds(_) => return,
            // As the completions format joins them.
            other => other.joined(),
        };
        let ids = self.tokenizer.encode(&text);
        req.prompt_tokens = Some(u32::try_from(ids.len()).unwrap_or(u32::MAX));
        req.prompt = Prompt::TokenIds(ids);
    }
}

impl RequestSource for TokenIdsSource {
    fn request(&mut self, slot: u64) -> Result<Option<PreparedRequest>, String> {
        let mut req = self.inner.request(slot)?;
        if let Some(r) = &mut req {
            self.encode(r);
        }
        Ok(req)
    }

    fn offset_ns(&self, slot: u64) -> Option<u64> {
        self.inner.offset_ns(slot)
    }

    fn has_sessions(&self) -> bool {
        self.inner.has_sessions()
    }

    fn session(&mut self, id: u64) -> Result<Option<SessionPlan>, String> {
        // Sessions speak conversations (chat formats), never completions.
        self.inner.session(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::TokenizerRef;

    #[derive(Debug)]
    struct Fixed;

    impl RequestSource for Fixed {
        fn request(&mut self, _slot: u64) -> Result<Option<PreparedRequest>, String> {
            Ok(Some(PreparedRequest {
                prompt: Prompt::Text("hello world, hello tokens".into()),
                prompt_tokens: Some(99),
                max_tokens: Some(4),
                model: None,
                user: None,
                session: None,
            }))
        }
    }

    #[test]
    fn text_becomes_its_ids_and_the_count_follows() {
        let tok = Tokenizer::load(&TokenizerRef::Builtin("cl100k_base".into())).expect("tok");
        let expected = tok.encode("hello world, hello tokens");
        let mut s = TokenIdsSource::new(Box::new(Fixed), tok);
        let req = s.request(0).expect("ok").expect("a request");
        assert_eq!(req.prompt, Prompt::TokenIds(expected.clone()));
        assert_eq!(req.prompt_tokens, Some(expected.len() as u32));
    }
}
