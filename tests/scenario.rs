//! "Start the mock, run a benchmark, read the report" with named options: an end-to-end
//! test says what it runs (`Bench::on(&server).concurrent(4).max_requests(24)`) instead
//! of spelling the run's argument array, and reads as what it checks. The options are
//! the real `llmsurge benchmark run` flags; the run goes through `support::start_run`,
//! so it is the same binary, output directory and dispatch-lag allowance as `run(&[…])`.

use std::process::{Child, Command};

use llmsurge::mock::MockServer;
use llmsurge::report::Report;

use crate::support::{Finished, ok_report, start_run, wait_run};

/// Options to add to a benchmark: a case of a table of cases.
pub type Options = fn(Bench) -> Bench;

/// One `llmsurge benchmark run`, built flag by flag.
#[derive(Clone, Debug)]
#[must_use = "a benchmark does nothing until run"]
pub struct Bench {
    args: Vec<String>,
}

impl Bench {
    /// A benchmark of `server` (`--target` its base URL).
    pub fn on(server: &MockServer) -> Self {
        Self::target(&server.base_url())
    }

    /// A benchmark of the server at `url`.
    pub fn target(url: &str) -> Self {
        Bench {
            args: vec!["--target".into(), url.into()],
        }
    }

    /// A benchmark of the in-process mock llmsurge starts when no `--target` is given.
    pub fn in_process_mock() -> Self {
        Bench { args: Vec::new() }
    }

    /// `FLAG VALUE`, for a flag with no named option here.
    pub fn arg(mut self, flag: &str, value: impl ToString) -> Self {
        self.args.push(flag.into());
        self.args.push(value.to_string());
        self
    }

    /// Arguments as written: for a table of flag sets under test (bad usage, say),
    /// where the flags are the data.
    pub fn args_as_written(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// A flag without a value (`--dry-run`).
    pub fn flag(mut self, flag: &str) -> Self {
        self.args.push(flag.into());
        self
    }

    /// `--profile NAME`.
    pub fn profile(self, name: &str) -> Self {
        self.arg("--profile", name)
    }

    /// `--rate R` (a request rate, or the concurrency of a concurrent profile).
    pub fn rate(self, rate: impl ToString) -> Self {
        self.arg("--rate", rate)
    }

    /// `--profile concurrent --rate N`: N requests in flight.
    pub fn concurrent(self, n: u32) -> Self {
        self.profile("concurrent").rate(n)
    }

    /// `--profile constant --rate R`: R requests a second.
    pub fn constant(self, rate: impl ToString) -> Self {
        self.profile("constant").rate(rate)
    }

    /// `--profile synchronous`: one request at a time.
    pub fn synchronous(self) -> Self {
        self.profile("synchronous")
    }

    /// `--max-requests N`.
    pub fn max_requests(self, n: u64) -> Self {
        self.arg("--max-requests", n)
    }

    /// `--max-seconds S`.
    pub fn max_seconds(self, s: impl ToString) -> Self {
        self.arg("--max-seconds", s)
    }

    /// `--max-concurrency N`: at most N requests in flight, whatever the profile.
    pub fn max_concurrency(self, n: u32) -> Self {
        self.arg("--max-concurrency", n)
    }

    /// `--slo LIST` (e.g. `ttft_p50<=60ms,error_rate<=1%`).
    pub fn slo(self, objectives: &str) -> Self {
        self.arg("--slo", objectives)
    }

    /// `--model NAME`.
    pub fn model(self, name: &str) -> Self {
        self.arg("--model", name)
    }

    /// `--data SPEC` (e.g. `prompt_tokens=16,output_tokens=8`).
    pub fn data(self, spec: &str) -> Self {
        self.arg("--data", spec)
    }

    /// `--data-args JSON`.
    pub fn data_args(self, json: &str) -> Self {
        self.arg("--data-args", json)
    }

    /// `--request-format NAME`.
    pub fn format(self, name: &str) -> Self {
        self.arg("--request-format", name)
    }

    /// `--stream true|false`.
    pub fn stream(self, on: bool) -> Self {
        self.arg("--stream", on)
    }

    /// `--request-timeout T`.
    pub fn request_timeout(self, t: &str) -> Self {
        self.arg("--request-timeout", t)
    }

    /// `--outputs LIST`.
    pub fn outputs(self, list: &str) -> Self {
        self.arg("--outputs", list)
    }

    /// `--random-seed N`.
    pub fn seed(self, n: u64) -> Self {
        self.arg("--random-seed", n)
    }

    /// `--workers N`.
    pub fn workers(self, n: u32) -> Self {
        self.arg("--workers", n)
    }

    /// `--request-log PATH` (relative paths land in the output directory).
    pub fn request_log(self, path: &str) -> Self {
        self.arg("--request-log", path)
    }

    /// `--repeat N`: the benchmark N times, with figures across the runs.
    pub fn repeat(self, n: u32) -> Self {
        self.arg("--repeat", n)
    }

    /// `--repeat-cooldown T`: the pause between repeated runs.
    pub fn repeat_cooldown(self, t: &str) -> Self {
        self.arg("--repeat-cooldown", t)
    }

    /// `--goodput SPEC` (e.g. `e2e:60s`).
    pub fn goodput(self, spec: &str) -> Self {
        self.arg("--goodput", spec)
    }

    /// `--until-precise LIST` (e.g. `e2e_p50:20%`).
    pub fn until_precise(self, targets: &str) -> Self {
        self.arg("--until-precise", targets)
    }

    /// `--rampup T`.
    pub fn rampup(self, t: &str) -> Self {
        self.arg("--rampup", t)
    }

    /// Whether `flag` is among the arguments (a helper's default gives way to it).
    pub fn sets(&self, flag: &str) -> bool {
        self.args.iter().any(|a| a == flag)
    }

    /// The arguments after `benchmark run`, as built.
    pub fn args(&self) -> Vec<&str> {
        self.args.iter().map(String::as_str).collect()
    }

    /// Starts the run with piped output; `configure` may add environment variables.
    pub fn start(&self, configure: impl FnOnce(&mut Command)) -> (Child, tempfile::TempDir) {
        start_run(&self.args(), configure)
    }

    /// Runs the benchmark to the end with `vars` set in its environment.
    pub fn run_with_env(&self, vars: &[(&str, &str)]) -> Finished {
        let (child, dir) = self.start(|cmd| {
            cmd.envs(vars.iter().copied());
        });
        wait_run(child, dir)
    }

    /// Runs the benchmark to the end.
    pub fn run(&self) -> Finished {
        let (child, dir) = self.start(|_| {});
        wait_run(child, dir)
    }

    /// Runs the benchmark, asserts it succeeded and accounted for every request, and
    /// reads its report.
    pub fn ok_report(&self) -> Report {
        ok_report(&self.run())
    }
}
