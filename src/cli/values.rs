//! Parsers for flag values: durations, rate lists, fractions, windows, key=value specs.
//! Each returns a one-line message that says what was expected; clap adds the flag name.

use std::time::Duration;

/// The longest duration any flag takes: a year. Longer values are typos (`1e20`), and
/// they would overflow the clock arithmetic (`Instant + Duration`) downstream.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// The highest request rate a flag takes, per second: far above what one client can send.
pub const MAX_RATE: f64 = 1e6;
/// The lowest request rate a flag takes, per second (one request a day): the gap
/// between two requests must fit the clock arithmetic.
pub const MIN_RATE: f64 = 1.0 / 86_400.0;

/// A duration: plain seconds (`30`, `1.5`) or with a unit (`500ms`, `30s`, `2m`, `1h`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    // The unit is the trailing run of letters, so `1e3s` is a number in exponent form.
    let num = t.trim_end_matches(|c: char| c.is_alphabetic());
    let (num, unit) = (num, &t[num.len()..]);
    let value: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (try 30, 2.5s, 500ms, 2m, 1h)"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" | "mins" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        other => {
            return Err(format!(
                "unknown duration unit {other:?} in {s:?} (use ms, s, m, h or d)"
            ));
        }
    };
    let seconds = value * scale;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("{s:?} must be a non-negative duration"));
    }
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if d <= MAX_DURATION => Ok(d),
        _ => Err(format!("{s:?} is too long (at most a year, 365d)")),
    }
}

/// A positive duration.
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?} must be greater than zero"));
    }
    Ok(d)
}

/// A list of rates, one benchmark each.
#[derive(Clone, Debug, PartialEq)]
pub struct RateList(pub Vec<f64>);

/// A list of positive numbers: `10` or `1,2,5.5`, each within [`MIN_RATE`, `MAX_RATE`].
pub fn parse_rates(s: &str) -> Result<RateList, String> {
    let rates: Vec<f64> = s
        .split(',')
        .map(|part| {
            let p = part.trim();
            match p.parse::<f64>() {
                Ok(v) if (MIN_RATE..=MAX_RATE).contains(&v) => Ok(v),
                Ok(v) if v.is_finite() && v > 0.0 => Err(format!(
                    "{p:?} is out of range (from one a day, {MIN_RATE:.6}, to {MAX_RATE:e})"
                )),
                _ => Err(format!(
                    "{p:?} is not a positive number (expected e.g. 10 or 1,2,5)"
                )),
            }
        })
        .collect::<Result<_, _>>()?;
    if rates.is_empty() {
        return Err("expected at least one rate".into());
    }
    Ok(RateList(rates))
}

/// A fraction: `0.05` or `5%`, within `[0, 1]`.
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("{s:?} is not a fraction (try 0.05 or 5%)"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("{s:?} must be between 0 and 1 (or 0% and 100%)"));
    }
    Ok(v)
}

/// A warm-up or cool-down window.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowSpec {
    /// A fraction (< 1) of the benchmark's duration or request count.
    Fraction(f64),
    /// An absolute time.
    Time(Duration),
    /// An absolute number of requests.
    Requests(u64),
}

/// `0.1` (a fraction below 1), `30s` (a time), or `200req` (a request count).
pub fn parse_window(s: &str) -> Result<WindowSpec, String> {
    let t = s.trim();
    if let Some(n) = t.strip_suffix("req").or_else(|| t.strip_suffix("requests")) {
        return n
            .trim()
            .parse::<u64>()
            .map(WindowSpec::Requests)
            .map_err(|_| format!("{s:?}: expected a whole number of requests, e.g. 200req"));
    }
    if t.ends_with(|c: char| c.is_ascii_alphabetic()) {
        return parse_duration(t).map(WindowSpec::Time);
    }
    match t.parse::<f64>() {
        Ok(f) if (0.0..1.0).contains(&f) => Ok(WindowSpec::Fraction(f)),
        _ => Err(format!(
            "{s:?}: expected a fraction below 1 (0.1), a time (30s) or a request count (200req)"
        )),
    }
}

/// Splits `k=v,k2=v2` into pairs; keys are trimmed, values may be empty.
pub fn parse_pairs(s: &str) -> Result<Vec<(String, String)>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((k.trim().to_string(), v.trim().to_string()))
            }
            _ => Err(format!("{p:?} is not key=value")),
        })
        .collect()
}

/// Lets every value start with `-`, as a negative number does, so that `--max-seconds -5`
/// reaches the flag's own parser and is refused as out of range, naming the flag, instead
/// of clap's "unexpected argument '-5'".
pub fn negative_numbers_are_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        if a.get_action().takes_values() {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    })
    .mut_subcommands(negative_numbers_are_values)
}

/// Where the target check asks whether the server is ready (`--health-path`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "path")]
pub enum HealthPath {
    /// GET this path (from `/`, e.g. `/health`).
    Path(String),
    /// No readiness check: `/v1/models` (or `--model`) alone.
    Off,
}

/// `--health-path`: `off` or a path from `/` (e.g. `/health/readiness`).
pub fn parse_health_path(s: &str) -> Result<HealthPath, String> {
    match s.trim() {
        "off" => Ok(HealthPath::Off),
        p if p.starts_with('/') && !p.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            Ok(HealthPath::Path(p.to_string()))
        }
        _ => Err(format!(
            "{s:?} is not off or a path from / (e.g. /health/readiness)"
        )),
    }
}

/// `--reset-cache`: `auto`, `none` or a path from `/`.
pub fn parse_reset_cache(s: &str) -> Result<String, String> {
    match s {
        "auto" | "none" => Ok(s.to_string()),
        p if p.starts_with('/') => Ok(p.to_string()),
        _ => Err(format!(
            "{s:?} is not auto, none or a path (e.g. /reset_prefix_cache)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_paths() {
        assert_eq!(parse_health_path("off"), Ok(HealthPath::Off));
        assert_eq!(
            parse_health_path("/health/readiness"),
            Ok(HealthPath::Path("/health/readiness".into()))
        );
        assert!(parse_health_path("health").is_err());
        assert!(parse_health_path("/a b").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration(" 1h "), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_positive_duration("0").is_err());
        assert_eq!(parse_duration("365d"), Ok(MAX_DURATION));
        assert_eq!(parse_duration("1e3ms"), Ok(Duration::from_secs(1)));
        for absurd in ["1e20", "1e19s", "366d", "inf", "NaN", "1e300h", "-0.5"] {
            assert!(parse_duration(absurd).is_err(), "{absurd}");
        }
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rates("10"), Ok(RateList(vec![10.0])));
        assert_eq!(parse_rates("1, 2,5.5"), Ok(RateList(vec![1.0, 2.0, 5.5])));
        assert!(parse_rates("0").is_err());
        assert!(parse_rates("fast").is_err());
        assert!(parse_rates("1,,2").is_err());
        assert!(parse_rates("1e300").is_err());
        assert!(parse_rates("1e-300").is_err());
        assert!(parse_rates("inf").is_err());
    }

    #[test]
    fn fractions_and_windows() {
        assert_eq!(parse_fraction("5%"), Ok(0.05));
        assert_eq!(parse_fraction("0.2"), Ok(0.2));
        assert!(parse_fraction("150%").is_err());
        assert_eq!(parse_window("0.1"), Ok(WindowSpec::Fraction(0.1)));
        assert_eq!(
            parse_window("30s"),
            Ok(WindowSpec::Time(Duration::from_secs(30)))
        );
        assert_eq!(parse_window("200req"), Ok(WindowSpec::Requests(200)));
        assert!(parse_window("1.5").is_err());
        assert!(parse_window("x req").is_err());
    }

    #[test]
    fn pairs() {
        assert_eq!(
            parse_pairs("a=1, b = two,"),
            Ok(vec![("a".into(), "1".into()), ("b".into(), "two".into())])
        );
        assert!(parse_pairs("novalue").is_err());
    }
}
