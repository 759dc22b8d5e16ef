//! Whether a benchmark's numbers stand (DESIGN.md: "Verdicts live in one place"): no
//! request succeeded, the client was the bottleneck, the server was lost mid-run
//! ([`crate::error_tail`] holds that rule); and why a `--repeat` leaves a run out of its
//! figures across runs. Each is a function of a benchmark's result, used by the exit
//! code, every report and `benchmark merge`.

use crate::result::BenchmarkResult;
use llmsurge_proto::Schedule;

/// Why one benchmark makes its run invalid (exit 4), one line per rule that fired with
/// its figures, each starting with the benchmark's strategy: no request succeeded; the
/// client was the bottleneck (its dispatch lag, or a stream strategy's slow sends); the
/// server was lost mid-run; more outputs ended short of the length asked than
/// `--max-short-output-share` allows. Empty for a valid benchmark.
pub fn invalid_reasons(b: &BenchmarkResult) -> Vec<String> {
    let label = b.strategy.to_string();
    let mut out = Vec::new();
    let r = &b.requests;
    if r.completed == 0 && !estimated(b) {
        let kinds: Vec<String> = b
            .errors
            .iter()
            .map(|e| format!("{} ×{}", e.kind, e.count))
            .collect();
        let kinds = if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        };
        out.push(format!(
            "{label}: no request succeeded: 0 of {} completed, {} errored{kinds}, {} cancelled",
            r.created, r.errored, r.cancelled
        ));
    }
    if let Some(lost) = &b.server_lost {
        out.push(format!("{label}: {}", lost.sentence()));
    }
    if let Some(why) = b.output_lengths.as_ref().and_then(|o| o.invalid_reason()) {
        out.push(format!("{label}: {why}"));
    }
    if b.client.bottleneck {
        let c = &b.client;
        let mut why = Vec::new();
        let streams = matches!(b.strategy.schedule(&b.settings), Schedule::Streams { .. });
        // Only a busy client's lag counts: the waits for the caps the user set are left
        // out of dispatch lag (and of a stream's send gap), so they never make a run
        // invalid.
        if !streams && c.dispatch_lag_p99_ms > c.dispatch_lag_threshold_ms {
            why.push(format!(
                "client dispatch lag p99 {:.1} ms > {} ms (--max-dispatch-lag): the client, not the server, set the pace",
                c.dispatch_lag_p99_ms, c.dispatch_lag_threshold_ms
            ));
        }
        let e2e_mean = b
            .metrics
            .get("request_latency")
            .map(|d| &d.successful)
            .filter(|d| d.count > 0)
            .map(|d| d.mean);
        if streams {
            why.extend(crate::result::slow_stream_client(c, e2e_mean));
        }
        if why.is_empty() {
            // A merged report: a shard's client was the bottleneck.
            why.push(format!(
                "the client was the bottleneck: {}",
                c.warnings.join("; ")
            ));
        }
        out.extend(why.into_iter().map(|w| format!("{label}: {w}")));
    }
    out
}

/// A benchmark that completed nothing but from which a sweep or capacity search still
/// estimated the server's rate (from the tokens it streamed): not invalid for it.
fn estimated(b: &BenchmarkResult) -> bool {
    b.rate_estimate
        .as_ref()
        .is_some_and(|e| e.source == crate::data::RateSource::StreamedTokens)
}

/// Why a benchmark's figures cannot stand beside other runs' (`--repeat` leaves it out
/// of `across_runs`): the reasons it is invalid ([`invalid_reasons`], without the
/// strategy), a worker that died in it (its load was cut short), an interruption
/// (partial results). Empty when it stands.
pub fn unsound_reasons(b: &BenchmarkResult) -> Vec<String> {
    let label = format!("{}: ", b.strategy);
    let mut out: Vec<String> = invalid_reasons(b)
        .into_iter()
        .map(|r| r.strip_prefix(&label).map(str::to_string).unwrap_or(r))
        .collect();
    out.extend(
        b.workers
            .iter()
            .filter(|w| w.died)
            .map(|w| format!("{} (pid {})", w.outcome, w.pid)),
    );
    if b.interrupted {
        out.push("interrupted: partial results".into());
    }
    out
}
