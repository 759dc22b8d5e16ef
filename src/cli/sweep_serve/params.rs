//! The sweep's parameter files and the commands built from them: a server command per
//! serve configuration, a `benchmark run` command line per benchmark configuration.
//!
//! Benchmark configurations are checked with the real `benchmark run` definition (the
//! same clap command a user's flags go through), so a typo in any entry fails before a
//! server starts.

use crate::cli::UsageError;
use crate::cli::scenario::flag_text;
use serde_json::{Map, Value};
use std::path::Path;

/// One configuration: a file's entry, keys in file order.
pub type Params = Map<String, Value>;

/// `benchmark run` settings the sweep sets itself per point; a parameter file may not.
pub const SWEEP_OWNED: &[&str] = &["target", "output_dir", "repeat", "dry_run", "scenario"];

/// Loads `--serve-params`/`--bench-params`: a JSON or YAML list of objects (YAML when
/// the file ends in .yaml/.yml).
pub fn load_list(flag: &str, path: &Path) -> Result<Vec<Params>, UsageError> {
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).map_err(|e| UsageError(format!("{flag} {shown}: {e}")))?;
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let value: Value = if yaml {
        serde_saphyr::from_str(&text).map_err(|e| {
            UsageError(format!(
                "{flag} {shown}: not valid YAML ({})",
                e.to_string().lines().next().unwrap_or_default()
            ))
        })?
    } else {
        serde_json::from_str(&text)
            .map_err(|e| UsageError(format!("{flag} {shown}: not valid JSON ({e})")))?
    };
    let Value::Array(items) = value else {
        return Err(UsageError(format!(
            "{flag} {shown}: expected a list of objects, one per configuration"
        )));
    };
    if items.is_empty() {
        return Err(UsageError(format!("{flag} {shown}: the list is empty")));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Object(map) => {
                for (k, v) in &map {
                    if v.is_null() {
                        return Err(UsageError(format!(
                            "{flag} {shown}: entry {i}: key {k:?} is null"
                        )));
                    }
                }
                Ok(map)
            }
            _ => Err(UsageError(format!(
                "{flag} {shown}: entry {i} is not an object"
            ))),
        })
        .collect()
}

/// Quotes `s` for `sh` when it holds anything a shell would interpret.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The server command of one serve configuration: `{key}` placeholders in `template`
/// are filled (`{port}` with `port`), every other key becomes `--key value` (`_` in the
/// key becomes `-`; `true` is a bare flag, `false` is left out).
pub fn serve_command(
    template: &str,
    params: &Params,
    port: u16,
    label: &str,
) -> Result<String, UsageError> {
    let mut cmd = template.replace("{port}", &port.to_string());
    let mut extra = String::new();
    for (key, value) in params {
        let placeholder = format!("{{{key}}}");
        let text = flag_text(label, key, value).map_err(UsageError)?;
        if cmd.contains(&placeholder) {
            cmd = cmd.replace(&placeholder, &shell_quote(&text));
            continue;
        }
        let flag = format!("--{}", key.replace('_', "-"));
        match value {
            Value::Bool(true) => extra.push_str(&format!(" {flag}")),
            Value::Bool(false) => {}
            _ => extra.push_str(&format!(" {flag} {}", shell_quote(&text))),
        }
    }
    if let Some(start) = cmd.find('{')
        && let Some(len) = cmd[start..].find('}')
    {
        let name = &cmd[start + 1..start + len];
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(UsageError(format!(
                "--serve-cmd: placeholder {{{name}}} has no value in {label} (give it a key {name:?})"
            )));
        }
    }
    Ok(cmd + &extra)
}

/// The `benchmark run` flags of one benchmark configuration, each key looked up in the
/// real definition (`run`): its long flag, a bare flag for a `true` switch.
pub fn bench_flags(
    run: &clap::Command,
    params: &Params,
    label: &str,
) -> Result<Vec<String>, UsageError> {
    let mut out = Vec::new();
    for (key, value) in params {
        let arg = run
            .get_arguments()
            .find(|a| a.get_id().as_str() == key.as_str() && !a.is_positional());
        let Some(arg) = arg else {
            return Err(UsageError(format!(
                "{label}: unknown key {key:?} (keys are benchmark run flag names with _, e.g. max_seconds)"
            )));
        };
        if SWEEP_OWNED.contains(&key.as_str()) {
            return Err(UsageError(format!(
                "{label}: key {key:?} is set by the sweep itself (use the sweep's own flag)"
            )));
        }
        let Some(long) = arg.get_long() else {
            return Err(UsageError(format!("{label}: key {key:?} has no flag")));
        };
        let switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
        match (switch, value) {
            (true, Value::Bool(true)) => out.push(format!("--{long}")),
            (true, Value::Bool(false)) => {}
            (true, _) => {
                return Err(UsageError(format!(
                    "{label}: key {key:?} is a switch; give it true or false"
                )));
            }
            _ => {
                out.push(format!("--{long}"));
                out.push(flag_text(label, key, value).map_err(UsageError)?);
            }
        }
    }
    Ok(out)
}

/// A short name for a configuration in reports: `key=value` pairs.
pub fn describe(params: &Params) -> String {
    params
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(json: &str) -> Params {
        serde_json::from_str(json).expect("json")
    }

    #[test]
    fn serve_keys_fill_placeholders_or_become_flags() {
        let p = params(r#"{"model": "m 1", "max_num_seqs": 32, "eager": true, "quiet": false}"#);
        let cmd = serve_command("serve {model} --port {port}", &p, 8123, "entry 0").expect("ok");
        // serde_json's maps keep keys sorted.
        assert_eq!(cmd, "serve 'm 1' --port 8123 --eager --max-num-seqs 32");
    }

    #[test]
    fn an_unfilled_placeholder_is_named() {
        let e = serve_command("serve {model}", &Params::new(), 1, "entry 0").expect_err("unfilled");
        assert!(e.0.contains("{model}"), "{}", e.0);
    }
}
