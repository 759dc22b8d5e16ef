//! `llmsurge sweep serve`: the Cartesian product of server configurations and benchmark
//! configurations, a server started once per serve configuration, each point measured
//! by `benchmark run` (this same executable, started again, so there is one engine), and
//! a sweep report of every point's headline figures.
//!
//! Points are `s{S}-b{B}` (`b{B}` without `--serve-cmd`; a named configuration's name
//! stands for `s{S}` or `b{B}`), each a directory under
//! `--output-dir` holding its full report, its console output (`run.log`) and the
//! server's log (`server.log`, a hard link to `s{S}.server.log`). [`sla`] is `sweep
//! serve-sla`: the capacity search per point and SLA, on the same servers and points.

pub mod charts;
pub mod filter;
pub mod params;
pub mod plot;
pub mod report;
pub mod secrets;
pub mod server;
pub mod sla;

use crate::cli::args::SweepServeArgs;
use crate::cli::{Cli, UsageError, usage_error};
use crate::exit_codes;
use clap::{Args, CommandFactory};
use llmsurge_coordinator::server_metrics::fingerprint::{self, ServerFingerprint};
use llmsurge_proto::inert::terminal;
use params::Params;
use report::{Outcome, Point, Row, Status, SweepReport};
use server::Server;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The file that marks a point complete, beside its report.
const DONE: &str = "point.json";
/// Lines of a server's log a failed configuration's rows keep.
const TAIL_LINES: usize = 10;
/// How long an interrupted benchmark may take to write its report before it is killed.
const BENCH_STOP_GRACE: Duration = Duration::from_secs(30);

/// One benchmark configuration, checked.
struct Bench {
    /// Its name in the file, when it has one.
    name: Option<String>,
    params: Params,
    flags: Vec<String>,
    /// The flags after `--` less those this configuration sets itself.
    common: Vec<String>,
    /// Flags (with their values) left out of this benchmark's command line, wherever
    /// they come from: serve-sla's synchronous load has no --max-concurrency.
    skip: &'static [&'static str],
}

/// One serve configuration (or the one `--target` without `--serve-cmd`).
struct Serve {
    index: Option<usize>,
    /// Its name in the file, when it has one.
    name: Option<String>,
    params: Params,
    /// The benchmark configurations it runs with: all, or those `--link-vars` pairs it
    /// with.
    benches: Vec<usize>,
}

/// Runs the sweep; returns the exit code.
pub fn sweep_serve(args: &SweepServeArgs) -> i32 {
    let (serves, benches) = match check(args) {
        Ok(v) => v,
        Err(UsageError(m)) => return usage_error(&m),
    };
    if let Err(m) = crate::compare::fingerprint::check_allowed(&args.allow_server_change) {
        return usage_error(&m);
    }
    if !args.allow_server_change.is_empty() && !args.resume {
        return usage_error(
            "--allow-server-change: only --resume compares servers (give it with --resume)",
        );
    }
    let runtime = match prepare(&args.output_dir) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let spec = match chart_spec(args, &serves, &benches) {
        Ok(s) => s,
        Err(UsageError(m)) => return usage_error(&m),
    };
    runtime.block_on(run(args, &spec, &serves, &benches))
}

/// The sweep's output directory, made, and the runtime it runs on; else the exit code,
/// said on stderr.
fn prepare(out: &Path) -> Result<tokio::runtime::Runtime, i32> {
    if let Err(e) = std::fs::create_dir_all(out) {
        return Err(usage_error(&format!("--output-dir {}: {e}", out.display())));
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            crate::stdout::eprintln(&format!("error: cannot start the runtime: {e}"));
            exit_codes::RUN_FAILED
        })
}

/// Registers as secrets ([`secrets`]) everything the sweep is given that may carry one,
/// as soon as it is read: the server and hook commands, the target URL, the shared
/// `benchmark run` flags and the API keys of the environment (`LLMSURGE_API_KEY`,
/// `OPENAI_API_KEY`). Each output of the sweep (its reports, its console, a server log's
/// tail or a run's error it quotes) is then scrubbed of them.
fn register_secrets(args: &SweepServeArgs) {
    for name in ["LLMSURGE_API_KEY", "OPENAI_API_KEY"] {
        if let Ok(key) = std::env::var(name) {
            llmsurge_proto::redact::register_secret(&key);
        }
    }
    for cmd in [&args.serve_cmd, &args.after_bench_cmd]
        .into_iter()
        .flatten()
    {
        secrets::command(cmd);
    }
    if let Some(target) = &args.target {
        secrets::register_url(target);
    }
    secrets::argv(&args.common);
}

/// The charts' settings, checked against the configurations' parameters.
fn chart_spec(
    args: &SweepServeArgs,
    serves: &[Serve],
    benches: &[Bench],
) -> Result<charts::ChartSpec, UsageError> {
    // Every parameter a point can have, as a row of the report would hold it.
    let rows: Vec<Row> = serves
        .iter()
        .flat_map(|s| {
            benches.iter().enumerate().map(|(j, b)| {
                let at = Point {
                    point: point_name(s, j, benches),
                    serve_index: s.index,
                    server: serve_tag(s),
                    bench_index: j,
                    serve_params: s.params.clone(),
                    bench_params: b.params.clone(),
                };
                Row::new(at, Status::Ok, Outcome::Ok)
            })
        })
        .collect();
    let figure = |k: &str| {
        crate::report::across_runs::FIGURES.contains(&k) || report::GPU_FIGURES.contains(&k)
    };
    let mut curve_by = Vec::new();
    for k in args
        .curve_by
        .iter()
        .map(|k| k.trim())
        .filter(|k| !k.is_empty())
    {
        match charts::qualify(&rows, k) {
            Some(q) => curve_by.push(q),
            None => {
                return Err(UsageError(format!(
                    "--curve-by: no parameter {k:?} in --serve-params or --bench-params"
                )));
            }
        }
    }
    let filter = match &args.filter {
        Some(spec) => Some(
            filter::Filter::parse(spec, |k| charts::qualify(&rows, k).is_some() || figure(k))
                .map_err(UsageError)?,
        ),
        None => None,
    };
    // Every point's GPU count is known before anything runs: a bad one is refused now.
    let gpus = match args.gpus.as_deref().map(str::trim) {
        None => None,
        Some(g) => {
            Some(charts::gpus(&rows, g, "--serve-params or --bench-params").map_err(UsageError)?)
        }
    };
    Ok(charts::ChartSpec {
        curve_by,
        filter,
        gpus,
        images: image_formats(&args.chart_images)?,
    })
}

/// `--chart-images`: the image formats the charts are also written as.
fn image_formats(
    values: &[String],
) -> Result<Vec<crate::report::charts::draw::ImageFormat>, UsageError> {
    let mut images = Vec::new();
    for f in values.iter().map(|f| f.trim()).filter(|f| !f.is_empty()) {
        images.push(match f {
            "png" => crate::report::charts::draw::ImageFormat::Png,
            "svg" => crate::report::charts::draw::ImageFormat::Svg,
            other => {
                return Err(UsageError(format!(
                    "--chart-images: unknown format {other:?} (expected png or svg)"
                )));
            }
        });
    }
    Ok(images)
}

/// Loads and checks every configuration before anything starts.
fn check(args: &SweepServeArgs) -> Result<(Vec<Serve>, Vec<Bench>), UsageError> {
    check_loads(args, &[(Vec::new(), &[])])
}

/// A load a point's command line is checked as: the flags it adds, those it leaves out.
type Load = (Vec<String>, &'static [&'static str]);

/// [`check`], each point's command line checked as each of `loads` runs it (serve-sla
/// runs several loads per point, each with a profile of its own).
fn check_loads(
    args: &SweepServeArgs,
    loads: &[Load],
) -> Result<(Vec<Serve>, Vec<Bench>), UsageError> {
    register_secrets(args);
    check_target(args)?;
    // The sweep's own: each point's run gets them from the sweep.
    for (flag, own) in [
        ("--target", "--target"),
        ("--output-dir", "--output-dir (-o)"),
    ] {
        if args
            .common
            .iter()
            .any(|w| w == flag || w.starts_with(&format!("{flag}=")))
        {
            return Err(UsageError(format!(
                "{flag} after --: the sweep gives each point's run its own; give the sweep {own} before --"
            )));
        }
    }
    if args.serve_cmd.is_none() && args.target.is_none() {
        return Err(UsageError(
            "sweep serve: give --serve-cmd (a server to start) or --target (a running one)".into(),
        ));
    }
    if args.serve_cmd.is_none() && args.serve_params.is_some() {
        return Err(UsageError(
            "--serve-params needs --serve-cmd (the command its configurations fill in)".into(),
        ));
    }
    let mut serves = match (&args.serve_cmd, &args.serve_params) {
        (None, _) => vec![Serve {
            index: None,
            name: None,
            params: Params::new(),
            benches: Vec::new(),
        }],
        (Some(_), None) => vec![Serve {
            index: Some(0),
            name: None,
            params: Params::new(),
            benches: Vec::new(),
        }],
        (Some(_), Some(path)) => params::load_list("--serve-params", path)?
            .into_iter()
            .enumerate()
            .map(|(i, e)| Serve {
                index: Some(i),
                name: e.name,
                params: e.params,
                benches: Vec::new(),
            })
            .collect(),
    };
    if let Some(template) = &args.serve_cmd {
        for s in &serves {
            secrets::params(&s.params);
            let label = label_of("--serve-params", args.serve_params.as_deref(), s.index);
            params::serve_command(template, &s.params, 1, &label)?;
        }
    }
    let bench_params = match &args.bench_params {
        Some(path) => params::load_list("--bench-params", path)?,
        None => vec![params::Entry::default()],
    };
    bench_params.iter().for_each(|e| {
        secrets::params(&e.params);
    });
    // A target the points can reach, for the check of their command lines.
    let target = args
        .target
        .as_deref()
        .unwrap_or("http://127.0.0.1:{port}")
        .replace("{port}", "1");
    let cli = Cli::command();
    let run = cli
        .find_subcommand("benchmark")
        .and_then(|b| b.find_subcommand("run"))
        .ok_or_else(|| UsageError("the benchmark run command is missing".into()))?;
    // The flags after `--` alone first: an error in them is theirs, not a bench entry's.
    let alone = Bench {
        name: None,
        params: Params::new(),
        flags: Vec::new(),
        common: args.common.clone(),
        skip: &[],
    };
    let argv: Vec<String> = std::iter::once("llmsurge".to_string())
        .chain(bench_argv(args, &alone, &target, &args.output_dir, false))
        .collect();
    parse_run(&argv).map_err(|e| UsageError(format!("the benchmark run flags after --: {e}")))?;
    let mut benches = Vec::new();
    let shared_profile = params::without_overridden(run, &args.common, &["--profile".into()]).len()
        < args.common.len();
    for (i, params::Entry { name, params: p }) in bench_params.into_iter().enumerate() {
        let label = label_of("--bench-params", args.bench_params.as_deref(), Some(i));
        let flags = params::bench_flags(run, &p, &label, shared_profile)?;
        let common = params::without_overridden(run, &args.common, &flags);
        let bench = Bench {
            name,
            params: p,
            flags,
            common,
            skip: &[],
        };
        secrets::argv(&bench.flags);
        // The whole command line, as a point will run it, through the real definition
        // and the real checks of `benchmark run`.
        let dir = args.output_dir.join(format!("b{i}"));
        // Without --bench-params every point is the flags after `--` alone.
        let label = match &args.bench_params {
            Some(_) => label,
            None => "the benchmark run flags after --".to_string(),
        };
        for (extra, skip) in loads {
            let mut flags = bench.flags.clone();
            flags.extend(extra.iter().cloned());
            let load = Bench {
                name: None,
                params: Params::new(),
                flags,
                common: bench.common.clone(),
                skip,
            };
            let argv: Vec<String> = std::iter::once("llmsurge".to_string())
                .chain(bench_argv(args, &load, &target, &dir, false))
                .collect();
            let plan = parse_run(&argv)
                .and_then(|run| crate::cli::resolve::resolve(&run).map_err(|e| e.0))
                .map_err(|e| UsageError(format!("{label}: {e}")))?;
            // The sweep reads each point's benchmarks.json.
            let json = plan.outputs.iter().any(|o| {
                matches!(o, crate::report::Output::Json(path)
                    if path.file_name().is_some_and(|n| n == "benchmarks.json"))
            });
            if !json {
                return Err(UsageError(format!(
                    "{label}: --outputs must include json (the sweep reads each point's benchmarks.json), e.g. --outputs json,html"
                )));
            }
            // A point's plan alone is no point: the sweep's own --dry-run prints them all.
            if plan.dry_run {
                return Err(UsageError(format!(
                    "{label}: --dry-run would make every point print its plan and measure nothing; give the sweep's own --dry-run (before --)"
                )));
            }
        }
        benches.push(bench);
    }
    link(args.link_vars.as_deref(), &mut serves, &benches)?;
    // Names become folders: two points may not share one.
    let mut folders = std::collections::BTreeSet::new();
    for s in &serves {
        for &b in &s.benches {
            let name = point_name(s, b, &benches);
            if !folders.insert(name.clone()) {
                return Err(UsageError(format!(
                    "--serve-params/--bench-params: two points would share the folder {}; give the configurations distinct names",
                    terminal(&name)
                )));
            }
        }
    }
    Ok((serves, benches))
}

/// Pairs each serve configuration with its benchmark configurations: every one, or with
/// `--link-vars` (vLLM's `SERVE_KEY=BENCH_KEY,...`) those whose values of each pair of
/// keys are equal (both present).
fn link(spec: Option<&str>, serves: &mut [Serve], benches: &[Bench]) -> Result<(), UsageError> {
    let mut pairs = Vec::new();
    for item in spec.unwrap_or_default().split(',').map(str::trim) {
        if item.is_empty() {
            continue;
        }
        let Some((s, b)) = item
            .split_once('=')
            .map(|(s, b)| (s.trim(), b.trim()))
            .filter(|(s, b)| !s.is_empty() && !b.is_empty() && !b.contains('='))
        else {
            return Err(UsageError(format!(
                "--link-vars: {:?} is not SERVE_KEY=BENCH_KEY (e.g. max_num_seqs=max_concurrency)",
                terminal(item)
            )));
        };
        if !serves.iter().any(|x| x.params.contains_key(s)) {
            return Err(UsageError(format!(
                "--link-vars: no serve configuration has the key {s:?}"
            )));
        }
        if !benches.iter().any(|x| x.params.contains_key(b)) {
            return Err(UsageError(format!(
                "--link-vars: no bench configuration has the key {b:?}"
            )));
        }
        pairs.push((s.to_string(), b.to_string()));
    }
    // 32 and 32.0 are one value, as in vLLM (Python's ==); "32" is another.
    let same = |a: &serde_json::Value, b: &serde_json::Value| match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    };
    for s in serves.iter_mut() {
        s.benches = (0..benches.len())
            .filter(|&b| {
                pairs.iter().all(
                    |(sk, bk)| match (s.params.get(sk), benches[b].params.get(bk)) {
                        (Some(x), Some(y)) => same(x, y),
                        _ => false,
                    },
                )
            })
            .collect();
    }
    if serves.iter().all(|s| s.benches.is_empty()) {
        return Err(UsageError(
            "--link-vars: no serve configuration matches any bench configuration on every linked key; nothing would run".into(),
        ));
    }
    Ok(())
}

/// `--target` and `{port}`: the target is a server's URL (a trailing `/v1` is fine, as
/// for `benchmark run`), and `{port}` is where both the server and the target have it.
fn check_target(args: &SweepServeArgs) -> Result<(), UsageError> {
    let cmd_port = args.serve_cmd.as_deref().map(|c| c.contains("{port}"));
    let target_port = args.target.as_deref().map(|t| t.contains("{port}"));
    match (cmd_port, target_port) {
        (Some(false), None) => {
            return Err(UsageError(
                "--serve-cmd has no {port} and no --target is given: put {port} where the server takes its port (e.g. --port {port}), or give --target with the URL the server listens on".into(),
            ));
        }
        (Some(false), Some(true)) => {
            return Err(UsageError(
                "--target holds {port} but --serve-cmd does not: put {port} where the server takes its port (e.g. --port {port}), or give --target the server's own port".into(),
            ));
        }
        (None, Some(true)) => {
            return Err(UsageError(
                "--target holds {port}, which only a server the sweep starts gets (--serve-cmd); give the running server's port".into(),
            ));
        }
        _ => {}
    }
    if let Some(target) = &args.target {
        match crate::cli::resolve::resolve_target(Some(&target.replace("{port}", "1"))) {
            Ok(crate::cli::resolve::TargetSpec::Url(_)) => {}
            Ok(crate::cli::resolve::TargetSpec::Mock) => {
                return Err(UsageError(
                    "--target: give the server's URL (e.g. http://127.0.0.1:8000); the sweep has no built-in mock (run `llmsurge mock-server` as --serve-cmd)".into(),
                ));
            }
            Err(e) => return Err(UsageError(e.0)),
        }
    }
    Ok(())
}

/// The server's base URL (without a trailing `/v1`) of a point's target: where the
/// sweep's own requests (readiness, cache resets) go and what a hook is given.
fn base_url(target: &str) -> String {
    match crate::cli::resolve::resolve_target(Some(target)) {
        Ok(crate::cli::resolve::TargetSpec::Url(url)) => url,
        // Checked before the sweep started.
        _ => target.to_string(),
    }
}

/// `argv` (`llmsurge benchmark run …`) parsed by the real `benchmark run` definition
/// (scenario files applied); an error is clap's first line.
fn parse_run(argv: &[String]) -> Result<Box<crate::cli::args::RunArgs>, String> {
    use clap::FromArgMatches;
    let command = crate::cli::scenario::apply(Cli::command(), argv)?;
    let matches = crate::cli::negative_numbers_are_values(command)
        .try_get_matches_from(argv)
        // clap's hints kept: "did you mean", possible values, llmsurge's form of a
        // vLLM flag (issue 38).
        .map_err(|e| crate::cli::clap_line::one_line(&e))?;
    match Cli::from_arg_matches(&matches).map(|c| c.into_command()) {
        Ok(crate::cli::Command::Benchmark(crate::cli::BenchmarkCommand::Run(run))) => Ok(run),
        Ok(_) => Err("not a benchmark run command line".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn label_of(flag: &str, path: Option<&Path>, index: Option<usize>) -> String {
    match (path, index) {
        (Some(p), Some(i)) => format!("{flag} {}: entry {i}", p.display()),
        _ => flag.to_string(),
    }
}

/// A serve configuration's part of its folders' names: its name, else `s{S}`.
fn serve_tag(serve: &Serve) -> Option<String> {
    match (&serve.name, serve.index) {
        (Some(n), _) => Some(params::folder_name(n)),
        (None, Some(s)) => Some(format!("s{s}")),
        (None, None) => None,
    }
}

/// A point's name and folder: the configurations' names (file-system safe), else
/// `s{S}-b{B}` (`b{B}` without `--serve-cmd`).
fn point_name(serve: &Serve, bench: usize, benches: &[Bench]) -> String {
    let b = match &benches[bench].name {
        Some(n) => params::folder_name(n),
        None => format!("b{bench}"),
    };
    match serve_tag(serve) {
        Some(s) => format!("{s}-{b}"),
        None => b,
    }
}

/// Point `bench` of serve configuration `serve`.
fn point_of(serve: &Serve, bench: usize, benches: &[Bench]) -> Point {
    Point {
        point: point_name(serve, bench, benches),
        serve_index: serve.index,
        server: serve_tag(serve),
        bench_index: bench,
        // As every output shows them: a credential-named value of any length hidden.
        serve_params: secrets::params(&serve.params),
        bench_params: secrets::params(&benches[bench].params),
    }
}

/// What a point's figures depend on, recorded in its `point.json`: `--resume` keeps a
/// point only when the sweep's are the same. As written to a file: secrets redacted
/// (so a changed secret alone does not run a point again).
fn inputs(args: &SweepServeArgs, serve: &Serve, bench: &Bench) -> serde_json::Value {
    // Redacted as the outputs are: a changed secret alone runs nothing again.
    let v = serde_json::json!({
        "serve_cmd": args.serve_cmd.as_deref().map(secrets::command),
        "serve_params": secrets::params(&serve.params),
        "bench_params": secrets::params(&bench.params),
        "shared_flags": secrets::argv(&args.common),
        // The variables every point's run reads (a CI job's LLMSURGE_MAX_SECONDS).
        "environment": run_environment(),
        "repeat": args.repeat,
        "llmsurge_version": env!("CARGO_PKG_VERSION"),
    });
    let mut v = v;
    if v["environment"].as_array().is_some_and(Vec::is_empty)
        && let Some(o) = v.as_object_mut()
    {
        o.remove("environment");
    }
    let text = v.to_string();
    serde_json::from_str(&llmsurge_proto::redact::scrub(&text)).unwrap_or(v)
}

/// A point's report and its run's exit code, when an earlier run completed it with a
/// valid run of the same `inputs`; otherwise why it runs again, one line.
fn resumable(
    dir: &Path,
    inputs: &serde_json::Value,
) -> Result<(crate::report::json::Report, i32), String> {
    let done: serde_json::Value = std::fs::read(dir.join(DONE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("it has no complete report")?;
    let code = done
        .get("exit_code")
        .and_then(serde_json::Value::as_i64)
        .and_then(|c| i32::try_from(c).ok());
    if done.get("complete").and_then(serde_json::Value::as_bool) != Some(true) {
        return Err(format!(
            "its run did not complete (exit code {})",
            code.map_or("unknown".into(), |c| c.to_string())
        ));
    }
    if code == Some(exit_codes::INVALID_RUN) {
        return Err("its run was invalid (exit code 4)".into());
    }
    let changed = changes(done.get("inputs"), inputs);
    if !changed.is_empty() {
        return Err(changed.join("; "));
    }
    let report = crate::report::json::Report::load(&dir.join("benchmarks.json"))
        .map_err(|e| format!("its report cannot be read: {e}"))?;
    Ok((report, code.unwrap_or(exit_codes::OK)))
}

/// What differs between the inputs a point recorded and the sweep's, one phrase each
/// (`bench params changed: rate 2 → 4`).
fn changes(recorded: Option<&serde_json::Value>, now: &serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    let Some(recorded) = recorded else {
        return vec!["its point.json records no parameters (an older llmsurge wrote it)".into()];
    };
    let shown = |v: Option<&Value>| match v {
        None | Some(Value::Null) => "(none)".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
            let words: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
            if words.is_empty() {
                "(none)".into()
            } else {
                words.join(" ")
            }
        }
        Some(other) => other.to_string(),
    };
    let mut out = Vec::new();
    for (key, what) in [
        ("serve_params", "serve params"),
        ("bench_params", "bench params"),
        ("shared_flags", "shared flags (after --)"),
        ("environment", "LLMSURGE_* variables"),
        ("serve_cmd", "--serve-cmd"),
        ("repeat", "--repeat"),
        ("llmsurge_version", "llmsurge version"),
    ] {
        let (was, is) = (recorded.get(key), now.get(key));
        if was == is || (key == "shared_flags" && flag_groups(was) == flag_groups(is)) {
            continue;
        }
        match (
            was.and_then(Value::as_object),
            is.and_then(Value::as_object),
        ) {
            (Some(a), Some(b)) => {
                let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
                keys.sort();
                keys.dedup();
                let diffs: Vec<String> = keys
                    .into_iter()
                    .filter(|k| a.get(*k) != b.get(*k))
                    .map(|k| format!("{k} {} → {}", shown(a.get(k)), shown(b.get(k))))
                    .collect();
                out.push(format!("{what} changed: {}", diffs.join(", ")));
            }
            _ => out.push(format!("{what} changed: {} → {}", shown(was), shown(is))),
        }
    }
    out
}

/// A bench configuration's index among a server's points, and a line of why.
type PointWhy = (usize, String);

/// The resumed points (all taken out of `resumed`: each is checked once) whose reports
/// measured a server that differs from `now` in a field the compare gate judges and
/// `--allow-server-change` does not allow, each with why it runs again; and the points
/// kept without the check passing (no fingerprint, or a change allowed), each with why.
fn other_servers(
    args: &SweepServeArgs,
    resumed: &mut Vec<(usize, Option<ServerFingerprint>)>,
    now: &ServerFingerprint,
) -> (Vec<PointWhy>, Vec<PointWhy>) {
    let (mut again, mut kept) = (Vec::new(), Vec::new());
    for (b, recorded) in resumed.drain(..) {
        let Some(recorded) = recorded else {
            kept.push((
                b,
                "its report has no server fingerprint (an older llmsurge wrote it): not checked against this sweep's server".to_string(),
            ));
            continue;
        };
        let check = crate::compare::fingerprint::ServerCheck {
            changes: fingerprint::changes(&recorded, now),
            allowed: args.allow_server_change.clone(),
        };
        let failing: Vec<String> = check.failing().iter().map(|c| c.describe()).collect();
        if !failing.is_empty() {
            again.push((
                b,
                format!(
                    "measured against another server: {} (--allow-server-change FIELD keeps it)",
                    failing.join("; ")
                ),
            ));
            continue;
        }
        let allowed = check.warnings(true);
        if !allowed.is_empty() {
            kept.push((b, allowed.join("; ")));
        }
    }
    (again, kept)
}

/// Command-line words as a sorted list of flags, each with its values (`--k=v` as `--k`
/// `v`): flags given in another order, or with `=`, run the same benchmark.
fn flag_groups(words: Option<&serde_json::Value>) -> Option<Vec<Vec<String>>> {
    let is_flag = |w: &str| {
        w.starts_with('-') && w[1..].starts_with(|c: char| c == '-' || c.is_ascii_alphabetic())
    };
    let mut groups: Vec<Vec<String>> = Vec::new();
    for w in words?
        .as_array()?
        .iter()
        .filter_map(serde_json::Value::as_str)
    {
        match groups.last_mut() {
            Some(g) if !is_flag(w) => g.push(w.to_string()),
            _ => groups.push(match w.split_once('=') {
                Some((flag, value)) if is_flag(w) => vec![flag.to_string(), value.to_string()],
                _ => vec![w.to_string()],
            }),
        }
    }
    groups.sort();
    Some(groups)
}

/// The sweep's signals: a Ctrl-C or SIGTERM ends it after stopping what it started.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// The signal handlers and this executable (each point runs its `benchmark run`),
    /// which a sweep needs before its first server; else the exit code, said on stderr.
    fn with_exe() -> Result<(Self, PathBuf), i32> {
        let signals = Self::install().map_err(|e| {
            crate::stdout::eprintln(&format!("error: cannot install signal handlers: {e}"));
            exit_codes::RUN_FAILED
        })?;
        let exe = std::env::current_exe().map_err(|e| {
            crate::stdout::eprintln(&format!("error: cannot find the llmsurge executable: {e}"));
            exit_codes::RUN_FAILED
        })?;
        Ok((signals, exe))
    }

    /// The next signal: SIGINT or SIGTERM.
    async fn next(&mut self) -> nix::sys::signal::Signal {
        tokio::select! {
            _ = self.int.recv() => nix::sys::signal::Signal::SIGINT,
            _ = self.term.recv() => nix::sys::signal::Signal::SIGTERM,
        }
    }
}

/// How one benchmark child ended.
enum Ended {
    Exited(i32),
    ServerDied(String),
    Interrupted,
}

async fn run(
    args: &SweepServeArgs,
    spec: &charts::ChartSpec,
    serves: &[Serve],
    benches: &[Bench],
) -> i32 {
    let (mut signals, exe) = match Signals::with_exe() {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    let out = &args.output_dir;
    let mut sweep = SweepReport {
        serve_cmd: args.serve_cmd.as_deref().map(secrets::command),
        provenance: report::Provenance::now(args),
        interrupted: false,
        rows: Vec::new(),
    };
    let mut any_failed = false;
    'serves: for serve in serves {
        let row_template =
            |b: usize| Row::new(point_of(serve, b, benches), Status::Failed, Outcome::Failed);
        // Points this configuration still has to run, and the servers the complete ones
        // measured (checked against this sweep's once a point has read it).
        let mut todo = Vec::new();
        let mut resumed: Vec<(usize, Option<ServerFingerprint>)> = Vec::new();
        for &b in &serve.benches {
            let bench = &benches[b];
            let dir = out.join(point_name(serve, b, benches));
            if !args.resume || args.dry_run {
                todo.push(b);
                continue;
            }
            match resumable(&dir, &inputs(args, serve, bench)) {
                Ok((report, code)) => {
                    let mut t = row_template(b);
                    t.status = Status::Resumed;
                    t.exit_code = Some(code);
                    sweep.provenance.add_model(&report.target.model);
                    sweep.rows.extend(report::rows_of(&t, &report, &dir));
                    crate::stdout::println(&format!(
                        "{}: complete, skipped (--resume)",
                        t.at.point
                    ));
                    resumed.push((b, report.server_fingerprint));
                }
                Err(why) => {
                    // A point never run is no news; one run before and run again is.
                    if dir.exists() {
                        crate::stdout::println(&format!(
                            "{}: runs again (--resume): {why}",
                            point_name(serve, b, benches)
                        ));
                    }
                    todo.push(b);
                }
            }
        }
        if todo.is_empty() {
            if let (Some(tag), false) = (serve_tag(serve), resumed.is_empty()) {
                crate::stdout::println(&format!(
                    "server {tag}: not started (every point complete, --resume), so its points were not checked against the server it would run now"
                ));
            }
            continue;
        }
        let Some((port, target)) = port_and_target(args) else {
            return exit_codes::RUN_FAILED;
        };
        let command = server_command(args, serve, port);
        let server_log = serve_tag(serve).map(|t| out.join(format!("{t}.server.log")));
        // The last lines of this configuration's server log, for a failed row.
        let server_tail = || {
            server_log
                .as_deref()
                .map(|l| server::log_tail(l, TAIL_LINES))
                .unwrap_or_default()
        };
        if args.dry_run {
            if let (Some(cmd), Some(s)) = (&command, serve_tag(serve)) {
                crate::stdout::println(&format!("server {s}: {}", terminal(&cmd.shown)));
            }
            if let Some(hook) = &args.after_bench_cmd {
                crate::stdout::println(&format!(
                    "after each benchmark but the last: {}",
                    terminal(&secrets::command(&hook_command(hook, &target)))
                ));
            }
            for &b in &todo {
                let dir = out.join(point_name(serve, b, benches));
                let argv = bench_argv(args, &benches[b], &target, &dir, true);
                crate::stdout::println(&format!(
                    "plan {}: llmsurge {}",
                    point_name(serve, b, benches),
                    terminal(&secrets::argv(&argv).join(" "))
                ));
                let mut plan = tokio::process::Command::new(&exe);
                plan.args(&argv)
                    .env_clear()
                    .envs(child_env())
                    .stdin(Stdio::null());
                server::die_with_sweep(&mut plan, nix::sys::signal::Signal::SIGKILL);
                match plan.output().await {
                    Ok(o) if o.status.success() => {
                        crate::stdout::print(&llmsurge_proto::inert::terminal_lines(
                            &String::from_utf8_lossy(&o.stdout),
                        ));
                    }
                    Ok(o) => {
                        crate::stdout::eprintln(&format!(
                            "{}: the plan failed: {}",
                            point_name(serve, b, benches),
                            terminal(String::from_utf8_lossy(&o.stderr).trim())
                        ));
                        any_failed = true;
                    }
                    Err(e) => {
                        crate::stdout::eprintln(&format!(
                            "{}: cannot run llmsurge: {e}",
                            point_name(serve, b, benches)
                        ));
                        any_failed = true;
                    }
                }
            }
            continue;
        }
        // Start the server, if the sweep starts one.
        let mut running: Option<Server> = None;
        if let (Some(cmd), Some(log)) = (&command, &server_log) {
            let own_keys = own_keys(serve, benches);
            match start_server(args, &exe, cmd, log, &target, own_keys, &mut signals).await {
                Started::Ready(srv) => running = Some(srv),
                Started::Interrupted => {
                    sweep.interrupted = true;
                    break 'serves;
                }
                Started::Failed { error, log_tail } => {
                    for &b in &todo {
                        let mut row = row_template(b);
                        row.outcome = Outcome::ServerFailed;
                        row.error = Some(error.clone());
                        row.log_tail = log_tail.clone();
                        sweep.rows.push(row);
                    }
                    write_report(out, &mut sweep, spec);
                    continue;
                }
            }
        }
        let mut server_dead: Option<String> = None;
        let mut n = 0;
        // `todo` grows while it runs: a resumed point of another server joins it.
        while let Some(&b) = todo.get(n) {
            n += 1;
            let name = point_name(serve, b, benches);
            let dir = out.join(&name);
            let mut row = row_template(b);
            if let Some(why) = &server_dead {
                row.outcome = Outcome::ServerFailed;
                row.error = Some(why.clone());
                row.log_tail = server_tail();
                sweep.rows.push(row);
                continue;
            }
            if n > 1 {
                (row.cache_reset, row.after_bench_cmd) =
                    between_benchmarks(args, &target, &name).await;
            }
            let _ = std::fs::remove_dir_all(&dir);
            if let Err(e) = std::fs::create_dir_all(&dir) {
                crate::stdout::eprintln(&format!("error: {}: {e}", dir.display()));
                return exit_codes::RUN_FAILED;
            }
            if let Some(log) = &server_log
                && std::fs::hard_link(log, dir.join("server.log")).is_err()
            {
                // A file system without hard links: a copy at the end of the point.
                let _ = std::fs::copy(log, dir.join("server.log"));
            }
            crate::stdout::println(&format!("{name}: running"));
            let ended = run_point(
                &exe,
                args,
                &benches[b],
                &target,
                &dir,
                running.as_mut(),
                &mut signals,
            )
            .await;
            match ended {
                Ended::Interrupted => {
                    sweep.interrupted = true;
                    row.outcome = Outcome::Interrupted;
                    row.error = Some("interrupted".into());
                    sweep.rows.push(row);
                    if let Some(srv) = running.take() {
                        srv.stop().await;
                    }
                    break 'serves;
                }
                Ended::ServerDied(why) => {
                    let why = format!("the server died: {why}");
                    crate::stdout::eprintln(&format!("{name}: {}", terminal(&why)));
                    row.outcome = Outcome::ServerFailed;
                    row.error = Some(why.clone());
                    row.log_tail = server_tail();
                    sweep.rows.push(row);
                    server_dead = Some(why);
                }
                Ended::Exited(code) => {
                    row.exit_code = Some(code);
                    // 0 ok, 3 a gate failed, 4 an invalid run, 5 an inconclusive gate: each
                    // wrote a whole report.
                    let complete = matches!(code, 0 | 3 | 4 | 5);
                    mark_point(&dir, complete, code, &inputs(args, serve, &benches[b]));
                    match crate::report::json::Report::load(&dir.join("benchmarks.json")) {
                        Ok(report) if complete => {
                            row.status = Status::Ok;
                            sweep.provenance.add_model(&report.target.model);
                            let mut rows = report::rows_of(&row, &report, &dir);
                            // Reasons `benchmark run` gave that its report does not show:
                            // every row of the point carries them.
                            if code == exit_codes::INVALID_RUN
                                && !rows.iter().any(|r| r.outcome == Outcome::Invalid)
                            {
                                let why = invalid_why(&[], &dir);
                                for r in &mut rows {
                                    r.status = Status::Invalid;
                                    r.outcome = Outcome::Invalid;
                                    r.error = Some(why.clone());
                                }
                            }
                            // The point's warnings, which were only in its run.log.
                            let warnings = rows.first().map_or(&[][..], |r| &r.warnings[..]);
                            for w in warnings.iter().filter(|w| w.starts_with("warning: ")) {
                                crate::stdout::eprintln(&format!("{name}: {}", terminal(w)));
                            }
                            for r in rows.iter().filter(|r| !r.outcome.measured()) {
                                crate::stdout::eprintln(&format!(
                                    "{name}: {}",
                                    terminal(r.error.as_deref().unwrap_or_default())
                                ));
                            }
                            crate::stdout::println(&format!(
                                "{name}: done (exit code {code}): {}",
                                outcomes(&rows)
                            ));
                            sweep.rows.extend(rows);
                            if let Some(now) = &report.server_fingerprint {
                                let (again, kept) = other_servers(args, &mut resumed, now);
                                for (b, why) in again {
                                    let point = point_name(serve, b, benches);
                                    crate::stdout::println(&format!(
                                        "{point}: runs again (--resume): {}",
                                        terminal(&why)
                                    ));
                                    sweep.rows.retain(|r| r.at.point != point);
                                    todo.push(b);
                                }
                                for (b, why) in kept {
                                    let point = point_name(serve, b, benches);
                                    let line = format!("kept (--resume): {why}");
                                    crate::stdout::println(&format!(
                                        "{point}: {}",
                                        terminal(&line)
                                    ));
                                    for r in sweep.rows.iter_mut().filter(|r| r.at.point == point) {
                                        r.warnings.push(line.clone());
                                    }
                                }
                            }
                        }
                        _ => {
                            let tail = server::log_tail(&dir.join("run.log"), 3);
                            row.error = Some(format!(
                                "benchmark run ended with exit code {code}: {}",
                                tail.join(" / ")
                            ));
                            crate::stdout::eprintln(&format!(
                                "{name}: {}",
                                terminal(row.error.as_deref().unwrap_or_default())
                            ));
                            sweep.rows.push(row);
                        }
                    }
                }
            }
            write_report(out, &mut sweep, spec);
        }
        if let Some(srv) = running.take() {
            srv.stop().await;
            crate::stdout::println(&format!(
                "server {}: stopped",
                serve_tag(serve).unwrap_or_default()
            ));
        }
    }
    if args.dry_run {
        return if any_failed {
            exit_codes::RUN_FAILED
        } else {
            exit_codes::OK
        };
    }
    write_report(out, &mut sweep, spec);
    crate::stdout::println(&report::console_table(&sweep));
    crate::stdout::println(&format!(
        "sweep report: {}",
        out.join("sweep.json").display()
    ));
    exit_code(&sweep)
}

/// The sweep's exit code, with a line per failed point on stderr: 130 when interrupted;
/// 1 when a point failed (its server, or its `benchmark run` without a report); 4 when
/// none failed but a point's run was invalid; else 0 (a failed or inconclusive SLO, a
/// load the server did not keep up with: the point measured what it was asked to).
fn exit_code(sweep: &SweepReport) -> i32 {
    if sweep.interrupted {
        return exit_codes::INTERRUPTED;
    }
    let mut failed: Vec<&Row> = Vec::new();
    for r in sweep.rows.iter().filter(|r| r.outcome.failed()) {
        if !failed.iter().any(|f| f.at.point == r.at.point) {
            failed.push(r);
        }
    }
    if failed.is_empty() {
        return exit_codes::OK;
    }
    let points = {
        let mut p: Vec<&str> = sweep.rows.iter().map(|r| r.at.point.as_str()).collect();
        p.dedup();
        p.len()
    };
    crate::stdout::eprintln(&format!(
        "sweep: {} of {points} points failed:",
        failed.len()
    ));
    for r in &failed {
        crate::stdout::eprintln(&format!(
            "  {}: {}: {}",
            r.at.point,
            r.outcome.name(),
            terminal(r.error.as_deref().unwrap_or_default())
        ));
    }
    if failed
        .iter()
        .any(|r| matches!(r.outcome, Outcome::ServerFailed | Outcome::Failed))
    {
        exit_codes::RUN_FAILED
    } else {
        exit_codes::INVALID_RUN
    }
}

/// The outcomes of a point's rows, for its `done` line (`ok`, `not_kept_up`, …).
fn outcomes(rows: &[Row]) -> String {
    let mut names: Vec<&str> = rows.iter().map(|r| r.outcome.name()).collect();
    names.dedup();
    names.join(", ")
}

/// How starting a configuration's server went.
enum Started {
    Ready(Server),
    /// It did not start or never became ready: why, and its log's last lines.
    Failed {
        error: String,
        log_tail: Vec<String>,
    },
    /// The sweep was interrupted while it started (it is stopped).
    Interrupted,
}

/// A configuration's server command: as it runs, and as it may be shown.
struct ServerCommand {
    /// The command `sh -c` runs.
    run: String,
    /// The same with every secret hidden: credential-named flags and words, and the
    /// values of credential-named parameters a `{key}` placeholder took in (a short
    /// token is not registered, so only its name can hide it).
    shown: String,
}

/// `serve`'s command on `port`, when the sweep starts servers.
fn server_command(args: &SweepServeArgs, serve: &Serve, port: u16) -> Option<ServerCommand> {
    let template = args.serve_cmd.as_ref()?;
    let label = label_of("--serve-params", args.serve_params.as_deref(), serve.index);
    // Checked before the sweep started.
    let fill = |p: &Params| params::serve_command(template, p, port, &label).unwrap_or_default();
    Some(ServerCommand {
        run: fill(&serve.params),
        shown: secrets::command(&fill(&secrets::params(&serve.params))),
    })
}

/// Whether every point of `serve` gives its run an API key of its own (a bench param).
fn own_keys(serve: &Serve, benches: &[Bench]) -> bool {
    serve.benches.iter().all(|&b| {
        benches[b]
            .flags
            .iter()
            .any(|f| f == "--api-key" || f.starts_with("--api-key="))
    })
}

/// Starts `cmd` (its output in `log`) through `exe`'s guard and waits until it is ready
/// at `target` (`own_keys`: every point's run carries its own API key).
async fn start_server(
    args: &SweepServeArgs,
    exe: &Path,
    cmd: &ServerCommand,
    log: &Path,
    target: &str,
    own_keys: bool,
    signals: &mut Signals,
) -> Started {
    let _ = std::fs::remove_file(log);
    crate::stdout::println(&format!(
        "{}: starting {}",
        log.display(),
        terminal(&cmd.shown)
    ));
    let mut srv = match Server::start(exe, &cmd.run, log, args.stop_grace) {
        Ok(s) => s,
        Err(e) => {
            return Started::Failed {
                error: format!("the server command cannot start: {e}"),
                log_tail: Vec::new(),
            };
        }
    };
    let access = target_access(args);
    let backend = &access.backend;
    let check = crate::target::TargetCheck {
        request_format: backend.request_format,
        api_key: backend.api_key.as_ref(),
        headers: &backend.headers,
        params: &backend.params,
        health: &access.health,
        connect_timeout: Duration::from_secs(2),
        tls: &backend.tls,
        http2: backend.http2,
        // The sweep takes `benchmark run`'s flags after `--`.
        flags_where: Some("after --"),
    };
    let base = base_url(target);
    let ready = tokio::select! {
        r = srv.wait_ready(&base, access.model.as_deref(), &check, args.ready_timeout, own_keys) => Some(r),
        _ = signals.next() => None,
    };
    match ready {
        None => {
            srv.stop().await;
            Started::Interrupted
        }
        Some(Err(e)) => {
            crate::stdout::eprintln(&format!("{}: {}", log.display(), terminal(&e)));
            srv.stop().await;
            Started::Failed {
                error: e,
                log_tail: server::log_tail(log, TAIL_LINES),
            }
        }
        Some(Ok(())) => Started::Ready(srv),
    }
}

/// Between two benchmarks of one server: `--after-bench-cmd` when given (how it ended),
/// else the `--reset-cache` reset (its answers).
async fn between_benchmarks(
    args: &SweepServeArgs,
    target: &str,
    name: &str,
) -> (
    Option<llmsurge_coordinator::cache_reset::CacheReset>,
    Option<report::HookRun>,
) {
    if let Some(hook) = &args.after_bench_cmd {
        return (None, Some(after_bench(hook, target, name).await));
    }
    if args.reset_cache == "none" {
        return (None, None);
    }
    use llmsurge_coordinator::cache_reset::{CacheResetConfig, ResetMode, reset};
    let access = target_access(args);
    let backend = access.backend;
    let origin = base_url(target);
    let cfg = CacheResetConfig {
        mode: match args.reset_cache.as_str() {
            "auto" => ResetMode::Auto,
            path => ResetMode::Path(path.to_string()),
        },
        headers: llmsurge_proto::credentials::target_headers(
            backend.request_format,
            backend.api_key.as_ref(),
            &backend.headers,
            &origin,
        ),
        origin,
        timeout: Duration::from_secs(30),
        tls: backend.tls.clone(),
        http2: backend.http2,
        before_first: true,
    };
    (Some(reset(&cfg).await), None)
}

/// The environment variable a hook finds the server's port in.
pub const HOOK_PORT_VAR: &str = "LLMSURGE_SWEEP_PORT";
/// The environment variable a hook finds the server's base URL in.
pub const HOOK_TARGET_VAR: &str = "LLMSURGE_SWEEP_TARGET";
/// The environment variable a hook finds the point that just ran in.
pub const HOOK_POINT_VAR: &str = "LLMSURGE_SWEEP_POINT";

/// The server's port at `target` (its URL's, else the scheme's).
fn port_of(target: &str) -> Option<u16> {
    reqwest::Url::parse(target)
        .ok()
        .and_then(|u| u.port_or_known_default())
}

/// `--after-bench-cmd` for the server at `target`: `{port}` and `{target}` (its base URL)
/// filled in, each quoted once for the shell.
fn hook_command(hook: &str, target: &str) -> String {
    let port = port_of(&base_url(target)).map_or_else(String::new, |p| p.to_string());
    hook.replace("{port}", &params::shell_quote(&port))
        .replace("{target}", &params::shell_quote(&base_url(target)))
}

/// Runs `--after-bench-cmd` before point `name` (the server's port and base URL in its
/// environment too); a failure is one line on stderr, and the result goes in the row.
async fn after_bench(hook: &str, target: &str, name: &str) -> report::HookRun {
    let base = base_url(target);
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(hook_command(hook, target))
        .env(HOOK_TARGET_VAR, &base)
        .env(HOOK_POINT_VAR, name)
        .stdin(Stdio::null());
    if let Some(port) = port_of(&base) {
        command.env(HOOK_PORT_VAR, port.to_string());
    }
    server::die_with_sweep(&mut command, nix::sys::signal::Signal::SIGTERM);
    // Its output passes through the sweep's console, scrubbed of the secrets.
    let output = command.output().await;
    if let Ok(o) = &output {
        crate::stdout::print(&String::from_utf8_lossy(&o.stdout));
        let err = String::from_utf8_lossy(&o.stderr);
        if !err.trim().is_empty() {
            crate::stdout::eprintln(err.trim_end());
        }
    }
    let (exit_code, error) = match output.map(|o| o.status) {
        Ok(s) if s.success() => (s.code(), None),
        Ok(s) => match s.code() {
            Some(code) => (Some(code), Some(format!("exited with code {code}"))),
            None => (None, Some(format!("ended by {s}"))),
        },
        Err(e) => (None, Some(format!("cannot start: {e}"))),
    };
    if let Some(why) = &error {
        crate::stdout::eprintln(&format!("{name}: --after-bench-cmd {}", terminal(why)));
    }
    report::HookRun { exit_code, error }
}

/// How the points' `benchmark run` flags (those after `--`, with the environment) make
/// requests, their `--health-path` and `--model`: the sweep's own requests to a server
/// (readiness, cache resets) carry the same credentials and headers as the benchmarks'.
/// [`check`] has parsed the same flags; should they fail now, the defaults (no
/// credentials).
fn target_access(args: &SweepServeArgs) -> Access {
    let argv: Vec<String> = ["llmsurge", "benchmark", "run"]
        .iter()
        .map(|s| s.to_string())
        .chain(args.common.iter().cloned())
        .collect();
    let run = parse_run(&argv).ok();
    let backend = run
        .as_ref()
        .and_then(|r| crate::cli::resolve::resolve_backend(r).ok());
    match (run, backend) {
        (Some(run), Some(backend)) => Access {
            backend,
            health: run.target.health_path.clone(),
            model: run.target.model.clone(),
        },
        _ => Access {
            backend: crate::cli::resolve::BackendPlan::default(),
            health: crate::cli::values::HealthPath::Path("/health".into()),
            model: None,
        },
    }
}

/// How the sweep's own requests reach a server: [`target_access`].
struct Access {
    backend: crate::cli::resolve::BackendPlan,
    health: crate::cli::values::HealthPath,
    model: Option<String>,
}

/// Marks a point's (or a load's) directory done: whether its `benchmark run` wrote a
/// whole report, its exit code, and its [`inputs`] (`--resume` reads all three).
fn mark_point(dir: &Path, complete: bool, code: i32, inputs: &serde_json::Value) {
    let done = serde_json::json!({"complete": complete, "exit_code": code, "inputs": inputs});
    let _ = crate::report::write_atomic(&dir.join(DONE), done.to_string().as_bytes());
}

/// Why a `benchmark run` in `dir` was invalid (it exited 4): the reasons it gives for
/// `benchmarks` (its report judged again), else its own `invalid run:` lines in its
/// console output.
fn invalid_why(benchmarks: &[llmsurge_coordinator::BenchmarkResult], dir: &Path) -> String {
    let mut why = if benchmarks.is_empty() {
        Vec::new()
    } else {
        crate::cli::run::invalid_run(benchmarks)
    };
    if why.is_empty() {
        let log = std::fs::read(dir.join("run.log")).unwrap_or_default();
        why = String::from_utf8_lossy(&log)
            .lines()
            .filter_map(|l| l.strip_prefix("invalid run: "))
            .map(|l| llmsurge_proto::Redaction::default().text(l).into_owned())
            .collect();
    }
    if why.is_empty() {
        why.push("benchmark run judged the run invalid (exit code 4)".into());
    }
    format!("invalid run: {}", why.join("; "))
}

/// Writes the sweep report as it stands (its end time now).
fn write_report(out: &Path, sweep: &mut SweepReport, spec: &charts::ChartSpec) {
    sweep.provenance.touch();
    let charts = charts::charts(&sweep.rows, spec);
    if let Err(e) = report::write(out, sweep, &charts, &spec.images) {
        crate::stdout::eprintln(&format!(
            "error: cannot write the sweep report in {}: {e}",
            out.display()
        ));
    }
}

/// The environment of a `benchmark run` child: the sweep's own, less the variables of
/// the sweep's flags (the child gets them as flags, or not at all).
fn child_env() -> Vec<(String, String)> {
    let own: Vec<String> = SweepServeArgs::augment_args(clap::Command::new("sweep-serve"))
        .get_arguments()
        .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
        .collect();
    std::env::vars().filter(|(k, _)| !own.contains(k)).collect()
}

/// A configuration's server port (a free one when the sweep starts the server, else 0)
/// and the target its points measure; `None`, said on stderr, when no port is free.
fn port_and_target(args: &SweepServeArgs) -> Option<(u16, String)> {
    let port = match args.serve_cmd {
        Some(_) => match server::free_port() {
            Ok(p) => p,
            Err(e) => {
                crate::stdout::eprintln(&format!("error: no free port for the server: {e}"));
                return None;
            }
        },
        None => 0,
    };
    let target = match &args.target {
        Some(t) => t.replace("{port}", &port.to_string()),
        None => format!("http://127.0.0.1:{port}"),
    };
    Some((port, target))
}

/// The `LLMSURGE_*` variables a point's `benchmark run` reads, as `NAME=value` words
/// (secrets hidden), in name order: a changed one changes what the point measures.
fn run_environment() -> Vec<String> {
    let mut vars: Vec<String> = child_env()
        .into_iter()
        .filter(|(k, _)| k.starts_with("LLMSURGE_") && k != "LLMSURGE_LOG")
        .map(|(k, v)| {
            // Hidden as its flag's value is (`LLMSURGE_BACKEND_KWARGS` as
            // `--backend-kwargs`: header values and credential-named body fields).
            let flag = format!(
                "--{}",
                k["LLMSURGE_".len()..].to_lowercase().replace('_', "-")
            );
            let shown = secrets::argv(&[flag, v.clone()]).pop().unwrap_or(v);
            format!("{k}={shown}")
        })
        .collect();
    vars.sort();
    secrets::argv(&vars)
}

/// A point's `benchmark run` command line.
fn bench_argv(
    args: &SweepServeArgs,
    bench: &Bench,
    target: &str,
    dir: &Path,
    dry: bool,
) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        "benchmark".into(),
        "run".into(),
        "--target".into(),
        target.into(),
        "--output-dir".into(),
        dir.display().to_string(),
    ];
    if args.repeat > 1 {
        argv.extend(["--repeat".into(), args.repeat.to_string()]);
    }
    if args.reset_cache_given {
        argv.extend(["--reset-cache".into(), args.reset_cache.clone()]);
    }
    if dry {
        argv.push("--dry-run".into());
    }
    // The shared flags less those the configuration sets: its own value wins.
    let mut rest = bench.common.iter().chain(&bench.flags);
    while let Some(flag) = rest.next() {
        let name = flag.split_once('=').map_or(flag.as_str(), |(n, _)| n);
        if bench.skip.contains(&name) {
            if !flag.contains('=') {
                rest.next();
            }
            continue;
        }
        argv.push(flag.clone());
    }
    argv
}

/// Runs one point's benchmark to its end, watching the server and the signals.
async fn run_point(
    exe: &Path,
    args: &SweepServeArgs,
    bench: &Bench,
    target: &str,
    dir: &Path,
    mut server: Option<&mut Server>,
    signals: &mut Signals,
) -> Ended {
    let log = match std::fs::File::create(dir.join("run.log")) {
        Ok(f) => f,
        Err(e) => {
            crate::stdout::eprintln(&format!("error: {}: {e}", dir.display()));
            return Ended::Exited(exit_codes::RUN_FAILED);
        }
    };
    let err = match log.try_clone() {
        Ok(f) => f,
        Err(e) => {
            crate::stdout::eprintln(&format!("error: {}: {e}", dir.display()));
            return Ended::Exited(exit_codes::RUN_FAILED);
        }
    };
    let mut command = tokio::process::Command::new(exe);
    command
        .args(bench_argv(args, bench, target, dir, false))
        .env_clear()
        .envs(child_env())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .kill_on_drop(true);
    // A SIGKILLed sweep's benchmark stops too (SIGTERM: it stops its workers and writes
    // the report of what it measured).
    server::die_with_sweep(&mut command, nix::sys::signal::Signal::SIGTERM);
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            crate::stdout::eprintln(&format!("error: cannot run llmsurge: {e}"));
            return Ended::Exited(exit_codes::RUN_FAILED);
        }
    };
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let signal = loop {
        tokio::select! {
            status = child.wait() => {
                return Ended::Exited(status.ok().and_then(|s| s.code()).unwrap_or(exit_codes::RUN_FAILED));
            }
            sig = signals.next() => break sig,
            _ = tick.tick() => {
                if let Some(srv) = server.as_deref_mut()
                    && let Some(status) = srv.exited()
                {
                    stop_child(&mut child, nix::sys::signal::Signal::SIGTERM).await;
                    return Ended::ServerDied(format!("the server command exited ({status})"));
                }
            }
        }
    };
    // The benchmark writes the report of what it measured, then ends.
    stop_child(&mut child, signal).await;
    Ended::Interrupted
}

/// Passes `signal` on to a benchmark child and waits for it (killed after a grace).
async fn stop_child(child: &mut tokio::process::Child, signal: nix::sys::signal::Signal) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
    if tokio::time::timeout(BENCH_STOP_GRACE, child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}
