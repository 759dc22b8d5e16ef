//! `--reset-cache`: the mock counts one reset before each benchmark but the first, and
//! the report says per benchmark what was reset and what the server answered.

use crate::scenario::Bench;
use crate::support::mock;
use llmsurge::mock::MockConfig;

fn three_benchmarks(url: &str) -> Bench {
    Bench::target(url)
        .constant("10,20,40")
        .max_requests(4)
        .data("prompt_tokens=64,output_tokens=2")
        .outputs("json")
}

#[test]
fn cache_reset_auto_resets_a_vllm_like_server_before_each_benchmark_but_the_first() {
    let server = mock(MockConfig::instant());
    let report = three_benchmarks(&server.base_url())
        .arg("--reset-cache", "auto")
        .ok_report();
    let stats = server.stats();
    // The mock publishes vLLM's series, so auto takes it for vLLM: both of its endpoints.
    assert_eq!(stats.cache_resets.prefix_cache, 2, "{stats:?}");
    assert_eq!(stats.cache_resets.mm_cache, 2, "{stats:?}");
    assert_eq!(stats.cache_resets.flush_cache, 0, "{stats:?}");
    assert!(report.benchmarks[0].cache_reset.is_none());
    for b in &report.benchmarks[1..] {
        let reset = b
            .cache_reset
            .as_ref()
            .expect("a reset before this benchmark");
        assert!(reset.reset, "{reset:?}");
        assert_eq!(reset.server.as_deref(), Some("vllm"));
        let paths: Vec<&str> = reset.calls.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["/reset_prefix_cache", "/reset_mm_cache"]);
        assert!(reset.calls.iter().all(|c| c.status == Some(200)));
    }
}

#[test]
fn cache_reset_a_path_posts_that_path_and_none_is_the_default_for_fixed_profiles() {
    let server = mock(MockConfig::instant());
    let report = three_benchmarks(&server.base_url())
        .arg("--reset-cache", "/flush_cache")
        .ok_report();
    let stats = server.stats();
    assert_eq!(stats.cache_resets.flush_cache, 2, "{stats:?}");
    assert_eq!(stats.cache_resets.prefix_cache, 0, "{stats:?}");
    let reset = report.benchmarks[2].cache_reset.as_ref().expect("reset");
    assert_eq!(reset.calls[0].answer, "Cache flushed.");

    let quiet = mock(MockConfig::instant());
    let report = three_benchmarks(&quiet.base_url()).ok_report();
    let stats = quiet.stats();
    assert_eq!(stats.cache_resets, Default::default(), "{stats:?}");
    assert!(report.benchmarks.iter().all(|b| b.cache_reset.is_none()));
}

#[test]
fn cache_reset_empties_the_mocks_prefix_cache_between_repeats() {
    // `--repeat 2` over a file of prompts sends the same prompts in both runs (each run
    // draws its own seed, but a file's prompts are the file's): without a reset the
    // second run finds them cached; with one (before the second run's first benchmark)
    // it finds none of them.
    let dir = tempfile::tempdir().expect("tempdir");
    let prompts = dir.path().join("prompts.jsonl");
    let lines: Vec<String> = (0..4)
        .map(|i| {
            let words: Vec<String> = (0..64).map(|w| format!("w{i}x{w}")).collect();
            serde_json::json!({ "prompt": words.join(" "), "output_tokens_count": 2 }).to_string()
        })
        .collect();
    std::fs::write(&prompts, lines.join("\n") + "\n").expect("write the prompts");
    let run = |reset: &str| {
        let server = mock(MockConfig::instant());
        let report = Bench::target(&server.base_url())
            .constant(10)
            .max_requests(4)
            .repeat(2)
            .data(&prompts.display().to_string())
            .outputs("json")
            .arg("--reset-cache", reset)
            .ok_report();
        (server.stats(), report)
    };
    let (kept, _) = run("none");
    let (reset, report) = run("/reset_prefix_cache");
    assert!(
        kept.prefix_cache_hits >= kept.prefix_cache_queries / 4,
        "{kept:?}"
    );
    assert_eq!(reset.cache_resets.prefix_cache, 1, "{reset:?}");
    assert_eq!(reset.prefix_cache_hits, 0, "{reset:?}");
    assert!(
        report.benchmarks[1]
            .cache_reset
            .as_ref()
            .is_some_and(|r| r.reset)
    );
}

#[test]
fn cache_reset_auto_says_why_it_posted_nothing_when_metrics_fails() {
    use llmsurge::mock::MetricsFault;
    // Each way a server's /metrics can fail `auto`'s reading of it; the mock's count of
    // resets is the truth that nothing was posted. A hung /metrics is given up after
    // 5 s, not the reset calls' 60 s before every benchmark.
    let cases: [(MockConfig, &str); 4] = [
        (
            MockConfig {
                no_metrics: true,
                ..MockConfig::instant()
            },
            "GET /metrics answered 404 Not Found",
        ),
        (
            MockConfig {
                metrics_fault: Some(MetricsFault::Error),
                ..MockConfig::instant()
            },
            "GET /metrics answered 500 Internal Server Error",
        ),
        (
            MockConfig {
                metrics_fault: Some(MetricsFault::Garbage),
                ..MockConfig::instant()
            },
            "/metrics shows neither vLLM nor SGLang",
        ),
        (
            MockConfig {
                metrics_fault: Some(MetricsFault::Hang),
                ..MockConfig::instant()
            },
            "GET /metrics did not answer within 5 s",
        ),
    ];
    for (config, why) in cases {
        let server = mock(config);
        let run = Bench::target(&server.base_url())
            .constant("10,20")
            .max_requests(4)
            .data("prompt_tokens=64,output_tokens=2")
            .outputs("json,console")
            .arg("--reset-cache", "auto")
            .run();
        let report = crate::support::ok_report(&run);
        assert_eq!(server.stats().cache_resets, Default::default(), "{why}");
        let reset = report.benchmarks[1]
            .cache_reset
            .as_ref()
            .expect("a reset before the second benchmark");
        assert!(!reset.reset && reset.calls.is_empty(), "{reset:?}");
        let note = reset.note.as_deref().unwrap_or_default();
        assert!(note.starts_with(why), "{why}: {reset:?}");
        assert!(
            run.stdout.contains(&format!("nothing posted ({note})")),
            "{}",
            run.stdout
        );
    }
}
