//! `GET /metrics`: vLLM's series from the mock's live state, equal to `/stats`; the
//! `--no-metrics` and `--metrics-fault` targets; the profiler endpoints.

use std::collections::BTreeMap;

use llmsurge::mock::MetricsFault;
use prom_text_format_parser::{Scrape, Type, ValueType};

use super::*;

/// The samples of one scrape by their full series text, `name{labels}` as exposed
/// (`vllm:prompt_tokens_total{model_name="m"}`), and each family's declared type.
struct Parsed {
    samples: BTreeMap<String, f64>,
    types: BTreeMap<String, Type>,
}

impl Parsed {
    fn new(text: &str) -> Parsed {
        let scrape = Scrape::parse(text).unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
        let mut samples = BTreeMap::new();
        let mut types = BTreeMap::new();
        for metric in &scrape.metrics {
            types.insert(metric.name.clone(), metric.kind);
            for sample in &metric.samples {
                let suffix = match (metric.kind, sample.value.value_type) {
                    (Type::Histogram, ValueType::Sample) => "_bucket",
                    (Type::Histogram, ValueType::Sum) => "_sum",
                    (Type::Histogram, ValueType::Count) => "_count",
                    _ => "",
                };
                let key = format!("{}{suffix}{}", metric.name, sample.labels);
                let value: f64 = sample.value.value.parse().expect("a number");
                assert!(samples.insert(key.clone(), value).is_none(), "twice: {key}");
            }
        }
        Parsed { samples, types }
    }

    /// The value of `series` with the mock's default model label plus `labels`.
    fn get(&self, series: &str, labels: &str) -> f64 {
        let key = format!("{series}{{model_name=\"llmsurge-mock\"{labels}}}");
        *self
            .samples
            .get(&key)
            .unwrap_or_else(|| panic!("no {key} in {:?}", self.samples.keys()))
    }
}

async fn scrape_text(client: &Client, base: &str) -> (StatusCode, String, String) {
    let response = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("scrape");
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (status, content_type, response.text().await.expect("body"))
}

async fn scrape(client: &Client, base: &str) -> Parsed {
    let (status, content_type, text) = scrape_text(client, base).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    Parsed::new(&text)
}

/// The counters of a scrape against the `/stats` fields they mirror.
fn assert_counters_match(m: &Parsed, s: &MockStats) {
    let pairs = [
        ("vllm:prompt_tokens_total", "", s.prompt_tokens),
        ("vllm:generation_tokens_total", "", s.tokens_sent),
        (
            "vllm:request_success_total",
            ",finished_reason=\"stop\"",
            s.request_success.stop,
        ),
        (
            "vllm:request_success_total",
            ",finished_reason=\"length\"",
            s.request_success.length,
        ),
        ("vllm:num_requests_running", "", s.active_requests),
        ("vllm:num_requests_waiting", "", s.queued),
        ("vllm:num_preemptions_total", "", 0),
        (
            "vllm:prefix_cache_queries_total",
            "",
            s.prefix_cache_queries,
        ),
        ("vllm:prefix_cache_hits_total", "", s.prefix_cache_hits),
    ];
    for (series, labels, expected) in pairs {
        assert_eq!(m.get(series, labels), expected as f64, "{series}{labels}");
    }
}

#[tokio::test]
async fn mock_metrics_counters_equal_stats_after_streamed_requests() {
    let mock = server(MockConfig {
        output_tokens: 5,
        reasoning_tokens: 3,
        ..MockConfig::instant()
    });
    bounded(async {
        let c = client();
        let base = mock.base_url();
        // Nothing yet: every counter at 0, and both histograms empty.
        let empty = scrape(&c, &base).await;
        assert_counters_match(&empty, &mock.stats());
        assert_eq!(empty.get("vllm:time_to_first_token_seconds_count", ""), 0.0);
        // Two streamed chats ending at max_tokens (length), one streamed chat ending by
        // itself (stop), one non-streaming completion (no reasoning: completions only).
        for max_tokens in [2, 3] {
            post(
                &c,
                format!("{base}/v1/chat/completions"),
                chat_body(max_tokens, true, true),
            )
            .await
            .bytes()
            .await
            .expect("body");
        }
        let stop = json!({"messages": [{"role": "user", "content": "a b c"}], "stream": true});
        post(&c, format!("{base}/v1/chat/completions"), stop)
            .await
            .bytes()
            .await
            .expect("body");
        post(
            &c,
            format!("{base}/v1/completions"),
            json!({"prompt": "one two", "max_tokens": 50}),
        )
        .await
        .bytes()
        .await
        .expect("body");
        let m = scrape(&c, &base).await;
        let s = stats(&c, &base).await;
        assert_counters_match(&m, &s);
        // The numbers themselves: 4 + 4 + 3 + 2 prompt tokens. max_tokens counts the
        // reasoning too, which leaves one answer token: 1 + 1 and 2 + 1 under the caps
        // of 2 and 3, then 3 + 5 uncapped; 5 for the completion.
        assert_eq!(s.prompt_tokens, 13);
        assert_eq!(s.reasoning_tokens_sent, 1 + 2 + 3);
        assert_eq!(s.tokens_sent, 2 + 3 + 8 + 5);
        assert_eq!((s.request_success.length, s.request_success.stop), (2, 2));
        // Every request ran to its end: one TTFT and one e2e observation each.
        for h in [
            "vllm:time_to_first_token_seconds",
            "vllm:e2e_request_latency_seconds",
        ] {
            assert_eq!(m.types[h], Type::Histogram);
            assert_eq!(m.get(&format!("{h}_count"), ""), 4.0, "{h}");
            assert_eq!(m.get(&format!("{h}_bucket"), ",le=\"+Inf\""), 4.0, "{h}");
        }
        assert_eq!(m.types["vllm:generation_tokens_total"], Type::Counter);
        assert_eq!(m.types["vllm:kv_cache_usage_perc"], Type::Gauge);
        assert_eq!(m.get("vllm:kv_cache_usage_perc", ""), 0.0, "nothing runs");
        // Two scrapes, counted as such and in no benchmark count or response class.
        assert_eq!(s.requests.metrics, 2);
        assert_eq!(s.requests.chat_completions + s.requests.completions, 4);
        assert_eq!(s.responses_2xx, 4, "the four generations, not the scrapes");
        // A reset zeroes the counters and histograms alike.
        c.post(format!("{base}/stats/reset"))
            .send()
            .await
            .expect("reset");
        let after = scrape(&c, &base).await;
        assert_counters_match(&after, &mock.stats());
        assert_eq!(after.get("vllm:e2e_request_latency_seconds_count", ""), 0.0);
    })
    .await;
}

#[tokio::test]
async fn mock_prefix_cache_hits_shared_prompt_prefixes() {
    let mock = server(MockConfig::instant());
    bounded(async {
        let c = client();
        let base = mock.base_url();
        // 40 words: two full 16-token blocks and a tail that never caches.
        let words: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
        let mut other = words.clone();
        other[20] = "changed".into(); // the second block differs
        for (prompt, hits) in [(&words, 0), (&words, 32), (&other, 16)] {
            let before = mock.stats().prefix_cache_hits;
            let body = json!({"prompt": prompt.join(" "), "max_tokens": 1});
            post(&c, format!("{base}/v1/completions"), body)
                .await
                .bytes()
                .await
                .expect("body");
            assert_eq!(mock.stats().prefix_cache_hits - before, hits);
        }
        let s = stats(&c, &base).await;
        assert_eq!(s.prefix_cache_queries, 3 * 40);
        assert_eq!(s.prefix_cache_hits, 32 + 16);
        // A chat request's messages are looked up the same way.
        let chat =
            json!({"messages": [{"role": "user", "content": words.join(" ")}], "max_tokens": 1});
        post(&c, format!("{base}/v1/chat/completions"), chat)
            .await
            .bytes()
            .await
            .expect("body");
        let m = scrape(&c, &base).await;
        let s = stats(&c, &base).await;
        assert_eq!((s.prefix_cache_queries, s.prefix_cache_hits), (160, 80));
        assert_counters_match(&m, &s);
    })
    .await;
}

#[tokio::test]
async fn mock_spec_decode_counters_follow_the_tokens() {
    // Every draft accepted: 11 tokens are the prefill's one, then two steps of 4 + 1.
    let all = server(MockConfig {
        output_tokens: 11,
        spec_decode_draft_tokens: 4,
        spec_decode_acceptance: Some(1.0),
        ..MockConfig::instant()
    });
    // Half accepted, drawn per request: only the invariants are known.
    let half = server(MockConfig {
        output_tokens: 9,
        output_tokens_std: 3.0,
        reasoning_tokens: 2,
        tokens_per_chunk: 3,
        spec_decode_draft_tokens: 3,
        spec_decode_acceptance: Some(0.5),
        ..MockConfig::instant()
    });
    let off = server(MockConfig::instant());
    bounded(async {
        let c = client();
        for mock in [&all, &half, &off] {
            let base = mock.base_url();
            for stream in [true, false, true, true] {
                let body =
                    json!({"messages": [{"role": "user", "content": "hi"}], "stream": stream});
                post(&c, format!("{base}/v1/chat/completions"), body)
                    .await
                    .bytes()
                    .await
                    .expect("body");
            }
        }
        let s = all.stats();
        assert_eq!(
            (
                s.spec_decode.drafts,
                s.spec_decode.draft_tokens,
                s.spec_decode.accepted_tokens
            ),
            (4 * 2, 4 * 8, 4 * 8)
        );
        for mock in [&all, &half] {
            let s = mock.stats();
            let d = &s.spec_decode;
            // Each step yields its accepted tokens plus one; the prefill yields the first.
            assert_eq!(
                d.drafts + d.accepted_tokens,
                s.tokens_sent - s.completed,
                "{d:?}"
            );
            assert_eq!(
                d.draft_tokens,
                d.drafts * if mock.addr() == all.addr() { 4 } else { 3 }
            );
            let m = scrape(&c, &mock.base_url()).await;
            assert_eq!(
                m.get("vllm:spec_decode_num_drafts_total", ""),
                d.drafts as f64
            );
            assert_eq!(
                m.get("vllm:spec_decode_num_draft_tokens_total", ""),
                d.draft_tokens as f64
            );
            assert_eq!(
                m.get("vllm:spec_decode_num_accepted_tokens_total", ""),
                d.accepted_tokens as f64
            );
        }
        let d = &half.stats().spec_decode;
        assert!(
            0 < d.accepted_tokens && d.accepted_tokens < d.draft_tokens,
            "{d:?}"
        );
        // Off by default, and then absent as on vLLM.
        let m = scrape(&c, &off.base_url()).await;
        assert!(!m.types.contains_key("vllm:spec_decode_num_drafts_total"));
        assert_eq!(
            off.stats().spec_decode,
            llmsurge::mock::SpecDecodeCounts::default()
        );
    })
    .await;
}

#[tokio::test]
async fn mock_metrics_waiting_and_kv_follow_the_queue() {
    // One slot and a first token a minute away: the first request runs, the rest wait.
    let mock = server(MockConfig {
        max_concurrency: Some(1),
        ttft_ms: 60_000.0,
        kv_cache_tokens: 8,
        ..MockConfig::instant()
    });
    bounded(async {
        let c = client();
        let base = mock.base_url();
        let mut held = tokio::task::JoinSet::new();
        for _ in 0..3 {
            let (c, url) = (c.clone(), format!("{base}/v1/chat/completions"));
            held.spawn(async move {
                // Headers come at once; the body waits for the slot and the first token.
                let response = post(&c, url, chat_body(4, true, false)).await;
                let _ = response.bytes().await;
            });
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(mock.stats().queued == 2 && mock.stats().active_requests == 1) {
            assert!(
                Instant::now() < deadline,
                "never queued: {:?}",
                mock.stats()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let m = scrape(&c, &base).await;
        assert_counters_match(&m, &mock.stats());
        assert_eq!(m.get("vllm:num_requests_waiting", ""), 2.0);
        assert_eq!(m.get("vllm:num_requests_running", ""), 1.0);
        // The running request's prompt ("Hello, world!": 4 tokens) over 8 tokens of cache.
        assert_eq!(mock.stats().kv_cache_tokens, 4);
        assert_eq!(m.get("vllm:kv_cache_usage_perc", ""), 0.5);
        // The clients go away: queue, slot and cache are all given back.
        held.abort_all();
        while held.join_next().await.is_some() {}
        let deadline = Instant::now() + Duration::from_secs(20);
        while mock.stats().active_requests + mock.stats().queued > 0 {
            assert!(Instant::now() < deadline, "never freed: {:?}", mock.stats());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let m = scrape(&c, &base).await;
        assert_eq!(m.get("vllm:num_requests_waiting", ""), 0.0);
        assert_eq!(m.get("vllm:kv_cache_usage_perc", ""), 0.0);
        assert_eq!(mock.stats().kv_cache_tokens, 0);
        assert_eq!(m.get("vllm:time_to_first_token_seconds_count", ""), 0.0);
    })
    .await;
}

#[tokio::test]
async fn mock_metrics_kv_use_caps_at_one() {
    let mock = server(MockConfig {
        ttft_ms: 60_000.0,
        kv_cache_tokens: 3,
        ..MockConfig::instant()
    });
    bounded(async {
        let c = client();
        let base = mock.base_url();
        let url = format!("{base}/v1/chat/completions");
        let held = tokio::spawn({
            let c = c.clone();
            async move {
                let _ = post(&c, url, chat_body(4, true, false)).await.bytes().await;
            }
        });
        wait_in_flight_async(&mock, 1).await;
        let m = scrape(&c, &base).await;
        assert_eq!(mock.stats().kv_cache_tokens, 4);
        assert_eq!(m.get("vllm:kv_cache_usage_perc", ""), 1.0);
        held.abort();
    })
    .await;
}

async fn wait_in_flight_async(mock: &MockServer, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while mock.stats().active_requests < n {
        assert!(
            Instant::now() < deadline,
            "never active: {:?}",
            mock.stats()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn mock_no_metrics_answers_404() {
    let mock = server(MockConfig {
        no_metrics: true,
        ..MockConfig::instant()
    });
    bounded(async {
        let c = client();
        let (status, _, _) = scrape_text(&c, &mock.base_url()).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let s = mock.stats();
        assert_eq!((s.requests.metrics, s.requests.other), (1, 0));
        assert_eq!(s.responses_4xx, 0, "a scrape is no benchmark response");
    })
    .await;
}

#[tokio::test]
async fn mock_metrics_faults_start_after_n_good_scrapes() {
    for kind in [
        MetricsFault::Error,
        MetricsFault::Garbage,
        MetricsFault::Hang,
    ] {
        let mock = server(MockConfig {
            metrics_fault: Some(kind),
            metrics_fault_after: 2,
            ..MockConfig::instant()
        });
        bounded(async {
            let c = client();
            let base = mock.base_url();
            for _ in 0..2 {
                scrape(&c, &base).await;
            }
            match kind {
                MetricsFault::Error => {
                    let (status, _, _) = scrape_text(&c, &base).await;
                    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
                }
                MetricsFault::Garbage => {
                    let (status, content_type, text) = scrape_text(&c, &base).await;
                    assert_eq!(status, StatusCode::OK);
                    assert!(content_type.starts_with("text/plain; version=0.0.4"));
                    assert!(Scrape::parse(&text).is_err(), "not Prometheus: {text}");
                }
                MetricsFault::Hang => {
                    // No answer, not even headers: the client's own timeout ends it.
                    let result = c
                        .get(format!("{base}/metrics"))
                        .timeout(Duration::from_millis(300))
                        .send()
                        .await;
                    assert!(result.expect_err("no answer").is_timeout());
                    // The server goes on serving everything else meanwhile.
                    assert_eq!(stats(&c, &base).await.requests.metrics, 3);
                }
            }
            assert_eq!(mock.stats().requests.metrics, 3, "{kind:?}");
        })
        .await;
    }
}

#[tokio::test]
async fn mock_hung_scrape_ends_when_the_server_stops() {
    let mock = server(MockConfig {
        metrics_fault: Some(MetricsFault::Hang),
        ..MockConfig::instant()
    });
    let c = client();
    let url = format!("{}/metrics", mock.base_url());
    let hung = tokio::spawn(async move { c.get(url).send().await });
    let deadline = Instant::now() + Duration::from_secs(20);
    while mock.stats().requests.metrics < 1 {
        assert!(Instant::now() < deadline, "the scrape never came");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The stop does not wait out its grace period (1 s) for the hung scrape: it is
    // closed without an answer the moment the server stops. A stop that waited would
    // take the whole second (a timer never fires early), so the bound is the grace
    // period itself, not a guess at the machine's speed.
    let start = Instant::now();
    let seen = mock.stop();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    let outcome = bounded(hung).await.expect("task");
    assert!(outcome.is_err(), "no answer: {outcome:?}");
    assert_eq!(seen.faults.close, 0, "not a generation fault");
}

#[tokio::test]
async fn mock_profiler_endpoints_are_counted_apart() {
    let mock = server(MockConfig::instant());
    let off = server(MockConfig {
        no_profiler: true,
        ..MockConfig::instant()
    });
    bounded(async {
        let c = client();
        for (base, expected) in [
            (mock.base_url(), StatusCode::OK),
            (off.base_url(), StatusCode::NOT_FOUND),
        ] {
            for path in ["start_profile", "stop_profile", "stop_profile"] {
                let response = c.post(format!("{base}/{path}")).send().await.expect("sent");
                assert_eq!(response.status(), expected, "{base}/{path}");
            }
            // A probe header does not divert them to the probe twin.
            c.post(format!("{base}/start_profile"))
                .header(llmsurge::mock::PROBE_HEADER, "1")
                .send()
                .await
                .expect("sent");
        }
        for s in [mock.stats(), off.stats()] {
            assert_eq!((s.requests.start_profile, s.requests.stop_profile), (2, 2));
            assert_eq!(s.responses_2xx + s.responses_4xx + s.requests.other, 0);
            assert_eq!(s.requests_total, 4);
        }
    })
    .await;
}
