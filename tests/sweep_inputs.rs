//! vLLM's `vllm bench sweep` inputs as they are: named (dict) parameter files and
//! `_benchmark_name`, `false` as `--no-KEY`, `--link-vars`, bench params that override
//! the shared flags, `request_rate`, `--num-runs`, `-o`, `sla.json` and `--sla-variable
//! request_rate`, against the real mock started by the sweep itself; and every sweep
//! command of docs/sweeps.md run for real.

use crate::support::llmsurge;
use crate::sweep::write;
use llmsurge_coordinator::Strategy;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

const EXE: &str = env!("CARGO_BIN_EXE_llmsurge");

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{path:?}: {e}")))
        .expect("JSON")
}

/// Lines of a mock's `--truth` file: one per request it served.
fn served(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path:?}: {e}"))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

#[test]
fn sweep_inputs_vllm_named_files_false_link_vars_and_overrides_run_as_vllm_would() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // vLLM's named form; a name that is no folder name; `false` switches a default-on
    // flag off. Each server writes what it served to its own truth file.
    let serve = write(
        d,
        "serve.json",
        &format!(
            r#"{{"small": {{"max_num_seqs": 2, "enable_prefix_caching": false, "truth": "{0}/small.jsonl"}},
                "big/one": {{"max_num_seqs": 4, "truth": "{0}/big.jsonl"}}}}"#,
            d.display()
        ),
    );
    // vLLM's list form naming its entries; each sets rate and max_requests, which the
    // shared flags after -- set too: the configuration's own value wins.
    let bench = write(
        d,
        "bench.json",
        r#"[{"_benchmark_name": "c2", "max_concurrency": 2, "rate": 2, "max_requests": 6},
            {"_benchmark_name": "c4", "max_concurrency": 4, "rate": 4, "max_requests": 8}]"#,
    );
    let out = llmsurge()
        .args(["sweep", "serve", "--serve-cmd"])
        .arg(format!(
            "{EXE} mock-server --port {{port}} --instant --truth {{truth}}"
        ))
        .arg("--serve-params")
        .arg(&serve)
        .arg("--bench-params")
        .arg(&bench)
        .args(["--link-vars", "max_num_seqs=max_concurrency"])
        .args(["--num-runs", "1", "--ready-timeout", "60s", "-o"])
        .arg(d.join("out"))
        .args([
            "--",
            "--profile",
            "concurrent",
            "--rate",
            "1",
            "--max-requests",
            "20",
            "--data",
            "prompt_tokens=16,output_tokens=4",
            "--max-dispatch-lag",
            "10s",
        ])
        .output()
        .expect("llmsurge runs");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // vLLM's serve flags reached the mock, which started with them.
    assert!(
        stdout.lines().any(|l| l.contains("starting")
            && l.contains(" --max-num-seqs 2")
            && l.contains(" --no-enable-prefix-caching")),
        "{stdout}"
    );
    // Only the linked points ran, in folders named by the configurations.
    let sweep = json(&d.join("out/sweep.json"));
    let points: BTreeSet<&str> = sweep["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["point"].as_str().expect("point"))
        .collect();
    assert_eq!(
        points,
        BTreeSet::from(["small-c2", "big_one-c4"]),
        "{sweep}"
    );
    for unlinked in ["small-c4", "big_one-c2"] {
        assert!(!d.join("out").join(unlinked).exists(), "{unlinked} ran");
    }
    for row in sweep["rows"].as_array().expect("rows") {
        assert_eq!(row["status"], "ok", "{row}");
    }
    // The configurations' rate and max_requests, not the shared ones; the truth agrees.
    for (point, streams, requests, truth) in [
        ("small-c2", 2, 6, "small.jsonl"),
        ("big_one-c4", 4, 8, "big.jsonl"),
    ] {
        let report =
            llmsurge::report::Report::load(&d.join("out").join(point).join("benchmarks.json"))
                .expect("the point's report");
        let b = &report.benchmarks[0];
        assert_eq!(b.strategy, Strategy::Concurrent { streams }, "{point}");
        assert_eq!(b.requests.completed, requests, "{point}");
        assert_eq!(
            served(&d.join(truth)),
            requests as usize,
            "{point}: {truth}"
        );
    }
}

#[test]
fn sweep_inputs_request_rate_is_vllms_poisson_rate_and_a_profile_after_dashes_stays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let bench = write(
        d,
        "bench.json",
        r#"{"r8": {"request_rate": 8}, "inf": {"request_rate": "inf"}}"#,
    );
    let run = |extra: &[&str]| {
        let out = llmsurge()
            .args([
                "sweep",
                "serve",
                "--target",
                "http://127.0.0.1:9",
                "--dry-run",
            ])
            .arg("--bench-params")
            .arg(&bench)
            .arg("-o")
            .arg(d.join("out"))
            .args(["--", "--max-requests", "4"])
            .args(extra)
            .output()
            .expect("llmsurge runs");
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let plans = run(&[]);
    let plan = |name: &str, plans: &str| {
        plans
            .lines()
            .find(|l| l.starts_with(&format!("plan {name}:")))
            .unwrap_or_else(|| panic!("plan {name} in {plans}"))
            .to_string()
    };
    assert!(
        plan("r8", &plans).ends_with("--profile poisson --rate 8"),
        "{plans}"
    );
    assert!(
        plan("inf", &plans).ends_with("--profile throughput"),
        "{plans}"
    );
    let constant = run(&["--profile", "constant"]);
    let r8 = plan("r8", &constant);
    assert!(
        r8.contains("--profile constant") && r8.ends_with("--rate 8"),
        "{r8}"
    );
    assert!(!r8.contains("poisson"), "{r8}");
}

#[test]
fn sweep_inputs_serve_sla_takes_vllms_sla_json_and_names_its_loads_sanely() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // vLLM's form: a list of objects, each one SLA; the value is in ms.
    let slas = write(d, "sla.json", r#"[{"median_tpot_ms": "<=16"}]"#);
    let bench = write(
        d,
        "bench.json",
        r#"[{"data": "prompt_tokens=16,output_tokens=64", "max_dispatch_lag": "10s"}]"#,
    );
    let out_dir = d.join("out");
    let out = llmsurge()
        .args(["sweep", "serve-sla", "--serve-cmd"])
        .arg(format!(
            "{EXE} mock-server --port {{port}} --max-num-seqs 32 --itl-ms 10 --output-tokens 64 --itl-ms-per-active 0.5"
        ))
        .arg("--bench-params")
        .arg(&bench)
        .arg("--sla-params")
        .arg(&slas)
        .args(["--sla-variable", "request_rate", "--ready-timeout", "60s"])
        .arg("-o")
        .arg(&out_dir)
        .args([
            "--",
            "--max-seconds",
            "3",
            "--warmup",
            "1s",
            "--max-concurrency",
            "32",
        ])
        .output()
        .expect("llmsurge runs");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let report = json(&out_dir.join("sla.json"));
    assert_eq!(
        report["slas"],
        serde_json::json!(["tpot_p50<=16ms"]),
        "{report}"
    );
    assert_eq!(report["variable"], "rate", "{report}");
    let row = &report["rows"][0];
    assert_eq!(row["status"], "ok", "{row}");
    let answer = row["answer"].as_f64().expect("an answer");
    // Every rate's folder: a few significant digits, and on disk.
    let probes = row["probes"].as_array().expect("probes");
    let rates: Vec<&str> = probes
        .iter()
        .map(|p| p["dir"].as_str().expect("dir"))
        .filter(|d| d.starts_with("rate-"))
        .collect();
    assert!(!rates.is_empty(), "{row}");
    for dir in &rates {
        let number = dir.trim_start_matches("rate-").trim_end_matches("-run2");
        let digits = number.chars().filter(char::is_ascii_digit).count();
        assert!(
            digits <= 4 || !number.contains('.'),
            "{dir}: more than 4 significant digits"
        );
        assert!(
            out_dir
                .join(row["point"].as_str().expect("point"))
                .join(dir)
                .is_dir(),
            "{dir}"
        );
    }
    // The conclusion gives each value with its unit and says each thing once.
    let conclusion = row["conclusion"].as_str().expect("conclusion");
    assert!(conclusion.contains("req/s"), "{conclusion}");
    assert!(
        conclusion.matches("inconclusive").count() <= 1,
        "{conclusion}"
    );
    // The table labels the answer as the offered rate, the achieved one beside it.
    let md = std::fs::read_to_string(out_dir.join("sla.md")).expect("sla.md");
    let header: Vec<String> = md
        .lines()
        .find(|l| l.starts_with('|') && l.contains("sla"))
        .expect("a header")
        .split('|')
        .map(|c| c.trim().to_string())
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|c| c == name)
            .unwrap_or_else(|| panic!("{name:?} in {header:?}"))
    };
    let (offered, achieved) = (
        col("max offered rate (req/s)"),
        col("achieved at answer (req/s)"),
    );
    assert_eq!(achieved, offered + 1, "{header:?}");
    let cells: Vec<String> = md
        .lines()
        .filter(|l| l.starts_with('|'))
        .nth(2)
        .expect("a row")
        .split('|')
        .map(|c| c.trim().to_string())
        .collect();
    let num = |c: &str| c.parse::<f64>().unwrap_or_else(|_| panic!("{c:?}"));
    let achieved_json = row["figures"]["requests_per_s"].as_f64().expect("achieved");
    assert!(
        (num(&cells[offered]) - answer).abs() <= 1e-3 * answer.max(1.0),
        "{cells:?}"
    );
    assert!(
        (num(&cells[achieved]) - achieved_json).abs() <= 1e-3 * achieved_json.max(1.0),
        "{cells:?}"
    );
}

#[test]
fn sweep_inputs_forms_llmsurge_cannot_take_name_llmsurges_form() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let fails = |args: &[&str], files: &[(&str, &str)], want: &[&str]| {
        for (name, text) in files {
            write(d, name, text);
        }
        let out = llmsurge()
            .current_dir(d)
            .args(args)
            .output()
            .expect("llmsurge runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", show(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        for w in want {
            assert!(stderr.contains(w), "{args:?}: {w:?} not in {stderr}");
        }
    };
    let target = [
        "sweep",
        "serve",
        "--target",
        "http://127.0.0.1:9",
        "--dry-run",
    ];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        target
            .iter()
            .copied()
            .chain(extra.iter().copied())
            .collect()
    };
    fails(
        &with(&["--bench-params", "b.json"]),
        &[("b.json", r#"[{"num_prompts": 100}]"#)],
        &["num_prompts", "max_requests"],
    );
    fails(
        &with(&["--bench-params", "b.json"]),
        &[("b.json", r#"[{"random_input_len": 1024}]"#)],
        &["random_input_len", "prompt_tokens=1024"],
    );
    fails(
        &with(&["--bench-params", "b.json"]),
        &[("b.json", r#"{"x": {"rate": 1}, "y": 3}"#)],
        &["b.json", "\"y\"", "not an object"],
    );
    fails(
        &with(&["--bench-params", "b.json", "--link-vars", "max_num_seqs"]),
        &[(
            "b.json",
            r#"[{"profile": "concurrent", "rate": 2, "max_concurrency": 1}]"#,
        )],
        &["--link-vars", "SERVE_KEY=BENCH_KEY"],
    );
    // vLLM's sweep flags llmsurge has no use for, or calls otherwise.
    for (flag, value, ours) in [
        ("--bench-cmd", "vllm bench serve", "after --"),
        ("--server-ready-timeout", "300", "--ready-timeout"),
        ("--show-stdout", "", "server.log"),
        ("--continue-on-error", "", "always goes on"),
        ("--warmup-num-prompts", "8", "--warmup"),
    ] {
        let mut args = with(&[flag]);
        if !value.is_empty() {
            args.push(value);
        }
        fails(&args, &[], &[flag, ours]);
    }
    fails(
        &[
            "sweep",
            "serve-sla",
            "--target",
            "http://127.0.0.1:9",
            "--dry-run",
            "--sla-params",
            "s.json",
        ],
        &[("s.json", r#"[{"std_ttft_ms": "<=100"}]"#)],
        &["std_ttft_ms", "percentile", "e2e_p99<=2s"],
    );
    fails(
        &[
            "sweep",
            "serve-sla",
            "--target",
            "http://127.0.0.1:9",
            "--dry-run",
            "--sla-params",
            "s.json",
        ],
        &[("s.json", r#"[{"p99_e2el_ms": 200}]"#)],
        &["p99_e2el_ms", "<=2000"],
    );
}

/// docs/sweeps.md: every `llmsurge sweep` command its fences hold (those not marked
/// skip) runs for real against the mock it starts, without `--dry-run`, and every point
/// is ok. Each runs in a folder of its own holding the files the page writes out;
/// `LLMSURGE_MAX_REQUESTS` keeps each benchmark short (the page's files run a minute).
/// serve-sla's commands are left to `sweep_inputs_serve_sla_…` (a search runs a dozen
/// loads) and to the docs test, which runs every command as written; so are `sweep
/// plot`'s, which draw a folder an earlier command wrote.
#[test]
fn sweep_inputs_every_sweep_command_of_the_sweeps_page_runs_for_real() {
    let page = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/sweeps.md");
    let doc = crate::cli::docs::parse(&page);
    let bin = Path::new(EXE).parent().expect("the binary's folder");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for cmd in &doc.commands {
        // `sweep plot` reads an earlier command's folder: the docs test runs it there.
        if !cmd.args.starts_with(&["sweep".into(), "serve".into()]) {
            continue;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, content) in &doc.files {
            std::fs::write(dir.path().join(name), content).expect("a doc's file");
        }
        let args: Vec<&String> = cmd.args.iter().filter(|a| *a != "--dry-run").collect();
        let out = llmsurge()
            .current_dir(dir.path())
            .args(&args)
            .envs(cmd.env.iter().cloned())
            .env("PATH", &path)
            .env("LLMSURGE_MAX_REQUESTS", "8")
            // A busy test machine's client lag is allowed for: it would make a point
            // an invalid run, which measures the machine, not the sweep.
            .env("LLMSURGE_MAX_DISPATCH_LAG", "10s")
            .output()
            .expect("llmsurge runs");
        assert_eq!(out.status.code(), Some(0), "{}: {}", cmd.at, show(&out));
        let out_dir = args
            .iter()
            .position(|a| *a == "-o" || *a == "--output-dir")
            .map_or(dir.path().to_path_buf(), |i| dir.path().join(args[i + 1]));
        let sweep = json(&out_dir.join("sweep.json"));
        let rows = sweep["rows"].as_array().expect("rows");
        assert!(!rows.is_empty(), "{}: {sweep}", cmd.at);
        for row in rows {
            assert_eq!(row["status"], "ok", "{}: {row}", cmd.at);
        }
        ran += 1;
    }
    assert!(ran >= 2, "only {ran} sweep commands in docs/sweeps.md");
}
