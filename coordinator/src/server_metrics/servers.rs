//! The one table of the servers llmsurge knows: which of each server's Prometheus series
//! is which llmsurge series. Adding a server (or a renamed series) is adding rows here;
//! docs/server-metrics.md lists the same table for users.

use super::SeriesKind;

/// How a row's value is read from the server's series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A counter or gauge: the samples of the series, summed over their labels.
    Value(SeriesKind),
    /// A histogram's running sum (`<series>_sum`), read as a counter: TGI publishes its
    /// token counts only as histograms of per-request lengths.
    HistogramSum,
    /// A histogram of latencies: its `_count` and `_sum` go to the report's `histograms`.
    Histogram,
}

/// One server series and the llmsurge name it is reported under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// The server (`vllm`, `sglang`, `tgi`).
    pub server: &'static str,
    /// Its series name as published (a histogram's base name, without `_sum`/`_count`).
    pub series: &'static str,
    /// llmsurge's name for it (the report's key).
    pub name: &'static str,
    /// How it is read.
    pub source: Source,
}

const fn row(
    server: &'static str,
    series: &'static str,
    name: &'static str,
    source: Source,
) -> Row {
    Row {
        server,
        series,
        name,
        source,
    }
}

const GAUGE: Source = Source::Value(SeriesKind::Gauge);
const COUNTER: Source = Source::Value(SeriesKind::Counter);

/// Every known series. Where a server renamed one, both names have a row (the first
/// one published wins, see [`ROWS`] order); a name a server does not publish is absent.
pub const ROWS: &[Row] = &[
    // vLLM (v1 engine names; older names after the current ones).
    row(
        "vllm",
        "vllm:num_requests_running",
        "num_requests_running",
        GAUGE,
    ),
    row(
        "vllm",
        "vllm:num_requests_waiting",
        "num_requests_waiting",
        GAUGE,
    ),
    row(
        "vllm",
        "vllm:kv_cache_usage_perc",
        "kv_cache_usage_perc",
        GAUGE,
    ),
    row(
        "vllm",
        "vllm:gpu_cache_usage_perc",
        "kv_cache_usage_perc",
        GAUGE,
    ),
    row(
        "vllm",
        "vllm:prefix_cache_queries_total",
        "prefix_cache_queries",
        COUNTER,
    ),
    row(
        "vllm",
        "vllm:gpu_prefix_cache_queries_total",
        "prefix_cache_queries",
        COUNTER,
    ),
    row(
        "vllm",
        "vllm:prefix_cache_hits_total",
        "prefix_cache_hits",
        COUNTER,
    ),
    row(
        "vllm",
        "vllm:gpu_prefix_cache_hits_total",
        "prefix_cache_hits",
        COUNTER,
    ),
    row(
        "vllm",
        "vllm:num_preemptions_total",
        "num_preemptions",
        COUNTER,
    ),
    row("vllm", "vllm:prompt_tokens_total", "prompt_tokens", COUNTER),
    row(
        "vllm",
        "vllm:generation_tokens_total",
        "generation_tokens",
        COUNTER,
    ),
    row(
        "vllm",
        "vllm:spec_decode_num_draft_tokens_total",
        "spec_decode_num_draft_tokens",
        COUNTER,
    ),
    row(
        "vllm",
        "vllm:spec_decode_num_accepted_tokens_total",
        "spec_decode_num_accepted_tokens",
        COUNTER,
    ),
    row(
        "vllm",
        "vllm:request_success_total",
        "request_success",
        COUNTER,
    ),
    row(
        "vllm",
        "vllm:time_to_first_token_seconds",
        "time_to_first_token_seconds",
        Source::Histogram,
    ),
    row(
        "vllm",
        "vllm:e2e_request_latency_seconds",
        "e2e_request_latency_seconds",
        Source::Histogram,
    ),
    // SGLang.
    row(
        "sglang",
        "sglang:num_running_reqs",
        "num_requests_running",
        GAUGE,
    ),
    row(
        "sglang",
        "sglang:num_queue_reqs",
        "num_requests_waiting",
        GAUGE,
    ),
    row("sglang", "sglang:token_usage", "kv_cache_usage_perc", GAUGE),
    row("sglang", "sglang:cache_hit_rate", "cache_hit_rate", GAUGE),
    row(
        "sglang",
        "sglang:prompt_tokens_total",
        "prompt_tokens",
        COUNTER,
    ),
    row(
        "sglang",
        "sglang:generation_tokens_total",
        "generation_tokens",
        COUNTER,
    ),
    row(
        "sglang",
        "sglang:num_requests_total",
        "request_success",
        COUNTER,
    ),
    row(
        "sglang",
        "sglang:time_to_first_token_seconds",
        "time_to_first_token_seconds",
        Source::Histogram,
    ),
    row(
        "sglang",
        "sglang:e2e_request_latency_seconds",
        "e2e_request_latency_seconds",
        Source::Histogram,
    ),
    // Text Generation Inference.
    row(
        "tgi",
        "tgi_batch_current_size",
        "num_requests_running",
        GAUGE,
    ),
    row("tgi", "tgi_queue_size", "num_requests_waiting", GAUGE),
    row(
        "tgi",
        "tgi_request_input_length",
        "prompt_tokens",
        Source::HistogramSum,
    ),
    row(
        "tgi",
        "tgi_request_generated_tokens",
        "generation_tokens",
        Source::HistogramSum,
    ),
    row("tgi", "tgi_request_success", "request_success", COUNTER),
    row(
        "tgi",
        "tgi_request_duration",
        "e2e_request_latency_seconds",
        Source::Histogram,
    ),
];

/// Series-name prefixes that say which server published a scrape.
const PREFIXES: &[(&str, &str)] = &[("vllm:", "vllm"), ("sglang:", "sglang"), ("tgi_", "tgi")];

/// The server that published series named `names`, by the first known prefix found.
pub fn recognise<'a>(mut names: impl Iterator<Item = &'a str>) -> Option<&'static str> {
    names.find_map(|n| {
        PREFIXES
            .iter()
            .find(|(prefix, _)| n.starts_with(prefix))
            .map(|&(_, server)| server)
    })
}

/// The kind of llmsurge series `name`, when the table knows it.
pub fn kind_of(name: &str) -> Option<SeriesKind> {
    ROWS.iter()
        .find(|r| r.name == name)
        .and_then(|r| match r.source {
            Source::Value(kind) => Some(kind),
            Source::HistogramSum => Some(SeriesKind::Counter),
            Source::Histogram => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_uses_only_the_contracts_names() {
        let names = [
            "num_requests_running",
            "num_requests_waiting",
            "kv_cache_usage_perc",
            "prefix_cache_queries",
            "prefix_cache_hits",
            "num_preemptions",
            "prompt_tokens",
            "generation_tokens",
            "spec_decode_num_draft_tokens",
            "spec_decode_num_accepted_tokens",
            "request_success",
            "time_to_first_token_seconds",
            "e2e_request_latency_seconds",
            "cache_hit_rate",
        ];
        for r in ROWS {
            assert!(names.contains(&r.name), "{r:?}");
            assert!(
                PREFIXES
                    .iter()
                    .any(|(p, s)| *s == r.server && r.series.starts_with(p)),
                "{r:?}: its series does not carry its server's prefix"
            );
        }
        // One kind per llmsurge name, whichever server publishes it.
        for a in ROWS {
            for b in ROWS.iter().filter(|b| b.name == a.name) {
                let kind = |r: &Row| match r.source {
                    Source::Histogram => None,
                    Source::HistogramSum => Some(SeriesKind::Counter),
                    Source::Value(k) => Some(k),
                };
                assert_eq!(kind(a), kind(b), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn the_server_is_recognised_by_its_prefix() {
        assert_eq!(
            recognise(["process_cpu", "vllm:num_requests_running"].into_iter()),
            Some("vllm")
        );
        assert_eq!(
            recognise(["sglang:token_usage"].into_iter()),
            Some("sglang")
        );
        assert_eq!(recognise(["tgi_queue_size"].into_iter()), Some("tgi"));
        assert_eq!(recognise(["go_goroutines"].into_iter()), None);
    }
}
