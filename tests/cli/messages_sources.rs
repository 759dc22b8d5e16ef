//! Messages that say where a value came from and what to do (issue 38): a key that
//! conflicts or is refused names its source (a flag, `LLMSURGE_*`, `OPENAI_API_KEY`, a
//! scenario) and how to drop it; `k8s job` warns of a key that would not reach the pods;
//! a key that is not its certificate's, an `http://` URL to an HTTPS port and a host that
//! does not resolve are each one line with the fix; logs written to a file carry no
//! colour escapes. All against the real binary (and the real mock where a server is
//! needed), exit 2 and one `error:` line where it is an error.

use crate::engine::tls::{Leaf, Pki};
use crate::scenario::Bench;
use crate::support::{Finished, llmsurge, mock};
use llmsurge::mock::MockConfig;
use llmsurge_proto::Secret;

/// The key every case uses: it must never be printed.
const KEY: &str = "sk-shell-profile-7731";

/// Exit 2, exactly one line on stderr, an `error:` holding every one of `needles`, and
/// not the key.
fn assert_one_error(code: i32, stderr: &str, needles: &[&str]) {
    assert_eq!(code, 2, "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {stderr:?}");
    assert!(lines[0].starts_with("error: "), "{}", lines[0]);
    for needle in needles {
        assert!(
            lines[0].contains(needle),
            "{needle:?} not in {:?}",
            lines[0]
        );
    }
    assert!(!stderr.contains(KEY), "the key was printed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `benchmark run ARGS` with `env` set, to its end (a usage error ends it before any
/// request).
fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = llmsurge()
        .args(["benchmark", "run", "--max-requests", "1"])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("llmsurge runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Arguments, environment, and two words the line must hold: the source and the fix.
type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str, &'a str);

#[test]
fn an_authorization_header_against_a_key_names_where_the_key_came_from() {
    let header = r#"{"headers": {"Authorization": "Bearer mine"}}"#;
    // Nothing listens there: the conflict is found before any request.
    let target = ["--target", "http://127.0.0.1:9"];
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("team.json");
    std::fs::write(&scenario, format!(r#"{{"api_key": "{KEY}"}}"#)).expect("write scenario");
    let scenario = scenario.to_str().expect("a UTF-8 path");
    let flag = format!("--api-key={KEY}");
    let from_scenario = format!("the API key from --scenario {scenario} (its api_key)");
    let drop_scenario = format!("remove api_key from --scenario {scenario}, or drop the header");
    let cases: [Case; 4] = [
        // The issue's case: a key exported in a shell profile, no --api-key typed.
        (
            vec!["--backend-kwargs", header],
            vec![("OPENAI_API_KEY", KEY)],
            "the API key from OPENAI_API_KEY (environment)",
            "unset OPENAI_API_KEY, or drop the header",
        ),
        (
            vec!["--backend-kwargs", header],
            vec![("LLMSURGE_API_KEY", KEY)],
            "the API key from LLMSURGE_API_KEY (environment)",
            "unset LLMSURGE_API_KEY, or drop the header",
        ),
        (
            vec!["--backend-kwargs", header, &flag],
            vec![("OPENAI_API_KEY", "sk-other")],
            "the API key from --api-key;",
            "drop --api-key, or drop the header",
        ),
        (
            vec!["--scenario", scenario],
            vec![("LLMSURGE_BACKEND_KWARGS", header)],
            &from_scenario,
            &drop_scenario,
        ),
    ];
    for (args, env, source, fix) in &cases {
        let args: Vec<&str> = target.iter().copied().chain(args.iter().copied()).collect();
        let (code, stderr) = run(&args, env);
        assert_one_error(code, &stderr, &["headers.Authorization", source, fix]);
        assert!(!stderr.contains("mine"), "{stderr}");
    }
    // The header's own source is named when it is not the flag.
    let (_, stderr) = run(
        &target,
        &[("OPENAI_API_KEY", KEY), ("LLMSURGE_BACKEND_KWARGS", header)],
    );
    assert!(
        stderr.contains("headers.Authorization from LLMSURGE_BACKEND_KWARGS (environment)"),
        "{stderr}"
    );

    // A key that cannot be a header value names its source too.
    let (code, stderr) = run(&target, &[("OPENAI_API_KEY", "sk-line\nbreak")]);
    assert_one_error(
        code,
        &stderr,
        &[
            "the API key from OPENAI_API_KEY (environment)",
            "unset OPENAI_API_KEY",
        ],
    );
    assert!(!stderr.contains("sk-line"), "{stderr}");
}

#[test]
fn a_refused_key_names_where_it_came_from() {
    let server = mock(MockConfig {
        require_api_key: Some(Secret::new("sk-the-right-one")),
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .max_requests(1)
        .run_with_env(&[("OPENAI_API_KEY", KEY)]);
    assert_one_error(
        run.code(),
        &run.stderr,
        &[
            "the API key from OPENAI_API_KEY (environment) was refused",
            // How to drop the source named, as docs/cli.md promises.
            "unset OPENAI_API_KEY or pass the right key with --api-key",
        ],
    );
    assert_eq!(server.stats().completed, 0);
}

/// `llmsurge k8s job` with `env`: exit code, stdout, stderr.
fn k8s_job(extra: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = llmsurge()
        .args([
            "k8s",
            "job",
            "--now",
            "1800000000",
            "--image",
            "reg/llmsurge:1",
        ])
        .args(extra)
        .args(["--", "--target", "http://vllm:8000", "--max-seconds", "60"])
        .envs(env.iter().copied())
        .output()
        .expect("llmsurge runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn k8s_job_warns_of_a_shell_key_that_would_not_reach_the_pods() {
    for var in ["OPENAI_API_KEY", "LLMSURGE_API_KEY"] {
        let (code, stdout, stderr) = k8s_job(&[], &[(var, KEY)]);
        assert_eq!(code, 0, "{stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one warning expected: {stderr:?}");
        assert!(lines[0].starts_with("warning: "), "{}", lines[0]);
        for needle in [var, "will not reach the pods", "--api-key-secret"] {
            assert!(
                lines[0].contains(needle),
                "{needle:?} not in {:?}",
                lines[0]
            );
        }
        assert!(!stderr.contains(KEY), "{stderr}");
        assert!(
            !stdout.contains(KEY),
            "the key is in the manifest: {stdout}"
        );
        assert!(stdout.contains("kind: Job"), "{stdout}");
    }
    // With the Secret named, or no key in the shell, nothing to say.
    let (code, stdout, stderr) =
        k8s_job(&["--api-key-secret", "llm-key"], &[("OPENAI_API_KEY", KEY)]);
    assert_eq!((code, stderr.as_str()), (0, ""), "{stderr}");
    assert!(!stdout.contains(KEY), "{stdout}");
    let (code, _, stderr) = k8s_job(&[], &[]);
    assert_eq!((code, stderr.as_str()), (0, ""), "{stderr}");
    // The key in an Authorization header read from a Secret: the pods send it, so no
    // warning; that header beside --api-key-secret is a pair every pod would refuse.
    let header = [
        "--backend-kwargs",
        r#"{"headers": {"Authorization": "Bearer x"}}"#,
    ];
    let job = |extra: &[&str]| {
        let out = llmsurge()
            .args([
                "k8s",
                "job",
                "--now",
                "1800000000",
                "--image",
                "reg/llmsurge:1",
            ])
            .args(["--header-secret", "gw-auth"])
            .args(extra)
            .args(["--", "--target", "http://vllm:8000", "--max-seconds", "60"])
            .args(header)
            .env("OPENAI_API_KEY", KEY)
            .output()
            .expect("llmsurge runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = job(&[]);
    assert_eq!((code, stderr.as_str()), (Some(0), ""), "{stderr}");
    let (code, stderr) = job(&["--api-key-secret", "llm-key"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--api-key-secret and the Authorization header")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// Exit 2 and one `error:` line holding every one of `needles`.
fn assert_run_error(run: &Finished, needles: &[&str]) {
    assert_one_error(run.code(), &run.stderr, needles);
}

#[test]
fn a_client_key_that_is_not_the_certificates_names_both_files() {
    let pki = Pki::new("pair");
    let (cert, _) = pki.leaf(Leaf::Client, "client");
    let (_, other_key) = pki.leaf(Leaf::Client, "other");
    let (cert, other_key) = (
        cert.to_str().expect("UTF-8 path"),
        other_key.to_str().expect("UTF-8 path"),
    );
    // Found before anything is sent: nothing listens on the port.
    let run = Bench::target("https://127.0.0.1:9")
        .max_requests(1)
        .arg("--client-cert", cert)
        .arg("--client-key", other_key)
        .run();
    assert_run_error(
        &run,
        &[
            &format!("--client-key {other_key} does not match --client-cert {cert}"),
            "not a pair",
        ],
    );
    assert!(!run.stderr.contains("builder error"), "{}", run.stderr);
}

#[test]
fn an_http_url_to_an_https_port_says_use_https() {
    let pki = Pki::new("plain-to-tls");
    let (cert, key) = pki.leaf(Leaf::Server, "server");
    let server = mock(MockConfig {
        tls_cert: Some(cert),
        tls_key: Some(key),
        ..MockConfig::instant()
    });
    let url = server.base_url().replace("https://", "http://");
    assert!(url.starts_with("http://"), "{url}");
    let run = Bench::target(&url).max_requests(1).run();
    assert_run_error(
        &run,
        &[
            "answered an http:// request with TLS",
            "use an https:// URL",
        ],
    );
    assert!(
        !run.stderr.contains("invalid HTTP version"),
        "{}",
        run.stderr
    );
    assert_eq!(server.stats().completed, 0);
}

#[test]
fn a_host_that_does_not_resolve_is_one_line() {
    // `.invalid` never resolves (RFC 6761); the connect timeout bounds a resolver that
    // does not answer.
    let run = Bench::target("http://no-such-host.invalid:8000")
        .max_requests(1)
        .arg("--connect-timeout", "5s")
        .run();
    assert_run_error(
        &run,
        &[
            "cannot resolve host no-such-host.invalid",
            "check the host name in the URL",
        ],
    );
    assert!(!run.stderr.contains("dns error"), "{}", run.stderr);
}

#[test]
fn debug_logs_written_to_a_pipe_carry_no_colour_escapes() {
    // stderr is a pipe here, as `2> file` is a file: no terminal, so no colour.
    let run = Bench::in_process_mock()
        .max_requests(2)
        .data("prompt_tokens=16,output_tokens=2")
        .run_with_env(&[("LLMSURGE_LOG", "debug")]);
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(
        run.stderr.lines().count() > 5,
        "debug lines expected: {}",
        run.stderr
    );
    assert!(!run.stderr.contains('\x1b'), "{:?}", run.stderr);
    // Nor colour codes made visible (`\x1b[2m`) by the escaping of control characters.
    assert!(!run.stderr.contains("\\x1b["), "{}", run.stderr);
}

/// `llmsurge ARGS` with `env` set, run in `dir`: exit code and stderr.
fn binary(args: &[&str], env: &[(&str, &str)], dir: &std::path::Path) -> (i32, String) {
    let out = llmsurge()
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .expect("llmsurge runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Arguments, environment, and what the one error line must hold.
type LineCase<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, Vec<&'a str>);

/// The break test of issue 38: a missing argument is named (and the variable that made it
/// required), clap's hints survive `k8s job`'s `--`, a subcommand typo gets its tip, a
/// flag's value from a variable or a scenario names that source and how to drop it, and a
/// vLLM or GuideLLM flag names llmsurge's, not a misleading near match.
#[test]
fn usage_errors_name_the_argument_its_source_and_llmsurge_s_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("profile.json"), r#"{"profile": "foo"}"#).expect("write");
    std::fs::write(dir.path().join("rate.json"), r#"{"rate": 5}"#).expect("write");
    let target = ["--target", "http://127.0.0.1:9", "--max-requests", "1"];
    let run = |extra: &[&'static str]| -> Vec<&'static str> {
        ["benchmark", "run"]
            .into_iter()
            .chain(target)
            .chain(extra.iter().copied())
            .collect()
    };
    let k8s = |extra: &[&'static str]| -> Vec<&'static str> {
        ["k8s", "job", "--image", "reg/llmsurge:1"]
            .into_iter()
            .chain(extra.iter().copied())
            .collect()
    };
    let mut cases: Vec<LineCase> = vec![
        // 1. Required arguments keep their names, and a variable that required one is named.
        (
            vec![
                "benchmark",
                "compare",
                "a.json",
                "b.json",
                "--max-regression-only",
            ],
            vec![],
            vec!["not provided: --max-regression <TOLERANCES>"],
        ),
        (
            vec!["benchmark", "compare", "a.json", "b.json"],
            vec![("LLMSURGE_MAX_REGRESSION_ONLY", "true")],
            vec![
                "not provided: --max-regression <TOLERANCES>",
                "LLMSURGE_MAX_REGRESSION_ONLY is set in the environment (unset LLMSURGE_MAX_REGRESSION_ONLY)",
            ],
        ),
        (
            vec!["benchmark", "compare", "base.json"],
            vec![],
            vec!["not provided: <CURRENT>"],
        ),
        (
            vec!["plot", "pareto"],
            vec![],
            vec!["not provided: <REPORT.json>"],
        ),
        (
            vec!["plot", "runs"],
            vec![],
            vec!["not provided: <REPORT.json>"],
        ),
        (
            vec!["preprocess", "dataset"],
            vec![],
            vec!["not provided: --config <CONFIG>, <INPUT>, <OUTPUT>"],
        ),
        // 2. After `k8s job`'s or a sweep's `--` as at the top level; before it, the run
        // flag meant.
        (
            vec![
                "sweep",
                "serve",
                "--target",
                "http://127.0.0.1:9",
                "--dry-run",
                "--",
                "--max-second",
                "3",
            ],
            vec![],
            vec!["'--max-second'", "did you mean --max-seconds?"],
        ),
        (
            vec![
                "sweep",
                "serve",
                "--target",
                "http://127.0.0.1:9",
                "--dry-run",
                "--",
                "--num-prompts",
                "3",
            ],
            vec![],
            vec!["llmsurge's is --max-requests"],
        ),
        (
            k8s(&["--", "--max-second", "3"]),
            vec![],
            vec!["'--max-second'", "did you mean --max-seconds?"],
        ),
        (
            k8s(&["--", "--num-prompts", "10"]),
            vec![],
            vec!["llmsurge's is --max-requests"],
        ),
        (
            k8s(&["--", "--header", "K=V"]),
            vec![],
            vec!["--backend-kwargs '{\"headers\""],
        ),
        (
            k8s(&["--", "--profile", "foo"]),
            vec![],
            vec!["(possible values: synchronous,"],
        ),
        (
            k8s(&["--max-second", "3"]),
            vec![],
            vec!["did you mean --max-seconds?", "give it after --"],
        ),
        (
            vec!["benchmrk", "run"],
            vec![],
            vec!["'benchmrk'", "did you mean benchmark?"],
        ),
        (
            vec!["benchmark", "rnu"],
            vec![],
            vec!["'rnu'", "did you mean run?"],
        ),
        // 3. Where a conflicting or invalid value came from, and how to drop it.
        (
            run(&["--profile", "synchronous"]),
            vec![("LLMSURGE_RATE", "5")],
            vec![
                "--rate has no effect with --profile synchronous",
                "--rate is from LLMSURGE_RATE (environment): unset LLMSURGE_RATE",
            ],
        ),
        (
            run(&["--profile", "synchronous", "--scenario", "rate.json"]),
            vec![],
            vec![
                "--rate is from --scenario rate.json (its rate): remove rate from --scenario rate.json",
            ],
        ),
        (
            run(&[]),
            vec![("LLMSURGE_PROFILE", "foo")],
            vec![
                "invalid value 'foo' for '--profile",
                "--profile is from LLMSURGE_PROFILE (environment): unset LLMSURGE_PROFILE",
            ],
        ),
        (
            run(&["--scenario", "profile.json"]),
            vec![],
            vec![
                "invalid value 'foo' for '--profile",
                "--profile is from --scenario profile.json (its profile)",
            ],
        ),
        (
            run(&[]),
            vec![("LLMSURGE_MAX_SECONDS", "abc")],
            vec![
                "invalid value 'abc' for '--max-seconds",
                "--max-seconds is from LLMSURGE_MAX_SECONDS (environment): unset LLMSURGE_MAX_SECONDS",
            ],
        ),
    ];
    // 6. Peers' flags whose nearest llmsurge flag is not what they mean.
    for (peer, ours) in [
        ("--dataset-name", "--data"),
        ("--random-input-len", "--data prompt_tokens=N"),
        ("--random-output-len", "output_tokens=M"),
        ("--backend", "--request-format"),
        ("--backend-type", "--request-format"),
        ("--save-result", "--outputs json"),
        ("--percentile-metrics", "every percentile"),
        ("--max-num-seqs", "--max-concurrency"),
        ("--seed", "--random-seed"),
        ("--base-url", "--target"),
        ("--tokenizer", "--processor"),
        ("--endpoint", "--request-format"),
    ] {
        cases.push((
            vec!["benchmark", "run", peer, "x"],
            vec![],
            vec![peer, ours],
        ));
    }
    for (args, env, needles) in &cases {
        let (code, stderr) = binary(args, env, dir.path());
        let what = format!("{args:?} {env:?}");
        assert_eq!(code, 2, "{what}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: one line expected: {stderr:?}");
        assert!(lines[0].starts_with("error: "), "{what}: {}", lines[0]);
        for needle in needles {
            assert!(
                lines[0].contains(needle),
                "{what}: {needle:?} not in {:?}",
                lines[0]
            );
        }
        assert!(
            !lines[0].contains("did you mean --data-oversample"),
            "{}",
            lines[0]
        );
    }
    // Typed, a flag's source goes without saying.
    let (_, stderr) = binary(
        &run(&["--profile", "synchronous", "--rate", "5"]),
        &[],
        dir.path(),
    );
    assert!(!stderr.contains("is from"), "{stderr}");
}

#[test]
fn a_repeat_cooldown_from_the_environment_does_not_refuse_a_single_run() {
    // Set CI-wide, it must not break the jobs that do not repeat.
    let run = Bench::in_process_mock()
        .max_requests(1)
        .data("prompt_tokens=16,output_tokens=2")
        .run_with_env(&[("LLMSURGE_REPEAT_COOLDOWN", "0s")]);
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(!run.stderr.contains("repeat-cooldown"), "{}", run.stderr);
    // Typed, it is still a mistake worth a word.
    let run = Bench::in_process_mock()
        .max_requests(1)
        .data("prompt_tokens=16,output_tokens=2")
        .arg("--repeat-cooldown", "0s")
        .run();
    assert_run_error(
        &run,
        &["--repeat-cooldown has no effect without --repeat 2"],
    );
}

#[test]
fn a_tolerance_for_a_metric_neither_report_has_is_named() {
    // A run without --goodput: its report has no goodput to judge.
    let run = Bench::in_process_mock()
        .max_requests(4)
        .data("prompt_tokens=16,output_tokens=2")
        .outputs("json")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("base.json");
    std::fs::copy(run.report_path(), &report).expect("copy the report");
    let report = report.to_str().expect("a UTF-8 path");
    let compare = |extra: &[&str]| {
        let out = llmsurge()
            .args(["benchmark", "compare", report, report, "--max-regression"])
            .args(extra)
            .output()
            .expect("llmsurge runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Alone, it leaves nothing to judge: not a pass.
    let (code, _, stderr) = compare(&["goodput_fraction=2pp", "--max-regression-only"]);
    assert_one_error(
        code,
        &stderr,
        &[
            "--max-regression-only: nothing to judge",
            "goodput_fraction",
        ],
    );
    // Beside the defaults, it is warned about and the rest is judged.
    let (code, stdout, stderr) = compare(&["goodput_fraction=2pp,goodput_per_s=5%"]);
    assert_eq!(code, 0, "{stderr}");
    for name in ["goodput_fraction", "goodput_per_s"] {
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with("warning: --max-regression ") && l.contains(name)),
            "{name} not warned about: {stderr}"
        );
    }
    let line = stdout
        .lines()
        .find(|l| l.starts_with("tolerances: "))
        .unwrap_or_else(|| panic!("a tolerances line: {stdout}"));
    assert!(line.contains("ttft_p50 10%"), "{line}");
}

#[test]
fn a_gpu_scrape_host_that_does_not_resolve_is_one_line_and_zero_is_not_negative() {
    let run = Bench::in_process_mock()
        .max_requests(2)
        .data("prompt_tokens=16,output_tokens=2")
        .arg("--gpu-metrics", "http://gpu.invalid:9400/metrics")
        .outputs("json,console")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let gpu_line = run
        .stdout
        .lines()
        .find(|l| l.contains("GPU (http://gpu.invalid:9400/metrics"))
        .unwrap_or_else(|| panic!("a GPU line: {}", run.stdout));
    // Nothing was measured, and the line says so rather than print zeros.
    for needle in [
        "nothing measured",
        "cannot resolve host gpu.invalid; check the host name in the URL",
    ] {
        assert!(gpu_line.contains(needle), "{needle:?} not in {gpu_line}");
    }
    assert!(
        !gpu_line.contains("-0") && !gpu_line.contains(" 0 W"),
        "{gpu_line}"
    );
    assert!(!gpu_line.contains("failed to lookup"), "{gpu_line}");
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.report_path()).expect("report")).expect("json");
    let gpu = &raw["benchmarks"][0]["gpu"];
    for key in ["power_mean_w", "energy_j"] {
        let v = gpu[key].as_f64().unwrap_or_else(|| panic!("{key}: {gpu}"));
        assert!(v == 0.0 && v.is_sign_positive(), "{key} = {v:?}");
    }
}

/// Shell scripts and CI jobs write a switch as 1/0, yes/no or on/off: each is taken from
/// a switch's variable (`LLMSURGE_INSECURE`) as from a BOOL flag's (`LLMSURGE_STREAM`);
/// anything else is one line naming the flag and where the value came from.
#[test]
fn switches_from_the_environment_take_the_words_shell_scripts_use() {
    for (word, on) in [
        ("1", true),
        ("yes", true),
        ("on", true),
        ("0", false),
        ("no", false),
        ("off", false),
    ] {
        let plan = crate::support::dry_run(
            &["--target", "https://127.0.0.1:9"],
            &[("LLMSURGE_INSECURE", word), ("LLMSURGE_STREAM", word)],
        );
        // An unset switch is left out of the plan.
        let insecure = plan["backend"]["tls"]["insecure"]
            .as_bool()
            .unwrap_or(false);
        assert_eq!(insecure, on, "{word}: {plan:#}");
        assert_eq!(plan["backend"]["stream"], on, "{word}: {plan:#}");
    }
    let (code, stderr) = run(&[], &[("LLMSURGE_INSECURE", "maybe")]);
    assert_one_error(code, &stderr, &["--insecure", "LLMSURGE_INSECURE"]);
}
