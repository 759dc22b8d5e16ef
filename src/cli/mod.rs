//! The command line: parsing, environment checks, and dispatch to the subcommands.
//!
//! Raw flags ([`args`]) are resolved once into a validated plan ([`resolve`]); the
//! subcommands ([`run`]) work from the plan only.

pub mod affinity;
pub mod agentic;
pub mod args;
pub mod clap_line;
pub mod compare;
pub mod completions;
pub mod config;
pub mod from_file;
pub mod k8s;
pub mod merge;
pub mod origin;
pub mod plot;
pub mod repeat;
pub mod resolve;
pub mod resolve_output;
pub mod run;
pub mod scenario;
pub mod seed;
pub mod shard;
pub mod usage;
pub mod values;

use crate::exit_codes;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
pub use usage::{UsageError, usage_error};
pub use values::negative_numbers_are_values;

/// Environment variables that are not flags but are still ours.
const EXTRA_ENV: &[&str] = &["LLMSURGE_LOG", llmsurge_worker::sched::REALTIME_ENV];

/// llmsurge: a load generator and benchmark for OpenAI-compatible LLM inference servers.
#[derive(Debug, Parser)]
#[command(
    name = "llmsurge",
    version,
    about = "Load generator and benchmark for OpenAI-compatible LLM inference servers",
    after_help = "Every flag can also be set by an environment variable, LLMSURGE_<FLAG> (e.g. LLMSURGE_MAX_SECONDS; LLMSURGE_MOCK_<FLAG> for mock-server; none for the flags of k8s job).\nExit codes: 0 ok, 1 run failed, 2 bad usage or input, 3 a gate failed, 4 invalid run, 5 inconclusive (an objective could not decide), 130 interrupted."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// The parsed subcommand.
    pub(crate) fn into_command(self) -> Command {
        self.command
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run benchmarks against a server (or the built-in mock).
    #[command(subcommand)]
    Benchmark(BenchmarkCommand),
    /// Run the built-in mock OpenAI-compatible server.
    MockServer(Box<crate::mock::MockServerArgs>),
    /// Print Kubernetes manifests that run a benchmark as N shards (see docs/multi-host.md).
    #[command(subcommand)]
    K8s(k8s::K8sCommand),
    /// Experiments over server and benchmark settings (see docs/sweeps.md).
    #[command(subcommand)]
    Sweep(SweepCommand),
    /// Prepare data offline.
    #[command(subcommand)]
    Preprocess(PreprocessCommand),
    /// Draw charts from saved JSON reports (docs/report.md).
    #[command(subcommand)]
    Plot(plot::PlotCommand),
    /// Print every setting with its environment variable, default and effective value,
    /// as a .env block (secrets redacted).
    Config,
    /// Print a shell completion script (e.g. `llmsurge completions bash > /etc/bash_completion.d/llmsurge`).
    Completions(completions::CompletionsArgs),
    /// Internal: a worker process started by the coordinator.
    #[command(name = "__worker", hide = true)]
    Worker(WorkerArgs),
    /// Internal: the guard of a sweep's server, started by `sweep serve`.
    #[command(name = "__serve-guard", hide = true)]
    ServeGuard(args::GuardArgs),
}

/// `llmsurge benchmark` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum BenchmarkCommand {
    /// Run a profile of one or more benchmarks and write the report.
    Run(Box<args::RunArgs>),
    /// Render a saved JSON report again (html, csv, yaml, console, …) without running anything.
    FromFile(from_file::FromFileArgs),
    /// Compare two reports: flag regressions beyond tolerance and noise (exit code 3).
    Compare(compare::CompareArgs),
    /// Merge the reports of the N shards of one run (`--shard K/N`) into one report.
    Merge(merge::MergeArgs),
}

/// `llmsurge sweep` subcommands, run by the crate root (`crate::sweep`).
#[derive(Debug, Subcommand)]
pub enum SweepCommand {
    /// Start a server per configuration and run every benchmark configuration against
    /// it (the Cartesian product), with a sweep report of every point.
    Serve(Box<args::SweepServeArgs>),
    /// Per serve x bench configuration, the highest rate (or concurrency) meeting each
    /// SLA, by the capacity search; loads measured once serve every SLA.
    ServeSla(Box<args::SweepServeSlaArgs>),
    /// Draw a finished sweep again from its sweep.json, with the x and y axes, curves
    /// and panels chosen (`vllm bench sweep plot`).
    Plot(args::SweepPlotArgs),
    /// Draw a finished sweep's Pareto front of tokens/s per user against tokens/s per
    /// GPU (`vllm bench sweep plot_pareto`).
    PlotPareto(args::SweepPlotParetoArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum PreprocessCommand {
    /// Rewrite a dataset so every prompt has a requested token length.
    Dataset(args::PreprocessArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    /// The inherited IPC socket.
    #[arg(long)]
    ipc_fd: i32,
    /// The inherited shared-memory block.
    #[arg(long)]
    shm_fd: i32,
}

/// Every `LLMSURGE_*` variable a flag reads, from the clap definitions.
pub fn known_env_vars() -> Vec<String> {
    fn walk(cmd: &clap::Command, out: &mut Vec<String>) {
        out.extend(
            cmd.get_arguments()
                .filter_map(|a| a.get_env())
                .map(|e| e.to_string_lossy().into_owned()),
        );
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out: Vec<String> = EXTRA_ENV.iter().map(|s| s.to_string()).collect();
    walk(&Cli::command(), &mut out);
    out.sort();
    out.dedup();
    out
}

/// An unknown `LLMSURGE_*` variable is a typo that would be silently ignored: refuse it.
fn check_env() -> Result<(), String> {
    let known = known_env_vars();
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("LLMSURGE_") && !known.iter().any(|k| k == name) {
            return Err(format!(
                "unknown environment variable {name} (llmsurge reads LLMSURGE_<FLAG> for its flags; see --help)"
            ));
        }
    }
    Ok(())
}

/// Standard error for log lines, every URL in them redacted: a dependency's debug line
/// (a connection, a redirect) may name the target with its credentials. The formatter
/// writes each event in one call, so each line is redacted whole.
struct RedactingStderr;

impl std::io::Write for RedactingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let redacted = llmsurge_proto::Redaction::default().text(&text);
        // One event is one line: control characters in it (server text a dependency
        // logs) become visible escapes; the line's own break stays.
        let (line, end) = match redacted.strip_suffix('\n') {
            Some(line) => (line, "\n"),
            None => (redacted.as_ref(), ""),
        };
        let inert = llmsurge_proto::inert::terminal(line);
        std::io::stderr().write_all(format!("{inert}{end}").as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Logs to stderr, filtered by `LLMSURGE_LOG` (e.g. `debug`, `llmsurge_coordinator=debug`);
/// warnings only by default. Workers inherit the variable, so one setting covers the run.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LLMSURGE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| RedactingStderr)
        // Colour codes would be escaped with the rest of the control characters.
        .with_ansi(false)
        .try_init();
}

/// What [`dispatch`] leaves to its caller, the crate root: the commands of the sweep,
/// which builds on the CLI (so the CLI must not name it), and `config`, which shows the
/// sweep's shell commands through the sweep's redaction.
#[derive(Debug)]
pub enum Parsed {
    /// Run (or refused): the process exit code.
    Exit(i32),
    /// A `sweep` subcommand, its environment checked.
    Sweep(Box<SweepCommand>),
    /// The hidden `__serve-guard`.
    ServeGuard(args::GuardArgs),
    /// `llmsurge config`, its environment checked.
    Config,
}

/// Parses the command line (logging set up, environment checked) and runs its command,
/// but for those [`Parsed`] hands back.
pub fn dispatch() -> Parsed {
    init_logging();
    // Every mode holds many sockets (the coordinator's in-process mock, the mock server,
    // workers): lift the soft open-file limit to the hard one before anything opens.
    let _ = llmsurge_proto::fdlimit::raise_fd_limit();
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let command = match scenario::apply(Cli::command(), &argv) {
        Ok(c) => c,
        Err(e) => return Parsed::Exit(usage_error(&e)),
    };
    let command = negative_numbers_are_values(command);
    let matches = match command.clone().try_get_matches() {
        Ok(m) => m,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            {
                let _ = e.print();
                return Parsed::Exit(
                    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                        exit_codes::USAGE
                    } else {
                        exit_codes::OK
                    },
                );
            }
            // One line: clap's first line names the flag and the bad value; its hints
            // follow on the same line.
            let line = clap_line::one_line(&e) + &clap_line::more_hints(&e, &command, &argv);
            return Parsed::Exit(usage_error(&line));
        }
    };
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => return Parsed::Exit(usage_error(&e.to_string())),
    };
    if let Command::Benchmark(BenchmarkCommand::Run(args)) = &mut cli.command {
        let run = matches
            .subcommand_matches("benchmark")
            .and_then(|m| m.subcommand_matches("run"));
        // Given on the command line or in the environment, not defaulted (a scenario's
        // keys are defaults too).
        let explicit = |id: &str| {
            run.and_then(|m| m.value_source(id))
                .is_some_and(|s| s != clap::parser::ValueSource::DefaultValue)
        };
        args.data.ignore_eos_explicit = explicit("ignore_eos");
        args.target.stream_explicit = explicit("stream");
        // A variable set for a whole CI job must not refuse the runs without --slo.
        args.limits.confidence_from_env = run.and_then(|m| m.value_source("confidence"))
            == Some(clap::parser::ValueSource::EnvVariable);
        // Nor the runs without --repeat (`LLMSURGE_REPEAT_COOLDOWN=0s` set CI-wide).
        args.limits.repeat_cooldown_from_env = run.and_then(|m| m.value_source("repeat_cooldown"))
            == Some(clap::parser::ValueSource::EnvVariable);
    }
    if let Command::Sweep(command) = &mut cli.command {
        let sweep = match command {
            SweepCommand::Serve(a) => Some(("serve", &mut **a)),
            SweepCommand::ServeSla(a) => Some(("serve-sla", &mut a.sweep)),
            SweepCommand::Plot(_) | SweepCommand::PlotPareto(_) => None,
        };
        if let Some((name, args)) = sweep {
            args.reset_cache_given = matches
                .subcommand_matches("sweep")
                .and_then(|m| m.subcommand_matches(name))
                .and_then(|m| m.value_source("reset_cache"))
                .is_some_and(|s| s != clap::parser::ValueSource::DefaultValue);
        }
    }
    if !matches!(cli.command, Command::Worker(_) | Command::ServeGuard(_))
        && let Err(message) = check_env()
    {
        return Parsed::Exit(usage_error(&message));
    }
    Parsed::Exit(match cli.command {
        Command::Benchmark(BenchmarkCommand::Run(args)) => run::benchmark_run(&args),
        Command::Benchmark(BenchmarkCommand::FromFile(args)) => from_file::from_file(&args),
        Command::Config => return Parsed::Config,
        Command::Completions(args) => completions::print_completions(&args),
        Command::Benchmark(BenchmarkCommand::Compare(args)) => compare::benchmark_compare(&args),
        Command::Benchmark(BenchmarkCommand::Merge(args)) => merge::benchmark_merge(&args),
        Command::MockServer(args) => {
            let Some(sub) = matches.subcommand_matches("mock-server") else {
                return Parsed::Exit(usage_error("mock-server: its arguments were not parsed"));
            };
            let config = args.resolve(sub);
            if let Err(e) = config.validate() {
                return Parsed::Exit(usage_error(&e.to_string()));
            }
            match crate::mock::run_cli(config) {
                Ok(()) => exit_codes::OK,
                // A certificate or key file that cannot be used is bad input.
                Err(e) if matches!(e.downcast_ref(), Some(crate::mock::MockError::Tls(_))) => {
                    usage_error(&e.to_string())
                }
                Err(e) => {
                    crate::stdout::eprintln(&format!("error: {e:#}"));
                    exit_codes::RUN_FAILED
                }
            }
        }
        Command::Preprocess(PreprocessCommand::Dataset(a)) => a.run(),
        Command::Sweep(command) => return Parsed::Sweep(Box::new(command)),
        Command::K8s(command) => k8s::k8s(&command),
        Command::Plot(command) => plot::plot(&command),
        Command::Worker(w) => worker_main(&w),
        Command::ServeGuard(args) => return Parsed::ServeGuard(args),
    })
}

fn worker_main(w: &WorkerArgs) -> i32 {
    use std::os::fd::{FromRawFd, OwnedFd};
    for fd in [w.ipc_fd, w.shm_fd] {
        // SAFETY: fcntl(F_GETFD) only queries the descriptor table.
        if fd < 3 || unsafe { nix::libc::fcntl(fd, nix::libc::F_GETFD) } < 0 {
            eprintln!(
                "llmsurge worker: descriptor {fd} is not open (this subcommand is started by the coordinator)"
            );
            return exit_codes::USAGE;
        }
    }
    // SAFETY: both descriptors were checked open above and were handed to this process
    // by the coordinator for it alone; nothing else in the process owns them.
    let (ipc, shm) = unsafe {
        (
            OwnedFd::from_raw_fd(w.ipc_fd),
            OwnedFd::from_raw_fd(w.shm_fd),
        )
    };
    llmsurge_worker::run_worker(ipc, shm, &crate::data::source_factory)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_flag_has_an_llmsurge_variable() {
        let known = known_env_vars();
        assert!(known.iter().any(|v| v == "LLMSURGE_MAX_SECONDS"));
        assert!(known.iter().any(|v| v == "LLMSURGE_MOCK_TTFT_MS"));
        assert!(
            known.iter().all(|v| v.starts_with("LLMSURGE_")),
            "{known:?}"
        );
    }
}
