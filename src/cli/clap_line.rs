//! A clap error as the one line a usage error prints, keeping what clap offers beyond its
//! first line (a similar flag, the possible values) and naming llmsurge's flag for one a
//! user brings from vLLM's `benchmark_serving` or GuideLLM.

use clap::error::{ContextKind, ContextValue, Error};

/// Flags of peers' benchmarks and what llmsurge calls them.
const PEER_FLAGS: [(&str, &str); 12] = [
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
    let peer = strings(ContextKind::InvalidArg)
        .into_iter()
        .find_map(|arg| {
            let flag = arg.split(['=', ' ']).next().unwrap_or("").to_string();
            PEER_FLAGS
                .iter()
                .find(|(f, _)| *f == flag)
                .map(|(_, hint)| *hint)
        });
    let similar = [ContextKind::SuggestedArg, ContextKind::SuggestedValue]
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
    fn a_peer_s_flag_names_llmsurge_s() {
        let l = line(&["--num-prompts", "100"]);
        assert!(l.ends_with("llmsurge's is --max-requests"), "{l}");
        let l = line(&["--header", "a=b"]);
        assert!(l.contains("--backend-kwargs"), "{l}");
    }
}
