//! Request formats: one module per API behind the [`Format`] trait.
//!
//! A format knows its endpoint, how to write a request body from a [`PreparedRequest`]
//! (and the body's content type, so a multipart upload fits as well as JSON), and how to
//! read a streamed event or a whole response into the one timing/usage record the
//! metrics use ([`ChunkInfo`] with [`Usage`]). The transport (`backend`) knows none of
//! this. Adding a format is its module plus one line in [`for_config`].
//!
//! Parsing runs for every streamed token, so the readers borrow from the event and keep
//! no strings: the metrics only need to know which fields are there and non-empty.

pub mod anthropic;
pub mod embeddings;
pub mod format;
pub mod openai;
pub mod openai_text;
pub mod rerank;
pub mod responses;
pub mod tools;
pub mod transcription;
pub mod wire;

use llmsurge_proto::{BackendConfig, RequestFormat};

pub use format::{Format, StreamState};
pub use openai::{ChunkInfo, StreamEvent, Usage};
#[cfg(test)]
pub(crate) use wire::test_config;

/// The format of a backend configuration: the one registration point.
pub fn for_config(cfg: &BackendConfig) -> Box<dyn Format> {
    match cfg.request_format {
        RequestFormat::Chat | RequestFormat::Completions => {
            Box::new(openai_text::OpenAiText::new(cfg))
        }
        RequestFormat::Responses => Box::new(responses::Responses::new(cfg)),
        RequestFormat::Anthropic => Box::new(anthropic::Anthropic::new(cfg)),
        RequestFormat::Embeddings => Box::new(embeddings::Embeddings::new(cfg)),
        RequestFormat::Rerank => Box::new(rerank::Rerank::new(cfg, rerank::Shape::Rerank)),
        RequestFormat::Score => Box::new(rerank::Rerank::new(cfg, rerank::Shape::Score)),
        RequestFormat::Transcription => Box::new(transcription::Transcription::new(cfg)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{Message, PreparedRequest, Prompt};

    use super::test_config as cfg;

    fn req(prompt: Prompt, max: Option<u32>) -> PreparedRequest {
        PreparedRequest {
            prompt,
            prompt_tokens: None,
            max_tokens: max,
            model: None,
            user: None,
            session: None,
        }
    }

    fn body(format: RequestFormat, r: &PreparedRequest) -> serde_json::Value {
        let f = for_config(&cfg(format, true));
        serde_json::from_slice(&f.build(r)).expect("valid JSON")
    }

    fn conversation() -> Prompt {
        Prompt::Messages(vec![
            Message::text("system", "be brief".into()),
            Message::text("user", "hi".into()),
        ])
    }

    #[test]
    fn every_format_writes_a_per_request_model() {
        for format in [
            RequestFormat::Chat,
            RequestFormat::Completions,
            RequestFormat::Responses,
            RequestFormat::Anthropic,
            RequestFormat::Embeddings,
            RequestFormat::Rerank,
            RequestFormat::Score,
        ] {
            let mut r = req(Prompt::Text("x".into()), Some(2));
            assert_eq!(body(format, &r)["model"], "m", "{format:?}");
            r.model = Some("adapter-1".into());
            let raw = for_config(&cfg(format, true)).build(&r);
            let s = std::str::from_utf8(&raw).expect("utf8");
            assert_eq!(s.matches("\"model\"").count(), 1, "{s}");
            assert_eq!(body(format, &r)["model"], "adapter-1", "{format:?}");
        }
    }

    #[test]
    fn responses_and_anthropic_bodies() {
        let r = req(conversation(), Some(7));
        assert_eq!(
            body(RequestFormat::Responses, &r),
            serde_json::json!({"model": "m", "stream": true, "max_output_tokens": 7,
                "input": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]})
        );
        assert_eq!(
            body(RequestFormat::Anthropic, &r),
            serde_json::json!({"model": "m", "stream": true, "max_tokens": 7, "system": "be brief",
                "messages": [{"role": "user", "content": "hi"}]})
        );
        // max_tokens is required by the Messages API: sent even when no length is asked.
        let v = body(
            RequestFormat::Anthropic,
            &req(Prompt::Text("x".into()), None),
        );
        assert_eq!(v["max_tokens"], anthropic::DEFAULT_MAX_TOKENS);
        assert!(
            body(
                RequestFormat::Responses,
                &req(Prompt::Text("x".into()), None)
            )
            .get("max_output_tokens")
            .is_none()
        );
    }

    #[test]
    fn embeddings_and_ranking_bodies() {
        let batch = req(Prompt::Batch(vec!["a".into(), "b".into()]), None);
        assert_eq!(
            body(RequestFormat::Embeddings, &batch),
            serde_json::json!({"model": "m", "encoding_format": "float", "input": ["a", "b"]})
        );
        let ranking = req(
            Prompt::Ranking {
                query: "q".into(),
                documents: vec!["d1".into(), "d2".into()],
            },
            None,
        );
        assert_eq!(
            body(RequestFormat::Rerank, &ranking),
            serde_json::json!({"model": "m", "query": "q", "documents": ["d1", "d2"], "top_n": 2})
        );
        assert_eq!(
            body(RequestFormat::Score, &ranking),
            serde_json::json!({"model": "m", "text_1": "q", "text_2": ["d1", "d2"]})
        );
    }

    fn stream(format: RequestFormat, events: &[&str]) -> Vec<Result<StreamEvent, String>> {
        let f = for_config(&cfg(format, true));
        let mut state = StreamState::default();
        events
            .iter()
            .map(|e| f.parse_event(e.as_bytes(), &mut state))
            .collect()
    }

    fn chunk(content: bool, reasoning: bool) -> Result<StreamEvent, String> {
        Ok(StreamEvent::Chunk(ChunkInfo {
            content,
            reasoning,
            ..ChunkInfo::default()
        }))
    }

    #[test]
    fn responses_events_parse() {
        let got = stream(
            RequestFormat::Responses,
            &[
                r#"{"type":"response.created","sequence_number":0,"response":{"id":"r","status":"in_progress","output":[]}}"#,
                r#"{"type":"response.reasoning_summary_text.delta","delta":"think"}"#,
                r#"{"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":"Hi"}"#,
                r#"{"type":"response.output_text.annotation.added","annotation":{}}"#,
                r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":5,"output_tokens":2,"total_tokens":7}}}"#,
                r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":5,"output_tokens":9,"output_tokens_details":{"reasoning_tokens":4}}}}"#,
            ],
        );
        assert_eq!(got[0], chunk(false, false));
        assert_eq!(got[1], chunk(false, true));
        assert_eq!(got[2], chunk(true, false));
        assert_eq!(got[3], chunk(false, false), "an unknown type is skipped");
        assert_eq!(
            got[4],
            Ok(StreamEvent::Last(ChunkInfo {
                finished: true,
                finish: Some(llmsurge_proto::FinishReason::Stop),
                usage: Some(Usage {
                    prompt_tokens: Some(5),
                    completion_tokens: Some(2),
                    reasoning_tokens: None,
                }),
                ..ChunkInfo::default()
            }))
        );
        // The reasoning part of the count, where the usage gives it.
        assert_eq!(
            got[5],
            Ok(StreamEvent::Last(ChunkInfo {
                finished: true,
                finish: Some(llmsurge_proto::FinishReason::Stop),
                usage: Some(Usage {
                    prompt_tokens: Some(5),
                    completion_tokens: Some(9),
                    reasoning_tokens: Some(4),
                }),
                ..ChunkInfo::default()
            }))
        );
        let early = stream(
            RequestFormat::Responses,
            &[r#"{"type":"response.output_text.delta","delta":"x"}"#],
        );
        assert!(
            early[0]
                .as_ref()
                .is_err_and(|e| e.contains("before response.created"))
        );
        let failed = stream(
            RequestFormat::Responses,
            &[
                r#"{"type":"error","code":"x","message":"overloaded"}"#,
                "not json",
            ],
        );
        assert_eq!(failed[0], Ok(StreamEvent::Error("overloaded".into())));
        assert!(failed[1].as_ref().is_err_and(|e| e.contains("malformed")));
    }

    #[test]
    fn anthropic_events_parse() {
        let got = stream(
            RequestFormat::Anthropic,
            &[
                r#"{"type":"ping"}"#,
                r#"{"type":"message_start","message":{"id":"msg","type":"message","role":"assistant","content":[],"usage":{"input_tokens":25,"output_tokens":1}}}"#,
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#,
                r#"{"type":"brand_new_event","x":1}"#,
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
                r#"{"type":"message_stop"}"#,
            ],
        );
        assert_eq!(got[0], chunk(false, false));
        assert!(
            matches!(&got[1], Ok(StreamEvent::Chunk(i)) if i.usage.is_some_and(|u| u.prompt_tokens == Some(25) && u.completion_tokens.is_none()))
        );
        assert_eq!(got[3], chunk(false, true));
        assert_eq!(got[4], chunk(true, false));
        assert_eq!(got[5], chunk(false, false), "an unknown type is skipped");
        assert!(
            matches!(&got[6], Ok(StreamEvent::Chunk(i)) if i.finished && i.usage.is_some_and(|u| u.completion_tokens == Some(15)))
        );
        assert_eq!(got[7], Ok(StreamEvent::Last(ChunkInfo::default())));
        let early = stream(
            RequestFormat::Anthropic,
            &[r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}"#],
        );
        assert!(
            early[0]
                .as_ref()
                .is_err_and(|e| e.contains("before message_start"))
        );
        let err = stream(
            RequestFormat::Anthropic,
            &[r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#],
        );
        assert_eq!(err[0], Ok(StreamEvent::Error("Overloaded".into())));
    }

    #[test]
    fn finish_reasons_parse_in_every_format() {
        use llmsurge_proto::FinishReason::{Length, Other, Stop, ToolCalls};
        let last = |format, e: &str| match stream(format, &[e]).remove(0) {
            Ok(StreamEvent::Chunk(i) | StreamEvent::Last(i)) => i.finish,
            other => panic!("{other:?}"),
        };
        let chat = |reason: &str| {
            last(
                RequestFormat::Chat,
                &format!(r#"{{"choices":[{{"delta":{{}},"finish_reason":{reason}}}]}}"#),
            )
        };
        assert_eq!(chat(r#""length""#), Some(Length));
        assert_eq!(chat(r#""stop""#), Some(Stop));
        assert_eq!(chat(r#""tool_calls""#), Some(ToolCalls));
        assert_eq!(chat(r#""content_filter""#), Some(Other));
        assert_eq!(chat("null"), None);
        let started = |format, open: &str, e: &str| {
            let got = stream(format, &[open, e]);
            match &got[1] {
                Ok(StreamEvent::Chunk(i) | StreamEvent::Last(i)) => i.finish,
                other => panic!("{other:?}"),
            }
        };
        let msg = r#"{"type":"message_start","message":{"usage":{"input_tokens":1}}}"#;
        let delta = |r: &str| {
            format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":"{r}"}},"usage":{{"output_tokens":2}}}}"#
            )
        };
        assert_eq!(
            started(RequestFormat::Anthropic, msg, &delta("max_tokens")),
            Some(Length)
        );
        assert_eq!(
            started(RequestFormat::Anthropic, msg, &delta("end_turn")),
            Some(Stop)
        );
        assert_eq!(
            started(RequestFormat::Anthropic, msg, &delta("tool_use")),
            Some(ToolCalls)
        );
        let created = r#"{"type":"response.created","response":{"status":"in_progress"}}"#;
        assert_eq!(
            started(
                RequestFormat::Responses,
                created,
                r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#
            ),
            Some(Length)
        );
        assert_eq!(
            started(
                RequestFormat::Responses,
                created,
                r#"{"type":"response.completed","response":{"status":"completed","output":[{"type":"function_call","arguments":"{}"}]}}"#
            ),
            Some(ToolCalls)
        );
    }

    #[test]
    fn whole_responses_parse() {
        let parse =
            |format, body: &str| for_config(&cfg(format, false)).parse_full(body.as_bytes());
        let r = parse(
            RequestFormat::Responses,
            r#"{"id":"r","object":"response","status":"completed","output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"t"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi","annotations":[]}]}],"usage":{"input_tokens":3,"output_tokens":4}}"#,
        )
        .expect("responses");
        assert!(r.content && r.reasoning && r.finished);
        assert_eq!(r.usage.and_then(|u| u.completion_tokens), Some(4));
        let a = parse(
            RequestFormat::Anthropic,
            r#"{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}"#,
        )
        .expect("anthropic");
        assert!(a.content && !a.reasoning && a.finished);
        let e = parse(
            RequestFormat::Embeddings,
            r#"{"object":"list","data":[{"embedding":[0.1]}],"usage":{"prompt_tokens":9,"total_tokens":9}}"#,
        )
        .expect("embeddings");
        assert!(!e.content);
        assert_eq!(e.usage.and_then(|u| u.prompt_tokens), Some(9));
        assert!(
            parse(
                RequestFormat::Rerank,
                r#"{"results":[],"usage":{"total_tokens":4}}"#
            )
            .is_ok()
        );
        assert!(parse(RequestFormat::Score, r#"{"results":[]}"#).is_err());
        assert!(parse(RequestFormat::Embeddings, r#"{"data":[]}"#).is_err());
        let err = r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#;
        assert_eq!(parse(RequestFormat::Anthropic, err), Err("bad".into()));
        for format in [
            RequestFormat::Responses,
            RequestFormat::Anthropic,
            RequestFormat::Embeddings,
        ] {
            assert!(parse(format, "<html>").is_err_and(|e| e.contains("malformed JSON")));
        }
    }
}
