//! The server's own metrics (its Prometheus `/metrics`), scraped by the coordinator beside
//! a benchmark on the benchmark's t0, and what the report keeps of them.
//!
//! Names: every series the report holds is keyed by llmsurge's name for it (vLLM's name
//! without the `vllm:` prefix where vLLM has one, e.g. `num_requests_waiting`), whichever
//! server published it; series kept by `--server-metrics-include` keep their own name.

pub mod fingerprint;
pub mod parse;
pub mod scrape;
pub mod servers;
pub mod summary;

pub use scrape::{Scraper, probe, profiler_call};
pub use summary::{ClientCounts, ScrapeLog, SummaryWindow, summarise};

use llmsurge_proto::{Redaction, Secret};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// A cross-check disagrees beyond this fraction (the report states it beside each).
pub const CROSS_CHECK_TOLERANCE: f64 = 0.02;

/// The default time between two scrapes (`--server-metrics-interval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// How a benchmark scrapes the server (`--server-metrics`).
#[derive(Clone, Debug)]
pub struct ScrapeConfig {
    /// The URL to GET, without credentials (they are in `headers`).
    pub url: String,
    /// Headers sent with every scrape (the target's credentials, only when the URL has
    /// the target's origin, or the URL's own user and password); never logged.
    pub headers: Vec<(String, Secret)>,
    /// Time between two scrapes.
    pub interval: Duration,
    /// Bound on one scrape.
    pub timeout: Duration,
    /// Other series to keep under their own names (`--server-metrics-include`).
    pub include: Option<regex::Regex>,
    /// How the URL is written in the report (query values redacted unless opted in).
    pub redaction: Redaction,
    /// The run's TLS settings (`--ca-cert`, `--insecure`, `--client-cert`), for an
    /// `https://` URL.
    pub tls: llmsurge_proto::http::TlsConfig,
    /// `--http2` and the URL is the target's origin: h2c with prior knowledge on
    /// `http://` (another host's exporter may speak only HTTP/1.1).
    pub http2: bool,
}

impl ScrapeConfig {
    /// The config for scraping `url` every `interval`. User and password in the URL
    /// become a Basic authorization header (and leave the URL, which is reported); the
    /// target's own credentials (`target_headers`) are sent only when `url` has the
    /// origin of `target_base`, so they never leak to another host.
    pub fn new(
        url: &str,
        interval: Duration,
        include: Option<regex::Regex>,
        target_base: &str,
        target_headers: &[(String, Secret)],
    ) -> Result<Self, String> {
        use base64::Engine as _;
        let shown = Redaction::default().url(url);
        let mut parsed =
            reqwest::Url::parse(url).map_err(|e| format!("{shown:?} is not a URL ({e})"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(format!(
                "{shown:?} must be an http:// or https:// URL with a host"
            ));
        }
        let mut headers = Vec::new();
        if !parsed.username().is_empty() || parsed.password().is_some() {
            let credentials = format!("{}:{}", parsed.username(), parsed.password().unwrap_or(""));
            let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
            headers.push((
                "authorization".to_string(),
                Secret::new(format!("Basic {encoded}")),
            ));
            // Only fails for URLs that cannot carry credentials, which this one did.
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
        }
        let same_origin =
            reqwest::Url::parse(target_base).is_ok_and(|t| t.origin() == parsed.origin());
        if same_origin {
            for (name, value) in target_headers {
                if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                    headers.push((name.clone(), value.clone()));
                }
            }
        }
        Ok(Self {
            url: parsed.to_string(),
            headers,
            interval,
            timeout: Self::timeout_for(interval),
            include,
            redaction: Redaction::default(),
            tls: Default::default(),
            http2: false,
        })
    }

    /// The bound on one scrape for `interval`: the interval, within 1 to 5 seconds, so
    /// a hung server costs a benchmark at most that much at its end.
    pub fn timeout_for(interval: Duration) -> Duration {
        interval.clamp(Duration::from_secs(1), Duration::from_secs(5))
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

    #[test]
    fn credentials_go_only_to_the_targets_origin() {
        let target = [("authorization".to_string(), Secret::new("Bearer k"))];
        let base = "http://10.0.0.1:8000";
        let same = ScrapeConfig::new(
            "http://10.0.0.1:8000/metrics",
            DEFAULT_INTERVAL,
            None,
            base,
            &target,
        )
        .expect("valid");
        assert_eq!(same.headers.len(), 1);
        assert_eq!(same.headers[0].1.expose(), "Bearer k");
        let other = ScrapeConfig::new(
            "http://10.0.0.1:9090/metrics",
            DEFAULT_INTERVAL,
            None,
            base,
            &target,
        )
        .expect("valid");
        assert!(other.headers.is_empty(), "another port is another origin");
        // User and password leave the URL (it is reported) for a Basic header.
        let basic = ScrapeConfig::new(
            "http://u:p@10.0.0.1:9090/metrics",
            DEFAULT_INTERVAL,
            None,
            base,
            &target,
        )
        .expect("valid");
        assert_eq!(basic.url, "http://10.0.0.1:9090/metrics");
        assert_eq!(basic.headers[0].1.expose(), "Basic dTpw");
        assert!(
            !format!("{basic:?}").contains("dTpw"),
            "secrets never in Debug"
        );
        assert!(
            ScrapeConfig::new("ftp://h/metrics", DEFAULT_INTERVAL, None, base, &target).is_err()
        );
        assert_eq!(
            ScrapeConfig::timeout_for(Duration::from_millis(200)),
            Duration::from_secs(1)
        );
        assert_eq!(
            ScrapeConfig::timeout_for(Duration::from_secs(30)),
            Duration::from_secs(5)
        );
    }
}

/// Where `--profile-server` sends `POST /start_profile` and `POST /stop_profile`.
#[derive(Clone, Debug)]
pub struct ProfilerConfig {
    /// The target's origin (scheme, host, port).
    pub origin: String,
    /// The target's credentials.
    pub headers: Vec<(String, Secret)>,
    /// Bound on each call (stopping a profiler writes its trace, which takes a while).
    pub timeout: Duration,
    /// The run's TLS settings.
    pub tls: llmsurge_proto::http::TlsConfig,
    /// `--http2`: h2c with prior knowledge on `http://`.
    pub http2: bool,
}

/// What the scrapes of one benchmark found. Absent from a benchmark when scraping was
/// off, and from reports older than it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerMetrics {
    /// The URL scraped (user and password, if the URL had them, removed; query values
    /// redacted).
    pub url: String,
    /// The server recognised from its series' prefixes (`vllm`, `sglang`, `tgi`), if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Scrapes attempted during the benchmark.
    pub scrapes: u64,
    /// Scrapes that failed (timeout, connection error, HTTP error status, a body that is
    /// not Prometheus text), per kind with a sample message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scrape_errors: Vec<ScrapeErrorEntry>,
    /// One point per successful scrape: `(seconds since the benchmark's t0, value)`.
    /// Counters are cumulative as the server published them; gauges as read.
    #[serde(default)]
    pub series: BTreeMap<String, Vec<(f64, f64)>>,
    /// Each series over the measured window.
    #[serde(default)]
    pub summary: BTreeMap<String, SeriesSummary>,
    /// The server's own latency histograms over the measured window (count and sum deltas).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub histograms: BTreeMap<String, ServerHistogram>,
    /// Figures derived from the summary.
    #[serde(default)]
    pub derived: Derived,
    /// The server's counts beside the client's for the same window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cross_checks: Vec<CrossCheck>,
    /// What a reader must know (a series missing, a cross-check that disagrees, a
    /// counter that went backwards because the server restarted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The client's counts over the same window, when the server's deltas cover it
    /// exactly (a shard's too, though it is not cross-checked alone): what `benchmark
    /// merge` checks the server's counts against, summed over the shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_counts: Option<ClientCounts>,
}

/// One kind of scrape failure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScrapeErrorEntry {
    /// `timeout`, `connect`, `status`, `parse`.
    pub kind: String,
    /// How many scrapes failed this way.
    pub count: u64,
    /// The first such failure's message.
    pub sample: String,
}

/// How a series behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeriesKind {
    /// Only ever grows (until the server restarts).
    Counter,
    /// Goes up and down.
    Gauge,
}

/// A series over the measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeriesSummary {
    /// Counter or gauge.
    pub kind: SeriesKind,
    /// Counters: the increase over the window, from the last scrape at or before it
    /// opened to the first one at or after it closed (resets counted from zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    /// Counters: `delta` per second between those two scrapes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// Gauges: the mean of the scrapes in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    /// Gauges: the largest scrape in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Scrapes in the window the figures come from.
    pub samples: u64,
}

/// A server-side histogram over the measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerHistogram {
    /// Observations added in the window.
    pub count: f64,
    /// Their sum, in the histogram's unit (seconds for vLLM's latencies).
    pub sum: f64,
    /// `sum / count`, when count > 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
}

/// Ratios computed from counter deltas, present only when the server publishes both sides.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Derived {
    /// Prefix-cache hits / queries over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate: Option<f64>,
    /// Speculative decoding: accepted / draft tokens over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode_acceptance_rate: Option<f64>,
}

/// A count the server and the client both know, over the same window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CrossCheck {
    /// What is compared, e.g. `generation_tokens`.
    pub name: String,
    /// The server's counter delta.
    pub server: f64,
    /// The client's count: what the server certainly counted.
    pub client: f64,
    /// The most the server can have counted, when the client cannot know more exactly
    /// (prompts of requests sent but never answered: the server may or may not have read
    /// them). `client` to `client_upper` is the client's range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_upper: Option<f64>,
    /// How far the server's count lies outside the client's range, relative to its
    /// nearest end: `(server - client) / client` below it, 0 within it.
    pub difference: f64,
    /// Within the tolerance (2%).
    pub agrees: bool,
    /// Requests sent whose count the client does not know (a later session turn cut
    /// off before the server's usage said its prompt length): `client_upper` includes a
    /// bound of theirs (each at most twice the longest known prompt). Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unknown_requests: u64,
    /// `generation_tokens`: why the outputs fell short of the lengths the requests asked
    /// for, when they did (the server stopped early, or the tokens were lost after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl CrossCheck {
    /// Compares the server's count with the client's range `client..=client_upper`.
    pub fn new(name: &str, server: f64, client: f64, client_upper: Option<f64>) -> Self {
        let upper = client_upper.filter(|u| *u > client);
        let nearest = match upper {
            Some(u) if server > u => u,
            Some(_) if server >= client => server,
            _ => client,
        };
        let difference = if nearest > 0.0 {
            (server - nearest) / nearest
        } else if server > 0.0 {
            1.0 // the client counted none: a full disagreement (never infinite in JSON)
        } else {
            0.0
        };
        Self {
            name: name.into(),
            server,
            client,
            client_upper: upper,
            difference,
            agrees: difference.abs() <= CROSS_CHECK_TOLERANCE,
            unknown_requests: 0,
            explanation: None,
        }
    }
}
