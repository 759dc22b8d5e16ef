//! The wire format: SSE framing, response shapes, lengths, embeddings, tokenizer.

use super::*;

#[tokio::test]
async fn mock_chat_stream_framing_is_exact() {
    let mock = server(MockConfig {
        seed: 7,
        ..MockConfig::instant()
    });
    bounded(async {
        let response = post(&client(), format!("{}/v1/chat/completions", mock.base_url()), chat_body(3, true, true)).await;
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response.headers()["content-type"].to_str().expect("ascii").to_string();
        assert!(content_type.starts_with("text/event-stream"), "{content_type}");
        let body = response.text().await.expect("body");
        let (chunks, words) = chat_chunks(&body);
        let id = chunks[0]["id"].as_str().expect("id");
        let created = chunks[0]["created"].as_u64().expect("created");
        assert!(id.starts_with("chatcmpl-"));
        assert_eq!(words.len(), 3);
        let head = format!(
            r#"data: {{"id":"{id}","object":"chat.completion.chunk","created":{created},"model":"llmsurge-mock""#
        );
        let mut expected = String::new();
        for (i, word) in words.iter().enumerate() {
            assert!(word.starts_with(' ') && word[1..].bytes().all(|b| b.is_ascii_lowercase()), "{word:?}");
            let role = if i == 0 { r#""role":"assistant","# } else { "" };
            expected += &format!(
                r#"{head},"choices":[{{"index":0,"delta":{{{role}"content":"{word}"}},"logprobs":null,"finish_reason":null}}],"usage":null}}"#
            );
            expected += "\n\n";
        }
        expected += &format!(
            r#"{head},"choices":[{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"length"}}],"usage":null}}"#
        );
        expected += "\n\n";
        // "Hello, world!" is 4 tokens: two words and two punctuation marks.
        expected += &format!(
            r#"{head},"choices":[],"usage":{{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}}}}"#
        );
        expected += "\n\ndata: [DONE]\n\n";
        assert_eq!(body, expected);
    })
    .await;
}

#[tokio::test]
async fn mock_completions_stream_framing_is_exact() {
    let mock = server(MockConfig {
        output_tokens: 2,
        ..MockConfig::instant()
    });
    bounded(async {
        let request = json!({"model": "llmsurge-mock", "prompt": "a b c", "stream": true});
        let body = post(&client(), format!("{}/v1/completions", mock.base_url()), request).await.text().await.expect("body");
        let payloads = sse_payloads(&body);
        assert_eq!(payloads.len(), 2 + 1 + 1, "two tokens, the finish chunk, [DONE]");
        let first: Value = serde_json::from_str(payloads[0]).expect("json");
        let (id, created) = (first["id"].as_str().expect("id"), first["created"].as_u64().expect("created"));
        assert!(id.starts_with("cmpl-"));
        let head = format!(r#"{{"id":"{id}","object":"text_completion","created":{created},"model":"llmsurge-mock""#);
        for payload in &payloads[..2] {
            let value: Value = serde_json::from_str(payload).expect("json");
            let text = value["choices"][0]["text"].as_str().expect("text");
            let expected = format!(
                r#"{head},"choices":[{{"index":0,"text":"{text}","logprobs":null,"finish_reason":null}}]}}"#
            );
            assert_eq!(*payload, expected);
        }
        let finish = format!(r#"{head},"choices":[{{"index":0,"text":"","logprobs":null,"finish_reason":"stop"}}]}}"#);
        assert_eq!(payloads[2], finish);
        assert_eq!(payloads[3], "[DONE]");
    })
    .await;
}

#[tokio::test]
async fn mock_usage_chunk_only_when_asked() {
    let mock = server(MockConfig::instant());
    bounded(async {
        let client = client();
        let url = format!("{}/v1/chat/completions", mock.base_url());
        let without = post(&client, url.clone(), chat_body(4, true, false))
            .await
            .text()
            .await
            .expect("body");
        assert!(!without.contains("usage"), "{without}");
        let payloads = sse_payloads(&without);
        assert_eq!(payloads.len(), 4 + 1 + 1);
        let with = post(&client, url, chat_body(4, true, true))
            .await
            .text()
            .await
            .expect("body");
        let payloads = sse_payloads(&with);
        let usage: Value = serde_json::from_str(payloads[payloads.len() - 2]).expect("usage chunk");
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["completion_tokens"], 4);
    })
    .await;
}

/// (content tokens, finish_reason) of a non-streaming chat request.
async fn lengths(client: &Client, base: &str, body: Value) -> (u64, String) {
    let value = json_of(post(client, format!("{base}/v1/chat/completions"), body).await).await;
    let text = value["choices"][0]["message"]["content"]
        .as_str()
        .expect("content");
    let usage = value["usage"]["completion_tokens"].as_u64().expect("usage");
    assert_eq!(
        usage,
        llmsurge::mock::count_tokens(text),
        "usage matches the text"
    );
    (
        usage,
        value["choices"][0]["finish_reason"]
            .as_str()
            .expect("finish")
            .to_string(),
    )
}

#[tokio::test]
async fn mock_max_tokens_and_ignore_eos_set_the_length() {
    let mock = server(MockConfig {
        output_tokens: 8,
        ..MockConfig::instant()
    });
    bounded(async {
        let (c, base) = (client(), mock.base_url());
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let cases = [
            (json!({"messages": msgs, "max_tokens": 3}), 3, "length"),
            (
                json!({"messages": msgs, "max_completion_tokens": 5, "max_tokens": 2}),
                5,
                "length",
            ),
            (json!({"messages": msgs, "max_tokens": 20}), 8, "stop"),
            (
                json!({"messages": msgs, "max_tokens": 20, "ignore_eos": true}),
                20,
                "length",
            ),
            (json!({"messages": msgs}), 8, "stop"),
        ];
        for (body, tokens, finish) in cases {
            let got = lengths(&c, &base, body.clone()).await;
            assert_eq!(got, (tokens, finish.to_string()), "{body}");
        }
    })
    .await;
}

#[tokio::test]
async fn mock_non_streaming_shapes() {
    let mock = server(MockConfig {
        output_tokens: 5,
        ..MockConfig::instant()
    });
    bounded(async {
        let c = client();
        let chat = json_of(
            post(
                &c,
                format!("{}/v1/chat/completions", mock.base_url()),
                chat_body(10, false, false),
            )
            .await,
        )
        .await;
        assert_eq!(chat["object"], "chat.completion");
        assert_eq!(chat["model"], "llmsurge-mock");
        assert_eq!(chat["choices"][0]["message"]["role"], "assistant");
        assert_eq!(chat["choices"][0]["finish_reason"], "stop");
        assert_eq!(
            chat["usage"],
            json!({"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9})
        );
        let request = json!({"prompt": "one two three.", "max_tokens": 2});
        let cmpl =
            json_of(post(&c, format!("{}/v1/completions", mock.base_url()), request).await).await;
        assert_eq!(cmpl["object"], "text_completion");
        assert!(cmpl["choices"][0]["text"].is_string());
        assert_eq!(
            cmpl["usage"],
            json!({"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6})
        );
    })
    .await;
}

#[tokio::test]
async fn mock_reasoning_streams_before_content() {
    let mock = server(MockConfig {
        output_tokens: 2,
        reasoning_tokens: 3,
        ..MockConfig::instant()
    });
    bounded(async {
        let body = post(
            &client(),
            format!("{}/v1/chat/completions", mock.base_url()),
            chat_body(100, true, true),
        )
        .await
        .text()
        .await
        .expect("body");
        let (chunks, words) = chat_chunks(&body);
        let kinds: Vec<&str> = chunks[..5]
            .iter()
            .map(|c| {
                if c["choices"][0]["delta"]["reasoning_content"].is_string() {
                    "r"
                } else {
                    "c"
                }
            })
            .collect();
        assert_eq!(kinds, ["r", "r", "r", "c", "c"]);
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(words.len(), 2);
        let usage = &chunks[chunks.len() - 1]["usage"];
        assert_eq!(usage["completion_tokens"], 5);
        assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 3);
    })
    .await;
}

/// Issue 22 §1.12: `max_tokens` caps reasoning and answer together, as vLLM's and
/// OpenAI's do; the reasoning is cut to leave one answer token.
#[tokio::test]
async fn mock_reasoning_counts_inside_max_tokens() {
    let mock = server(MockConfig {
        output_tokens: 10,
        reasoning_tokens: 3,
        ..MockConfig::instant()
    });
    bounded(async {
        for (cap, reasoning, content) in [(5, 3, 2), (3, 2, 1), (1, 0, 1)] {
            let body = post(
                &client(),
                format!("{}/v1/chat/completions", mock.base_url()),
                chat_body(cap, true, true),
            )
            .await
            .text()
            .await
            .expect("body");
            let (chunks, words) = chat_chunks(&body);
            assert_eq!(words.len(), content, "max_tokens {cap}");
            let usage = &chunks[chunks.len() - 1]["usage"];
            assert_eq!(usage["completion_tokens"], cap, "max_tokens {cap}");
            // No details at all when no reasoning was sent.
            let sent = usage["completion_tokens_details"]["reasoning_tokens"].as_u64();
            assert_eq!(sent.unwrap_or(0), reasoning, "max_tokens {cap}");
            let finish = chunks
                .iter()
                .find_map(|c| c["choices"][0]["finish_reason"].as_str())
                .expect("a finish chunk");
            assert_eq!(finish, "length", "max_tokens {cap}");
        }
    })
    .await;
}

#[tokio::test]
async fn mock_tokens_per_chunk_groups_tokens() {
    let mock = server(MockConfig {
        output_tokens: 10,
        tokens_per_chunk: 4,
        ..MockConfig::instant()
    });
    bounded(async {
        let body = post(
            &client(),
            format!("{}/v1/chat/completions", mock.base_url()),
            chat_body(100, true, false),
        )
        .await
        .text()
        .await
        .expect("body");
        let (_, words) = chat_chunks(&body);
        let sizes: Vec<u64> = words
            .iter()
            .map(|w| llmsurge::mock::count_tokens(w))
            .collect();
        assert_eq!(sizes, [4, 4, 2]);
    })
    .await;
}

#[tokio::test]
async fn mock_long_zero_latency_stream_arrives_whole() {
    // Far more than one coalesced frame (64 KiB) of chunks: every token still arrives.
    let mock = server(MockConfig::instant());
    bounded(async {
        let request = json!({
            "messages": [{"role": "user", "content": "go"}],
            "max_tokens": 5000,
            "ignore_eos": true,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        let url = format!("{}/v1/chat/completions", mock.base_url());
        let body = post(&client(), url, request)
            .await
            .text()
            .await
            .expect("body");
        let (chunks, words) = chat_chunks(&body);
        assert_eq!(words.len(), 5000);
        let usage = &chunks[chunks.len() - 1]["usage"];
        assert_eq!(usage["completion_tokens"], 5000);
        assert_eq!(mock.stats().tokens_sent, 5000);
    })
    .await;
}

#[tokio::test]
async fn mock_same_seed_gives_same_text() {
    let text = |seed| async move {
        let mock = server(MockConfig {
            seed,
            ..MockConfig::instant()
        });
        let value = json_of(
            post(
                &client(),
                format!("{}/v1/chat/completions", mock.base_url()),
                chat_body(16, false, false),
            )
            .await,
        )
        .await;
        value["choices"][0]["message"]["content"]
            .as_str()
            .expect("content")
            .to_string()
    };
    bounded(async {
        assert_eq!(text(3).await, text(3).await);
        assert_ne!(text(3).await, text(4).await);
    })
    .await;
}

#[tokio::test]
async fn mock_embeddings_are_deterministic_unit_vectors() {
    let mock = server(MockConfig::instant());
    bounded(async {
        let url = format!("{}/v1/embeddings", mock.base_url());
        let request = json!({"model": "llmsurge-mock", "input": ["the cat", "a dog", "the cat"]});
        let value = json_of(post(&client(), url, request).await).await;
        assert_eq!(value["object"], "list");
        assert_eq!(value["usage"]["prompt_tokens"], 6);
        let data = value["data"].as_array().expect("data");
        assert_eq!(data.len(), 3);
        let vector = |i: usize| -> Vec<f64> {
            data[i]["embedding"]
                .as_array()
                .expect("vector")
                .iter()
                .map(|x| x.as_f64().expect("float"))
                .collect()
        };
        assert_eq!(vector(0).len(), llmsurge::mock::EMBEDDING_DIM);
        let norm: f64 = vector(0).iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-3, "{norm}");
        assert_eq!(vector(0), vector(2));
        assert_ne!(vector(0), vector(1));
        assert_eq!(data[1]["index"], 1);
    })
    .await;
}

#[tokio::test]
async fn mock_tokenize_and_detokenize() {
    let mock = server(MockConfig {
        max_model_len: 4096,
        ..MockConfig::instant()
    });
    bounded(async {
        let c = client();
        let base = mock.base_url();
        let value = json_of(post(&c, format!("{base}/tokenize"), json!({"prompt": "the model, the server."})).await).await;
        assert_eq!(value["count"], 6);
        assert_eq!(value["max_model_len"], 4096);
        let tokens = value["tokens"].clone();
        assert_eq!(tokens.as_array().expect("tokens").len(), 6);
        let back = json_of(post(&c, format!("{base}/detokenize"), json!({"tokens": tokens})).await).await;
        assert_eq!(back["prompt"], "the model, the server.");
        let messages = json!({"messages": [{"role": "user", "content": "a b"}, {"role": "assistant", "content": [{"type": "text", "text": "c!"}]}]});
        let value = json_of(post(&c, format!("{base}/tokenize"), messages).await).await;
        assert_eq!(value["count"], 4);
    })
    .await;
}

#[tokio::test]
async fn mock_models_and_health() {
    let mock = server(MockConfig {
        model: vec!["a".into(), "b".into()],
        ..MockConfig::instant()
    });
    bounded(async {
        let c = client();
        assert_eq!(mock.model(), "a");
        let health = c
            .get(format!("{}/health", mock.base_url()))
            .send()
            .await
            .expect("health");
        assert_eq!(health.status(), StatusCode::OK);
        let models = json_of(
            c.get(format!("{}/v1/models", mock.base_url()))
                .send()
                .await
                .expect("models"),
        )
        .await;
        let ids: Vec<&str> = models["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|m| m["id"].as_str().expect("id"))
            .collect();
        assert_eq!(ids, ["a", "b"]);
        let second = post(
            &c,
            format!("{}/v1/chat/completions", mock.base_url()),
            json!({"model": "b", "messages": []}),
        )
        .await;
        assert_eq!(json_of(second).await["model"], "b");
    })
    .await;
}
