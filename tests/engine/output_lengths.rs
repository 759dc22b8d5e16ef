//! Output lengths as asked: a mock that ignores `ignore_eos` and `min_tokens`
//! (`--drop-ignore-eos`, standing in for a gateway that drops them) stops where its model
//! would, and llmsurge says so before the load (the probe) and after it (stderr, every
//! report format), with the asked/received figures and finish reasons compared with the
//! mock's truth joined by `x-request-id`; `--max-short-output-share` makes it an invalid
//! run (exit 4). Against the mock honouring the lengths (`ignore_eos`, or `min_tokens`
//! alone) none of it appears.

use crate::scenario::Bench;
use crate::support::{Finished, Joined, join_truth, mock, recorded};
use llmsurge::mock::MockConfig;
use llmsurge_coordinator::BenchmarkResult;

/// The output length every request asks for.
const ASKED: u64 = 24;
/// Requests per run.
const REQUESTS: u64 = 24;
/// The probe's warning, printed before the load.
const PROBE_WARNING: &str = "warning: output lengths fall short:";

/// A mock whose model ends its answers after 8 ± 6 tokens (so nearly every request that
/// asked for 24 is short unless the length is forced), writing its truth to `truth`.
fn natural_lengths(truth: &std::path::Path, drop_ignore_eos: bool) -> MockConfig {
    MockConfig {
        output_tokens: 8,
        output_tokens_std: 6.0,
        drop_ignore_eos,
        truth: Some(truth.to_path_buf()),
        ..MockConfig::instant()
    }
}

/// Runs `options` on a mock configured by `config` (whose truth file is `truth`); the
/// finished run and its requests joined with the truth.
fn run(
    config: MockConfig,
    truth: &std::path::Path,
    options: impl FnOnce(Bench) -> Bench,
) -> (Finished, Vec<Joined>) {
    let data = format!("prompt_tokens=32,output_tokens={ASKED}");
    run_on(config, truth, &data, options)
}

/// [`run`] with data `data`.
fn run_on(
    config: MockConfig,
    truth: &std::path::Path,
    data: &str,
    options: impl FnOnce(Bench) -> Bench,
) -> (Finished, Vec<Joined>) {
    let server = mock(config);
    let finished = options(
        Bench::on(&server)
            .constant(40)
            .max_requests(REQUESTS)
            .data(data)
            .request_log("requests.jsonl")
            .outputs("json,csv,md,html,console"),
    )
    .run();
    // Stopping flushes the truth file, after every response ended.
    server.stop();
    let joined = join_truth(&finished.dir.path().join("requests.jsonl"), truth);
    (finished, joined)
}

/// What the truth says of the measured completed requests: (received tokens summed,
/// short, finish `stop`, finish `length`).
fn truth_figures(joined: &[Joined]) -> (u64, u64, u64, u64) {
    let completed: Vec<&Joined> = joined
        .iter()
        .filter(|j| j.log["status"] == "completed" && j.log["phase"] == "measured")
        .collect();
    assert_eq!(completed.len() as u64, REQUESTS, "every request completed");
    let tokens = |j: &Joined| {
        j.truth["content_tokens"].as_u64().expect("content_tokens")
            + j.truth["reasoning_tokens"]
                .as_u64()
                .expect("reasoning_tokens")
    };
    let received = completed.iter().map(|j| tokens(j)).sum();
    let short = completed.iter().filter(|j| tokens(j) < ASKED).count() as u64;
    let finish = |r: &str| {
        completed
            .iter()
            .filter(|j| j.truth["finish_reason"] == r)
            .count() as u64
    };
    (received, short, finish("stop"), finish("length"))
}

/// Every request's log line says what the mock did: the tokens it sent, its finish
/// reason, and the length asked.
fn assert_log_matches_truth(joined: &[Joined]) {
    for j in joined {
        let sent = j.truth["content_tokens"].as_u64().expect("content_tokens")
            + j.truth["reasoning_tokens"]
                .as_u64()
                .expect("reasoning_tokens");
        assert_eq!(j.log["output_tokens"].as_u64(), Some(sent), "{:?}", j);
        assert_eq!(j.log["finish_reason"], j.truth["finish_reason"], "{:?}", j);
        assert_eq!(
            j.log["output_tokens_asked"].as_u64(),
            Some(ASKED),
            "{:?}",
            j
        );
    }
}

/// Neither the probe's warning nor the benchmark's is on stderr.
fn assert_no_length_warning(finished: &Finished) {
    for line in ["output lengths fall short", "ended short"] {
        assert!(!finished.stderr.contains(line), "{}", finished.stderr);
    }
}

/// The benchmark's `output_lengths` against the truth.
fn assert_figures_match_truth(b: &BenchmarkResult, joined: &[Joined]) {
    let (received, short, stop, length) = truth_figures(joined);
    let o = b.output_lengths.as_ref().expect("output_lengths");
    assert_eq!(o.asked_requests, REQUESTS);
    assert_eq!(o.asked_tokens, ASKED * REQUESTS);
    assert_eq!(o.received_tokens, received);
    assert_eq!(o.asked_mean, ASKED as f64);
    assert!((o.received_mean - received as f64 / REQUESTS as f64).abs() < 1e-9);
    assert_eq!(o.short, short);
    assert_eq!(
        (o.finish_reasons.stop, o.finish_reasons.length),
        (stop, length)
    );
    assert_eq!(o.short_stopped, short.min(stop));
}

#[test]
fn a_server_that_drops_ignore_eos_is_named_before_and_after_the_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let (finished, joined) = run(natural_lengths(&truth, true), &truth, |b| b);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let (received, short, stop, _) = truth_figures(&joined);
    assert!(short > 0 && stop > 0, "the mock ended some requests early");
    assert_log_matches_truth(&joined);
    let report = finished.report();
    let b = &report.benchmarks[0];
    assert_figures_match_truth(b, &joined);

    // Before the load: the probe's warning comes before the benchmark starts; after it,
    // the benchmark's own, with its figures.
    let err = &finished.stderr;
    let probe = err.find(PROBE_WARNING).unwrap_or_else(|| panic!("{err}"));
    let started = err.find("starting").unwrap_or_else(|| panic!("{err}"));
    assert!(probe < started, "{err}");
    let after = format!(
        "warning: {}: {short} of {REQUESTS} requests ended short of the output length asked with finish reason `stop`",
        b.strategy
    );
    let at = err
        .find(&after)
        .unwrap_or_else(|| panic!("{after} in:\n{err}"));
    assert!(at > started, "{err}");
    assert!(err.contains("try --min-tokens true"), "{err}");
    assert!(!err.contains("invalid run"), "{err}");

    // Every output format carries the figures (the CSV's are the report's) and the
    // warning.
    let csv = finished.csv_first_row();
    assert_eq!(csv.cell("output_lengths.short"), short.to_string());
    assert_eq!(csv.cell("output_lengths.finish_stop"), stop.to_string());
    let received_mean: f64 = csv
        .cell("output_lengths.received_mean")
        .parse()
        .expect("a number");
    assert!((received_mean - received as f64 / REQUESTS as f64).abs() < 1e-3);
    let md = std::fs::read_to_string(finished.dir.path().join("benchmarks.md")).expect("md");
    let row = format!("| {} | 24.0 |", b.strategy);
    assert!(
        md.contains("### Output lengths") && md.contains(&row),
        "{md}"
    );
    assert!(md.contains(&format!("{short} of {REQUESTS} (")), "{md}");
    assert!(md.contains("**Warning:**"), "{md}");
    let html = std::fs::read_to_string(finished.dir.path().join("benchmarks.html")).expect("html");
    assert!(html.contains("id=\"output-lengths\""));
    assert!(html.contains("ended short of the output length asked"));
    assert!(
        finished.stdout.contains("Output lengths"),
        "{}",
        finished.stdout
    );
    assert!(
        finished
            .stdout
            .contains(&format!("{short} of {REQUESTS} (")),
        "{}",
        finished.stdout
    );

    // The server's own count agrees with the truth, and the cross-check explains the
    // shortfall: the server generated less than asked.
    let sm = b
        .server_metrics
        .as_ref()
        .expect("the mock's /metrics was scraped");
    let check = sm
        .cross_checks
        .iter()
        .find(|c| c.name == "generation_tokens")
        .expect("a generation_tokens cross-check");
    assert_eq!(check.server, received as f64);
    let why = check.explanation.as_deref().expect("an explanation");
    assert!(
        why.contains("the server itself generated less than asked"),
        "{why}"
    );
}

#[test]
fn max_short_output_share_makes_a_short_run_invalid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let (finished, joined) = run(natural_lengths(&truth, true), &truth, |b| {
        b.arg("--max-short-output-share", "10%")
    });
    let (_, short, _, _) = truth_figures(&joined);
    assert!(short * 10 > REQUESTS, "more than 10% short by the truth");
    assert_eq!(finished.code(), 4, "{}", finished.stderr);
    let line = finished
        .stderr
        .lines()
        .find(|l| l.starts_with("invalid run:"))
        .unwrap_or_else(|| panic!("{}", finished.stderr));
    assert!(
        line.contains(&format!("{short} of {REQUESTS} requests")),
        "{line}"
    );
    assert!(line.contains("--max-short-output-share 10.0%"), "{line}");
    assert_figures_match_truth(&finished.report().benchmarks[0], &joined);

    // The same outputs under a limit they do not pass stay a valid run.
    let truth = dir.path().join("truth-all.jsonl");
    let (finished, _) = run(natural_lengths(&truth, true), &truth, |b| {
        b.arg("--max-short-output-share", "100%")
    });
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
}

#[test]
fn lengths_the_server_honours_raise_no_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    // ignore_eos (the default), and min_tokens alone: the mock's model would end early,
    // both fields make it go on to the length asked.
    for (i, flags) in [
        &[][..],
        &["--ignore-eos", "false", "--min-tokens", "true"][..],
    ]
    .iter()
    .enumerate()
    {
        let truth = dir.path().join(format!("truth-{i}.jsonl"));
        let (finished, joined) = run(natural_lengths(&truth, false), &truth, |b| {
            b.args_as_written(flags)
                .arg("--max-short-output-share", "0")
        });
        assert_eq!(finished.code(), 0, "{flags:?}: {}", finished.stderr);
        let (_, short, stop, length) = truth_figures(&joined);
        assert_eq!((short, stop, length), (0, 0, REQUESTS), "{flags:?}");
        assert_log_matches_truth(&joined);
        let b = &finished.report().benchmarks[0];
        assert_figures_match_truth(b, &joined);
        assert_no_length_warning(&finished);
        let md = std::fs::read_to_string(finished.dir.path().join("benchmarks.md")).expect("md");
        assert!(!md.contains("**Warning:**"), "{md}");
        let check = b
            .server_metrics
            .as_ref()
            .and_then(|sm| {
                sm.cross_checks
                    .iter()
                    .find(|c| c.name == "generation_tokens")
            })
            .expect("a generation_tokens cross-check");
        assert!(check.explanation.is_none(), "{check:?}");
    }
}

#[test]
fn lengths_left_to_the_server_are_counted_without_a_warning() {
    // `--ignore-eos false`: short outputs are what was asked for; the figures still say
    // how short, and only the gate judges them.
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let (finished, joined) = run(natural_lengths(&truth, false), &truth, |b| {
        b.arg("--ignore-eos", "false")
    });
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let (_, short, _, _) = truth_figures(&joined);
    assert!(short > 0, "the model ended some requests early");
    assert_figures_match_truth(&finished.report().benchmarks[0], &joined);
    assert_no_length_warning(&finished);
}

/// The measured completed requests of a join.
fn completed(joined: &[Joined]) -> Vec<&Joined> {
    joined
        .iter()
        .filter(|j| j.log["status"] == "completed" && j.log["phase"] == "measured")
        .collect()
}

#[test]
fn a_tool_call_that_ends_before_max_tokens_is_a_success_of_the_mock() {
    // The mock crashed on a tool call ending before the cap (its success counter had no
    // place for it), and llmsurge saw broken streams.
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let config = MockConfig {
        output_tokens: 5,
        output_tokens_std: 0.0,
        tool_call_rate: 1.0,
        truth: Some(truth.clone()),
        ..MockConfig::instant()
    };
    let server = mock(config);
    let finished = Bench::on(&server)
        .constant(40)
        .max_requests(REQUESTS)
        .data(&format!("prompt_tokens=32,output_tokens={ASKED},tools=1"))
        .arg("--ignore-eos", "false")
        .arg("--max-short-output-share", "0")
        .request_log("requests.jsonl")
        .run();
    let stats = server.stats();
    server.stop();
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let joined = join_truth(&finished.dir.path().join("requests.jsonl"), &truth);
    let done = completed(&joined);
    assert_eq!(done.len() as u64, REQUESTS, "every request completed");
    let calls = done
        .iter()
        .filter(|j| j.truth["finish_reason"] == "tool_calls")
        .count() as u64;
    assert_eq!(calls, REQUESTS, "the mock answered each with a call");
    // vLLM's engine counts a tool call as `stop`.
    assert_eq!(stats.request_success.stop, REQUESTS, "{stats:?}");
    assert_eq!(stats.request_success.length, 0, "{stats:?}");
    let o = finished.report().benchmarks[0]
        .output_lengths
        .clone()
        .expect("output_lengths");
    assert_eq!(o.finish_reasons.tool_calls, calls);
    assert_eq!(o.short, 0, "a tool call ends there by design");
}

#[test]
fn outputs_counted_in_chunks_are_never_called_short() {
    // Without usage in the stream the client counts chunks; four tokens a chunk made
    // every `length` answer look short (exit 4 under --max-short-output-share 0).
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let config = MockConfig {
        tokens_per_chunk: 4,
        ..natural_lengths(&truth, false)
    };
    let (finished, joined) = run(config, &truth, |b| {
        b.arg(
            "--backend-kwargs",
            r#"{"extra_body":{"stream_options":{"include_usage":false}}}"#,
        )
        .arg("--max-short-output-share", "0")
    });
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let (_, short, _, length) = truth_figures(&joined);
    assert_eq!((short, length), (0, REQUESTS), "the mock sent every length");
    let b = &finished.report().benchmarks[0];
    let o = b.output_lengths.as_ref().expect("output_lengths");
    assert_eq!(
        o.unknown_lengths, REQUESTS,
        "no usage: lengths unknown in tokens"
    );
    assert_eq!((o.asked_requests, o.short, o.short_stopped), (0, 0, 0));
    assert_eq!(o.finish_reasons.length, length);
    assert_no_length_warning(&finished);
    let csv = finished.csv_first_row();
    assert_eq!(
        csv.cell("output_lengths.unknown_lengths"),
        REQUESTS.to_string()
    );
    let md = std::fs::read_to_string(finished.dir.path().join("benchmarks.md")).expect("md");
    assert!(
        md.contains(&format!("{REQUESTS} unknown (no usage)")),
        "{md}"
    );
    let check = b
        .server_metrics
        .as_ref()
        .and_then(|sm| {
            sm.cross_checks
                .iter()
                .find(|c| c.name == "generation_tokens")
        })
        .expect("a generation_tokens cross-check");
    assert!(check.explanation.is_none(), "{check:?}");
}

/// Writes `n` prompt-only rows (no output length) to `dir/prompts.jsonl`.
fn prompt_only(dir: &std::path::Path, n: u64) -> String {
    let path = dir.join("prompts.jsonl");
    let rows: String = (0..n)
        .map(|i| format!("{{\"prompt\": \"Tell me about topic {i} in some detail\"}}\n"))
        .collect();
    std::fs::write(&path, rows).expect("write prompts");
    path.display().to_string()
}

#[test]
fn data_that_names_no_output_length_asks_for_none() {
    // ignore_eos without a max_tokens makes vLLM generate to its context limit; the
    // Messages API's default max_tokens (sent because the API requires one) is no length
    // asked either.
    for (format, flags) in [
        ("chat", &[][..]),
        ("anthropic", &["--ignore-eos", "false"][..]),
        ("anthropic", &[][..]),
    ] {
        let what = format!("{format} {flags:?}");
        let dir = tempfile::tempdir().expect("tempdir");
        let truth = dir.path().join("truth.jsonl");
        let record = dir.path().join("sent.jsonl");
        let data = prompt_only(dir.path(), REQUESTS);
        let config = MockConfig {
            record: Some(record.clone()),
            ..natural_lengths(&truth, false)
        };
        let (finished, joined) = run_on(config, &truth, &data, |b| {
            b.format(format)
                .args_as_written(flags)
                .arg("--max-short-output-share", "5%")
        });
        assert_eq!(finished.code(), 0, "{what}: {}", finished.stderr);
        assert_eq!(completed(&joined).len() as u64, REQUESTS, "{what}");
        let sent = recorded(&record);
        let generations: Vec<&serde_json::Value> = sent
            .iter()
            .map(|r| &r["body"])
            .filter(|b| b.get("messages").is_some())
            .collect();
        assert!(generations.len() as u64 >= REQUESTS, "{what}: {sent:?}");
        for body in generations {
            assert!(body.get("ignore_eos").is_none(), "{what}: {body}");
            assert!(body.get("min_tokens").is_none(), "{what}: {body}");
        }
        let o = finished.report().benchmarks[0]
            .output_lengths
            .clone()
            .expect("output_lengths");
        assert_eq!(o.completed, REQUESTS, "{what}");
        assert_eq!((o.asked_requests, o.short), (0, 0), "{what}");
        assert!(!o.exact, "{what}: nothing asked, nothing exact");
        assert_no_length_warning(&finished);
        for j in &joined {
            assert!(
                j.log["output_tokens_asked"].is_null(),
                "{what}: {:?}",
                j.log
            );
        }
    }
}

#[test]
fn exact_follows_the_fields_the_bodies_carried() {
    let dir = tempfile::tempdir().expect("tempdir");
    // extra_body's ignore_eos false overrides --ignore-eos: nothing exact was asked, so
    // short outputs raise no warning.
    let truth = dir.path().join("truth-extra.jsonl");
    let record = dir.path().join("sent-extra.jsonl");
    let config = MockConfig {
        record: Some(record.clone()),
        ..natural_lengths(&truth, false)
    };
    let (finished, joined) = run(config, &truth, |b| {
        b.arg("--backend-kwargs", r#"{"extra_body":{"ignore_eos":false}}"#)
    });
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let (_, short, _, _) = truth_figures(&joined);
    assert!(short > 0, "the model ended some requests early");
    for r in recorded(&record)
        .iter()
        .filter(|r| r["body"].get("messages").is_some())
    {
        assert_eq!(r["body"]["ignore_eos"], false, "{r}");
    }
    let o = finished.report().benchmarks[0]
        .output_lengths
        .clone()
        .expect("output_lengths");
    assert!(!o.exact && !o.ignore_eos, "{o:?}");
    assert_eq!(o.short, short);
    assert_no_length_warning(&finished);

    // min_tokens alone, dropped by the server: the warning names min_tokens, not the
    // ignore_eos that was never sent.
    let truth = dir.path().join("truth-min.jsonl");
    let (finished, joined) = run(natural_lengths(&truth, true), &truth, |b| {
        b.args_as_written(&["--ignore-eos", "false", "--min-tokens", "true"])
    });
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let (_, short, stop, _) = truth_figures(&joined);
    assert!(short > 0 && stop > 0, "the mock ended some requests early");
    let o = finished.report().benchmarks[0]
        .output_lengths
        .clone()
        .expect("output_lengths");
    assert!(o.exact && o.min_tokens && !o.ignore_eos, "{o:?}");
    let err = &finished.stderr;
    assert!(err.contains("ignores min_tokens, so"), "{err}");
    assert!(!err.contains("ignore_eos and min_tokens"), "{err}");
    assert!(!err.contains("both were dropped"), "{err}");
}

#[test]
fn a_short_output_limit_on_embeddings_is_a_usage_error() {
    let server = mock(MockConfig::instant());
    let finished = Bench::on(&server)
        .format("embeddings")
        .constant(10)
        .max_requests(2)
        .data("prompt_tokens=8")
        .arg("--max-short-output-share", "10%")
        .run();
    assert_eq!(finished.code(), 2, "{}", finished.stderr);
    let lines: Vec<&str> = finished.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", finished.stderr);
    assert!(
        lines[0].contains("--max-short-output-share"),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains("embeddings"), "{}", lines[0]);
    assert_eq!(server.stats().requests.embeddings, 0, "no load");
}
