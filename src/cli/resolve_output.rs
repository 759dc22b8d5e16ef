//! Resolving the output flags of `benchmark run` into outputs and report settings.

use super::UsageError;
use super::args::OutputArgs;
use crate::report::{Output, ReportSettings, parse_outputs};

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
        // An absolute path stays as it is; a relative one lands beside the reports.
        Some(p) => Some(args.output_dir.join(p)),
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
