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

/// `K/N`: shard K of N, counted from 1 as people count (`1/3` … `3/3`, the convention
/// of Jest and Playwright), N in 1..=1024. `1/1` is the whole load. The returned
/// [`Shard`] is 0-based (K − 1), like `JOB_COMPLETION_INDEX`.
pub fn parse_shard(s: &str) -> Result<Shard, String> {
    let (k, n) = s
        .trim()
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not K/N (e.g. 1/4: the first of four shards)"))?;
    let count = parse_count(n.trim()).map_err(|e| format!("{s:?}: N {e}"))?;
    let k: u32 = k
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: K must be a whole number from 1 to N"))?;
    if k == 0 || k > count {
        return Err(format!(
            "{s:?}: K must be from 1 to N (shards are 1/{count} to {count}/{count})"
        ));
    }
    Ok(Shard {
        index: k - 1,
        count,
    })
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
                    "--shards {count}: {JOB_INDEX_VAR} is not set (a Kubernetes Indexed Job sets it; elsewhere use --shard K/{count}, K from 1)"
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

/// An RFC 3339 instant → Unix seconds.
fn parse_rfc3339(s: &str) -> Option<f64> {
    let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    Some(t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_are_range_checked() {
        // Counted from 1 on the command line, from 0 inside.
        assert_eq!(parse_shard("3/4"), Ok(Shard { index: 2, count: 4 }));
        assert_eq!(parse_shard("1/1"), Ok(Shard::WHOLE));
        for bad in ["0/4", "5/4"] {
            assert!(
                parse_shard(bad)
                    .expect_err("an error")
                    .contains("K must be from 1 to N"),
                "{bad}"
            );
        }
        assert!(
            parse_shard("1/0")
                .expect_err("an error")
                .contains("from 1 to 1024")
        );
        assert!(parse_shard("1/1025").is_err());
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
