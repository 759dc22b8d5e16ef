//! `GET /metrics`: the mock's live state in vLLM's Prometheus names, so that a scraper
//! can be tested against exact numbers. Each scrape snapshots the same counters that
//! `GET /stats` reads and encodes them with the `prometheus-client` crate (a registry
//! built per scrape around one collector); docs/mock-server.md maps every series to
//! its `/stats` field.

use std::borrow::Cow;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, prometheus_text};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::app::App;
use super::body::{InjectedClose, MockBody};
use crate::mock::api::shared::error_json;
use crate::mock::config::MetricsFault;
use crate::mock::model::stats::{HistogramSnapshot, MockStats};

/// The body of `--metrics-fault garbage`: a page a proxy might answer in the exporter's
/// place. No line of it is a sample, so a strict parser fails and a lenient one finds
/// nothing.
const GARBAGE_BODY: &str = "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n\
<body><h1>upstream metrics unavailable {\"retry\": true}</h1></body></html>\n";

/// Everything one scrape reports, read once so the series agree with each other.
#[derive(Debug)]
struct Snapshot {
    stats: MockStats,
    ttft: HistogramSnapshot,
    e2e: HistogramSnapshot,
    kv_capacity: u64,
    spec_decoding: bool,
    prefix_caching: bool,
    lora_adapters: usize,
}

impl Snapshot {
    fn take(app: &App) -> Self {
        Snapshot {
            stats: app.counters.snapshot(),
            ttft: app.counters.ttft.snapshot(),
            e2e: app.counters.e2e.snapshot(),
            kv_capacity: app.config.kv_cache_tokens,
            spec_decoding: app.model.spec_decoding(),
            prefix_caching: app.config.prefix_caching,
            lora_adapters: app.config.lora_adapters.len(),
        }
    }

    /// KV-cache use in [0, 1]: tokens held by running requests over the capacity.
    fn kv_usage(&self) -> f64 {
        (self.stats.kv_cache_tokens as f64 / self.kv_capacity.max(1) as f64).min(1.0)
    }
}

fn gauge<V: prometheus_client::encoding::EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: V,
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&value)
}

/// A counter; `name` is without the `_total` the encoder appends.
fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&value, None)
}

fn histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    h: &HistogramSnapshot,
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Histogram)?
        .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            h.sum_seconds,
            h.count,
            &h.buckets,
            None,
        )
}

/// An info gauge (value 1) whose labels carry the facts, as vLLM publishes its
/// configuration.
fn info(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    labels: &[(&str, &str)],
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_family(&labels)?
        .encode_gauge(&1_i64)
}

impl Collector for Snapshot {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.stats;
        gauge(
            &mut e,
            "vllm:num_requests_running",
            "Requests holding a slot now (/stats active_requests).",
            s.active_requests,
        )?;
        gauge(
            &mut e,
            "vllm:num_requests_waiting",
            "Requests queued behind --max-concurrency (/stats queued).",
            s.queued,
        )?;
        gauge(
            &mut e,
            "vllm:kv_cache_usage_perc",
            "Tokens of running requests over --kv-cache-tokens, capped at 1.",
            self.kv_usage(),
        )?;
        counter(
            &mut e,
            "vllm:prompt_tokens",
            "Prompt tokens received (/stats prompt_tokens).",
            s.prompt_tokens,
        )?;
        counter(
            &mut e,
            "vllm:generation_tokens",
            "Output tokens sent, reasoning included (/stats tokens_sent).",
            s.tokens_sent,
        )?;
        {
            let mut family = e.encode_descriptor(
                "vllm:request_success",
                "Generation requests that ran to their end (/stats request_success).",
                None,
                MetricType::Counter,
            )?;
            for (reason, value) in [
                ("stop", s.request_success.stop),
                ("length", s.request_success.length),
            ] {
                let labels = [("finished_reason", reason)];
                family
                    .encode_family(&labels)?
                    .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                        &value, None,
                    )?;
            }
        }
        counter(
            &mut e,
            "vllm:prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache (/stats prefix_cache_queries).",
            s.prefix_cache_queries,
        )?;
        counter(
            &mut e,
            "vllm:prefix_cache_hits",
            "Prompt tokens found in the prefix cache (/stats prefix_cache_hits).",
            s.prefix_cache_hits,
        )?;
        // Like vLLM, the spec-decode series exist only when speculative decoding is on.
        if self.spec_decoding {
            let d = &s.spec_decode;
            counter(
                &mut e,
                "vllm:spec_decode_num_drafts",
                "Speculative-decoding steps (/stats spec_decode.drafts).",
                d.drafts,
            )?;
            counter(
                &mut e,
                "vllm:spec_decode_num_draft_tokens",
                "Draft tokens proposed (/stats spec_decode.draft_tokens).",
                d.draft_tokens,
            )?;
            counter(
                &mut e,
                "vllm:spec_decode_num_accepted_tokens",
                "Draft tokens accepted (/stats spec_decode.accepted_tokens).",
                d.accepted_tokens,
            )?;
        }
        // The mock never preempts a request; published so the series set is vLLM's.
        counter(
            &mut e,
            "vllm:num_preemptions",
            "Preemptions (always 0: the mock never preempts).",
            0,
        )?;
        histogram(
            &mut e,
            "vllm:time_to_first_token_seconds",
            "Arrival to first token of generation requests, queueing included.",
            &self.ttft,
        )?;
        histogram(
            &mut e,
            "vllm:e2e_request_latency_seconds",
            "Arrival to last token of generation requests that ran to their end.",
            &self.e2e,
        )?;
        // vLLM states its booleans in Python's spelling.
        let caching = if self.prefix_caching { "True" } else { "False" };
        let block_size = crate::mock::model::prefix_cache::BLOCK_TOKENS.to_string();
        let gpu_blocks = (self.kv_capacity / crate::mock::model::prefix_cache::BLOCK_TOKENS as u64)
            .max(1)
            .to_string();
        info(
            &mut e,
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig (the mock's prefix cache).",
            &[
                ("block_size", &block_size),
                ("cache_dtype", "auto"),
                ("enable_prefix_caching", caching),
                ("num_gpu_blocks", &gpu_blocks),
            ],
        )?;
        // Like vLLM, only a server with LoRA adapters publishes it.
        if self.lora_adapters > 0 {
            let max_lora = self.lora_adapters.to_string();
            info(
                &mut e,
                "vllm:lora_requests_info",
                "Running stats on LoRA requests (the mock's adapters, none running here).",
                &[
                    ("max_lora", &max_lora),
                    ("running_lora_adapters", ""),
                    ("waiting_lora_adapters", ""),
                ],
            )?;
        }
        Ok(())
    }
}

/// The Prometheus text of the mock's state now.
fn render(app: &App) -> String {
    let mut registry = Registry::default();
    let label = (
        Cow::Borrowed("model_name"),
        Cow::Owned(app.config.primary_model().to_string()),
    );
    registry
        .sub_registry_with_label(label)
        .register_collector(Box::new(Snapshot::take(app)));
    let mut text = String::with_capacity(4096);
    // Writing into a String cannot fail; an empty scrape beats a panic if it ever did.
    if prometheus_text::encode(&mut text, &registry).is_err() {
        text.clear();
    }
    text
}

/// A response outside the `/stats` response classes: scrapes and profiler calls are
/// counted under their own endpoints only, so they never look like benchmark traffic.
fn uncounted(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<MockBody> {
    let mut response = Response::new(MockBody::full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Answers `GET /metrics`: the state, a 404 (`--no-metrics`), or the injected fault once
/// `--metrics-fault-after` scrapes were answered. A `hang` returns only when the server
/// stops, with a response that closes the connection unanswered.
pub async fn scrape(app: &App) -> Response<MockBody> {
    if app.config.no_metrics {
        return not_found("/metrics (the server runs with --no-metrics)");
    }
    // Counted apart from `/stats` (which a reset zeroes) so the fault schedule is fixed.
    let index = app.scrapes.fetch_add(1, Relaxed);
    let fault = app
        .config
        .metrics_fault
        .filter(|_| index >= app.config.metrics_fault_after);
    match fault {
        None => {
            let mut text = render(app);
            // Appended series go before the end marker, where a strict reader still sees them.
            let eof = text.ends_with("# EOF\n");
            if eof {
                text.truncate(text.len() - "# EOF\n".len());
            }
            // The process collector's series, without the model label the registry adds.
            text.push_str(&format!(
                "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n\
                 # TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {}\n",
                app.started_unix
            ));
            text.push_str(&dcgm(app));
            if eof {
                text.push_str("# EOF\n");
            }
            uncounted(StatusCode::OK, prometheus_text::CONTENT_TYPE, text)
        }
        Some(MetricsFault::Error) => uncounted(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            "metrics collection failed (injected by llmsurge mock-server --metrics-fault error)\n",
        ),
        Some(MetricsFault::Garbage) => {
            uncounted(StatusCode::OK, prometheus_text::CONTENT_TYPE, GARBAGE_BODY)
        }
        Some(MetricsFault::Hang) => {
            // Holds the request until the client goes away or the server stops; then the
            // connection is closed without an answer.
            let mut stopping = app.stopping.subscribe();
            let _ = stopping.wait_for(|stop| *stop).await;
            let mut response = Response::new(MockBody::full(Bytes::new()));
            response.extensions_mut().insert(InjectedClose);
            response
        }
    }
}

/// A DCGM exporter's series for `--dcgm-gpus` GPUs (empty without it): each GPU at
/// `--dcgm-power-w`, 50% busy, 1024 MiB of memory used per GPU index + 1, and its
/// energy counter (mJ) consistent with that power: power × the time since the server
/// started, from a different starting count per GPU (a real counter counts from boot).
fn dcgm(app: &App) -> String {
    use std::fmt::Write as _;
    let n = app.config.dcgm_gpus;
    if n == 0 {
        return String::new();
    }
    let mut out = String::new();
    let series = [
        ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
        ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
        ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ];
    let elapsed = app.started.elapsed().as_secs_f64();
    let energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";
    for (name, help) in series
        .into_iter()
        .chain([(energy, "Total energy consumption since boot (in mJ).")])
    {
        let kind = if name == energy { "counter" } else { "gauge" };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for gpu in 0..n {
            let value = match name {
                "DCGM_FI_DEV_POWER_USAGE" => app.config.dcgm_power_w,
                "DCGM_FI_DEV_GPU_UTIL" => 50.0,
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => {
                    1.0e6 * f64::from(gpu + 1) + app.config.dcgm_power_w * elapsed * 1000.0
                }
                _ => 1024.0 * f64::from(gpu + 1),
            };
            let _ = writeln!(
                out,
                "{name}{{gpu=\"{gpu}\",UUID=\"GPU-mock-{gpu}\",modelName=\"mock\"}} {value}"
            );
        }
    }
    out
}

/// Answers `POST /start_profile` and `POST /stop_profile` like vLLM (200, empty body),
/// or 404 with `--no-profiler`.
pub fn profile(app: &App, path: &str) -> Response<MockBody> {
    if app.config.no_profiler {
        return not_found(&format!("{path} (the server runs with --no-profiler)"));
    }
    uncounted(StatusCode::OK, "text/plain; charset=utf-8", Bytes::new())
}

fn not_found(what: &str) -> Response<MockBody> {
    let message = format!("no route for {what}");
    uncounted(
        StatusCode::NOT_FOUND,
        "application/json",
        error_json(&message, "invalid_request_error", "not_found"),
    )
}
