//! Scenarios: ready workloads whose keys are `benchmark run` flag names with `_`.
//!
//! Precedence is built-in defaults < scenario < environment < flags. A scenario is
//! found before the real parse (`--scenario` in argv, else `LLMSURGE_SCENARIO`); each of
//! its keys becomes the *default value* of the matching argument, and clap then applies
//! flags over environment over defaults as it always does. An unknown key is an error
//! naming the key and the file.

use clap::Command;
use serde_json::Value;
use std::path::Path;

/// Scenarios built into the binary (also shipped as files in `scenarios/`).
pub const BUILTIN: &[(&str, &str)] = &[
    ("chat", include_str!("../../scenarios/chat.json")),
    ("rag", include_str!("../../scenarios/rag.json")),
    (
        "prefix_cache",
        include_str!("../../scenarios/prefix_cache.json"),
    ),
    (
        "long_context",
        include_str!("../../scenarios/long_context.json"),
    ),
];

/// The scenario named in `argv` (after `benchmark run`) or in the environment.
pub fn requested(argv: &[String]) -> Option<String> {
    let run_at = argv
        .windows(2)
        .position(|w| w[0] == "benchmark" && w[1] == "run")?;
    let mut it = argv[run_at + 2..].iter();
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "--scenario" {
            return it.next().cloned();
        }
        if let Some(v) = a.strip_prefix("--scenario=") {
            return Some(v.to_string());
        }
    }
    std::env::var("LLMSURGE_SCENARIO")
        .ok()
        .filter(|s| !s.is_empty())
}

/// Loads a scenario: a built-in name, or a `.json`/`.yaml` file. Returns its name (for
/// errors) and its keys.
pub fn load(name_or_path: &str) -> Result<(String, serde_json::Map<String, Value>), String> {
    let path = Path::new(name_or_path);
    let (label, text, yaml) = if path.is_file() {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("--scenario {name_or_path}: {e}"))?;
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        (name_or_path.to_string(), text, yaml)
    } else if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
        (
            format!("scenario {name_or_path}"),
            (*text).to_string(),
            false,
        )
    } else {
        let known: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        return Err(format!(
            "--scenario {name_or_path}: no such file or built-in scenario (built-in: {})",
            known.join(", ")
        ));
    };
    let value: Value = if yaml {
        serde_saphyr::from_str(&text).map_err(|e| {
            format!(
                "--scenario {label}: not valid YAML ({})",
                e.to_string().lines().next().unwrap_or_default()
            )
        })?
    } else {
        serde_json::from_str(&text)
            .map_err(|e| format!("--scenario {label}: not valid JSON ({e})"))?
    };
    match value {
        Value::Object(map) => Ok((label, map)),
        _ => Err(format!(
            "--scenario {label}: expected an object of flag names"
        )),
    }
}

/// A scenario (or sweep parameter) value as the text a flag would take.
pub fn flag_text(label: &str, key: &str, v: &Value) -> Result<String, String> {
    Ok(match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        // A list is a comma-separated flag value (e.g. "rate": [1, 5, 10]).
        Value::Array(items) => items
            .iter()
            .map(|i| flag_text(label, key, i))
            .collect::<Result<Vec<_>, _>>()?
            .join(","),
        // An object is a JSON flag value (e.g. "data": {"prompt_tokens": 256, ...}).
        Value::Object(_) => v.to_string(),
        Value::Null => return Err(format!("--scenario {label}: key {key:?} is null")),
    })
}

/// Applies the scenario requested in `argv` (if any) to `cli` as argument defaults.
pub fn apply(cli: Command, argv: &[String]) -> Result<Command, String> {
    let Some(requested) = requested(argv) else {
        return Ok(cli);
    };
    let (label, keys) = load(&requested)?;
    let mut defaults = Vec::new();
    {
        let run = cli
            .find_subcommand("benchmark")
            .and_then(|b| b.find_subcommand("run"))
            .ok_or("the benchmark run command is missing")?;
        for (key, value) in &keys {
            let known = run
                .get_arguments()
                .any(|a| a.get_id().as_str() == key.as_str() && !a.is_positional());
            if !known || key == "scenario" {
                return Err(format!(
                    "--scenario {label}: unknown key {key:?} (keys are benchmark run flag names with _, e.g. max_seconds)"
                ));
            }
            defaults.push((key.clone(), flag_text(&label, key, value)?));
        }
    }
    Ok(cli.mut_subcommand("benchmark", |b| {
        b.mut_subcommand("run", |mut run| {
            for (key, text) in defaults {
                // Leaked once per process: clap keeps defaults as 'static strings.
                let text: &'static str = Box::leak(text.into_boxed_str());
                run = run.mut_arg(key, |a| a.default_value(text));
            }
            run
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn built_in_scenarios_use_only_known_keys() {
        for (name, _) in BUILTIN {
            let argv: Vec<String> = ["llmsurge", "benchmark", "run", "--scenario", name]
                .iter()
                .map(|s| s.to_string())
                .collect();
            let cmd = apply(super::super::Cli::command(), &argv).expect(name);
            cmd.try_get_matches_from(&argv)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn unknown_keys_and_names_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("s.json");
        std::fs::write(&f, r#"{"max_seconds": 5, "colour": "red"}"#).expect("w");
        let argv: Vec<String> = ["llmsurge", "benchmark", "run", "--scenario"]
            .iter()
            .map(|s| s.to_string())
            .chain([f.display().to_string()])
            .collect();
        let e = apply(super::super::Cli::command(), &argv).expect_err("unknown");
        assert!(e.contains("colour") && e.contains("s.json"), "{e}");
        let argv: Vec<String> = ["llmsurge", "benchmark", "run", "--scenario=nope"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(
            apply(super::super::Cli::command(), &argv)
                .expect_err("name")
                .contains("nope")
        );
    }
}
