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
    Flag(&'static str),
    /// An environment variable (`LLMSURGE_API_KEY`, `OPENAI_API_KEY`).
    Env(&'static str),
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
            Origin::Flag(flag) => (*flag).to_string(),
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
pub fn of(flag: &'static str, env: &'static str, value: &str) -> Origin {
    find(flag, env, value).unwrap_or(Origin::Flag(flag))
}

/// Where the API key in force came from: `--api-key`, `LLMSURGE_API_KEY`, a scenario,
/// or `OPENAI_API_KEY`, read when none of those gave one.
pub fn api_key(key: &str) -> Origin {
    const OPENAI: &str = "OPENAI_API_KEY";
    find("--api-key", "LLMSURGE_API_KEY", key)
        .or_else(|| {
            std::env::var(OPENAI)
                .is_ok_and(|v| v == key)
                .then_some(Origin::Env(OPENAI))
        })
        .unwrap_or(Origin::Flag("--api-key"))
}

/// The source of [`of`], `None` when no source holds `value`.
fn find(flag: &'static str, env: &'static str, value: &str) -> Option<Origin> {
    let argv: Vec<String> = std::env::args().collect();
    // The flag with this value: `--api-key` alone may be a word of a server's command.
    let joined = format!("{flag}={value}");
    let typed = argv.windows(2).any(|w| w[0] == flag && w[1] == value) || argv.contains(&joined);
    if typed {
        return Some(Origin::Flag(flag));
    }
    if std::env::var(env).is_ok_and(|v| v == value) {
        return Some(Origin::Env(env));
    }
    let key = flag.trim_start_matches('-').replace('-', "_");
    let requested = super::scenario::requested(&argv)?;
    let (label, keys) = super::scenario::load(&requested).ok()?;
    let text = super::scenario::flag_text(&label, &key, keys.get(&key)?).ok()?;
    (text == value).then(|| Origin::Scenario {
        label: label
            .strip_prefix("scenario ")
            .unwrap_or(&label)
            .to_string(),
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_says_how_to_drop_it() {
        let flag = Origin::Flag("--api-key");
        assert_eq!(
            (flag.describe(), flag.how_to_drop()),
            ("--api-key".into(), "drop --api-key".into())
        );
        let env = Origin::Env("OPENAI_API_KEY");
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
