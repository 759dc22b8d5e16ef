//! What the report's tables say in their cells: numbers, benchmark labels, notes, and a
//! CSV record made inert. Below `report` and every renderer, which all read them.

use llmsurge_coordinator::BenchmarkResult;

/// A number with 2–3 significant figures, for tables.
pub fn num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A measured value for a table cell: three decimals below 100, one above, `–` for none.
pub fn cell_value(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.3}"),
    }
}

/// One row of a table of benchmarks, which the console, Markdown and HTML renderers all
/// print: the benchmark's label, then the other cells in the table's header order.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// The benchmark's label.
    pub label: String,
    /// The other cells, in header order after the label.
    pub cells: Vec<String>,
}

/// A benchmark's name in tables: its strategy, and its run with `--repeat`
/// (`constant@20 (run 2)`).
pub fn label(b: &BenchmarkResult) -> String {
    match b.run {
        Some(r) => format!("{} (run {})", b.strategy, r + 1),
        None => b.strategy.to_string(),
    }
}

/// What a reader should know about a benchmark beyond its numbers: why it stopped, a
/// server lost mid-run, its errors by kind, the client's warnings, outputs short of the
/// length asked, and dead workers.
pub fn notes(b: &BenchmarkResult) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(reason) = &b.stop_reason {
        notes.push(format!("stopped: {reason}"));
    }
    if let Some(lost) = &b.server_lost {
        notes.push(format!("invalid: {}", lost.sentence()));
    }
    for e in &b.errors {
        let sample = e
            .samples
            .first()
            .map(|s| format!(" (e.g. {s})"))
            .unwrap_or_default();
        notes.push(format!("{} × {}{sample}", e.count, e.kind));
    }
    if b.requests.resent > 0 {
        notes.push(format!(
            "{} resent once on a fresh connection: the reused connection each was first written on closed before the server took it whole (requests.resent; counted once each)",
            b.requests.resent
        ));
    }
    if let Some(note) = unfinished_note(b) {
        notes.push(note);
    }
    if let Some(g) = &b.gpu {
        notes.push(g.note());
    }
    if let Some(r) = &b.cache_reset {
        let calls: Vec<String> = r
            .calls
            .iter()
            .map(|c| match c.status {
                Some(s) => format!("{} {s}", c.path),
                None => format!("{} failed ({})", c.path, c.answer),
            })
            .collect();
        notes.push(format!(
            "cache reset before it{}: {}",
            r.server
                .as_deref()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default(),
            if calls.is_empty() {
                match &r.note {
                    Some(why) => format!("nothing posted ({why})"),
                    None => "nothing to reset".to_string(),
                }
            } else {
                calls.join(", ")
            }
        ));
    }
    if let Some(e) = b
        .rate_estimate
        .as_ref()
        .filter(|e| e.source != llmsurge_coordinator::profiles::RateSource::Completed)
    {
        notes.push(format!(
            "rate taken for the profile: {:.3} req/s, estimated: {}",
            e.requests_per_s, e.detail
        ));
    }
    if let Some(count) = b.shards.first().map(|s| s.count) {
        let present: Vec<u32> = b.shards.iter().map(|s| s.index).collect();
        let missing: Vec<String> = (0..count)
            .filter(|i| !present.contains(i))
            .map(|i| i.to_string())
            .collect();
        notes.push(format!(
            "merged from {} of {count} shards{}; concurrency peak is the sum of the shards' peaks (an upper bound)",
            present.len(),
            if missing.is_empty() {
                String::new()
            } else {
                format!(" (missing: {}: partial load)", missing.join(", "))
            }
        ));
    }
    notes.extend(b.client.warnings.iter().map(|w| format!("warning: {w}")));
    if let Some(w) = b.output_lengths.as_ref().and_then(|o| o.warning()) {
        notes.push(format!("warning: {w}"));
    }
    for w in b.workers.iter().filter(|w| w.died) {
        notes.push(format!("worker {} (pid {}): {}", w.id, w.pid, w.outcome));
    }
    notes
}

/// What the requests cut off before they finished do to the latencies, when there were
/// any: the `…_with_incomplete` percentiles count their elapsed time as a lower bound.
fn unfinished_note(b: &BenchmarkResult) -> Option<String> {
    let family = |key: &str| b.metrics.get(key).filter(|d| d.incomplete.count > 0);
    let e2e = family("request_latency_with_incomplete")?;
    let ttft = family("ttft_with_incomplete")
        .map(|d| {
            format!(
                "TTFT p99 ≥ {} ms, ",
                cell_value(Some(d.total.percentiles.p99))
            )
        })
        .unwrap_or_default();
    Some(format!(
        "{} measured requests did not finish: counting their elapsed time as a lower bound, {ttft}E2E p99 ≥ {} ms (the *_with_incomplete distributions)",
        e2e.incomplete.count,
        cell_value(Some(e2e.total.percentiles.p99))
    ))
}

/// A record's cells as no spreadsheet evaluates them: a text cell that starts like a
/// formula (`=`, `+`, `-`, `@`: a model id a server chose, a label) gets a leading `'`
/// ([`llmsurge_proto::inert::csv_cell`]); finite numbers, negative ones included, stay
/// numbers. The report's CSV files (benchmarks, slices) pass their header and rows
/// through here; the sweep's tables apply `csv_cell` to their text columns.
pub fn inert_record<I, S>(cells: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    cells
        .into_iter()
        .map(|c| {
            let c = c.as_ref();
            // Our numbers: finite, never with a leading `+` (`-Infinity`, `+1` from a
            // server are text).
            if !c.starts_with('+') && c.parse::<f64>().is_ok_and(f64::is_finite) {
                c.to_string()
            } else {
                llmsurge_proto::inert::csv_cell(c).into_owned()
            }
        })
        .collect()
}

/// Seconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc(unix: f64) -> String {
    if !unix.is_finite() || unix < 0.0 {
        return String::new();
    }
    chrono::DateTime::from_timestamp(unix as i64, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csv_record_keeps_numbers_and_makes_formulas_text() {
        let record = inert_record([
            "-1.5",
            "3",
            "1e5",
            "-Infinity",
            "+1",
            "NaN",
            "=A1",
            "@x",
            "m\u{1b}",
        ]);
        assert_eq!(
            record,
            [
                "-1.5",
                "3",
                "1e5",
                "'-Infinity",
                "'+1",
                "NaN",
                "'=A1",
                "'@x",
                "m\\x1b"
            ]
        );
    }
}
