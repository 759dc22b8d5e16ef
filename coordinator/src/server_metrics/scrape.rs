//! Scraping the server's `/metrics` beside a benchmark, on a tokio task of the
//! coordinator (never a worker's): one scrape as the benchmark is set up (it must answer
//! before t0 to count as the baseline), one every interval from t0, and one once every
//! request has ended, so counter deltas cover the benchmark exactly. Every scrape is
//! bounded by a timeout; a failure is counted, never fatal, and never delays the
//! benchmark: at its end the task is given one timeout for the last scrape, then dropped.

use super::parse::parse;
use super::summary::{ScrapeLog, Snapshot};
use super::{ProfilerConfig, ScrapeConfig};
use llmsurge_proto::{MonoNanos, http, limits};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// A failed scrape: its kind (`timeout`, `connect`, `status`, `parse`) and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrapeFailure {
    /// The kind, as the report's `scrape_errors` key it.
    pub kind: &'static str,
    /// One line (no credentials: the URL carries none).
    pub message: String,
}

impl std::fmt::Display for ScrapeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// An HTTP client for scrapes and profiler calls to `url` (no TLS roots read for a
/// plain-HTTP URL while the workers start); h2c with prior knowledge with `http2`.
fn client(
    timeout: Duration,
    url: &str,
    tls: &http::TlsConfig,
    http2: bool,
) -> Result<reqwest::Client, ScrapeFailure> {
    let builder = http::client_builder(url, tls).map_err(|e| ScrapeFailure {
        kind: "connect",
        message: e.to_string(),
    })?;
    http::http2_when(builder, http2)
        .connect_timeout(timeout)
        .build()
        .map_err(|e| ScrapeFailure {
            kind: "connect",
            message: format!("cannot build an HTTP client: {e}"),
        })
}

/// One GET of the metrics URL, bounded by the config's timeout, parsed.
pub async fn scrape_once(
    client: &reqwest::Client,
    cfg: &ScrapeConfig,
) -> Result<super::parse::Parsed, ScrapeFailure> {
    let body = fetch_page(client, cfg).await?;
    parse_page(body, cfg).await
}

/// One GET of the metrics URL, bounded by the config's timeout: the page's text.
pub async fn fetch_page(
    client: &reqwest::Client,
    cfg: &ScrapeConfig,
) -> Result<String, ScrapeFailure> {
    let transport = |e: reqwest::Error| ScrapeFailure {
        kind: if e.is_timeout() { "timeout" } else { "connect" },
        // The innermost cause (reqwest's own message repeats the URL), or what a user
        // can act on (an unknown issuer, a refused client certificate).
        message: http::connect_problem(&e).map_or_else(|| http::root_cause(&e), |p| p.line()),
    };
    let fetch = async {
        let mut request = client
            .get(&cfg.url)
            .header(reqwest::header::ACCEPT, "text/plain;version=0.0.4");
        for (name, value) in &cfg.headers {
            request = request.header(name.as_str(), value.expose());
        }
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        if !status.is_success() {
            return Err(ScrapeFailure {
                kind: "status",
                message: format!("HTTP {status}"),
            });
        }
        // Read with a bound: a URL that is not a metrics endpoint may stream forever.
        let body = http::read_limited(response, limits::METRICS_PAGE)
            .await
            .map_err(|e| match e {
                http::LimitedReadError::Transport(e) => transport(e),
                too_large => ScrapeFailure {
                    kind: "parse",
                    message: format!("the answer is {too_large}"),
                },
            })?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(cfg.timeout, fetch)
        .await
        .map_err(|_| ScrapeFailure {
            kind: "timeout",
            message: format!("no answer within {}s", cfg.timeout.as_secs_f64()),
        })?
}

/// A page's text parsed.
async fn parse_page(
    body: String,
    cfg: &ScrapeConfig,
) -> Result<super::parse::Parsed, ScrapeFailure> {
    // A big server's body (histograms of every model) takes a while to parse: off the
    // coordinator's runtime thread, which also reads the workers' reports.
    let include = cfg.include.clone();
    tokio::task::spawn_blocking(move || parse(&body, include.as_ref()))
        .await
        .map_err(|e| format!("the parser failed: {e}"))
        .and_then(|r| r)
        .map_err(|message| ScrapeFailure {
            kind: "parse",
            message,
        })
}

/// One scrape before the run, to decide whether the target publishes metrics: the page,
/// which the server's fingerprint reads too (so the run asks for it once).
pub async fn probe(cfg: &ScrapeConfig) -> Result<String, ScrapeFailure> {
    let client = client(cfg.timeout, &cfg.url, &cfg.tls, cfg.http2)?;
    let body = fetch_page(&client, cfg).await?;
    parse_page(body.clone(), cfg).await.map(|_| body)
}

/// What the task and the benchmark share: the log, filled as scrapes come back.
#[derive(Debug, Default)]
struct Shared {
    log: ScrapeLog,
    /// Successful scrapes with the monotonic instant their answer arrived.
    raw: Vec<(MonoNanos, super::parse::Parsed)>,
}

/// The scraper of one benchmark.
#[derive(Debug)]
pub struct Scraper {
    shared: Arc<Mutex<Shared>>,
    t0: Option<oneshot::Sender<MonoNanos>>,
    end: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    /// The waiting-requests gauge as it is scraped: (answer instant, value).
    queue: mpsc::UnboundedReceiver<(MonoNanos, f64)>,
    timeout: Duration,
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    // A panic elsewhere cannot leave the log half-written in a way that matters here.
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Scraper {
    /// Starts scraping: the baseline scrape at once, the periodic ones from t0.
    pub fn start(cfg: ScrapeConfig) -> Self {
        let shared = Arc::new(Mutex::new(Shared {
            log: ScrapeLog {
                // Only ever written out: redacted once, here.
                url: cfg.redaction.url(&cfg.url),
                ..ScrapeLog::default()
            },
            raw: Vec::new(),
        }));
        let (t0_tx, t0_rx) = oneshot::channel();
        let (end_tx, end_rx) = oneshot::channel();
        let (queue_tx, queue) = mpsc::unbounded_channel();
        let timeout = cfg.timeout;
        let task = tokio::spawn(run(cfg, shared.clone(), t0_rx, end_rx, queue_tx));
        Self {
            shared,
            t0: Some(t0_tx),
            end: Some(end_tx),
            task,
            queue,
            timeout,
        }
    }

    /// The benchmark starts at `t0`: periodic scrapes begin an interval after it.
    pub fn started(&mut self, t0: MonoNanos) {
        if let Some(tx) = self.t0.take() {
            let _ = tx.send(t0);
        }
    }

    /// The waiting-requests values scraped since the last call.
    pub fn queue_samples(&mut self) -> Vec<(MonoNanos, f64)> {
        let mut out = Vec::new();
        while let Ok(v) = self.queue.try_recv() {
            out.push(v);
        }
        out
    }

    /// Every request has ended: takes the last scrape (bounded by one timeout) and
    /// returns the log, its times in seconds since `t0`.
    pub async fn finish(mut self, t0: MonoNanos) -> ScrapeLog {
        if let Some(tx) = self.end.take() {
            let _ = tx.send(());
        }
        let grace = self.timeout + Duration::from_millis(500);
        if tokio::time::timeout(grace, &mut self.task).await.is_err() {
            self.task.abort();
        }
        let mut shared = lock(&self.shared);
        let raw = std::mem::take(&mut shared.raw);
        let mut log = std::mem::take(&mut shared.log);
        log.snapshots = raw
            .into_iter()
            .map(|(at, parsed)| Snapshot {
                at: at.signed_since(t0) as f64 / 1e9,
                parsed,
            })
            .collect();
        log
    }
}

/// Takes one scrape and records it.
async fn record(
    client: &reqwest::Client,
    cfg: &ScrapeConfig,
    shared: &Mutex<Shared>,
    queue: &mpsc::UnboundedSender<(MonoNanos, f64)>,
) {
    let result = scrape_once(client, cfg).await;
    let at = MonoNanos::now();
    let mut s = lock(shared);
    s.log.scrapes += 1;
    match result {
        Ok(parsed) => {
            if let Some(&(_, v)) = parsed.values.get("num_requests_waiting") {
                let _ = queue.send((at, v));
            }
            s.raw.push((at, parsed));
        }
        Err(e) => s.log.error(e.kind, e.message),
    }
}

async fn run(
    cfg: ScrapeConfig,
    shared: Arc<Mutex<Shared>>,
    t0: oneshot::Receiver<MonoNanos>,
    mut end: oneshot::Receiver<()>,
    queue: mpsc::UnboundedSender<(MonoNanos, f64)>,
) {
    let client = match client(cfg.timeout, &cfg.url, &cfg.tls, cfg.http2) {
        Ok(c) => c,
        Err(e) => {
            lock(&shared).log.error(e.kind, e.message);
            return;
        }
    };
    // The baseline, while the workers start: it counts as one only if it answered
    // before t0 (the summary sees a negative time).
    record(&client, &cfg, &shared, &queue).await;
    let Ok(t0) = t0.await else {
        return; // the benchmark never started
    };
    let mut next = crate::tokio_instant(t0) + cfg.interval;
    loop {
        tokio::select! {
            biased;
            _ = &mut end => break,
            () = tokio::time::sleep_until(next) => {}
        }
        tokio::select! {
            biased;
            // A scrape still out when the benchmark ends is dropped, not waited for.
            _ = &mut end => break,
            () = record(&client, &cfg, &shared, &queue) => {}
        }
        let now = tokio::time::Instant::now();
        while next <= now {
            next += cfg.interval;
        }
    }
    record(&client, &cfg, &shared, &queue).await;
}

/// Calls the profiler endpoint `path` (`start_profile`, `stop_profile`) of the target;
/// `Err` is the warning to show.
pub async fn profiler_call(cfg: &ProfilerConfig, path: &str) -> Result<(), String> {
    let url = format!("{}/{path}", cfg.origin.trim_end_matches('/'));
    let shown = llmsurge_proto::Redaction::default().url(&url);
    let fail = |why: String| format!("--profile-server: POST {shown} failed ({why})");
    let client = client(cfg.timeout, &url, &cfg.tls, cfg.http2).map_err(|e| fail(e.message))?;
    let mut request = client.post(&url);
    for (name, value) in &cfg.headers {
        request = request.header(name.as_str(), value.expose());
    }
    match tokio::time::timeout(cfg.timeout, request.send()).await {
        Err(_) => Err(fail(format!(
            "no answer within {}s",
            cfg.timeout.as_secs_f64()
        ))),
        Ok(Err(e)) => Err(fail(
            http::connect_problem(&e).map_or_else(|| http::root_cause(&e), |p| p.line()),
        )),
        Ok(Ok(r)) if !r.status().is_success() => Err(fail(format!("HTTP {}", r.status()))),
        Ok(Ok(_)) => Ok(()),
    }
}
