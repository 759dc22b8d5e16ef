//! `--confidence` and `LLMSURGE_CONFIDENCE` read the same way by `benchmark run` and
//! `benchmark compare` (one parser: `0.95` or `95%`, above 0.5 and below 1), and the
//! variable, set for a whole CI job, never refuses a run without `--slo`.

use crate::support::{dry_run, llmsurge};

/// A report to compare with itself.
const REPORT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/report-server-metrics.json"
);

/// Exit code and output of `llmsurge ARGS` with `env` set.
fn llmsurge_with(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = llmsurge()
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("llmsurge runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `benchmark run --dry-run` against a port nothing listens on (a dry run sends nothing).
fn run_args<'a>(more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "benchmark",
        "run",
        "--dry-run",
        "--target",
        "http://127.0.0.1:9",
    ];
    args.extend_from_slice(more);
    args
}

/// `benchmark compare REPORT REPORT`.
fn compare_args<'a>(more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["benchmark", "compare", REPORT, REPORT];
    args.extend_from_slice(more);
    args
}

/// A usage error: exit 2, one line on stderr that names the flag.
fn assert_usage(what: &str, (code, _, stderr): (Option<i32>, String, String)) -> String {
    assert_eq!(code, Some(2), "{what}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{what}: {stderr}");
    assert!(stderr.contains("--confidence"), "{what}: {stderr}");
    stderr
}

/// The percentage `benchmark compare` says its intervals were computed at.
fn compare_confidence(stdout: &str) -> &str {
    let at = stdout
        .split("intervals at ")
        .nth(1)
        .unwrap_or_else(|| panic!("no confidence in:\n{stdout}"));
    at.split_whitespace().next().unwrap_or_default()
}

#[test]
fn run_and_compare_accept_the_same_confidences() {
    let slo = ["--slo", "ttft_p99<=1s"];
    for (written, value) in [("0.99", 0.99), ("99%", 0.99), ("0.9", 0.9), ("90%", 0.9)] {
        // The flag and the variable.
        let plan = dry_run(&[&slo[..], &["--confidence", written]].concat()[..], &[]);
        assert_eq!(plan["slo"]["confidence"], value, "--confidence {written}");
        let plan = dry_run(&slo, &[("LLMSURGE_CONFIDENCE", written)]);
        assert_eq!(
            plan["slo"]["confidence"], value,
            "LLMSURGE_CONFIDENCE={written}"
        );
    }
    // Compare's bootstrap takes seconds in a debug build: a percentage by flag, a
    // fraction by variable (it refused both a percentage and its variable's value 99%).
    let (code, stdout, stderr) = llmsurge_with(&compare_args(&["--confidence", "99%"]), &[]);
    assert!(
        matches!(code, Some(0 | 3)),
        "compare --confidence 99%: {stderr}"
    );
    assert_eq!(compare_confidence(&stdout), "99%", "{stdout}");
    let (code, stdout, stderr) =
        llmsurge_with(&compare_args(&[]), &[("LLMSURGE_CONFIDENCE", "90%")]);
    assert!(
        matches!(code, Some(0 | 3)),
        "compare, variable 90%: {stderr}"
    );
    assert_eq!(compare_confidence(&stdout), "90%", "{stdout}");
}

#[test]
fn run_and_compare_refuse_the_same_confidences() {
    for bad in [
        "0.5", "50%", "0.3", "1", "100%", "0", "150%", "high", "-0.9",
    ] {
        for (command, args) in [
            (
                "run",
                run_args(&["--slo", "ttft_p99<=1s", "--confidence", bad]),
            ),
            ("compare", compare_args(&["--confidence", bad])),
        ] {
            let what = format!("{command} --confidence {bad}");
            assert_usage(&what, llmsurge_with(&args, &[]));
            let what = format!("{command} with LLMSURGE_CONFIDENCE={bad}");
            let args: Vec<&str> = args[..args.len() - 2].to_vec();
            assert_usage(&what, llmsurge_with(&args, &[("LLMSURGE_CONFIDENCE", bad)]));
        }
    }
    // At or below 50% the error says why such a bound means nothing.
    let stderr = assert_usage(
        "0.5",
        llmsurge_with(&compare_args(&["--confidence", "0.5"]), &[]),
    );
    assert!(stderr.contains("above 0.5"), "{stderr}");
}

#[test]
fn the_variable_without_an_slo_is_ignored_and_the_flag_is_refused() {
    // A CI job may set the variable for every run, with an SLO or not.
    let plan = dry_run(&[], &[("LLMSURGE_CONFIDENCE", "0.99")]);
    assert!(plan["slo"].is_null(), "{plan}");
    let stderr = assert_usage(
        "--confidence without --slo",
        llmsurge_with(&run_args(&["--confidence", "0.99"]), &[]),
    );
    assert!(stderr.contains("--slo"), "{stderr}");
    // The flag wins over the variable, and is still refused without --slo.
    let stderr = assert_usage(
        "--confidence without --slo, variable set",
        llmsurge_with(
            &run_args(&["--confidence", "0.9"]),
            &[("LLMSURGE_CONFIDENCE", "0.99")],
        ),
    );
    assert!(stderr.contains("--slo"), "{stderr}");
}
