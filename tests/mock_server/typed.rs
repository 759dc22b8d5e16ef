//! The Responses and Anthropic Messages endpoints: event names and order, `event:`
//! lines that match each data's `type`, usage accounting, whole bodies, error shapes.

use super::*;

/// (event line name, data) of every event of an SSE body.
fn named_events(body: &str) -> Vec<(String, Value)> {
    body.split_terminator("\n\n")
        .map(|event| {
            let (name_line, data_line) = event.split_once('\n').expect("two lines");
            let name = name_line.strip_prefix("event: ").expect("event line");
            let data: Value =
                serde_json::from_str(data_line.strip_prefix("data: ").expect("data line"))
                    .expect("JSON");
            assert_eq!(data["type"], name, "the event line names the data's type");
            (name.to_string(), data)
        })
        .collect()
}

#[tokio::test]
async fn mock_responses_stream_is_the_responses_event_sequence() {
    let mock = server(MockConfig {
        reasoning_tokens: 2,
        ..MockConfig::instant()
    });
    bounded(async {
        let url = format!("{}/v1/responses", mock.base_url());
        let request = json!({"input": [{"role": "user", "content": "Hello, world!"}], "stream": true, "max_output_tokens": 5});
        let body = post(&client(), url.clone(), request).await.text().await.expect("body");
        let events = named_events(&body);
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.incomplete",
            ]
        );
        for (i, (_, data)) in events.iter().enumerate() {
            assert_eq!(data["sequence_number"], i, "sequence numbers count from 0");
        }
        // The `.done` events and the final response repeat the text of the deltas.
        let deltas = |kind: &str| -> String {
            events
                .iter()
                .filter(|(n, _)| n == kind)
                .map(|(_, d)| d["delta"].as_str().expect("delta").to_string())
                .collect()
        };
        let answer = deltas("response.output_text.delta");
        let thought = deltas("response.reasoning_text.delta");
        let done = |kind: &str| {
            events
                .iter()
                .find(|(n, _)| n == kind)
                .map(|(_, d)| d["text"].clone())
                .expect("a done event")
        };
        assert_eq!(done("response.output_text.done"), answer.as_str());
        assert_eq!(done("response.reasoning_text.done"), thought.as_str());
        let last = &events.last().expect("events").1["response"];
        assert_eq!(last["output"][0]["content"][0]["text"], thought.as_str());
        assert_eq!(last["output"][1]["content"][0]["text"], answer.as_str());
        assert_eq!(last["status"], "incomplete");
        assert_eq!(last["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(last["usage"]["input_tokens"], 4);
        // max_output_tokens counts the reasoning: 2 of it, then 3 of answer.
        assert_eq!(last["usage"]["output_tokens"], 5);
        assert_eq!(last["usage"]["output_tokens_details"]["reasoning_tokens"], 2);
        // Whole: the same accounting, with the text in the output items.
        let whole = json_of(
            post(&client(), url, json!({"input": "Hello, world!", "max_output_tokens": 5})).await,
        )
        .await;
        assert_eq!(whole["object"], "response");
        assert_eq!(whole["output"][0]["type"], "reasoning");
        assert_eq!(whole["output"][1]["content"][0]["type"], "output_text");
        assert_eq!(whole["usage"]["output_tokens"], 5);
        let stats = stats(&client(), &mock.base_url()).await;
        assert_eq!(stats.requests.responses, 2);
        assert_eq!(stats.tokens_sent, 10);
    })
    .await;
}

#[tokio::test]
async fn mock_messages_stream_is_the_anthropic_event_sequence() {
    let mock = server(MockConfig {
        reasoning_tokens: 1,
        ..MockConfig::instant()
    });
    bounded(async {
        let url = format!("{}/v1/messages", mock.base_url());
        let request = json!({"system": "Be brief.", "messages": [{"role": "user", "content": "Hello, world!"}], "stream": true, "max_tokens": 3});
        let body = post(&client(), url.clone(), request).await.text().await.expect("body");
        let events = named_events(&body);
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        // "Be brief." (3 tokens) and "Hello, world!" (4).
        assert_eq!(events[0].1["message"]["usage"]["input_tokens"], 7);
        assert_eq!(events[1].1["content_block"]["type"], "thinking");
        assert_eq!(events[3].1["delta"]["type"], "thinking_delta");
        assert_eq!(events[5].1["index"], 1);
        assert_eq!(events[6].1["delta"]["type"], "text_delta");
        // max_tokens counts the thinking: 1 of it, then 2 of text.
        assert_eq!(events[9].1["delta"]["stop_reason"], "max_tokens");
        assert_eq!(events[9].1["usage"]["output_tokens"], 3);
        // Whole, and an error in Anthropic's shape (max_tokens is required).
        let whole = json_of(
            post(&client(), url.clone(), json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})).await,
        )
        .await;
        assert_eq!(whole["type"], "message");
        assert_eq!(whole["content"][0]["type"], "thinking");
        assert_eq!(whole["content"][1]["type"], "text");
        assert_eq!(whole["usage"]["output_tokens"], 3);
        let refused = post(&client(), url, json!({"messages": []})).await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        let error = json_of(refused).await;
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert!(
            error["error"]["message"].as_str().is_some_and(|m| m.contains("max_tokens")),
            "{error}"
        );
    })
    .await;
}

#[tokio::test]
async fn mock_rerank_and_score_rank_every_document() {
    let mock = server(MockConfig::instant());
    bounded(async {
        let base = mock.base_url();
        let rerank = json_of(
            post(
                &client(),
                format!("{base}/v1/rerank"),
                json!({"query": "cat", "documents": ["a cat", {"text": "a dog"}, "fish"], "top_n": 2}),
            )
            .await,
        )
        .await;
        let results = rerank["results"].as_array().expect("results");
        assert_eq!(results.len(), 2, "top_n of them");
        assert!(results[0]["relevance_score"].as_f64() >= results[1]["relevance_score"].as_f64());
        // Every pair reads the query: (1 + 2) + (1 + 2) + (1 + 1).
        assert_eq!(rerank["usage"]["total_tokens"], 8);
        let score = json_of(
            post(
                &client(),
                format!("{base}/v1/score"),
                json!({"text_1": "cat", "text_2": ["a cat", "a dog", "fish"]}),
            )
            .await,
        )
        .await;
        let data = score["data"].as_array().expect("data");
        assert_eq!(data.len(), 3);
        assert_eq!(data[2]["index"], 2);
        assert_eq!(score["usage"]["prompt_tokens"], 8);
        // The same pair scores the same in both: rerank's results are score's best two.
        for r in results {
            let index = r["index"].as_u64().expect("index") as usize;
            assert_eq!(r["relevance_score"], data[index]["score"], "{r}");
        }
        let mut all: Vec<f64> = data.iter().map(|d| d["score"].as_f64().expect("score")).collect();
        all.sort_by(|a, b| b.total_cmp(a));
        assert_eq!(results[1]["relevance_score"].as_f64(), Some(all[1]));
        let stats = stats(&client(), &base).await;
        assert_eq!((stats.requests.rerank, stats.requests.score), (1, 1));
        assert_eq!(stats.prompt_tokens, 16);
    })
    .await;
}

/// A tool call names one of the functions the request offered, on each API (an agent
/// framework looks the name up in its registry); a tool without a usable name (a
/// built-in one, or a name JSON would need escaped) is called `tool_K` by its place.
#[tokio::test]
async fn mock_calls_the_tools_the_request_offered_by_name() {
    let mock = server(MockConfig {
        tool_call_rate: 1.0,
        ..MockConfig::instant()
    });
    bounded(async {
        let c = client();
        let base = mock.base_url();
        // (route, the tools offered in its shape, where a whole answer's call names it)
        let offer = |names: &[&str]| -> [(&'static str, Value); 3] {
            [
                (
                    "/v1/chat/completions",
                    json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                           "tools": names.iter().map(|n| json!({"type": "function", "function": {"name": n, "parameters": {}}})).collect::<Vec<_>>()}),
                ),
                (
                    "/v1/responses",
                    json!({"input": "hi", "max_output_tokens": 4,
                           "tools": names.iter().map(|n| json!({"type": "function", "name": n, "parameters": {}})).collect::<Vec<_>>()}),
                ),
                (
                    "/v1/messages",
                    json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                           "tools": names.iter().map(|n| json!({"name": n, "input_schema": {}})).collect::<Vec<_>>()}),
                ),
            ]
        };
        let called = |route: &str, body: &Value| -> String {
            let name = match route {
                "/v1/chat/completions" => &body["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
                "/v1/responses" => {
                    let items = body["output"].as_array().expect("output items");
                    &items.iter().find(|i| i["type"] == "function_call").expect("a call")["name"]
                }
                _ => {
                    let blocks = body["content"].as_array().expect("content blocks");
                    &blocks.iter().find(|b| b["type"] == "tool_use").expect("a call")["name"]
                }
            };
            name.as_str().expect("a name").to_string()
        };
        let offered = ["get_weather", "lookup-stock"];
        for (route, request) in offer(&offered) {
            let mut seen = std::collections::BTreeSet::new();
            // Consecutive requests call the offered tools in turn.
            for _ in 0..4 {
                let body = json_of(post(&c, format!("{base}{route}"), request.clone()).await).await;
                seen.insert(called(route, &body));
            }
            assert_eq!(seen, offered.iter().map(|s| s.to_string()).collect(), "{route}");
        }
        let unusable = ["bad\"name", &"x".repeat(65)];
        for (route, request) in offer(&unusable) {
            for _ in 0..2 {
                let body = json_of(post(&c, format!("{base}{route}"), request.clone()).await).await;
                let name = called(route, &body);
                assert!(name == "tool_0" || name == "tool_1", "{route}: {name}");
            }
        }
        // A built-in Responses tool has no name at all.
        let builtin = json!({"input": "hi", "max_output_tokens": 4, "tools": [{"type": "web_search"}]});
        let body = json_of(post(&c, format!("{base}/v1/responses"), builtin).await).await;
        assert_eq!(called("/v1/responses", &body), "tool_0");
    })
    .await;
}
