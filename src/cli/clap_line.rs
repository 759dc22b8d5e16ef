//! A clap error as the one line a usage error prints, keeping what clap offers beyond its
//! first line (a similar flag, the possible values) and naming llmsurge's flag for one a
//! user brings from vLLM's `benchmark_serving` or GuideLLM.

use clap::Command;
use clap::error::{ContextKind, ContextValue, Error};

/// Flags of peers' benchmarks and what llmsurge calls them.
const PEER_FLAGS: &[(&str, &str)] = &[
    (
        "--header",
        "llmsurge takes headers as --backend-kwargs '{\"headers\": {\"KEY\": \"VALUE\"}}'",
    ),
    ("--num-prompts", "llmsurge's is --max-requests"),
    (
        "--request-rate",
        "llmsurge's is --rate (with --profile constant or poisson)",
    ),
    ("--num-runs", "llmsurge's is --repeat"),
    (
        "-o",
        "llmsurge's is --output-dir (with --outputs for the formats)",
    ),
    ("--rate-type", "llmsurge's is --profile"),
    ("--result-dir", "llmsurge's is --output-dir"),
    (
        "--dataset-name",
        "llmsurge's is --data (a synthetic spec, a file, a folder or a Hugging Face id)",
    ),
    (
        "--random-input-len",
        "llmsurge's is --data prompt_tokens=N,output_tokens=M",
    ),
    (
        "--random-output-len",
        "llmsurge's is --data prompt_tokens=N,output_tokens=M",
    ),
    (
        "--backend",
        "llmsurge's is --request-format (chat, completions, ...; its target is --target)",
    ),
    (
        "--backend-type",
        "llmsurge's is --request-format (chat, completions, ...; its target is --target)",
    ),
    (
        "--save-result",
        "llmsurge's is --outputs json (files go under --output-dir)",
    ),
    (
        "--percentile-metrics",
        "llmsurge reports every percentile of every metric (choose the files with --outputs)",
    ),
    (
        "--max-num-seqs",
        "a vLLM server flag: give it to the server; a client cap is --max-concurrency",
    ),
    ("--seed", "llmsurge's is --random-seed"),
    ("--base-url", "llmsurge's is --target"),
    ("--tokenizer", "llmsurge's is --processor"),
    (
        "--endpoint",
        "llmsurge's is --request-format (the path follows it; the server is --target)",
    ),
    // `vllm bench sweep`'s.
    (
        "--bench-cmd",
        "llmsurge's sweep runs its own benchmark run: give its flags after --",
    ),
    ("--server-ready-timeout", "llmsurge's is --ready-timeout"),
    (
        "--show-stdout",
        "llmsurge's sweep keeps the server's output in SERVE.server.log and each point's run.log",
    ),
    (
        "--continue-on-error",
        "llmsurge's sweep always goes on: a failure fails only its points",
    ),
    (
        "--warmup-num-prompts",
        "llmsurge's is --warmup DURATION after -- (the start of each run is not measured)",
    ),
];

/// `e` on one line, without clap's `error: ` prefix: its first line, then a similar
/// argument or value clap found, the possible values of the flag, or llmsurge's name for
/// a peer's flag.
pub fn one_line(e: &Error) -> String {
    let rendered = e.to_string();
    let first = rendered.lines().next().unwrap_or("invalid arguments");
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_string();
    let strings = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => vec![s.clone()],
        Some(ContextValue::Strings(v)) => v.clone(),
        _ => Vec::new(),
    };
    // Only a flag the command does not know: a real flag of the same name (a bad value
    // of it) is not a peer's.
    let unknown = e.kind() == clap::error::ErrorKind::UnknownArgument;
    let peer = strings(ContextKind::InvalidArg)
        .into_iter()
        .filter(|_| unknown)
        .find_map(|arg| {
            let flag = arg.split(['=', ' ']).next().unwrap_or("").to_string();
            PEER_FLAGS
                .iter()
                .find(|(f, _)| *f == flag)
                .map(|(_, hint)| *hint)
        });
    // The names clap lists on the lines below its first: the required arguments missing.
    if e.kind() == clap::error::ErrorKind::MissingRequiredArgument {
        let missing = strings(ContextKind::InvalidArg);
        if !missing.is_empty() {
            line = format!("{} {}", line.trim_end(), missing.join(", "));
        }
    }
    let similar = [
        ContextKind::SuggestedArg,
        ContextKind::SuggestedValue,
        ContextKind::SuggestedSubcommand,
    ]
    .into_iter()
    .flat_map(strings)
    .collect::<Vec<_>>();
    let valid = strings(ContextKind::ValidValue);
    if let Some(hint) = peer {
        line.push_str(&format!("; {hint}"));
    } else if !similar.is_empty() {
        line.push_str(&format!("; did you mean {}?", similar.join(" or ")));
    }
    if !valid.is_empty() {
        line.push_str(&format!(" (possible values: {})", valid.join(", ")));
    }
    line
}

/// What [`one_line`] cannot know without the command and `argv`: the `LLMSURGE_*`
/// variable that made an argument required, a subcommand one letter swap away (clap's own
/// threshold misses `rnu`), a `benchmark run` flag given before the `--` of `k8s job`
/// or a sweep.
pub fn more_hints(e: &Error, cmd: &Command, argv: &[String]) -> String {
    use clap::error::ErrorKind;
    let mut out = String::new();
    let path = subcommand_path(cmd, argv);
    match e.kind() {
        ErrorKind::MissingRequiredArgument => {
            for env in required_by_env(cmd, argv) {
                out.push_str(&format!(
                    "; needed because {env} is set in the environment (unset {env})"
                ));
            }
        }
        ErrorKind::InvalidSubcommand if e.get(ContextKind::SuggestedSubcommand).is_none() => {
            let Some(ContextValue::String(typed)) = e.get(ContextKind::InvalidSubcommand) else {
                return out;
            };
            let near: Vec<&str> = find_path(cmd, &path)
                .into_iter()
                .flat_map(|c| c.get_subcommands())
                .filter(|s| !s.is_hide_set() && one_edit_apart(typed, s.get_name()))
                .map(|s| s.get_name())
                .collect();
            if !near.is_empty() {
                out.push_str(&format!("; did you mean {}?", near.join(" or ")));
            }
        }
        ErrorKind::UnknownArgument => {
            // A command that passes `benchmark run` flags after its `--` (k8s job, the
            // sweeps): the flag may be one of those, typed before it.
            // Unless clap found a flag of the command itself.
            let trailing = e.get(ContextKind::SuggestedArg).is_none()
                && find_path(cmd, &path)
                    .is_some_and(|c| c.get_positionals().any(|a| a.is_last_set()));
            let run = find_path(cmd, &["benchmark".into(), "run".into()]);
            if let (true, Some(run), Some(ContextValue::String(flag))) =
                (trailing, run, e.get(ContextKind::InvalidArg))
            {
                out.push_str(&misplaced_run_flag(run, flag).unwrap_or_default());
            }
        }
        _ => {}
    }
    out
}

/// For a flag typed before a command's `--`: the `benchmark run` flag (of `run`) it is
/// or resembles, to give after `--`.
fn misplaced_run_flag(run: &Command, flag: &str) -> Option<String> {
    let name = flag.split('=').next().unwrap_or(flag);
    let parsed = run
        .clone()
        .no_binary_name(true)
        .try_get_matches_from([name, "1"]);
    match parsed {
        Err(e) => match e.get(ContextKind::SuggestedArg) {
            Some(ContextValue::String(similar)) => Some(format!(
                "; did you mean {similar}? (a benchmark run flag: give it after --)"
            )),
            _ => None,
        },
        Ok(_) => Some(format!(
            "; {name} is a benchmark run flag: give it after --"
        )),
    }
}

/// One insertion, deletion, substitution or swap of neighbours turns `a` into `b`.
fn one_edit_apart(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let (ra, rb) = (&a[common..], &b[common..]);
    match (ra.len(), rb.len()) {
        (0, 0) => false,
        (x, y) if x == y => {
            ra[1..] == rb[1..] || (x >= 2 && ra[0] == rb[1] && ra[1] == rb[0] && ra[2..] == rb[2..])
        }
        (x, y) if x + 1 == y => ra == &rb[1..],
        (x, y) if y + 1 == x => &ra[1..] == rb,
        _ => false,
    }
}

/// The names of the subcommands `argv` (with the binary's name first) runs, from `cmd`:
/// `["benchmark", "compare"]`.
pub fn subcommand_path(cmd: &Command, argv: &[String]) -> Vec<String> {
    let mut path = Vec::new();
    let mut current = cmd;
    for word in argv.iter().skip(1) {
        if word == "--" {
            break;
        }
        let sub = current.get_subcommands().find(|s| {
            s.get_name() == word.as_str() || s.get_all_aliases().any(|a| a == word.as_str())
        });
        if let Some(sub) = sub {
            path.push(sub.get_name().to_string());
            current = sub;
        }
    }
    path
}

/// The command at `path` under `cmd`.
pub fn find_path<'a>(cmd: &'a Command, path: &[String]) -> Option<&'a Command> {
    path.iter()
        .try_fold(cmd, |c, name| c.find_subcommand(name.as_str()))
}

/// The `LLMSURGE_*` variables that make `argv` miss a required argument: a flag set in the
/// environment (`LLMSURGE_MAX_REGRESSION_ONLY=true`, CI-wide) may require another, and
/// the error names only the one missing. Each variable set and not typed is dropped in
/// turn; it is a cause when the parse then misses nothing.
pub fn required_by_env(cmd: &Command, argv: &[String]) -> Vec<String> {
    let path = subcommand_path(cmd, argv);
    let Some(leaf) = find_path(cmd, &path) else {
        return Vec::new();
    };
    let candidates: Vec<(String, String)> = leaf
        .get_arguments()
        .filter_map(|a| {
            let env = a.get_env()?.to_str()?.to_string();
            std::env::var_os(&env)?;
            let typed = a.get_long().is_some_and(|l| {
                let flag = format!("--{l}");
                argv.iter()
                    .any(|w| *w == flag || w.starts_with(&format!("{flag}=")))
            });
            (!typed).then(|| (a.get_id().to_string(), env))
        })
        .collect();
    candidates
        .into_iter()
        .filter(|(id, _)| {
            let parsed = without_env(cmd.clone(), &path, id).try_get_matches_from(argv);
            !matches!(parsed, Err(e) if e.kind() == clap::error::ErrorKind::MissingRequiredArgument)
        })
        .map(|(_, env)| env)
        .collect()
}

/// `cmd` with the argument `id` of the subcommand at `path` reading no variable.
fn without_env(cmd: Command, path: &[String], id: &str) -> Command {
    match path.split_first() {
        None => cmd.mut_arg(id, |a| a.env(None::<&str>)),
        Some((first, rest)) => cmd.mut_subcommand(first.as_str(), |s| without_env(s, rest, id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command, ValueEnum};

    #[derive(Clone, ValueEnum)]
    enum Shape {
        Constant,
        Poisson,
    }

    fn cmd() -> Command {
        Command::new("x")
            .arg(Arg::new("max-seconds").long("max-seconds"))
            .arg(
                Arg::new("profile")
                    .long("profile")
                    .value_parser(clap::builder::EnumValueParser::<Shape>::new()),
            )
    }

    fn line(args: &[&str]) -> String {
        let e = cmd()
            .try_get_matches_from(std::iter::once("x").chain(args.iter().copied()))
            .expect_err("an error");
        one_line(&e)
    }

    #[test]
    fn clap_s_hints_stay_on_the_line() {
        let l = line(&["--max-second", "3"]);
        assert!(
            l.contains("'--max-second'") && l.ends_with("did you mean --max-seconds?"),
            "{l}"
        );
        let l = line(&["--profile", "foo"]);
        assert!(l.ends_with("(possible values: constant, poisson)"), "{l}");
        assert!(!l.contains('\n'), "{l}");
    }

    #[test]
    fn one_edit_apart_is_a_swap_an_insertion_a_deletion_or_a_substitution() {
        for (a, b) in [
            ("rnu", "run"),
            ("benchmrk", "benchmark"),
            ("rum", "run"),
            ("runn", "run"),
        ] {
            assert!(one_edit_apart(a, b), "{a} {b}");
        }
        for (a, b) in [("run", "run"), ("nur", "run"), ("plot", "run"), ("", "run")] {
            assert!(!one_edit_apart(a, b), "{a} {b}");
        }
    }

    #[test]
    fn a_peer_s_flag_names_llmsurge_s() {
        let l = line(&["--num-prompts", "100"]);
        assert!(l.ends_with("llmsurge's is --max-requests"), "{l}");
        let l = line(&["--header", "a=b"]);
        assert!(l.contains("--backend-kwargs"), "{l}");
    }
}
