//! Where a `benchmark run` setting came from, for the messages about a value that
//! conflicts or is refused: the user may not know a variable in a shell profile or a
//! scenario's key set it, so each message names the source and how to drop it.
//!
//! Found in clap's precedence (flag > `LLMSURGE_*` variable > scenario), each source
//! only when it holds the value in force; then `OPENAI_API_KEY`, read for the key when
//! none of those gave one.

/// One place a setting comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Typed on the command line (`--api-key`).
    Flag(String),
    /// An environment variable (`LLMSURGE_API_KEY`, `OPENAI_API_KEY`).
    Env(String),
    /// A key of the scenario in force.
    Scenario {
        /// The scenario's file or `scenario NAME` for a built-in one.
        label: String,
        /// The key (`api_key`).
        key: String,
    },
}

impl Origin {
    /// The source, as a message names it: `--api-key`, `OPENAI_API_KEY (environment)`,
    /// `--scenario s.yaml (its api_key)`.
    pub fn describe(&self) -> String {
        match self {
            Origin::Flag(flag) => flag.clone(),
            Origin::Env(name) => format!("{name} (environment)"),
            Origin::Scenario { label, key } => format!("--scenario {label} (its {key})"),
        }
    }

    /// How to stop it giving the value: `drop --api-key`, `unset OPENAI_API_KEY`.
    pub fn how_to_drop(&self) -> String {
        match self {
            Origin::Flag(flag) => format!("drop {flag}"),
            Origin::Env(name) => format!("unset {name}"),
            Origin::Scenario { label, key } => format!("remove {key} from --scenario {label}"),
        }
    }
}

/// Where `value`, the value in force of `flag` (read from the variable `env` too), came
/// from. The flag when it is on the command line, or when nothing else holds the value
/// (a sweep's parameter, say).
pub fn of(flag: &str, env: &str, value: &str) -> Origin {
    find(flag, env, value).unwrap_or_else(|| Origin::Flag(flag.into()))
}

/// Where the API key in force came from: `--api-key`, `LLMSURGE_API_KEY`, a scenario,
/// or `OPENAI_API_KEY`, read when none of those gave one.
pub fn api_key(key: &str) -> Origin {
    const OPENAI: &str = "OPENAI_API_KEY";
    find("--api-key", "LLMSURGE_API_KEY", key)
        .or_else(|| {
            std::env::var(OPENAI)
                .is_ok_and(|v| v == key)
                .then(|| Origin::Env(OPENAI.into()))
        })
        .unwrap_or_else(|| Origin::Flag("--api-key".into()))
}

/// The source of [`of`], `None` when no source holds `value`.
fn find(flag: &str, env: &str, value: &str) -> Option<Origin> {
    let argv: Vec<String> = std::env::args().collect();
    // The flag with this value: `--api-key` alone may be a word of a server's command.
    let joined = format!("{flag}={value}");
    let typed = argv.windows(2).any(|w| w[0] == flag && w[1] == value) || argv.contains(&joined);
    if typed {
        return Some(Origin::Flag(flag.into()));
    }
    if std::env::var(env).is_ok_and(|v| v == value) {
        return Some(Origin::Env(env.into()));
    }
    let key = flag.trim_start_matches('-').replace('-', "_");
    let (origin, text) = scenario(&argv, &key)?;
    (text == value).then_some(origin)
}

/// The scenario `argv` runs, when it sets `key`: its origin and the flag text it gives.
fn scenario(argv: &[String], key: &str) -> Option<(Origin, String)> {
    let requested = super::scenario::requested(argv)?;
    let (label, keys) = super::scenario::load(&requested).ok()?;
    let text = super::scenario::flag_text(&label, key, keys.get(key)?).ok()?;
    let label = label
        .strip_prefix("scenario ")
        .unwrap_or(&label)
        .to_string();
    Some((
        Origin::Scenario {
            label,
            key: key.to_string(),
        },
        text,
    ))
}

/// For each flag a usage message names (`--rate has no effect with --profile
/// synchronous`) that the command line did not give but an `LLMSURGE_*` variable or the
/// scenario did, where it came from and how to drop it: `; --rate is from LLMSURGE_RATE
/// (environment): unset LLMSURGE_RATE`. Empty when the message names none such, or
/// names its source itself.
pub fn sources_named_in(message: &str) -> String {
    use clap::CommandFactory;
    let argv: Vec<String> = std::env::args().collect();
    let cli = super::Cli::command();
    let path = super::clap_line::subcommand_path(&cli, &argv);
    let Some(leaf) = super::clap_line::find_path(&cli, &path) else {
        return String::new();
    };
    let mut flags: Vec<&str> = message
        .match_indices("--")
        .map(|(at, _)| {
            let rest = &message[at + 2..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(rest.len());
            &message[at..at + 2 + end]
        })
        .filter(|f| f.len() > 2)
        .collect();
    flags.dedup();
    let mut out = String::new();
    for flag in flags {
        let typed = argv
            .iter()
            .any(|w| w == flag || w.starts_with(&format!("{flag}=")));
        let arg = leaf
            .get_arguments()
            .find(|a| a.get_long().is_some_and(|l| l == &flag[2..]));
        let (Some(arg), false) = (arg, typed) else {
            continue;
        };
        let env = arg.get_env().and_then(|e| e.to_str());
        let origin = match env {
            Some(env) if std::env::var_os(env).is_some() => Origin::Env(env.to_string()),
            _ if path == ["benchmark", "run"] => match scenario(&argv, arg.get_id().as_str()) {
                Some((origin, _)) => origin,
                None => continue,
            },
            _ => continue,
        };
        let named = match &origin {
            Origin::Env(name) => message.contains(name.as_str()),
            other => message.contains(&other.describe()),
        };
        if !named && !out.contains(&format!("; {flag} is from")) {
            out.push_str(&format!(
                "; {flag} is from {}: {}",
                origin.describe(),
                origin.how_to_drop()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_says_how_to_drop_it() {
        let flag = Origin::Flag("--api-key".into());
        assert_eq!(
            (flag.describe(), flag.how_to_drop()),
            ("--api-key".into(), "drop --api-key".into())
        );
        let env = Origin::Env("OPENAI_API_KEY".into());
        assert_eq!(env.describe(), "OPENAI_API_KEY (environment)");
        assert_eq!(env.how_to_drop(), "unset OPENAI_API_KEY");
        let scenario = Origin::Scenario {
            label: "s.yaml".into(),
            key: "api_key".into(),
        };
        assert_eq!(scenario.describe(), "--scenario s.yaml (its api_key)");
        assert_eq!(
            scenario.how_to_drop(),
            "remove api_key from --scenario s.yaml"
        );
    }
}
