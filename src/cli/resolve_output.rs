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

/// Whether a relative `--request-log` starts with a relative `--output-dir` (not `.`):
/// `--request-log o/log.jsonl --output-dir o`, meant from the working directory, would
/// land in `o/o/log.jsonl`.
fn repeats_output_dir(log: &Path, output_dir: &Path) -> bool {
    let dir = plain(output_dir);
    log.is_relative()
        && output_dir.is_relative()
        && !dir.as_os_str().is_empty()
        && plain(log).starts_with(&dir)
}

/// `log` with the output directory's components taken off its front.
fn strip_dir(log: &Path, output_dir: &Path) -> PathBuf {
    let log = plain(log);
    log.strip_prefix(plain(output_dir))
        .map(Path::to_path_buf)
        .unwrap_or(log)
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
            if repeats_output_dir(p, &args.output_dir) {
                return Err(UsageError(format!(
                    "--request-log {} is relative to --output-dir {}, so it would be written to {}; give it without the directory ({}) or as an absolute path",
                    p.display(),
                    args.output_dir.display(),
                    args.output_dir.join(p).display(),
                    strip_dir(p, &args.output_dir).display()
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
        assert!(repeats_output_dir(p("o/log.jsonl"), p("o")));
        assert!(repeats_output_dir(p("./o/log.jsonl"), p("o/")));
        assert!(!repeats_output_dir(p("log.jsonl"), p("o")));
        assert!(!repeats_output_dir(p("log.jsonl"), p(".")));
        assert!(!repeats_output_dir(p("other/log.jsonl"), p("o")));
        assert!(!repeats_output_dir(p("/tmp/o/log.jsonl"), p("o")));
        assert_eq!(strip_dir(p("./o/a/log.jsonl"), p("o")), p("a/log.jsonl"));
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
