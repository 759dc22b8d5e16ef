//! `llmsurge config`: every setting with its environment variable, default and effective
//! value, as a `.env` block a shell can source. Built from the clap definitions, so it
//! lists exactly what this build reads. Secrets are never printed.

use clap::CommandFactory;
use llmsurge_proto::{REDACTED, Redaction};

/// The variables that hold a credential, by exact name: the API key (also read from
/// `OPENAI_API_KEY`). Headers, which may carry one too, are redacted inside
/// `LLMSURGE_BACKEND_KWARGS` by the shared [`Redaction`]. A name is never guessed from a
/// part of it: `LLMSURGE_MOCK_OUTPUT_TOKENS` is a count. A new credential flag sets
/// `hide_env_values` (a test holds every credential-like name to that).
const SECRET_VARS: [&str; 2] = ["LLMSURGE_API_KEY", "OPENAI_API_KEY"];

/// The variables that hold a shell command, shown through the sweep's redaction of
/// commands (`crate::sweep::secrets::command`, which the crate root passes in: the CLI
/// does not name the sweep).
const COMMAND_VARS: [&str; 2] = ["LLMSURGE_SERVE_CMD", "LLMSURGE_AFTER_BENCH_CMD"];

/// Whether a setting holds a secret: its value is never shown.
pub(super) fn is_secret(arg: &clap::Arg, env: &str) -> bool {
    arg.is_hide_env_values_set() || SECRET_VARS.contains(&env)
}

/// Quotes a value for a POSIX shell when it needs quoting.
fn shell_quote(v: &str) -> String {
    let plain = !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:,@%+=-".contains(c));
    if plain {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\'', r"'\''"))
    }
}

/// `--backend-kwargs` as it may be written: header and query values redacted unless
/// harmless or opted in, body fields named like credentials redacted. Text that is not a
/// JSON object is redacted whole (it may be a half-typed object holding a key).
pub(super) fn redact_backend_kwargs(raw: &str, redaction: &Redaction) -> String {
    let Ok(mut value @ serde_json::Value::Object(_)) =
        serde_json::from_str::<serde_json::Value>(raw)
    else {
        return REDACTED.to_string();
    };
    llmsurge_proto::redact::json_credentials(&mut value, redaction);
    let serde_json::Value::Object(mut map) = value else {
        return REDACTED.to_string();
    };
    if let Some(serde_json::Value::Object(params)) = map.get_mut("params") {
        for (name, value) in params.iter_mut() {
            if !redaction.shows_query_param(name) {
                *value = REDACTED.into();
            }
        }
    }
    serde_json::Value::Object(map).to_string()
}

/// The opt-ins of the environment (`LLMSURGE_SHOW_HEADER`, `LLMSURGE_SHOW_QUERY_PARAM`).
fn redaction(lookup: &dyn Fn(&str) -> Option<String>) -> Redaction {
    let list = |name: &str| -> Vec<String> {
        lookup(name)
            .map(|v| v.split(',').map(str::to_string).collect())
            .unwrap_or_default()
    };
    Redaction::new(
        list("LLMSURGE_SHOW_HEADER"),
        list("LLMSURGE_SHOW_QUERY_PARAM"),
    )
}

/// The first line of an argument's help.
fn summary(arg: &clap::Arg) -> String {
    arg.get_help()
        .map(|h| h.to_string())
        .and_then(|h| h.lines().next().map(str::to_string))
        .unwrap_or_default()
}

/// A setting's value as it may be shown. A value is at most one URL, typed where a URL
/// is asked for: its password may hold a space or a quote, which end a URL in free text,
/// so one with `://` or `@` is redacted as a whole URL first ([`Redaction::url`]), then
/// as text (a second URL in it, a list of them).
fn shown_value(redaction: &Redaction, value: &str) -> String {
    if value.contains("://") || value.contains('@') {
        redaction.text(&redaction.url(value)).into_owned()
    } else {
        redaction.text(value).into_owned()
    }
}

/// The line that sets `env` to `shown`, commented out where the redaction hid part of
/// `value` (loaded back, it would set `<redacted>`, not what was set). A value only
/// rewritten (JSON re-serialized) stays a setting.
fn settable(env: &str, value: &str, shown: String) -> String {
    if !shown.contains(REDACTED) || value.contains(REDACTED) {
        format!("{env}={}", shell_quote(&shown))
    } else {
        format!(
            "# {env}={}  (set in the environment; redacted here, so not set by this line)",
            shell_quote(&shown)
        )
    }
}

/// Every visible subcommand that reads settings, with its path, in definition order.
fn sections(cmd: &clap::Command, path: &mut Vec<String>, out: &mut Vec<(String, clap::Command)>) {
    if cmd.get_arguments().any(|a| a.get_env().is_some()) {
        out.push((path.join(" "), cmd.clone()));
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        path.push(sub.get_name().to_string());
        sections(sub, path, out);
        path.pop();
    }
}

/// Renders the block; `lookup` reads the environment, `redact_command` hides the
/// credentials of a shell command.
pub fn render(
    lookup: &dyn Fn(&str) -> Option<String>,
    redact_command: fn(&str) -> String,
) -> String {
    let root = super::Cli::command();
    let mut out = format!(
        "# llmsurge {} settings: each with its flag, default and effective value (from the\n\
         # environment, else the default). Load with: set -a; . ./llmsurge.env; set +a\n\
         # Lines left commented are unset. Secrets are never printed.\n",
        env!("CARGO_PKG_VERSION")
    );
    // With LLMSURGE_MOCK_INSTANT on, the mock settings it changes are effectively its
    // values: printed so, the block loads back as the same mock (an explicit variable
    // wins over --instant, so printing the realistic defaults would undo it).
    let instant = lookup("LLMSURGE_MOCK_INSTANT").is_some_and(|v| crate::mock::instant_is_on(&v));
    let instant_values = if instant {
        crate::mock::instant_env_values()
    } else {
        Vec::new()
    };
    let redaction = redaction(lookup);
    let mut all = Vec::new();
    sections(&root, &mut Vec::new(), &mut all);
    // A variable shared by several subcommands (LLMSURGE_OUTPUTS) is listed once, under
    // the first.
    let mut seen = std::collections::BTreeSet::new();
    for (path, cmd) in &all {
        let args: Vec<(&clap::Arg, String)> = cmd
            .get_arguments()
            .filter_map(|a| Some((a, a.get_env()?.to_string_lossy().into_owned())))
            .filter(|(_, env)| seen.insert(env.clone()))
            .collect();
        if args.is_empty() {
            continue;
        }
        out.push_str(&format!("\n## llmsurge {path}\n"));
        for (arg, env) in args {
            let flag = arg
                .get_long()
                .map(|l| format!("--{l}"))
                .unwrap_or_else(|| arg.get_id().to_string());
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|d| d.to_string_lossy().into_owned())
                .collect();
            let default = (!defaults.is_empty()).then(|| defaults.join(","));
            out.push_str(&format!("\n# {flag}: {}\n", summary(arg)));
            out.push_str(&format!(
                "# default: {}\n",
                default.as_deref().unwrap_or("(none)")
            ));
            let value = lookup(&env);
            // Not from the environment: never a secret.
            let instant_value = instant_values
                .iter()
                .find(|(name, _)| *name == env)
                .map(|(_, v)| v);
            let line = match (value, default) {
                (None, _) if instant_value.is_some() => {
                    format!("{env}={}", shell_quote(instant_value.map_or("", |v| v)))
                }
                (Some(_), _) if is_secret(arg, &env) => {
                    format!("# {env}=<set in the environment; redacted>")
                }
                (Some(v), _) if env == "LLMSURGE_BACKEND_KWARGS" => {
                    settable(&env, &v, redact_backend_kwargs(&v, &redaction))
                }
                // A shell command (the sweep's server and hook) without the credentials
                // it carries: flag and environment values, headers, URL passwords.
                (Some(v), _) if COMMAND_VARS.contains(&env.as_str()) => {
                    settable(&env, &v, redact_command(&v))
                }
                // Any URL (the target, the metrics URL, a data file's) without its
                // credentials and query values.
                (Some(v), _) => settable(&env, &v, shown_value(&redaction, &v)),
                (None, Some(d)) => format!("{env}={}", shell_quote(&d)),
                (None, None) => format!("# {env}="),
            };
            out.push_str(&line);
            out.push('\n');
        }
    }
    out.push_str(
        "\n## other\n\n# Log filter of llmsurge's own diagnostics (tracing syntax, e.g. debug).\n",
    );
    out.push_str(&match lookup("LLMSURGE_LOG") {
        Some(v) => format!("LLMSURGE_LOG={}\n", shell_quote(&redaction.text(&v))),
        None => "# LLMSURGE_LOG=\n".to_string(),
    });
    let realtime = llmsurge_worker::sched::REALTIME_ENV;
    out.push_str(
        "# 0 keeps the pacer thread from running real-time (an A/B switch; docs/performance.md).\n",
    );
    out.push_str(&match lookup(realtime) {
        Some(v) => format!("{realtime}={}\n", shell_quote(&v)),
        None => format!("# {realtime}=\n"),
    });
    let openai = if lookup("OPENAI_API_KEY").is_some() {
        "set; redacted"
    } else {
        "unset"
    };
    out.push_str(&format!(
        "# OPENAI_API_KEY ({openai}) is read when LLMSURGE_API_KEY is not set.\n"
    ));
    out
}

/// Why a flag would refuse `value` given in its variable, in clap's words as a run says
/// them: the flag's own parser (a switch's boolish one once built), given the value alone,
/// split where the flag takes a list.
fn refusal(arg: &clap::Arg, value: &str) -> Option<String> {
    // clap parses through an argument only; a probe carries the flag's parser and nothing
    // that names the other flags (which would not be in the probe's command).
    const PROBE: &str = "VALUE";
    let mut probe = clap::Arg::new("value")
        .value_name(PROBE)
        .value_parser(arg.get_value_parser().clone())
        .allow_hyphen_values(true)
        .required(true)
        .num_args(1);
    if let Some(d) = arg.get_value_delimiter() {
        probe = probe.value_delimiter(d).num_args(1..);
    }
    let refused = clap::Command::new("llmsurge")
        .no_binary_name(true)
        .arg(probe)
        .try_get_matches_from(["--", value])
        .err()?;
    let long = arg.get_long().unwrap_or("value");
    let flag = if arg.get_action().takes_values() {
        let names: Vec<String> = match arg.get_value_names() {
            Some(names) => names.iter().map(|n| format!("<{n}>")).collect(),
            None => vec![format!("<{}>", arg.get_id().as_str().to_uppercase())],
        };
        format!("--{long} {}", names.join(" "))
    } else {
        format!("--{long}")
    };
    let text = refused.to_string();
    let line = text.lines().next().unwrap_or_default();
    Some(
        line.trim_start_matches("error: ")
            .replace(&format!("'<{PROBE}>'"), &format!("'{flag}'")),
    )
}

/// The variables set to a value their flag refuses, one line each naming the variable
/// (its value shown as `config` shows it, a secret's not at all) and why.
pub(super) fn refused_values(lookup: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut root = super::Cli::command();
    // Built, so that each flag has the parser a run gives it (a switch's boolish one).
    root.build();
    let redaction = redaction(lookup);
    let mut all = Vec::new();
    sections(&root, &mut Vec::new(), &mut all);
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for arg in all.iter().flat_map(|(_, cmd)| cmd.get_arguments()) {
        let Some(env) = arg.get_env().map(|e| e.to_string_lossy().into_owned()) else {
            continue;
        };
        if !seen.insert(env.clone()) {
            continue;
        }
        let Some(value) = lookup(&env) else { continue };
        let Some(why) = refusal(arg, &value) else {
            continue;
        };
        // The value as `config` shows it: a secret's nowhere, a URL's credentials hidden.
        out.push(if is_secret(arg, &env) {
            let why = match value.as_str() {
                "" => why,
                secret => why.replace(secret, REDACTED),
            };
            format!("{env} (set; redacted) is refused: {why}")
        } else {
            let shown = shown_value(&redaction, &value);
            let why = match value.as_str() {
                "" => why,
                typed => why.replace(typed, &shown),
            };
            redaction
                .text(&format!("{env}={shown} is refused: {why}"))
                .into_owned()
        });
    }
    out
}

/// Prints the block on stdout, shell commands through `redact_command`; returns the exit
/// code: a usage error when a variable holds a value its flag refuses (each named on
/// stderr, the block still printed: a run would stop on the first).
pub fn print_config(redact_command: fn(&str) -> String) -> i32 {
    let lookup = |name: &str| std::env::var(name).ok();
    crate::stdout::print(&render(&lookup, redact_command));
    let mut refused = refused_values(&lookup);
    // A value that is not UTF-8 reads as unset above; a run refuses it.
    refused.extend(
        std::env::vars_os()
            .filter(|(_, v)| v.to_str().is_none())
            .filter_map(|(name, _)| name.into_string().ok())
            .filter(|name| name.starts_with("LLMSURGE_") || SECRET_VARS.contains(&name.as_str()))
            .map(|name| format!("{name} is refused: its value is not valid UTF-8")),
    );
    for line in &refused {
        crate::stdout::eprintln(&format!("error: {line}"));
    }
    if refused.is_empty() {
        crate::exit_codes::OK
    } else {
        crate::exit_codes::USAGE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The block with shell commands as given: their redaction is the sweep's, tested
    /// with it (and end to end in the sweep's secret tests).
    fn render(lookup: &dyn Fn(&str) -> Option<String>) -> String {
        super::render(lookup, str::to_string)
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn every_setting_appears_with_its_effective_value() {
        let text = render(&env(&[
            ("LLMSURGE_MAX_SECONDS", "10s"),
            ("LLMSURGE_MODEL", "my model's name"),
        ]));
        assert!(text.contains("\nLLMSURGE_MAX_SECONDS=10s\n"), "{text}");
        assert!(
            text.contains("\nLLMSURGE_MODEL='my model'\\''s name'\n"),
            "{text}"
        );
        // A default is the effective value when the environment has none.
        assert!(text.contains("\nLLMSURGE_SAMPLE_REQUESTS=20\n"), "{text}");
        assert!(text.contains("\n# LLMSURGE_TARGET=\n"), "{text}");
        for name in super::super::known_env_vars() {
            assert!(text.contains(&format!("{name}=")), "{name} missing");
        }
    }

    #[test]
    fn the_instant_mock_prints_its_effective_values() {
        let text = render(&env(&[
            ("LLMSURGE_MOCK_INSTANT", "1"),
            ("LLMSURGE_MOCK_TTFT_MS", "50"),
        ]));
        for line in [
            "LLMSURGE_MOCK_INSTANT=1",
            "LLMSURGE_MOCK_TTFT_MS=50",
            "LLMSURGE_MOCK_ITL_MS=0",
            "LLMSURGE_MOCK_TTFT_MS_PER_PROMPT_TOKEN=0",
            "LLMSURGE_MOCK_OUTPUT_TOKENS=16",
            "LLMSURGE_MOCK_OUTPUT_TOKENS_STD=0",
        ] {
            assert!(text.contains(&format!("\n{line}\n")), "{line}: {text}");
        }
        let plain = render(&env(&[]));
        assert!(plain.contains("\nLLMSURGE_MOCK_ITL_MS=6\n"), "{plain}");
    }

    #[test]
    fn secrets_are_redacted() {
        let text = render(&env(&[
            ("LLMSURGE_API_KEY", "sk-config-secret"),
            ("OPENAI_API_KEY", "sk-openai-secret"),
            (
                "LLMSURGE_BACKEND_KWARGS",
                r#"{"headers": {"Authorization": "Bearer sk-header-secret", "X-Gateway-Key": "sk-custom-secret", "X-Trace": "on", "Accept": "text/event-stream"}, "params": {"code": "sk-param-secret", "api-version": "2024"}}"#,
            ),
            (
                "LLMSURGE_SERVER_METRICS",
                "http://scraper:sk-url-secret@10.0.0.5:9090/metrics",
            ),
            (
                "LLMSURGE_TARGET",
                "https://u:sk-target-secret@gw.example/v1?key=sk-query-secret&api-version=2024",
            ),
            ("LLMSURGE_SHOW_HEADER", "x-trace"),
            ("LLMSURGE_SHOW_QUERY_PARAM", "api-version"),
        ]));
        assert!(
            text.contains("LLMSURGE_SERVER_METRICS='http://<redacted>@10.0.0.5:9090/metrics'"),
            "{text}"
        );
        assert!(
            text.contains(
                "LLMSURGE_TARGET='https://<redacted>@gw.example/v1?key=<redacted>&api-version=2024'"
            ),
            "{text}"
        );
        for secret in [
            "sk-config-secret",
            "sk-openai-secret",
            "sk-header-secret",
            "sk-custom-secret",
            "sk-param-secret",
            "sk-url-secret",
            "sk-target-secret",
            "sk-query-secret",
        ] {
            assert!(!text.contains(secret), "{secret}: {text}");
        }
        assert!(text.contains("# LLMSURGE_API_KEY=<set in the environment; redacted>"));
        // Harmless and opted-in values stay.
        for shown in [
            r#""X-Trace":"on""#,
            r#""Accept":"text/event-stream""#,
            r#""api-version":"2024""#,
        ] {
            assert!(text.contains(shown), "{shown}: {text}");
        }
    }

    /// A password as typed, holding what ends a URL in free text (a space, a quote, a
    /// `/`), or in a URL without its scheme, is hidden all the same; a line whose value
    /// was redacted is left commented, so the block loaded back sets no `<redacted>`.
    #[test]
    fn typed_passwords_are_hidden_and_redacted_lines_set_nothing() {
        let text = render(&env(&[
            ("LLMSURGE_TARGET", "http://u:pw SECRET-1@127.0.0.1:1"),
            (
                "LLMSURGE_SERVER_METRICS",
                "http://u:pw/SECRET-2@h:9/metrics",
            ),
            ("LLMSURGE_DATA", "u:pw\"SECRET-3@host:8000"),
        ]));
        for secret in ["SECRET-1", "SECRET-2", "SECRET-3"] {
            assert!(!text.contains(secret), "{secret}: {text}");
        }
        for line in [
            "# LLMSURGE_TARGET='http://<redacted>@127.0.0.1:1'  (set in the environment; redacted here, so not set by this line)",
            "# LLMSURGE_SERVER_METRICS='http://<redacted>@h:9/metrics'  (set in the environment; redacted here, so not set by this line)",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}: {text}");
        }
        // Nothing hidden: still a line that sets it, in the JSON form it is read in.
        let kwargs = render(&env(&[(
            "LLMSURGE_BACKEND_KWARGS",
            r#"{"headers": {"Accept": "text/event-stream"}}"#,
        )]));
        assert!(
            kwargs.contains(
                "\nLLMSURGE_BACKEND_KWARGS='{\"headers\":{\"Accept\":\"text/event-stream\"}}'\n"
            ),
            "{kwargs}"
        );
        let refused = refused_values(&env(&[(
            "LLMSURGE_HTTP2_STREAMS",
            "http://u:pw SECRET-4@h",
        )]));
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(!refused[0].contains("SECRET-4"), "{refused:?}");
    }

    #[test]
    fn token_counts_are_shown_and_credentials_are_not() {
        let text = render(&env(&[
            ("LLMSURGE_MOCK_OUTPUT_TOKENS", "77"),
            ("LLMSURGE_MOCK_TTFT_MS_PER_PROMPT_TOKEN", "0.5"),
            ("LLMSURGE_MOCK_KV_CACHE_TOKENS", "4096"),
        ]));
        for line in [
            "LLMSURGE_MOCK_OUTPUT_TOKENS=77",
            "LLMSURGE_MOCK_TTFT_MS_PER_PROMPT_TOKEN=0.5",
            "LLMSURGE_MOCK_KV_CACHE_TOKENS=4096",
        ] {
            assert!(text.contains(&format!("\n{line}\n")), "{line}: {text}");
        }
        let arg = clap::Arg::new("x");
        assert!(is_secret(&arg, "LLMSURGE_API_KEY"));
        assert!(is_secret(&arg, "OPENAI_API_KEY"));
        assert!(!is_secret(&arg, "LLMSURGE_MOCK_OUTPUT_TOKENS"));
    }

    /// Secrets go by exact name, so a credential flag added later must say so itself
    /// (`hide_env_values`, or a place in SECRET_VARS): every setting whose name reads
    /// like a credential is held to that here rather than guessed at run time.
    #[test]
    fn every_credential_like_setting_is_a_secret() {
        let mut all = Vec::new();
        sections(&super::super::Cli::command(), &mut Vec::new(), &mut all);
        let credential_like = |env: &str| {
            [
                "KEY",
                "_SECRET",
                "_PASSWORD",
                "AUTH",
                "CREDENTIALS",
                "HF_TOKEN",
                "AUTH_TOKEN",
                "ACCESS_TOKEN",
                "API_TOKEN",
            ]
            .iter()
            .any(|s| env.ends_with(s))
        };
        let mut checked = 0;
        for (_, cmd) in &all {
            for arg in cmd.get_arguments() {
                let Some(env) = arg.get_env() else { continue };
                let env = env.to_string_lossy();
                if credential_like(&env) {
                    assert!(is_secret(arg, &env), "{env} reads like a credential");
                    checked += 1;
                }
            }
        }
        assert!(checked >= 1, "LLMSURGE_API_KEY is among the settings");
    }

    /// A value a run would refuse is named with its variable and flag; the defaults, and
    /// the values a switch takes from the environment, are not.
    #[test]
    fn values_a_flag_refuses_are_named() {
        let refused = refused_values(&env(&[
            ("LLMSURGE_RATE", "10,abc"),
            ("LLMSURGE_HTTP2_STREAMS", "0"),
            ("LLMSURGE_HTTP2", "perhaps"),
            ("LLMSURGE_MAX_SECONDS", "10s"),
            ("LLMSURGE_DISABLE_PROGRESS", "1"),
            ("LLMSURGE_API_KEY", "sk-refused-secret"),
        ]));
        let named = |var: &str, flag: &str| {
            refused
                .iter()
                .any(|l| l.starts_with(&format!("{var}=")) && l.contains(flag))
        };
        assert!(named("LLMSURGE_RATE", "--rate"), "{refused:?}");
        assert!(
            named("LLMSURGE_HTTP2_STREAMS", "--http2-streams"),
            "{refused:?}"
        );
        assert!(named("LLMSURGE_HTTP2", "--http2"), "{refused:?}");
        assert_eq!(refused.len(), 3, "{refused:?}");
        let mut all = Vec::new();
        sections(&super::super::Cli::command(), &mut Vec::new(), &mut all);
        let defaults: Vec<(String, String)> = all
            .iter()
            .flat_map(|(_, cmd)| cmd.get_arguments())
            .filter_map(|a| {
                let env = a.get_env()?.to_string_lossy().into_owned();
                let d: Vec<String> = a
                    .get_default_values()
                    .iter()
                    .map(|d| d.to_string_lossy().into_owned())
                    .collect();
                (!d.is_empty()).then(|| (env, d.join(",")))
            })
            .collect();
        assert!(defaults.len() > 20, "{defaults:?}");
        let lookup = |name: &str| {
            defaults
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(refused_values(&lookup), Vec::<String>::new());
    }

    #[test]
    fn quoting_survives_a_shell() {
        assert_eq!(shell_quote("json,csv"), "json,csv");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
