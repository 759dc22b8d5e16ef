//! What the user sees on stderr while a run goes on.
//!
//! On a terminal: a live line per running benchmark (elapsed against its limit, requests
//! done and in flight, current request and token rates, TTFT p50, errors), redrawn in
//! place, and a line per finished benchmark. Elsewhere (a CI log, a pipe): the same
//! facts as plain lines, about once a second. Rates come from successive snapshots, so
//! they are current, not averages since the start.

use super::num;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use llmsurge_coordinator::{BenchmarkResult, Progress, Strategy};
use std::time::Duration;

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// A live view redrawn in place (stderr is a terminal).
    Live,
    /// Plain periodic lines.
    Lines,
    /// No progress; only benchmark start/finish lines and notices.
    Off,
}

impl ProgressMode {
    /// Live on a terminal, lines elsewhere, off when disabled.
    pub fn detect(disabled: bool) -> Self {
        use std::io::IsTerminal;
        if disabled {
            ProgressMode::Off
        } else if std::io::stderr().is_terminal() {
            ProgressMode::Live
        } else {
            ProgressMode::Lines
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Snapshot {
    elapsed: Duration,
    completed: u64,
    output_tokens: u64,
}

/// Current rates between two snapshots.
fn rates(prev: Option<Snapshot>, now: Snapshot) -> (f64, f64) {
    let prev = prev.unwrap_or(Snapshot {
        elapsed: Duration::ZERO,
        completed: 0,
        output_tokens: 0,
    });
    let dt = now.elapsed.saturating_sub(prev.elapsed).as_secs_f64();
    if dt <= 0.0 {
        return (0.0, 0.0);
    }
    (
        now.completed.saturating_sub(prev.completed) as f64 / dt,
        now.output_tokens.saturating_sub(prev.output_tokens) as f64 / dt,
    )
}

/// The facts of one progress snapshot, in two parts: where the benchmark stands, and
/// how fast it goes (two lines of the live view, one plain line otherwise). Each part
/// fits an 80-column terminal beside the benchmark's name.
fn describe(p: &Progress, req_s: f64, tok_s: f64) -> (String, String) {
    let elapsed = p.elapsed.as_secs_f64();
    let limit = match (p.max_seconds, p.max_requests) {
        (Some(d), _) => format!("{elapsed:.1}s/{:.0}s", d.as_secs_f64()),
        (None, Some(n)) => format!("{elapsed:.1}s, {}/{n} sent", p.counts.created),
        (None, None) => format!("{elapsed:.1}s"),
    };
    let ttft = p
        .ttft_p50_ms
        .map(|t| format!(", TTFT p50 {} ms", num(t)))
        .unwrap_or_default();
    (
        format!(
            "{limit}, {} done, {} in flight, {} errors",
            p.counts.completed, p.counts.in_flight, p.counts.errored,
        ),
        format!("{} req/s, {} tok/s{ttft}", num(req_s), num(tok_s)),
    )
}

/// The line printed when a benchmark finishes (`planned` 0: the total is not known).
pub fn finished_line(r: &BenchmarkResult, planned: usize) -> String {
    let position = if planned > 0 {
        format!("{}/{planned}", r.index + 1)
    } else {
        format!("{}", r.index + 1)
    };
    let ttft = r
        .metrics
        .get("ttft")
        .filter(|d| d.successful.count > 0)
        .map(|d| format!(", TTFT p50 {} ms", num(d.successful.percentiles.p50)))
        .unwrap_or_default();
    // Embeddings and ranking generate nothing: their rate is inputs, not output tokens.
    let rate = match r.throughput.inputs_per_s {
        Some(inputs) => format!("{} inputs/s", num(inputs)),
        None => format!(
            "{} tok/s",
            num(r.throughput.output_tokens_per_s.unwrap_or(0.0))
        ),
    };
    format!(
        "[{position}] {}: done in {:.1}s, {} completed, {} errored, {} req/s, {rate}{ttft}{}",
        r.strategy,
        r.duration_s,
        r.requests.completed,
        r.requests.errored,
        num(r.throughput.requests_per_s),
        if r.interrupted { " (interrupted)" } else { "" },
    )
}

/// The progress display of a run.
#[derive(Debug)]
pub struct ProgressView {
    mode: ProgressMode,
    /// Start and finish lines (off with `--disable-console-outputs`).
    lines: bool,
    planned: usize,
    bar: Option<ProgressBar>,
    last: Option<Snapshot>,
}

impl ProgressView {
    /// A display for `planned` benchmarks (0 when the profile decides as it goes).
    pub fn new(mode: ProgressMode, lines: bool, planned: usize) -> Self {
        Self {
            mode,
            lines,
            planned,
            bar: None,
            last: None,
        }
    }

    fn prefix(&self, index: u32, strategy: &Strategy) -> String {
        if self.planned > 0 {
            format!("[{}/{}] {}", index + 1, self.planned, strategy)
        } else {
            format!("[{}] {}", index + 1, strategy)
        }
    }

    /// Prints a line without tearing the live view.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| crate::stdout::eprintln(line)),
            None => crate::stdout::eprintln(line),
        }
    }

    /// A benchmark is starting.
    pub fn started(&mut self, index: u32, strategy: &Strategy) {
        self.last = None;
        let prefix = self.prefix(index, strategy);
        if self.mode == ProgressMode::Live {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
            // Line one: the benchmark and where it stands; line two: its rates.
            let style = ProgressStyle::with_template("{spinner} {prefix}\n  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
            bar.set_style(style);
            bar.set_prefix(format!("{prefix}: starting workers"));
            bar.set_message("");
            bar.enable_steady_tick(Duration::from_millis(250));
            self.bar = Some(bar);
        } else if self.lines {
            eprintln!("{prefix}: starting");
        }
    }

    /// About once a second while a benchmark runs.
    pub fn update(&mut self, p: &Progress) {
        let now = Snapshot {
            elapsed: p.elapsed,
            completed: p.counts.completed,
            output_tokens: p.output_tokens,
        };
        let (req_s, tok_s) = rates(self.last, now);
        self.last = Some(now);
        let (stand, speed) = describe(p, req_s, tok_s);
        let prefix = self.prefix(p.index, &p.strategy);
        match self.mode {
            ProgressMode::Live => {
                if let Some(bar) = &self.bar {
                    bar.set_prefix(format!("{prefix}: {stand}"));
                    bar.set_message(speed);
                }
            }
            ProgressMode::Lines => eprintln!("{prefix}: {stand}, {speed}"),
            ProgressMode::Off => {}
        }
    }

    /// A benchmark finished.
    pub fn finished(&mut self, r: &BenchmarkResult) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if self.lines {
            crate::stdout::eprintln(&finished_line(r, self.planned));
        }
    }

    /// The run is over: remove any live view left (a benchmark that never finished).
    pub fn close(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for ProgressView {
    /// A run that ends in an error must not leave a half-drawn live view above its message.
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_coordinator::state::Counts;

    fn progress(elapsed_s: u64, completed: u64, tokens: u64) -> Progress {
        Progress {
            index: 1,
            strategy: Strategy::Constant { rate: 5.0 },
            elapsed: Duration::from_secs(elapsed_s),
            max_seconds: Some(Duration::from_secs(30)),
            max_requests: None,
            counts: Counts {
                created: completed + 2,
                completed,
                in_flight: 2,
                errored: 1,
                ..Counts::default()
            },
            output_tokens: tokens,
            ttft_p50_ms: Some(52.25),
        }
    }

    #[test]
    fn rates_come_from_successive_snapshots() {
        let a = Snapshot {
            elapsed: Duration::from_secs(2),
            completed: 10,
            output_tokens: 1000,
        };
        let b = Snapshot {
            elapsed: Duration::from_secs(4),
            completed: 30,
            output_tokens: 1400,
        };
        assert_eq!(rates(Some(a), b), (10.0, 200.0));
        assert_eq!(rates(None, a), (5.0, 500.0));
        assert_eq!(rates(Some(b), b), (0.0, 0.0));
    }

    #[test]
    fn a_progress_line_names_every_fact() {
        let (stand, speed) = describe(&progress(12, 60, 6000), 5.0, 500.0);
        assert_eq!(stand, "12.0s/30s, 60 done, 2 in flight, 1 errors");
        assert_eq!(speed, "5.00 req/s, 500 tok/s, TTFT p50 52.2 ms");
        // Beside "[10/10] constant@1000: " and a spinner, each line fits 80 columns.
        assert!(stand.len() + 26 <= 80 && speed.len() + 2 <= 80);
    }
}
