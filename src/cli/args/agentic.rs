//! `benchmark run` flags: agentic client behaviours (clients that give up, the prefill
//! cap, prompts as token ids).

use crate::cli::values::{parse_duration, parse_fraction};
use clap::Args;
use llmsurge_proto::{CancelAfter, CancelSpec};

/// Agentic client behaviours.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Agentic clients")]
pub struct AgenticArgs {
    /// Clients that give up: "share=10%,after=500ms" closes that share of the requests
    /// early, chosen per slot by --random-seed. `after` is a time after the send
    /// (`500ms`), a uniform range (`0.5..2s`), or a time after the first token
    /// (`ttft+200ms`). Such requests end `cancelled` with reason `planned`.
    #[arg(long, env = "LLMSURGE_CANCEL", value_parser = parse_cancel, value_name = "SPEC")]
    pub cancel: Option<CancelSpec>,

    /// At most N requests that have not yet received their first token are in flight at
    /// once (per host); decoding requests are not capped by it. The time requests waited
    /// for it is reported apart from dispatch lag.
    #[arg(long, env = "LLMSURGE_MAX_PREFILL_CONCURRENCY", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_prefill_concurrency: Option<u32>,

    /// Completions format: send each prompt as a list of token ids under --processor, so
    /// the server's prompt length is exact whatever its tokenizer does to text.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_PROMPT_TOKEN_IDS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub prompt_token_ids: bool,
}

/// `share=10%,after=500ms` | `after=0.5..2s` | `after=ttft+200ms`.
pub fn parse_cancel(s: &str) -> Result<CancelSpec, String> {
    let (mut share, mut after) = (None, None);
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = part.split_once('=') else {
            return Err(format!(
                "{part:?} is not key=value (expected e.g. share=10%,after=500ms)"
            ));
        };
        let twice = || format!("{:?} is given twice", key.trim());
        match key.trim() {
            "share" if share.is_some() => return Err(twice()),
            "after" if after.is_some() => return Err(twice()),
            "share" => share = Some(parse_fraction(value)?),
            "after" => after = Some(parse_after(value.trim())?),
            other => {
                return Err(format!(
                    "unknown key {other:?} (the keys are share and after)"
                ));
            }
        }
    }
    match (share, after) {
        (Some(share), Some(after)) => Ok(CancelSpec { share, after }),
        _ => Err(format!(
            "{s:?} needs both share and after (e.g. share=10%,after=500ms)"
        )),
    }
}

fn parse_after(v: &str) -> Result<CancelAfter, String> {
    if let Some(rest) = v.strip_prefix("ttft+") {
        return Ok(CancelAfter::AfterFirstToken(parse_duration(rest)?));
    }
    if let Some((lo, hi)) = v.split_once("..") {
        // The unit of the upper end applies to a bare lower one: `0.5..2s`.
        if lo.trim().is_empty() {
            return Err(format!(
                "after={v:?}: the range needs a start (e.g. 0.5..2s)"
            ));
        }
        let unit = hi.trim().trim_start_matches(|c: char| !c.is_alphabetic());
        let lo = if lo.trim().ends_with(|c: char| c.is_alphabetic()) {
            parse_duration(lo)?
        } else {
            parse_duration(&format!("{}{unit}", lo.trim()))?
        };
        let hi = parse_duration(hi)?;
        if hi < lo {
            return Err(format!("after={v:?}: the range's end is below its start"));
        }
        if hi.is_zero() {
            return Err(given_up_unsent(v));
        }
        return Ok(CancelAfter::Uniform { lo, hi });
    }
    let after = parse_duration(v)?;
    if after.is_zero() {
        return Err(given_up_unsent(v));
    }
    Ok(CancelAfter::Fixed(after))
}

/// A time after the send of zero gives every chosen request up before the server sees
/// it, and the loop sends the next at once: a run of nothing but cancellations.
fn given_up_unsent(v: &str) -> String {
    format!(
        "after={v:?} gives a request up as it is sent, before the server sees it: give a time above zero, or ttft+0ms to give up at the first token"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_three_forms_parse() {
        let ms = Duration::from_millis;
        assert_eq!(
            parse_cancel("share=10%,after=500ms").expect("parses"),
            CancelSpec {
                share: 0.1,
                after: CancelAfter::Fixed(ms(500))
            }
        );
        assert_eq!(
            parse_cancel("share=0.25,after=0.5..2s")
                .expect("parses")
                .after,
            CancelAfter::Uniform {
                lo: ms(500),
                hi: ms(2000)
            }
        );
        assert_eq!(
            parse_cancel("after=ttft+200ms,share=1")
                .expect("parses")
                .after,
            CancelAfter::AfterFirstToken(ms(200))
        );
        assert_eq!(
            parse_cancel("share=5%,after=100ms..1s")
                .expect("parses")
                .after,
            CancelAfter::Uniform {
                lo: ms(100),
                hi: ms(1000)
            }
        );
    }

    #[test]
    fn bad_specs_say_why() {
        for bad in [
            "share=10%",
            "after=1s",
            "share=150%,after=1s",
            "share=1%,after=2s..1s",
            "share=1%,after=soon",
            "share=1%,when=1s",
            "share",
        ] {
            assert!(parse_cancel(bad).is_err(), "{bad} was accepted");
        }
        for (bad, says) in [
            ("share=10%,after=0s", "before the server sees it"),
            ("share=10%,after=0..0ms", "before the server sees it"),
            ("share=10%,share=20%,after=1s", "\"share\" is given twice"),
            (
                "share=10%,after=ttft+1s,after=2s",
                "\"after\" is given twice",
            ),
            ("share=10%,after=..1s", "the range needs a start"),
        ] {
            let error = parse_cancel(bad).expect_err(bad);
            assert!(error.contains(says), "{bad}: {error}");
        }
        // Zero after the first token is a plan: give up at the first token.
        assert!(parse_cancel("share=10%,after=ttft+0ms").is_ok());
        assert!(parse_cancel("share=10%,after=0..1s").is_ok());
    }
}
