//! Several served models (a base and its LoRA adapters): the list, the 404 for an
//! unknown name, and the per-model counts in `/stats`.

use super::cli::{base_of, spawn_binary, wait_exit};
use super::*;

fn chat(model: Option<&str>, max_tokens: u64, stream: bool) -> Value {
    let mut body = chat_body(max_tokens, stream, true);
    match model {
        Some(m) => body["model"] = json!(m),
        None => drop(body.as_object_mut().map(|o| o.remove("model"))),
    }
    body
}

#[tokio::test]
async fn mock_counts_requests_and_tokens_per_served_model() {
    let mock = server(MockConfig {
        model: ["base", "ad1", "ad2"].map(String::from).to_vec(),
        ..MockConfig::instant()
    });
    bounded(async {
        let c = client();
        let base = mock.base_url();
        let url = format!("{base}/v1/chat/completions");
        // ad1: two streamed requests of 3 tokens; ad2: one whole one of 5; no model
        // named: the first served one.
        for (model, tokens, stream) in [
            (Some("ad1"), 3, true),
            (Some("ad1"), 3, true),
            (Some("ad2"), 5, false),
            (None, 2, true),
        ] {
            let r = post(&c, url.clone(), chat(model, tokens, stream)).await;
            assert_eq!(r.status(), StatusCode::OK);
            let _ = r.bytes().await.expect("body");
        }
        let unknown = post(&c, url.clone(), chat(Some("ad3"), 3, true)).await;
        assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
        let value = json_of(unknown).await;
        assert_eq!(value["error"]["code"], "model_not_found");
        assert_eq!(value["error"]["type"], "invalid_request_error");
        assert!(
            value["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("ad3")),
            "{value}"
        );

        let s = stats(&c, &base).await;
        let m = &s.models;
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(
            (m["ad1"].requests, m["ad1"].completed, m["ad1"].tokens_sent),
            (2, 2, 6)
        );
        assert_eq!(
            (m["ad2"].requests, m["ad2"].completed, m["ad2"].tokens_sent),
            (1, 1, 5)
        );
        assert_eq!((m["base"].requests, m["base"].tokens_sent), (1, 2));
        assert_eq!(s.model_not_found, 1);
        let prompts: u64 = m.values().map(|c| c.prompt_tokens).sum();
        assert_eq!(prompts, s.prompt_tokens, "the models' prompts add up");
        let sent: u64 = m.values().map(|c| c.tokens_sent).sum();
        assert_eq!(sent, s.tokens_sent, "the models' tokens add up");

        // A reset zeroes the per-model counts too.
        c.post(format!("{base}/stats/reset"))
            .send()
            .await
            .expect("reset");
        let s = stats(&c, &base).await;
        assert!(
            s.models
                .values()
                .all(|c| c.requests == 0 && c.tokens_sent == 0)
        );
        assert_eq!(s.model_not_found, 0);
    })
    .await;
}

#[tokio::test]
async fn mock_binary_serves_lora_modules_as_vllm_names_them() {
    let mut child = spawn_binary(
        &[
            "--port",
            "0",
            "--instant",
            "--lora-modules",
            "sql=/adapters/sql",
            "chat",
        ],
        &[("LLMSURGE_MOCK_MODEL", "base")],
    );
    let base = base_of(&mut child);
    bounded(async {
        let c = client();
        let models = c
            .get(format!("{base}/v1/models"))
            .send()
            .await
            .expect("models");
        let list = json_of(models).await;
        let ids: Vec<&str> = list["data"]
            .as_array()
            .expect("data")
            .iter()
            .filter_map(|m| m["id"].as_str())
            .collect();
        assert_eq!(ids, ["base", "sql", "chat"]);
        let r = post(
            &c,
            format!("{base}/v1/chat/completions"),
            chat(Some("sql"), 2, false),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
        let _ = r.bytes().await;
        assert_eq!(stats(&c, &base).await.models["sql"].requests, 1);
    })
    .await;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    wait_exit(&mut child);
}
