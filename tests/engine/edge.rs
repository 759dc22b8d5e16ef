//! The binary's edge: absurd values, a strict server's refused fields, errors on the
//! terminal whatever `--outputs` says, prompt lengths the server counts differently,
//! and a report that cannot be written.

use crate::scenario::Bench;
use crate::support::{llmsurge, mock};
use llmsurge::mock::MockConfig;
use std::process::Stdio;

/// Runs the binary with `args` and `env`; returns (exit code, stderr).
fn run_binary(args: &[&str], env: &[(&str, &str)], dir: &std::path::Path) -> (i32, String) {
    let out = llmsurge()
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("llmsurge runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Arguments, environment, and what the one error line must name.
type AbsurdCase = (
    Vec<&'static str>,
    Vec<(&'static str, &'static str)>,
    &'static str,
);

#[test]
fn absurd_values_are_usage_errors_naming_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("absurd.json");
    std::fs::write(&scenario, r#"{"request_timeout": "1e19s"}"#).expect("scenario");
    // The table holds &'static str; one small leak in a test process is harmless.
    let scenario: &'static str =
        Box::leak(scenario.to_string_lossy().into_owned().into_boxed_str());
    let run_args = |extra: &[&'static str]| {
        let mut v = vec![
            "benchmark",
            "run",
            "--max-requests",
            "1",
            "--outputs",
            "json",
        ];
        v.extend_from_slice(extra);
        v
    };
    let cases: Vec<AbsurdCase> = vec![
        (
            run_args(&["--max-seconds", "1e20"]),
            vec![],
            "--max-seconds",
        ),
        (
            run_args(&["--max-seconds", "100000000000000000000"]),
            vec![],
            "--max-seconds",
        ),
        (run_args(&["--goodput", "ttft:1e30s"]), vec![], "--goodput"),
        (run_args(&["--goodput", "e2e:1e300ms"]), vec![], "--goodput"),
        (
            run_args(&["--request-timeout", "1e19s"]),
            vec![],
            "--request-timeout",
        ),
        (
            run_args(&["--request-timeout", "10000000000000000000"]),
            vec![],
            "--request-timeout",
        ),
        (
            run_args(&["--ttft-timeout", "1e300"]),
            vec![],
            "--ttft-timeout",
        ),
        (
            run_args(&["--idle-timeout", "1e300ms"]),
            vec![],
            "--idle-timeout",
        ),
        (
            run_args(&["--connect-timeout", "1e19"]),
            vec![],
            "--connect-timeout",
        ),
        (
            run_args(&["--drain-timeout", "NaN"]),
            vec![],
            "--drain-timeout",
        ),
        (
            run_args(&["--max-dispatch-lag", "inf"]),
            vec![],
            "--max-dispatch-lag",
        ),
        (
            run_args(&["--profile", "concurrent", "--rate", "2", "--rampup", "1e19"]),
            vec![],
            "--rampup",
        ),
        (run_args(&["--warmup", "1e19s"]), vec![], "--warmup"),
        (
            run_args(&["--profile", "constant", "--rate", "1e-300"]),
            vec![],
            "--rate",
        ),
        (
            run_args(&["--profile", "constant", "--rate", "1e300"]),
            vec![],
            "--rate",
        ),
        (
            run_args(&["--profile", "poisson", "--rate", "NaN"]),
            vec![],
            "--rate",
        ),
        (
            run_args(&[
                "--profile",
                "poisson",
                "--rate",
                "1",
                "--burstiness",
                "1e300",
            ]),
            vec![],
            "--burstiness",
        ),
        (
            run_args(&["--profile", "poisson", "--rate", "1", "--burstiness", "NaN"]),
            vec![],
            "--burstiness",
        ),
        (
            run_args(&["--max-error-rate", "NaN"]),
            vec![],
            "--max-error-rate",
        ),
        (
            run_args(&["--data", "prompt_tokens=99999999999,output_tokens=1"]),
            vec![],
            "--data",
        ),
        (
            run_args(&[]),
            vec![("LLMSURGE_MAX_SECONDS", "1e20")],
            "--max-seconds",
        ),
        (
            run_args(&["--scenario", scenario]),
            vec![],
            "--request-timeout",
        ),
        (
            run_args(&[]),
            vec![("LLMSURGE_MOCK_TTFT_MS", "1e300")],
            "--ttft-ms",
        ),
        (
            vec!["mock-server", "--ttft-ms", "1e300"],
            vec![],
            "--ttft-ms",
        ),
        (
            vec!["mock-server", "--itl-ms-per-active", "1e300"],
            vec![],
            "--itl-ms-per-active",
        ),
        (
            vec!["mock-server", "--request-latency", "1e300"],
            vec![],
            "--request-latency",
        ),
        (
            vec!["mock-server", "--reasoning-tokens", "4294967295"],
            vec![],
            "--reasoning-tokens",
        ),
        (
            vec!["mock-server", "--prompt-tokens-scale", "1e300"],
            vec![],
            "--prompt-tokens-scale",
        ),
        (
            vec![
                "benchmark",
                "compare",
                "a.json",
                "b.json",
                "--confidence",
                "1e300",
            ],
            vec![],
            "--confidence",
        ),
    ];
    for (args, env, flag) in cases {
        let (code, stderr) = run_binary(&args, &env, dir.path());
        let what = format!("{args:?} {env:?}");
        assert!(!stderr.contains("panicked"), "{what} panicked:\n{stderr}");
        assert_eq!(code, 2, "{what}: exit code; stderr:\n{stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: one line expected:\n{stderr}");
        assert!(lines[0].starts_with("error: "), "{what}: {}", lines[0]);
        assert!(
            lines[0].contains(flag),
            "{what}: {:?} should name {flag}",
            lines[0]
        );
    }
}

/// Issue 38: clap's hints stay on the one line, and a flag from vLLM's or GuideLLM's
/// benchmark names llmsurge's.
#[test]
fn usage_errors_keep_clap_s_hints_and_name_a_peer_s_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: [(&[&str], &str); 8] = [
        (
            &["benchmark", "run", "--max-second", "3"],
            "did you mean --max-seconds?",
        ),
        (
            &["benchmark", "run", "--profile", "foo"],
            "(possible values: synchronous, concurrent, throughput, constant, poisson,",
        ),
        (
            // vLLM's `request_rate` is an alias of rate since 262c919: a value neither is.
            &["sweep", "serve-sla", "--sla-variable", "tokens"],
            "(possible values: rate, concurrency)",
        ),
        (
            &["benchmark", "run", "--header", "Authorization=x"],
            "--backend-kwargs '{\"headers\"",
        ),
        (
            &["benchmark", "run", "--num-prompts", "100"],
            "llmsurge's is --max-requests",
        ),
        (
            &["benchmark", "run", "--request-rate", "4"],
            "llmsurge's is --rate",
        ),
        (
            &["benchmark", "run", "--num-runs", "3"],
            "llmsurge's is --repeat",
        ),
        (
            &["benchmark", "run", "-o", "out"],
            "llmsurge's is --output-dir",
        ),
    ];
    for (args, hint) in cases {
        let (code, stderr) = run_binary(args, &[], dir.path());
        assert_eq!(code, 2, "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line expected:\n{stderr}");
        assert!(
            lines[0].contains(hint),
            "{args:?}: {:?} lacks {hint:?}",
            lines[0]
        );
    }
}

#[test]
fn errors_reach_stderr_whatever_outputs_says() {
    let server = mock(MockConfig {
        error_rate: 1.0,
        ..MockConfig::instant()
    });
    let url = server.base_url();
    for quiet in [&[][..], &["--disable-console-outputs"][..]] {
        let run = Bench::target(&url)
            .max_requests(10)
            .outputs("json")
            .args_as_written(quiet)
            .run();
        assert_eq!(run.code(), 4, "no request completed: {}", run.stderr);
        let lines: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.starts_with("error: ") && l.contains("requests failed with http_"))
            .collect();
        assert!(
            !lines.is_empty(),
            "{quiet:?}: no error line:\n{}",
            run.stderr
        );
        let failed: u64 = lines
            .iter()
            .map(|l| {
                assert!(
                    l.contains("(e.g. ") && l.contains("injected by llmsurge mock-server"),
                    "a sample message: {l}"
                );
                let n = l.split(": ").nth(2).and_then(|t| t.split(' ').next());
                n.and_then(|n| n.parse::<u64>().ok()).expect("a count")
            })
            .sum();
        assert_eq!(
            failed, 10,
            "every failure is counted on stderr:\n{}",
            run.stderr
        );
        assert!(run.stdout.is_empty() || quiet.is_empty(), "{}", run.stdout);
    }
}

#[test]
fn a_report_that_cannot_be_written_fails_the_run_and_keeps_the_previous_one() {
    let server = mock(MockConfig::instant());
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("benchmarks.json");
    let previous = b"{\"previous\": \"report\"}\n";
    std::fs::write(&report, previous).expect("previous report");
    // A full disk, for root too: no file of the run may grow past 16 KiB, so the JSON
    // report (tens of KiB) fails mid-write where the Markdown summary (about 1 KiB) fits.
    // A write past the limit fails with EFBIG once SIGXFSZ is ignored.
    let mut cmd = llmsurge();
    cmd.args(["benchmark", "run", "--target", &server.base_url()])
        .args(["--max-requests", "2", "--outputs", "json,md"])
        .args(["--max-dispatch-lag", "10s", "--output-dir"])
        .arg(dir.path())
        .stdin(Stdio::null());
    // SAFETY: setrlimit and signal are async-signal-safe and touch only the child.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            use nix::sys::resource::{Resource, setrlimit};
            use nix::sys::signal::{SigHandler, Signal, signal};
            signal(Signal::SIGXFSZ, SigHandler::SigIgn).map_err(std::io::Error::from)?;
            setrlimit(Resource::RLIMIT_FSIZE, 16 * 1024, 16 * 1024).map_err(std::io::Error::from)
        });
    }
    let output = cmd.output().expect("llmsurge runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("cannot write the report"))
        .collect();
    assert_eq!(errors.len(), 1, "one line for the file:\n{stderr}");
    assert!(errors[0].starts_with("error: "), "{}", errors[0]);
    assert!(
        errors[0].contains(&report.display().to_string()),
        "names the file: {}",
        errors[0]
    );
    assert!(
        !stderr.contains(&format!("report written to {}", report.display())),
        "a failed file is not reported written:\n{stderr}"
    );
    // The other format was written; the previous report is byte-identical, and no
    // temporary file is left beside it.
    assert!(stderr.contains("benchmarks.md"), "{stderr}");
    assert_eq!(std::fs::read(&report).expect("previous report"), previous);
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn an_output_directory_that_cannot_take_files_is_refused_before_any_load() {
    let server = mock(MockConfig::instant());
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("taken");
    std::fs::write(&file, "a file, not a directory").expect("file");
    let out = llmsurge()
        .args(["benchmark", "run", "--target", &server.base_url()])
        .args(["--max-requests", "5", "--output-dir"])
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .expect("llmsurge runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--output-dir") && stderr.contains("not a directory"),
        "{stderr}"
    );
    // The truth: the server saw no request at all, not even the probe.
    assert_eq!(server.stats().requests_total, 0);
}

fn strict_mock() -> llmsurge::mock::MockServer {
    mock(MockConfig {
        reject_unknown_fields: true,
        ..MockConfig::instant()
    })
}

#[test]
fn a_default_field_a_strict_server_refuses_is_dropped_with_a_warning() {
    let server = strict_mock();
    let run = Bench::on(&server).max_requests(5).outputs("json").run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let warning = run
        .stderr
        .lines()
        .find(|l| l.starts_with("warning: ") && l.contains("refuses the field ignore_eos"))
        .unwrap_or_else(|| panic!("a warning naming ignore_eos:\n{}", run.stderr));
    assert!(warning.contains("422"), "{warning}");
    let report = crate::support::ok_report(&run);
    assert_eq!(report.benchmarks[0].requests.completed, 5);
    assert!(
        report
            .target
            .warnings
            .iter()
            .any(|w| w.contains("ignore_eos")),
        "{:?}",
        report.target.warnings
    );
    // The probe is no load: the server saw exactly the benchmark's requests.
    assert_eq!(server.stats().requests.chat_completions, 5);
}

#[test]
fn a_field_the_user_asked_for_that_a_strict_server_refuses_stops_before_load() {
    let server = strict_mock();
    let url = server.base_url();
    let cases: [(&[&str], &str); 2] = [
        (&["--ignore-eos", "true"], "--ignore-eos false"),
        (
            &["--backend-kwargs", r#"{"extra_body": {"top_k": 5}}"#],
            "--backend-kwargs",
        ),
    ];
    for (extra, fix) in cases {
        let run = Bench::target(&url)
            .max_requests(5)
            .args_as_written(extra)
            .run();
        assert_eq!(run.code(), 2, "{extra:?}: {}", run.stderr);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{extra:?}: one line:\n{}", run.stderr);
        assert!(lines[0].starts_with("error: "), "{}", lines[0]);
        assert!(
            lines[0].contains("refuses the request field"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains(fix),
            "{:?} should name the fix {fix}",
            lines[0]
        );
        assert!(!run.report_path().exists(), "nothing ran");
    }
    assert_eq!(server.stats().requests.chat_completions, 0, "no load sent");
}

#[test]
fn the_env_variable_makes_the_in_process_mock_strict() {
    let run = Bench::in_process_mock()
        .max_requests(2)
        .outputs("json")
        .arg("--ignore-eos", true)
        .run_with_env(&[("LLMSURGE_MOCK_REJECT_UNKNOWN_FIELDS", "true")]);
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert!(run.stderr.contains("ignore_eos"), "{}", run.stderr);
}

#[test]
fn prompt_lengths_the_server_counts_differently_are_reported() {
    for (scale, warned) in [(1.7, true), (1.0, false)] {
        let server = mock(MockConfig {
            prompt_tokens_scale: scale,
            ..MockConfig::instant()
        });
        let run = Bench::on(&server)
            .max_requests(3)
            .outputs("json")
            .data("prompt_tokens=64,output_tokens=4")
            .run();
        let report = crate::support::ok_report(&run);
        let line = run
            .stderr
            .lines()
            .find(|l| l.starts_with("warning: prompt lengths differ"));
        assert_eq!(line.is_some(), warned, "scale {scale}:\n{}", run.stderr);
        let noted = report
            .target
            .warnings
            .iter()
            .any(|w| w.starts_with("prompt lengths differ"));
        assert_eq!(noted, warned, "scale {scale}: {:?}", report.target.warnings);
        if let Some(line) = line {
            assert!(line.contains("--processor"), "names the fix: {line}");
            assert!(line.contains("counted 64"), "the client's count: {line}");
            // The mock counts its own tokens times the scale: about 1.7 × 64 for a
            // prompt the client made 64 long (each run draws fresh prompts, so the
            // mock's own count varies by a token or two).
            let counted: f64 = line
                .split("/tokenize counts ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("the server's count: {line}"));
            assert!(
                (counted - scale * 64.0).abs() <= 0.05 * scale * 64.0,
                "the server's count {counted}, the mock's scale {scale}: {line}"
            );
        }
    }
}

#[test]
fn a_request_log_cut_by_a_full_disk_keeps_whole_lines_and_says_how_many() {
    use nix::sys::resource::{Resource, setrlimit};
    use nix::sys::signal::{SigHandler, Signal, signal};
    use std::os::unix::process::CommandExt;
    const REQUESTS: u64 = 300;
    // The file-size limit stops a write part-way, then fails it (EFBIG), as a disk that
    // fills up does (ENOSPC), for root too; SIGXFSZ ignored, so the write fails rather
    // than killing the process. About 30 of the 300 lines fit.
    const LIMIT: u64 = 20_000;
    let server = mock(MockConfig::instant());
    let (child, dir) = Bench::on(&server)
        .concurrent(4)
        .max_requests(REQUESTS)
        .data("prompt_tokens=16,output_tokens=8")
        .request_log("requests.jsonl")
        // No report file: only the log meets the limit.
        .outputs("console")
        .start(|cmd| {
            // SAFETY: setrlimit and sigaction are async-signal-safe and touch only the
            // child's own limits and dispositions; the closure allocates nothing.
            unsafe {
                cmd.pre_exec(|| {
                    signal(Signal::SIGXFSZ, SigHandler::SigIgn).map_err(std::io::Error::from)?;
                    setrlimit(Resource::RLIMIT_FSIZE, LIMIT, LIMIT).map_err(std::io::Error::from)
                });
            }
        });
    let run = crate::support::wait_run(child, dir);
    assert_eq!(
        run.code(),
        1,
        "a log that cannot be written fails the run: {}",
        run.stderr
    );
    // The load went on: the mock served every request.
    assert_eq!(server.stats().completed, REQUESTS);
    let path = run.dir.path().join("requests.jsonl");
    let text = std::fs::read_to_string(&path).expect("the log");
    // Whole lines only: the cut one was removed.
    assert!(
        text.ends_with('\n'),
        "a cut last line: {:?}",
        &text[text.len().saturating_sub(80)..]
    );
    let entries: Vec<llmsurge::report::RequestEntry> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a whole entry"))
        .collect();
    let whole = entries.len() as u64;
    assert!(whole > 0 && whole < REQUESTS, "{whole} lines");
    // Said once when it happened, and what the file holds at the end; never "written".
    let shown = path.display().to_string();
    let at_failure = format!(
        "error: cannot write the request log {shown}: File too large (os error 27); it holds the first {whole} requests whole"
    );
    assert_eq!(
        run.stderr.matches("cannot write the request log").count(),
        1,
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains(&at_failure), "{}", run.stderr);
    let at_end =
        format!("error: the request log {shown} holds {whole} of the run's {REQUESTS} requests");
    assert!(run.stderr.contains(&at_end), "{}", run.stderr);
    assert!(
        !run.stderr.contains("request log written"),
        "{}",
        run.stderr
    );
}
