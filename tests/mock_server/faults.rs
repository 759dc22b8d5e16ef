//! Injected faults and bad requests, as a client sees them.

use super::*;

fn assert_error_body(value: &Value) {
    let error = &value["error"];
    assert!(error["message"].is_string(), "{value}");
    assert!(error["type"].is_string(), "{value}");
    assert!(error["param"].is_null(), "{value}");
    assert!(error["code"].is_string(), "{value}");
}

#[tokio::test]
async fn mock_injected_errors_are_500_or_429_with_a_body() {
    let mock = server(MockConfig {
        error_rate: 1.0,
        ..MockConfig::instant()
    });
    bounded(async {
        let c = client();
        let mut seen = Vec::new();
        for _ in 0..20 {
            let response = post(
                &c,
                format!("{}/v1/chat/completions", mock.base_url()),
                chat_body(4, true, false),
            )
            .await;
            let status = response.status();
            assert!(
                status == StatusCode::INTERNAL_SERVER_ERROR
                    || status == StatusCode::TOO_MANY_REQUESTS
            );
            assert_error_body(&json_of(response).await);
            seen.push(status);
        }
        assert!(
            seen.contains(&StatusCode::INTERNAL_SERVER_ERROR)
                && seen.contains(&StatusCode::TOO_MANY_REQUESTS)
        );
        let s = mock.stats();
        assert_eq!(s.faults.error_500 + s.faults.error_429, 20);
        assert_eq!(s.responses_5xx + s.responses_4xx, 20);
    })
    .await;
}

#[tokio::test]
async fn mock_drop_breaks_the_stream_on_http1_and_http2() {
    let mock = server(MockConfig {
        drop_rate: 1.0,
        output_tokens: 8,
        ..MockConfig::instant()
    });
    bounded(async {
        let h2 = client_builder()
            .http2_prior_knowledge()
            .build()
            .expect("h2 client");
        for c in [client(), h2] {
            let response = post(
                &c,
                format!("{}/v1/chat/completions", mock.base_url()),
                chat_body(8, true, false),
            )
            .await;
            assert_eq!(response.status(), StatusCode::OK);
            let err = response.bytes().await.expect_err("the body must break");
            assert!(err.is_body() || err.is_decode(), "{err:?}");
        }
        let request = json!({"messages": [], "stream": false});
        let response = post(
            &client(),
            format!("{}/v1/chat/completions", mock.base_url()),
            request,
        )
        .await;
        response
            .bytes()
            .await
            .expect_err("a non-streaming body breaks too");
        assert_eq!(mock.stats().faults.drop, 3);
    })
    .await;
}

#[tokio::test]
async fn mock_close_ends_the_connection_before_any_headers_on_http1_and_http2() {
    let mock = server(MockConfig {
        close_rate: 1.0,
        ..MockConfig::instant()
    });
    bounded(async {
        let h2 = client_builder()
            .http2_prior_knowledge()
            .build()
            .expect("h2 client");
        for c in [client(), h2] {
            let err = c
                .post(format!("{}/v1/chat/completions", mock.base_url()))
                .body(chat_body(4, true, false).to_string())
                .send()
                .await
                .expect_err("no response at all");
            assert!(!err.is_connect() && !err.is_timeout(), "{err:?}");
        }
        let s = mock.stats();
        assert_eq!(s.faults.close, 2);
        // Counted as a fault, not as a response.
        assert_eq!(s.completed + s.responses_4xx + s.responses_5xx, 0, "{s:?}");
    })
    .await;
}

#[tokio::test]
async fn mock_garbage_sends_one_malformed_event() {
    let mock = server(MockConfig {
        garbage_rate: 1.0,
        output_tokens: 6,
        ..MockConfig::instant()
    });
    bounded(async {
        let body = post(
            &client(),
            format!("{}/v1/chat/completions", mock.base_url()),
            chat_body(6, true, false),
        )
        .await
        .text()
        .await
        .expect("body");
        let payloads = sse_payloads(&body);
        let bad = payloads
            .iter()
            .filter(|p| **p != "[DONE]" && serde_json::from_str::<Value>(p).is_err())
            .count();
        assert_eq!(bad, 1, "{body}");
        // The stream goes on after the bad event: six tokens, finish, [DONE].
        assert_eq!(payloads.len(), 6 + 1 + 1 + 1);
        assert_eq!(mock.stats().faults.garbage, 1);
    })
    .await;
}

/// Polls `/stats` until `done` holds, for at most ten seconds.
async fn wait_for_stats(mock: &MockServer, done: impl Fn(&MockStats) -> bool) -> MockStats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = mock.stats();
        if done(&s) || Instant::now() > deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn mock_stall_holds_the_connection_until_the_client_leaves() {
    let config = MockConfig {
        stall_rate: 1.0,
        output_tokens: 8,
        max_concurrency: Some(1),
        ..MockConfig::instant()
    };
    let mock = server(config);
    bounded(async {
        let url = format!("{}/v1/chat/completions", mock.base_url());
        let stalled = post(&client(), url.clone(), chat_body(8, true, false)).await;
        assert_eq!(stalled.status(), StatusCode::OK);
        let mut stalled = Some(stalled);
        // Read what comes, until the server goes quiet: the client times out waiting.
        let quiet = tokio::time::timeout(Duration::from_millis(500), async {
            while let Some(response) = stalled.as_mut() {
                if response
                    .chunk()
                    .await
                    .expect("no error while stalled")
                    .is_none()
                {
                    break;
                }
            }
        })
        .await;
        assert!(quiet.is_err(), "the stream must stall, not end");
        // A second request queues behind the stalled one, which holds the only slot.
        let queued_client = client();
        let queued = tokio::spawn(async move {
            queued_client
                .post(url)
                .body(chat_body(8, true, false).to_string())
                .send()
                .await
        });
        let s = wait_for_stats(&mock, |s| s.queued == 1).await;
        assert_eq!(
            (
                s.faults.stall,
                s.active_requests,
                s.active_streams,
                s.queued
            ),
            (1, 1, 1, 1)
        );
        // Both clients go away: the server frees the slot and the queue, no task left behind.
        drop(stalled.take());
        queued.abort();
        // Its headers may already have come (they go before the slot): drop that response.
        drop(queued.await);
        let s = wait_for_stats(&mock, |s| s.active_requests == 0 && s.queued == 0).await;
        assert_eq!(
            (s.active_requests, s.active_streams, s.queued),
            (0, 0, 0),
            "{s:?}"
        );
        assert!(s.peak_queued >= 1 && s.peak_active == 1);
    })
    .await;
}

#[tokio::test]
async fn mock_bad_requests_get_openai_errors() {
    let mock = server(MockConfig::instant());
    bounded(async {
        let c = client();
        let base = mock.base_url();
        let malformed = c
            .post(format!("{base}/v1/chat/completions"))
            .body("{not json")
            .send()
            .await
            .expect("sent");
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
        let value = json_of(malformed).await;
        assert_error_body(&value);
        assert_eq!(value["error"]["code"], "invalid_json");
        // Not JSON, though a wrong type comes first in reading order: still invalid_json;
        // JSON of a wrong shape is invalid_request.
        for (body, code) in [
            (
                r#"{"model":"llmsurge-mock","messages":[{"role":"user","content":[1, oops]}]}"#,
                "invalid_json",
            ),
            (r#"{"max_tokens":"x","messages":["#, "invalid_json"),
            (
                r#"{"model":"llmsurge-mock","messages":[{"role":"user","content":5}]}"#,
                "invalid_request",
            ),
        ] {
            let answer = c
                .post(format!("{base}/v1/chat/completions"))
                .body(body)
                .send()
                .await
                .expect("sent");
            assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{body}");
            let value = json_of(answer).await;
            assert_error_body(&value);
            assert_eq!(value["error"]["code"], code, "{body}: {value}");
        }
        let missing = post(
            &c,
            format!("{base}/v1/chat/completions"),
            json!({"model": "llmsurge-mock"}),
        )
        .await;
        assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
        let zero = post(
            &c,
            format!("{base}/v1/completions"),
            json!({"prompt": "x", "max_tokens": 0}),
        )
        .await;
        assert_eq!(zero.status(), StatusCode::BAD_REQUEST);
        let model = post(
            &c,
            format!("{base}/v1/chat/completions"),
            json!({"model": "gpt-x", "messages": []}),
        )
        .await;
        assert_eq!(model.status(), StatusCode::NOT_FOUND);
        let value = json_of(model).await;
        assert_error_body(&value);
        assert_eq!(value["error"]["code"], "model_not_found");
        let path = c
            .get(format!("{base}/v2/nothing"))
            .send()
            .await
            .expect("sent");
        assert_eq!(path.status(), StatusCode::NOT_FOUND);
        assert_error_body(&json_of(path).await);
        let method = c
            .get(format!("{base}/v1/chat/completions"))
            .send()
            .await
            .expect("sent");
        assert_eq!(method.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(method.headers()["allow"], "POST");
        assert_error_body(&json_of(method).await);
    })
    .await;
}
