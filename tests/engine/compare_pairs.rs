//! Issue 36: comparisons that cannot flatter. `benchmark compare` pairs benchmarks by
//! strategy, rate and label, names every benchmark without a partner and fails the gate
//! on one (finding 8), and warns when the reports share a seed or the server's prefix
//! cache answered one side more (finding 2). The figures it compares are checked against
//! the two report files' own, and the hit rates against the mock's prefix cache as the
//! reports' server metrics scraped it.

use crate::scenario::Bench;
use crate::support::{llmsurge, mock};
use llmsurge::mock::MockConfig;
use serde_json::Value;
use std::path::{Path, PathBuf};

const DATA: &str = "prompt_tokens=64,output_tokens=4";

/// A gate on requests_per_s alone, one no run misses: these tests judge pairing and
/// warnings, so the default latency tolerances (noise on a busy machine) stay out.
const ONLY_RATE: [&str; 3] = [
    "--max-regression",
    "requests_per_s=-99%",
    "--max-regression-only",
];

fn server() -> llmsurge::mock::MockServer {
    mock(MockConfig {
        ttft_ms: 20.0,
        itl_ms: 1.0,
        ..MockConfig::instant()
    })
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json")
}

/// Runs `bench` (which must pass) and keeps its JSON report as `dir/name`.
fn keep(bench: Bench, dir: &Path, name: &str) -> PathBuf {
    let run = bench.outputs("json").run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let path = dir.join(name);
    std::fs::copy(run.report_path(), &path).expect("copy the report");
    path
}

/// What one `benchmark compare` said.
pub(super) struct Compared {
    pub(super) code: i32,
    pub(super) stdout: String,
    pub(super) stderr: String,
    /// Its `--json` output.
    pub(super) json: Value,
    /// Its `--markdown` output.
    pub(super) markdown: String,
}

/// `benchmark compare BASE CUR ARGS` with `--json` and `--markdown` written to files.
pub(super) fn compare(base: &Path, cur: &Path, args: &[&str]) -> Compared {
    let dir = tempfile::tempdir().expect("tempdir");
    let (json_path, md_path) = (dir.path().join("c.json"), dir.path().join("c.md"));
    let out = llmsurge()
        .args(["benchmark", "compare"])
        .arg(base)
        .arg(cur)
        .args(args)
        .arg("--json")
        .arg(&json_path)
        .arg("--markdown")
        .arg(&md_path)
        .output()
        .expect("compare runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    Compared {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        json: json(&json_path),
        markdown: std::fs::read_to_string(&md_path).expect("markdown written"),
        stderr,
    }
}

/// The benchmark of `report` (its first run) at `rate` requests/s.
fn at_rate(report: &Value, rate: f64) -> &Value {
    report["benchmarks"]
        .as_array()
        .expect("benchmarks")
        .iter()
        .find(|b| {
            b["run"].as_u64().unwrap_or(0) == 0 && b["strategy"]["rate"].as_f64() == Some(rate)
        })
        .unwrap_or_else(|| panic!("no benchmark at {rate}/s"))
}

/// The row of `metric` in the comparison's only pair.
fn row<'a>(c: &'a Value, metric: &str) -> &'a Value {
    c["pairs"][0]["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|m| m["metric"] == metric)
        .unwrap_or_else(|| panic!("no {metric} row"))
}

/// Issue 36 finding 8: a baseline of `--rate 10,20` against `--rate 20 --repeat 3` was
/// compared by position (constant@10's figures under the label constant@20, exit 0) and
/// the unmatched benchmark went unnamed.
#[test]
fn compare_pairs_the_same_rate_names_the_benchmark_without_a_partner_and_fails_on_it() {
    let server = server();
    let dir = tempfile::tempdir().expect("tempdir");
    let base = keep(
        Bench::on(&server)
            .constant("10,20")
            .max_requests(10)
            .data(DATA),
        dir.path(),
        "base.json",
    );
    let cur = keep(
        Bench::on(&server)
            .constant(20)
            .max_requests(10)
            .data(DATA)
            .repeat(3),
        dir.path(),
        "cur.json",
    );
    // Only requests_per_s has a tolerance, one no run misses: the exit code says
    // whether a missing benchmark failed the gate, and nothing else.
    let tolerance = ONLY_RATE;
    let c = compare(&base, &cur, &tolerance);
    assert_eq!(c.code, 3, "{}{}", c.stdout, c.stderr);
    assert!(
        c.stderr
            .contains("constant@10 of the baseline has no partner"),
        "{}",
        c.stderr
    );
    assert!(
        c.stdout.contains("unmatched in the baseline"),
        "{}",
        c.stdout
    );
    assert!(c.markdown.contains("constant@10"), "{}", c.markdown);
    assert_eq!(
        c.json["unmatched_baseline"],
        serde_json::json!(["constant@10"])
    );
    assert_eq!(c.json["unmatched_current"], serde_json::json!([]));
    // The one pair is constant@20 with constant@20, with both files' own figures.
    let pairs = c.json["pairs"].as_array().expect("pairs");
    assert_eq!(pairs.len(), 1);
    assert_eq!(
        (&pairs[0]["baseline_label"], &pairs[0]["label"]),
        (&Value::from("constant@20"), &Value::from("constant@20"))
    );
    let (b, k) = (
        at_rate(&json(&base), 20.0).clone(),
        at_rate(&json(&cur), 20.0).clone(),
    );
    let rps = row(&c.json, "requests_per_s");
    assert_eq!(rps["baseline"], b["throughput"]["requests_per_s"]);
    assert_eq!(rps["current"], k["throughput"]["requests_per_s"]);
    let ttft = row(&c.json, "ttft_p50");
    assert_eq!(
        ttft["baseline"],
        b["metrics"]["ttft"]["successful"]["percentiles"]["p50"]
    );
    assert_eq!(
        ttft["current"],
        k["metrics"]["ttft"]["successful"]["percentiles"]["p50"]
    );

    // Told to, the gate compares the rest and passes.
    let mut allowed = tolerance.to_vec();
    allowed.push("--allow-missing");
    let c = compare(&base, &cur, &allowed);
    assert_eq!(c.code, 0, "{}{}", c.stdout, c.stderr);
    assert_eq!(c.json["pairs"].as_array().map(Vec::len), Some(1));
    assert!(
        c.stdout.contains("allowed (--allow-missing)"),
        "{}",
        c.stdout
    );
    // The repeated report as the baseline: the same pair, the other side's benchmark named.
    let c = compare(&cur, &base, &tolerance);
    assert_eq!(c.code, 3, "{}{}", c.stdout, c.stderr);
    assert_eq!(
        c.json["unmatched_current"],
        serde_json::json!(["constant@10"])
    );
    assert_eq!(
        row(&c.json, "requests_per_s")["current"],
        b["throughput"]["requests_per_s"]
    );
}

fn warned(c: &Compared, needle: &str) -> bool {
    let in_json = c.json["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .any(|w| w.as_str().is_some_and(|w| w.contains(needle)));
    let on_stderr = c
        .stderr
        .lines()
        .any(|l| l.starts_with("warning: ") && l.contains(needle));
    assert_eq!(
        in_json, on_stderr,
        "JSON and stderr agree on {needle:?}: {}",
        c.stderr
    );
    assert_eq!(in_json, c.markdown.contains(needle), "{}", c.markdown);
    in_json
}

/// Issue 36 finding 2: two reports of the same `--random-seed` sent the same prompts; a
/// server's prefix cache then answers the second from the first, and compare said
/// nothing. Reports of different seeds draw no such warning.
#[test]
fn compare_warns_when_both_reports_share_a_seed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |seed: Option<u64>, name: &str| {
        // A mock each: neither run warms the other's cache, so only the seed can warn.
        let server = server();
        let bench = Bench::on(&server).constant(40).max_requests(10).data(DATA);
        keep(
            match seed {
                Some(s) => bench.seed(s),
                None => bench,
            },
            dir.path(),
            name,
        )
    };
    let (a, b, fresh) = (
        run(Some(11), "a.json"),
        run(Some(11), "b.json"),
        run(None, "c.json"),
    );
    let same = compare(&a, &b, &ONLY_RATE);
    assert_eq!(same.code, 0, "{}", same.stderr);
    assert!(warned(&same, "share the random seed 11"), "{}", same.stderr);
    let other = compare(&a, &fresh, &ONLY_RATE);
    assert!(!warned(&other, "share the random seed"), "{}", other.stderr);
    // Both mocks' caches missed every prompt: no hit-rate warning either.
    assert!(!warned(&other, "prefix-cache hit rate"), "{}", other.stderr);
}

/// The server's prefix-cache hit rate of a report's only benchmark, as scraped.
fn hit_rate(report: &Path) -> f64 {
    json(report)["benchmarks"][0]["server_metrics"]["derived"]["prefix_cache_hit_rate"]
        .as_f64()
        .expect("a prefix-cache hit rate")
}

/// The current run's prompts share a 48-token prefix, the baseline's nothing: the mock's
/// cache answers up to three quarters of the current's prompt tokens and none of the
/// baseline's, and compare says so with both rates.
#[test]
fn compare_warns_when_the_servers_prefix_cache_hit_rate_differs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |data: &str, name: &str| {
        let server = server();
        let path = keep(
            Bench::on(&server)
                .constant(40)
                .max_requests(20)
                .data(data)
                .arg("--server-metrics-interval", "200ms"),
            dir.path(),
            name,
        );
        // The report's rate is the mock's own count.
        let s = server.stats();
        let truth = s.prefix_cache_hits as f64 / s.prefix_cache_queries as f64;
        assert!(
            (hit_rate(&path) - truth).abs() < 1e-12,
            "{} vs {truth}",
            hit_rate(&path)
        );
        path
    };
    let base = run(DATA, "base.json");
    let cur = run(
        "prompt_tokens=64,prefix_tokens=48,prefix_count=1,output_tokens=4",
        "cur.json",
    );
    let (rb, rc) = (hit_rate(&base), hit_rate(&cur));
    // At most three quarters (48 of 64 tokens); fewer where requests overlapped the
    // first one's prefill on a busy machine, still far beyond noise.
    assert!(
        rc - rb > 0.25,
        "the prefix made the difference: {rb} vs {rc}"
    );
    let c = compare(&base, &cur, &ONLY_RATE);
    assert_eq!(c.code, 0, "a warning does not fail the gate: {}", c.stderr);
    assert!(warned(&c, "prefix-cache hit rate differs"), "{}", c.stderr);
    let line = c
        .stderr
        .lines()
        .find(|l| l.contains("prefix-cache hit rate differs"))
        .expect("the warning");
    for rate in [rb, rc] {
        assert!(line.contains(&format!("{:.1}%", rate * 100.0)), "{line}");
    }
    assert!(!warned(&c, "share the random seed"), "{}", c.stderr);
}

/// Break test of issue 36: compare judged a run whose server did not keep up as any
/// other (its latencies cut by the time limit); and issue 43's: a run whose outputs
/// ended short of what it asked (lighter work) compared as the same work. Both are
/// warnings now; runs that kept up and got their lengths draw neither.
#[test]
fn compare_warns_of_a_side_that_did_not_keep_up_or_got_shorter_outputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |config: MockConfig, name: &str| {
        let server = mock(config);
        let bench = Bench::on(&server)
            .constant(20)
            .seed(3)
            .max_seconds(3)
            .data("prompt_tokens=16,output_tokens=20")
            .arg("--server-metrics", "off");
        keep(bench, dir.path(), name)
    };
    let fixed = MockConfig {
        ttft_ms: 20.0,
        itl_ms: 2.0,
        ..MockConfig::instant()
    };
    let good = run(fixed.clone(), "good.json");
    let other = run(fixed.clone(), "other.json");
    // Hung streams hold all four slots of the server within the first second.
    let clogged = run(
        MockConfig {
            stall_rate: 0.5,
            seed: 1,
            max_concurrency: Some(4),
            ..fixed.clone()
        },
        "clogged.json",
    );
    // A server that drops ignore_eos and stops at its own length, 10 ± 3 tokens.
    let short = run(
        MockConfig {
            drop_ignore_eos: true,
            output_tokens: 10,
            output_tokens_std: 3.0,
            ..fixed
        },
        "short.json",
    );
    let tolerance = ONLY_RATE;
    let c = compare(&good, &clogged, &tolerance);
    assert!(warned(&c, "the server did not keep up"), "{}", c.stderr);
    // Whatever the reason (a queue, or arrivals no connection took), not a queue's.
    assert!(
        warned(&c, "its latencies are not the server's at the load asked"),
        "{}",
        c.stderr
    );
    let c = compare(&good, &short, &tolerance);
    assert!(
        warned(&c, "ended short of the output length asked"),
        "{}",
        c.stderr
    );
    assert!(warned(&c, "measure different work"), "{}", c.stderr);
    let c = compare(&good, &other, &tolerance);
    assert!(!warned(&c, "did not keep up"), "{}", c.stderr);
    assert!(!warned(&c, "ended short"), "{}", c.stderr);
    assert!(!warned(&c, "measure different work"), "{}", c.stderr);
}

/// Two runs whose request rates differ within noise (10 requests each) give a token rate
/// within noise too: each request brings its 128 tokens as one block. Counting the tokens
/// as independent events made the token rate's interval √128 times narrower, and a CI
/// gate failed (exit 3) on the same change it called noise for requests.
#[test]
fn a_token_rate_is_as_noisy_as_the_requests_that_bring_its_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |ttft_ms: f64, name: &str| {
        let server = mock(MockConfig {
            ttft_ms,
            ..MockConfig::instant()
        });
        let bench = Bench::on(&server)
            .concurrent(1)
            .max_requests(10)
            .data("prompt_tokens=16,output_tokens=128")
            .arg("--server-metrics", "off");
        let report = keep(bench, dir.path(), name);
        // The truth: every request the mock answered generated 128 tokens.
        let stats = server.stats();
        assert_eq!(
            (stats.completed, stats.tokens_sent),
            (10, 1280),
            "{stats:?}"
        );
        report
    };
    // A server slower per request: about −40% in both rates, within the noise of 10
    // requests on each side (the interval spans about ±70%).
    let (fast, slow) = (run(20.0, "fast.json"), run(35.0, "slow.json"));
    let c = compare(
        &fast,
        &slow,
        &[
            "--max-regression",
            "requests_per_s=-5%,output_tokens_per_s=-5%",
            "--max-regression-only",
        ],
    );
    let (requests, tokens) = (
        row(&c.json, "requests_per_s"),
        row(&c.json, "output_tokens_per_s"),
    );
    assert_eq!(requests["verdict"], "within_noise", "{requests}");
    assert_eq!(tokens["verdict"], "within_noise", "{tokens}");
    // Equal blocks: the same interval, as the same relative change.
    for (i, side) in ["low", "high"].iter().enumerate() {
        let (r, t) = (
            requests["ci"][i].as_f64().expect("requests ci"),
            tokens["ci"][i].as_f64().expect("tokens ci"),
        );
        assert!((r - t).abs() < 0.5, "{side}: requests {r}, tokens {t}");
    }
    assert_eq!(c.code, 0, "{}{}", c.stdout, c.stderr);
}

/// Goodput compared across two `--goodput` thresholds counts two kinds of "good": the
/// comparison says so, naming both; the same thresholds on both sides say nothing.
#[test]
fn compare_warns_when_goodput_counted_against_different_thresholds() {
    let server = server();
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |goodput: &str, name: &str| {
        let bench = Bench::on(&server)
            .constant(20)
            .max_requests(10)
            .data(DATA)
            .goodput(goodput);
        keep(bench, dir.path(), name)
    };
    let loose = run("ttft:500ms", "loose.json");
    let tight = run("ttft:1ms,e2e:2s", "tight.json");
    let same = run("ttft:500ms", "same.json");
    let c = compare(&loose, &tight, &ONLY_RATE);
    assert!(
        warned(&c, "two definitions of a good request"),
        "{}",
        c.stderr
    );
    assert!(
        c.stderr.contains(
            "goodput counted requests within ttft<=500ms in the baseline and within ttft<=1ms,e2e<=2s in the current run"
        ),
        "{}",
        c.stderr
    );
    let c = compare(&loose, &same, &ONLY_RATE);
    assert!(!warned(&c, "goodput counted"), "{}", c.stderr);
}

/// Two runs whose router affinity differs placed their conversations differently: the
/// comparison says so, naming both sides' flags; the same flags on both sides say nothing.
#[test]
fn compare_warns_when_router_affinity_differs() {
    let server = server();
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |flags: &[&str], name: &str| {
        let bench = Bench::on(&server)
            .constant(20)
            .max_requests(6)
            .data("turns=2,prompt_tokens=16,output_tokens=4")
            .args_as_written(flags);
        keep(bench, dir.path(), name)
    };
    let none = run(&[], "none.json");
    let dynamo = run(
        &[
            "--affinity",
            "dynamo",
            "--session-token",
            "cookie:route",
            "--sticky-connections",
        ],
        "dynamo.json",
    );
    let again = run(
        &[
            "--affinity",
            "dynamo",
            "--session-token",
            "cookie:route",
            "--sticky-connections",
        ],
        "again.json",
    );
    let c = compare(&none, &dynamo, &ONLY_RATE);
    assert!(
        warned(
            &c,
            "router affinity differs: none in the baseline, --affinity dynamo --session-token cookie:route --sticky-connections in the current run"
        ),
        "{}",
        c.stderr
    );
    let c = compare(&dynamo, &again, &ONLY_RATE);
    assert!(!warned(&c, "router affinity"), "{}", c.stderr);
}

/// Runs without `flags`, with them, and with them again, against one mock: compare
/// warns `warning` between the first two and says nothing with `quiet` in it between
/// the last two.
fn warns_only_where_the_flags_differ(flags: &[&str], warning: &str, quiet: &str) {
    let server = server();
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |flags: &[&str], name: &str| {
        let bench = Bench::on(&server)
            .constant(20)
            .max_requests(6)
            .args_as_written(flags);
        keep(bench, dir.path(), name)
    };
    let without = run(&[], "without.json");
    let with = run(flags, "with.json");
    let again = run(flags, "again.json");
    let c = compare(&without, &with, &ONLY_RATE);
    assert!(warned(&c, warning), "{}", c.stderr);
    let c = compare(&with, &again, &ONLY_RATE);
    assert!(!warned(&c, quiet), "{}", c.stderr);
}

/// Two runs whose clients gave up on requests, or held prefills back, differently did
/// different work: the comparison says so, naming both sides' flags as given; the same
/// flags on both sides say nothing.
#[test]
fn compare_warns_when_the_clients_behaved_differently() {
    warns_only_where_the_flags_differ(
        &[
            "--cancel",
            "share=10%,after=ttft+200ms",
            "--max-prefill-concurrency",
            "2",
        ],
        "the clients behaved differently: none in the baseline, --cancel share=10%,after=ttft+200ms --max-prefill-concurrency 2 in the current run",
        "behaved differently",
    );
}

/// Two runs whose clients reached the server differently (here HTTP/1.1 against HTTP/2
/// with requests sharing connections) are not the same measurement: the comparison says
/// so, naming both sides' transports; the same transport on both sides says nothing.
#[test]
fn compare_warns_when_the_transport_differs() {
    warns_only_where_the_flags_differ(
        &["--http2", "--http2-streams", "4"],
        "the client reached the server differently: http:// HTTP/1.1 in the baseline, http:// --http2 --http2-streams 4 in the current run",
        "reached the server differently",
    );
}

/// `--json -` makes stdout that JSON alone (the table goes to stderr), so `| jq` reads it;
/// two outputs on stdout are refused.
#[test]
fn compare_json_on_stdout_is_json_alone() {
    let server = server();
    let dir = tempfile::tempdir().expect("tempdir");
    let bench = || Bench::on(&server).constant(20).max_requests(5).data(DATA);
    let (a, b) = (
        keep(bench(), dir.path(), "a.json"),
        keep(bench(), dir.path(), "b.json"),
    );
    let out = llmsurge()
        .args(["benchmark", "compare"])
        .arg(&a)
        .arg(&b)
        .args(ONLY_RATE)
        .args(["--json", "-"])
        .output()
        .expect("compare runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let json: Value = serde_json::from_str(&stdout).expect("stdout is the JSON alone");
    assert_eq!(json["pairs"].as_array().map(Vec::len), Some(1), "{json}");
    assert!(stderr.contains("tolerances: requests_per_s"), "{stderr}");
    let out = llmsurge()
        .args(["benchmark", "compare"])
        .arg(&a)
        .arg(&b)
        .args(["--json", "-", "--markdown", "-"])
        .output()
        .expect("compare runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--json -, --markdown -: only one output can be written to stdout"),
        "{stderr}"
    );
}

/// What a report holds is shown one line per line compare writes: a server's version
/// string (or a hand-edited report) with a line break in it cannot forge a line of its
/// own on stderr, such as a `warning:` or a verdict.
#[test]
fn text_from_a_report_cannot_forge_a_line_of_compare() {
    let server = server();
    let dir = tempfile::tempdir().expect("tempdir");
    let base = keep(
        Bench::on(&server).constant(20).max_requests(5).data(DATA),
        dir.path(),
        "base.json",
    );
    let mut forged: Value =
        serde_json::from_str(&std::fs::read_to_string(&base).expect("the report")).expect("JSON");
    forged["server_fingerprint"]["before"]["engine_version"]["value"] =
        "9.9\nwarning: forged\ngate passed".into();
    let cur = dir.path().join("forged.json");
    std::fs::write(&cur, forged.to_string()).expect("write");
    let c = compare(&base, &cur, &ONLY_RATE);
    assert_eq!(c.code, 3, "{}", c.stderr);
    assert!(
        c.stderr.contains("9.9\\nwarning: forged\\ngate passed"),
        "{}",
        c.stderr
    );
    for forged_line in ["warning: forged", "gate passed"] {
        assert!(
            !c.stderr.lines().any(|l| l.starts_with(forged_line)),
            "{forged_line}: {}",
            c.stderr
        );
    }
}
