//! Multi-host flags: which shard of the load this process runs (`--shard K/N`,
//! `--shards N` with `JOB_COMPLETION_INDEX`), and the shared start instant (`--start-at`).
//! Pure parsing and checks; every error is one line naming the flag or variable.

use llmsurge_proto::Shard;

/// The most shards one load can be split into.
pub const MAX_SHARDS: u32 = 1024;
/// The variable a Kubernetes Indexed Job sets to the pod's index.
pub const JOB_INDEX_VAR: &str = "JOB_COMPLETION_INDEX";
/// How far in the past `--start-at` may be (clock skew, a slow start).
pub const START_AT_PAST_S: f64 = 1.0;
/// How far ahead `--start-at` may be.
pub const START_AT_AHEAD_S: f64 = 86_400.0;

/// `K/N`: shard K (from 0) of N, N in 1..=1024, K < N.
pub fn parse_shard(s: &str) -> Result<Shard, String> {
    let (k, n) = s
        .trim()
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not K/N (e.g. 0/4: the first of four shards)"))?;
    let count = parse_count(n.trim()).map_err(|e| format!("{s:?}: N {e}"))?;
    let index: u32 = k
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: K must be a whole number from 0"))?;
    if index >= count {
        return Err(format!("{s:?}: K must be below N (shards are 0..{count})"));
    }
    Ok(Shard { index, count })
}

/// A shard count, 1..=1024.
pub fn parse_count(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_SHARDS).contains(&n) => Ok(n),
        _ => Err(format!(
            "must be a whole number from 1 to {MAX_SHARDS}, got {s:?}"
        )),
    }
}

/// The shard of this process: `--shard K/N`, or `--shards N` with K from
/// `JOB_COMPLETION_INDEX` (`job_index`), or the whole load.
pub fn resolve_shard(
    shard: Option<Shard>,
    shards: Option<u32>,
    job_index: Option<&str>,
) -> Result<Shard, String> {
    match (shard, shards) {
        (Some(_), Some(_)) => Err("--shard and --shards conflict: give one".into()),
        (Some(s), None) => Ok(s),
        (None, None) => Ok(Shard::WHOLE),
        (None, Some(count)) => {
            let raw = job_index.ok_or_else(|| {
                format!(
                    "--shards {count}: {JOB_INDEX_VAR} is not set (a Kubernetes Indexed Job sets it; elsewhere use --shard K/{count})"
                )
            })?;
            match raw.trim().parse::<u32>() {
                Ok(index) if index < count => Ok(Shard { index, count }),
                _ => Err(format!(
                    "{JOB_INDEX_VAR}={raw:?} is not a shard of --shards {count} (expected 0 to {})",
                    count - 1
                )),
            }
        }
    }
}

/// `--start-at`: an RFC 3339 instant (`2026-11-25T10:00:00Z`, `…+01:00`, fractions of a
/// second allowed) or Unix seconds (`1795600000`, `1795600000.5`). Returns Unix seconds.
pub fn parse_start_at(s: &str) -> Result<f64, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        return if secs.is_finite() && secs > 0.0 {
            Ok(secs)
        } else {
            Err(format!("{s:?} is not a positive number of Unix seconds"))
        };
    }
    parse_rfc3339(t).ok_or_else(|| {
        format!("{s:?} is neither RFC 3339 (e.g. 2026-11-25T10:00:00Z) nor Unix seconds")
    })
}

/// Checks that `start_at` (Unix seconds) is at most 1 s in the past and 24 h ahead of `now`.
pub fn check_start_at(start_at: f64, now: f64) -> Result<(), String> {
    let ahead = start_at - now;
    if ahead < -START_AT_PAST_S {
        return Err(format!(
            "--start-at is {:.1}s in the past (the host's clock reads {now:.3}); pick an instant ahead",
            -ahead
        ));
    }
    if ahead > START_AT_AHEAD_S {
        return Err(format!(
            "--start-at is {:.1}h ahead; at most 24h is accepted",
            ahead / 3600.0
        ));
    }
    Ok(())
}

/// `YYYY-MM-DD(T|t| )HH:MM:SS[.frac](Z|z|±HH:MM)` → Unix seconds.
fn parse_rfc3339(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let mut rest = &s[19..];
    let mut fraction = 0.0;
    if let Some(after) = rest.strip_prefix('.') {
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        fraction = format!("0.{}", &after[..digits]).parse::<f64>().ok()?;
        rest = &after[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let r = rest.as_bytes();
            if r.len() != 6 || r[3] != b':' {
                return None;
            }
            let (oh, om) = (
                rest[1..3].parse::<i64>().ok()?,
                rest[4..6].parse::<i64>().ok()?,
            );
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => return None,
    };
    // Second 60 is a leap second: the instant is the next second's start.
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some(secs as f64 + fraction)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_are_range_checked() {
        assert_eq!(parse_shard("2/4"), Ok(Shard { index: 2, count: 4 }));
        assert_eq!(parse_shard("0/1"), Ok(Shard::WHOLE));
        assert!(
            parse_shard("4/4")
                .expect_err("an error")
                .contains("K must be below N")
        );
        assert!(
            parse_shard("0/0")
                .expect_err("an error")
                .contains("from 1 to 1024")
        );
        assert!(parse_shard("0/1025").is_err());
        assert!(parse_shard("1").is_err());
        assert!(parse_shard("-1/2").is_err());
    }

    #[test]
    fn shards_take_k_from_the_job_index() {
        let two = Some(2);
        assert_eq!(
            resolve_shard(None, two, Some("1")),
            Ok(Shard { index: 1, count: 2 })
        );
        assert!(
            resolve_shard(None, two, None)
                .expect_err("an error")
                .contains(JOB_INDEX_VAR)
        );
        let out = resolve_shard(None, two, Some("2")).expect_err("an error");
        assert!(out.contains("JOB_COMPLETION_INDEX=\"2\""), "{out}");
        assert!(resolve_shard(None, two, Some("x")).is_err());
        assert_eq!(resolve_shard(None, None, Some("5")), Ok(Shard::WHOLE));
        let s = Some(Shard { index: 0, count: 3 });
        assert!(
            resolve_shard(s, two, None)
                .expect_err("an error")
                .contains("conflict")
        );
    }

    #[test]
    fn start_at_takes_rfc3339_and_unix_seconds() {
        assert_eq!(parse_start_at("1795600000"), Ok(1_795_600_000.0));
        assert_eq!(parse_start_at("1795600000.25"), Ok(1_795_600_000.25));
        assert_eq!(parse_start_at("1970-01-01T00:00:01Z"), Ok(1.0));
        assert_eq!(parse_start_at("2000-03-01T00:00:00Z"), Ok(951_868_800.0));
        assert_eq!(parse_start_at("2026-11-25T10:00:00Z"), Ok(1_795_600_800.0));
        assert_eq!(
            parse_start_at("2026-11-25T11:30:00.5+01:30"),
            Ok(1_795_600_800.5)
        );
        assert_eq!(
            parse_start_at("2026-11-25t09:00:00-01:00"),
            Ok(1_795_600_800.0)
        );
        for bad in [
            "tomorrow",
            "2026-11-25",
            "2026-11-25T10:00:00",
            "2026-02-29T10:00:00Z",
            "2026-13-01T10:00:00Z",
            "2026-11-25T24:00:00Z",
            "2026-11-25T10:00:00.Z",
            "2026-11-25T10:00:00+1:00",
            "-5",
            "NaN",
        ] {
            assert!(parse_start_at(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_start_at("2024-02-29T00:00:00Z"), Ok(1_709_164_800.0));
    }

    #[test]
    fn start_at_must_be_near() {
        assert!(check_start_at(1000.0, 1000.5).is_ok());
        assert!(
            check_start_at(1000.0, 1001.5)
                .expect_err("an error")
                .contains("in the past")
        );
        assert!(check_start_at(1000.0 + 86_400.0, 1000.0).is_ok());
        assert!(
            check_start_at(1001.0 + 86_400.0, 1000.0)
                .expect_err("an error")
                .contains("24h")
        );
    }
}
