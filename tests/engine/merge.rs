//! `benchmark merge` end to end: shard reports from real runs against the mock (edited to
//! carry shard metadata), merged by the real binary: exit codes, one-line refusals, and
//! the same bytes whatever the order of the files.

use crate::scenario::Bench;
use crate::support::{llmsurge, mock, wait_run};
use llmsurge::mock::MockConfig;
use llmsurge::report::Report;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Runs `llmsurge ARGS` to the end.
fn llmsurge_run(args: &[&str]) -> crate::support::Finished {
    let mut cmd = llmsurge();
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("llmsurge starts");
    wait_run(child, tempfile::tempdir().expect("tempdir"))
}

/// Rewrites a run's report as shard `index` of `count`, under `dir`.
fn as_shard(report: &Path, index: u32, count: u32, dir: &Path) -> PathBuf {
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report).expect("report")).expect("JSON");
    v["metadata"]["shard"] = serde_json::json!({ "index": index, "count": count });
    v["args"]["shard"] = serde_json::json!({ "index": index, "count": count });
    std::fs::create_dir_all(dir).expect("mkdir");
    let path = dir.join(format!("shard-{index}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&v).expect("JSON")).expect("write");
    path
}

fn merge(inputs: &[&Path], extra: &[&str], out: &Path) -> crate::support::Finished {
    let mut args: Vec<&str> = vec!["benchmark", "merge"];
    args.extend(inputs.iter().map(|p| p.to_str().expect("utf-8 path")));
    args.extend(extra);
    args.extend(["--output-dir", out.to_str().expect("utf-8 path")]);
    llmsurge_run(&args)
}

fn one_line_error(run: &crate::support::Finished, file: &Path, field: &str) {
    assert_eq!(run.code(), 2, "{}", run.stderr);
    let line = run.stderr.trim();
    assert!(!line.contains('\n'), "one line: {line}");
    assert!(
        line.contains(&file.display().to_string()),
        "names the file: {line}"
    );
    assert!(line.contains(field), "names {field}: {line}");
}

#[test]
fn shard_reports_of_real_runs_merge_in_any_order_to_the_same_bytes() {
    let server = mock(MockConfig {
        ttft_ms: 10.0,
        itl_ms: 2.0,
        output_tokens: 8,
        error_rate: 0.2,
        ..MockConfig::instant()
    });
    let url = server.base_url();
    let runs: Vec<_> = (0..3)
        .map(|_| {
            Bench::target(&url)
                .constant(40)
                .max_requests(12)
                .seed(7)
                .data("prompt_tokens=16,output_tokens=8")
                .outputs("json")
                .run()
        })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let shards: Vec<PathBuf> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            assert_eq!(r.code(), 0, "{}", r.stderr);
            as_shard(&r.report_path(), i as u32, 3, dir.path())
        })
        .collect();
    let [s0, s1, s2] = [&shards[0], &shards[1], &shards[2]].map(PathBuf::as_path);

    let out_a = dir.path().join("a");
    let a = merge(&[s0, s1, s2], &["--outputs", "json,html,csv"], &out_a);
    let out_b = dir.path().join("b");
    let b = merge(&[s2, s0, s1], &["--outputs", "json,html,csv"], &out_b);
    assert_eq!(a.code(), 0, "{}", a.stderr);
    assert_eq!(b.code(), 0, "{}", b.stderr);
    for name in ["benchmarks.json", "benchmarks.html", "benchmarks.csv"] {
        let read = |d: &Path| std::fs::read(d.join(name)).expect("merged output");
        assert!(
            read(&out_a) == read(&out_b),
            "{name} differs between orders"
        );
    }

    let merged = Report::load(&out_a.join("benchmarks.json")).expect("merged report loads");
    let inputs: Vec<Report> = runs.iter().map(|r| r.report()).collect();
    let m = &merged.benchmarks[0];
    let sum = |f: fn(&Report) -> u64| inputs.iter().map(f).sum::<u64>();
    assert_eq!(
        m.requests.created,
        sum(|r| r.benchmarks[0].requests.created)
    );
    assert_eq!(
        m.requests.errored,
        sum(|r| r.benchmarks[0].requests.errored)
    );
    assert_eq!(m.shards.len(), 3);
    assert_eq!(merged.metadata.shard, None);
    assert_eq!(
        merged.metadata.merged.as_ref().map(|x| x.shards.clone()),
        Some(vec![0, 1, 2])
    );
    // The merged percentiles are those of the union of the shards' histograms.
    let mut union = llmsurge_proto::MetricSet::new();
    for r in &inputs {
        union
            .merge(&r.benchmarks[0].metric_set().expect("histograms"))
            .expect("add");
    }
    assert_eq!(
        m.metrics,
        llmsurge_coordinator::result::distributions(&union)
    );
    assert!(
        m.metrics["request_latency"].errored.count > 0,
        "errors were merged too"
    );

    // A merged report is a report: rendered again and compared.
    let again = llmsurge_run(&[
        "benchmark",
        "from-file",
        out_a.join("benchmarks.json").to_str().expect("path"),
        "--outputs",
        "console",
    ]);
    assert_eq!(again.code(), 0, "{}", again.stderr);
    assert!(
        again.stdout.contains("merged from 3 of 3 shards"),
        "{}",
        again.stdout
    );
    let merged_json = out_a.join("benchmarks.json");
    let cmp = llmsurge_run(&[
        "benchmark",
        "compare",
        merged_json.to_str().expect("path"),
        merged_json.to_str().expect("path"),
    ]);
    assert_eq!(cmp.code(), 0, "{}", cmp.stderr);

    // A missing shard: refused, unless --allow-partial, which says so.
    let out = dir.path().join("partial");
    let refused = merge(&[s0, s2], &["--outputs", "json"], &out);
    assert_eq!(refused.code(), 2, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("metadata.shard: shard(s) 2 of 3 missing"),
        "{}",
        refused.stderr
    );
    let partial = merge(&[s2, s0], &["--outputs", "json", "--allow-partial"], &out);
    assert_eq!(partial.code(), 0, "{}", partial.stderr);
    assert!(
        partial.stderr.contains("shard(s) 2 of 3 missing"),
        "{}",
        partial.stderr
    );
    let report = Report::load(&out.join("benchmarks.json")).expect("partial report");
    assert_eq!(report.metadata.merged.map(|m| m.missing), Some(vec![1]));

    // A foreign report (a plain run's, no metadata.shard), another run's configuration,
    // another N, the same shard twice: one line naming the file and the field.
    let foreign = runs[1].report_path();
    one_line_error(
        &merge(&[s0, &foreign, s2], &[], &out),
        &foreign,
        "metadata.shard",
    );
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s1).expect("read")).expect("JSON");
    v["args"]["seed"] = serde_json::json!(8);
    let other = dir.path().join("other-seed.json");
    std::fs::write(&other, v.to_string()).expect("write");
    one_line_error(&merge(&[s0, &other, s2], &[], &out), &other, "args.seed");
    let other_n = as_shard(&runs[1].report_path(), 1, 4, &dir.path().join("n4"));
    one_line_error(
        &merge(&[s0, &other_n, s2], &[], &out),
        &other_n,
        "metadata.shard.count",
    );
    let twice = dir.path().join("twice.json");
    std::fs::copy(s1, &twice).expect("copy");
    let dup = merge(&[s0, s1, &twice, s2], &[], &out);
    assert_eq!(dup.code(), 2, "{}", dup.stderr);
    assert!(
        dup.stderr
            .contains("metadata.shard.index: 1 is also that of"),
        "{}",
        dup.stderr
    );
}
