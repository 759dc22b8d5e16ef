//! Resolving the output flags of `benchmark run` into outputs and report settings.

use super::UsageError;
use super::args::OutputArgs;
use crate::report::{Output, ReportSettings, parse_outputs};
use std::path::{Component, Path, PathBuf};

/// Parses `--output-extras`: a JSON object.
pub fn parse_extras(
    raw: Option<&str>,
) -> Result<serde_json::Map<String, serde_json::Value>, UsageError> {
    let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(serde_json::Map::new());
    };
    match serde_json::from_str(raw) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(UsageError(
            "--output-extras: expected a JSON object, e.g. '{\"gpu\": \"H100\"}'".into(),
        )),
        Err(e) => Err(UsageError(format!(
            "--output-extras: not valid JSON ({e}); expected e.g. '{{\"gpu\": \"H100\"}}'"
        ))),
    }
}

/// `path` without its `.` components.
fn plain(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// `--output-dir` as seen from the working directory `cwd`, without `.` components: as
/// given when relative, the part under `cwd` when absolute (`None` outside it).
fn dir_from(output_dir: &Path, cwd: Option<&Path>) -> Option<PathBuf> {
    if output_dir.is_relative() {
        return Some(plain(output_dir));
    }
    output_dir.strip_prefix(cwd?).ok().map(plain)
}

/// The part of a relative `--request-log` after the output directory when it starts
/// with it (`dir`, from the working directory, not `.`): `--request-log o/log.jsonl
/// --output-dir o` (or `--output-dir $PWD/o`), meant from the working directory, would
/// land in `o/o/log.jsonl`.
fn repeats_output_dir(log: &Path, dir: Option<&Path>) -> Option<PathBuf> {
    let dir = dir.filter(|d| !d.as_os_str().is_empty())?;
    if !log.is_relative() {
        return None;
    }
    plain(log).strip_prefix(dir).ok().map(Path::to_path_buf)
}

/// The outputs and report settings of `benchmark run`.
pub fn resolve_output(args: &OutputArgs) -> Result<(Vec<Output>, ReportSettings), UsageError> {
    let outputs = parse_outputs(&args.outputs).map_err(UsageError)?;
    let request_log = match &args.request_log {
        Some(p) if p.as_os_str().is_empty() || p.file_name().is_none() => {
            return Err(UsageError(format!(
                "--request-log: {:?} is not a file name",
                p.display().to_string()
            )));
        }
        // An absolute path stays as it is; a relative one lands beside the reports, as
        // the --outputs files do (so each point of a sweep, shard or repeat keeps its own).
        Some(p) => {
            let cwd = std::env::current_dir().ok();
            let dir = dir_from(&args.output_dir, cwd.as_deref());
            if let Some(rest) = repeats_output_dir(p, dir.as_deref()) {
                let fix = if rest.as_os_str().is_empty() {
                    "give a file name (written inside --output-dir) or an absolute path".to_string()
                } else {
                    format!(
                        "give it without the directory ({}) or as an absolute path",
                        rest.display()
                    )
                };
                return Err(UsageError(format!(
                    "--request-log {} is relative to --output-dir {}, so it would be written to {}; {fix}",
                    p.display(),
                    args.output_dir.display(),
                    args.output_dir.join(p).display(),
                )));
            }
            Some(args.output_dir.join(p))
        }
        None => None,
    };
    let settings = ReportSettings {
        extras: parse_extras(args.output_extras.as_deref())?,
        sample_requests: args.sample_requests as usize,
        request_log,
        slice: args.slice,
        label: args.label.clone(),
        disable_progress: args.disable_progress || args.disable_console_outputs,
        disable_console_outputs: args.disable_console_outputs,
    };
    Ok((outputs, settings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_that_repeats_the_output_dir_is_caught() {
        let p = Path::new;
        let repeats = |log: &str, dir: &str, cwd: &str| {
            repeats_output_dir(p(log), dir_from(p(dir), Some(p(cwd))).as_deref())
        };
        assert_eq!(
            repeats("o/log.jsonl", "o", "/w"),
            Some(p("log.jsonl").into())
        );
        assert_eq!(
            repeats("./o/a/log.jsonl", "o/", "/w"),
            Some(p("a/log.jsonl").into())
        );
        // An absolute --output-dir under the working directory repeats the same way.
        assert_eq!(
            repeats("o/log.jsonl", "/w/o", "/w"),
            Some(p("log.jsonl").into())
        );
        // The directory itself as the log: nothing left of it.
        assert_eq!(repeats("o", "o", "/w"), Some(PathBuf::new()));
        assert_eq!(repeats("log.jsonl", "o", "/w"), None);
        assert_eq!(repeats("log.jsonl", ".", "/w"), None);
        assert_eq!(repeats("o/log.jsonl", "/w", "/w"), None);
        assert_eq!(repeats("o/log.jsonl", "/elsewhere/o", "/w"), None);
        assert_eq!(repeats("other/log.jsonl", "o", "/w"), None);
        assert_eq!(repeats("/tmp/o/log.jsonl", "o", "/w"), None);
    }

    #[test]
    fn extras_must_be_a_json_object() {
        let map = parse_extras(Some(r#"{"gpu": "H100", "n": 8}"#)).expect("an object");
        assert_eq!(map["gpu"], "H100");
        assert!(parse_extras(None).expect("none").is_empty());
        let e = parse_extras(Some("[1]")).expect_err("an array");
        assert!(
            e.0.starts_with("--output-extras: expected a JSON object"),
            "{e}"
        );
        let e = parse_extras(Some("{gpu")).expect_err("bad JSON");
        assert!(e.0.starts_with("--output-extras: not valid JSON"), "{e}");
        assert_eq!(e.0.lines().count(), 1);
    }
}
