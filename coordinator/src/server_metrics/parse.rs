//! One scrape's body: Prometheus text format parsed with `prometheus-parse`, then mapped
//! to llmsurge's names through the server table.

use super::SeriesKind;
use super::servers::{ROWS, Source, recognise};
use prometheus_parse::{LineInfo, Scrape, Value};
use std::collections::BTreeMap;

/// `prometheus-parse` reads metric names as `\w+`, so a name with a colon (`vllm:…`,
/// `sglang:…`, legal in the format) would be dropped. Colons in names are swapped for this
/// word before parsing and restored after; it is not a name any server publishes.
const COLON: &str = "__llmsurge_colon__";

/// What one successful scrape held, under llmsurge's names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    /// The server recognised from the series' prefixes.
    pub server: Option<&'static str>,
    /// Counters and gauges: known series under their llmsurge name, included ones
    /// (`--server-metrics-include`) under their own; samples summed over labels.
    pub values: BTreeMap<String, (SeriesKind, f64)>,
    /// Latency histograms: (count, sum), summed over labels.
    pub histograms: BTreeMap<String, (f64, f64)>,
}

/// The metric name of a sample line: up to the label set or the value.
fn name_end(line: &str) -> usize {
    line.find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len())
}

/// The line with colons in its metric name (sample, `# TYPE`, `# HELP`) made parseable.
fn escape(line: &str) -> String {
    let line = line.trim();
    if let Some(rest) = line.strip_prefix('#') {
        let rest = rest.trim_start();
        for keyword in ["TYPE", "HELP"] {
            if let Some(after) = rest.strip_prefix(keyword) {
                let after = after.trim_start();
                let end = name_end(after);
                return format!(
                    "# {keyword} {}{}",
                    after[..end].replace(':', COLON),
                    &after[end..]
                );
            }
        }
        return line.to_string();
    }
    let end = name_end(line);
    format!("{}{}", line[..end].replace(':', COLON), &line[end..])
}

fn unescape(name: &str) -> String {
    name.replace(COLON, ":")
}

/// Parses a `/metrics` body. Errors (one line, for the report's `scrape_errors`): a body
/// with no sample at all, or one where most lines are not Prometheus text.
pub fn parse(body: &str, include: Option<&regex::Regex>) -> Result<Parsed, String> {
    let lines: Vec<String> = body.lines().map(escape).collect();
    let (mut samples, mut unreadable, mut first_bad) = (0usize, 0usize, None);
    for line in &lines {
        match LineInfo::parse(line) {
            // The line's shape alone is not a sample: "hello world" has a name and a word.
            LineInfo::Sample { value, .. } if value.to_lowercase().parse::<f64>().is_ok() => {
                samples += 1;
            }
            LineInfo::Empty | LineInfo::Doc { .. } | LineInfo::Type { .. } => {}
            LineInfo::Ignored if line.starts_with('#') => {}
            LineInfo::Ignored | LineInfo::Sample { .. } => {
                unreadable += 1;
                first_bad.get_or_insert(line.as_str());
            }
        }
    }
    let sample_of = |line: Option<&str>| {
        line.map(|l| unescape(l).chars().take(60).collect::<String>())
            .unwrap_or_default()
    };
    if samples == 0 {
        return Err(match first_bad {
            Some(line) => format!("not Prometheus text: {:?}", sample_of(Some(line))),
            None => "no Prometheus samples in the answer".into(),
        });
    }
    if unreadable > samples {
        return Err(format!(
            "not Prometheus text: {unreadable} of {} lines unreadable, e.g. {:?}",
            unreadable + samples,
            sample_of(first_bad)
        ));
    }
    let scrape = Scrape::parse(lines.into_iter().map(Ok))
        .map_err(|e| format!("not Prometheus text: {e}"))?;
    // Every counter, gauge and untyped sample (a histogram's `_sum` and `_count` are
    // untyped to the parser), summed over labels. NaN and infinite samples are left out:
    // they carry nothing to sum, and JSON (the report) cannot hold them.
    let mut raw: BTreeMap<String, (Option<SeriesKind>, f64)> = BTreeMap::new();
    for s in &scrape.samples {
        let (kind, v) = match s.value {
            Value::Counter(v) => (Some(SeriesKind::Counter), v),
            Value::Gauge(v) => (Some(SeriesKind::Gauge), v),
            Value::Untyped(v) => (None, v),
            Value::Histogram(_) | Value::Summary(_) => continue,
        };
        if !v.is_finite() {
            continue;
        }
        let e = raw.entry(unescape(&s.metric)).or_insert((kind, 0.0));
        e.1 += v;
    }
    let mut out = Parsed {
        server: recognise(raw.keys().map(String::as_str)),
        ..Parsed::default()
    };
    let mut used: Vec<String> = Vec::new();
    for row in ROWS {
        let get = |name: &str| raw.get(name).map(|&(_, v)| v);
        match row.source {
            Source::Value(kind) => {
                if !out.values.contains_key(row.name)
                    && let Some(v) = get(row.series)
                {
                    out.values.insert(row.name.into(), (kind, v));
                }
                used.push(row.series.into());
            }
            Source::HistogramSum => {
                let sum = format!("{}_sum", row.series);
                if !out.values.contains_key(row.name)
                    && let Some(v) = get(&sum)
                {
                    out.values.insert(row.name.into(), (SeriesKind::Counter, v));
                }
                used.push(sum);
            }
            Source::Histogram => {
                let (count, sum) = (
                    format!("{}_count", row.series),
                    format!("{}_sum", row.series),
                );
                if !out.histograms.contains_key(row.name)
                    && let (Some(c), Some(s)) = (get(&count), get(&sum))
                {
                    out.histograms.insert(row.name.into(), (c, s));
                }
                used.extend([count, sum]);
            }
        }
    }
    if let Some(re) = include {
        for (name, &(kind, v)) in &raw {
            // `_created` samples are the series' creation timestamps, not values.
            if name.ends_with("_created") || used.contains(name) || !re.is_match(name) {
                continue;
            }
            let counter = kind == Some(SeriesKind::Counter)
                || ["_total", "_count", "_sum"]
                    .iter()
                    .any(|s| name.ends_with(s));
            let kind = if counter {
                SeriesKind::Counter
            } else {
                kind.unwrap_or(SeriesKind::Gauge)
            };
            out.values.entry(name.clone()).or_insert((kind, v));
        }
    }
    Ok(out)
}

/// The labels of the first sample of `series` in a `/metrics` body (an info series such
/// as `vllm:cache_config_info`, whose labels are the facts), and the value of each plain
/// `gauges` series (summed over labels); `None`/absent when the body does not have them.
pub fn labels_and_gauges(
    body: &str,
    series: &[&str],
    gauges: &[&str],
) -> (
    BTreeMap<String, BTreeMap<String, String>>,
    BTreeMap<String, f64>,
) {
    let lines = body.lines().map(|l| Ok(escape(l)));
    let Ok(scrape) = Scrape::parse(lines) else {
        return Default::default();
    };
    let (mut labels, mut values) = (BTreeMap::new(), BTreeMap::new());
    for s in &scrape.samples {
        let name = unescape(&s.metric);
        if series.contains(&name.as_str()) && !labels.contains_key(&name) {
            let set: BTreeMap<String, String> = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            labels.insert(name.clone(), set);
        }
        if gauges.contains(&name.as_str()) {
            let v = match s.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
                Value::Histogram(_) | Value::Summary(_) => continue,
            };
            if v.is_finite() {
                *values.entry(name).or_insert(0.0) += v;
            }
        }
    }
    (labels, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1200.0
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 10.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 5.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 0.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 15.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 15.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 3.0
# TYPE python_gc_collections_total counter
python_gc_collections_total{generation="0"} 100.0
python_gc_collections_total{generation="1"} 20.0
# TYPE process_open_fds gauge
process_open_fds 31.0
"#;

    #[test]
    fn vllm_series_with_colons_are_read_and_labels_summed() {
        let p = parse(VLLM, None).expect("parses");
        assert_eq!(p.server, Some("vllm"));
        assert_eq!(p.values["num_requests_running"], (SeriesKind::Gauge, 3.0));
        assert_eq!(p.values["num_requests_waiting"], (SeriesKind::Gauge, 7.0));
        assert_eq!(p.values["kv_cache_usage_perc"], (SeriesKind::Gauge, 0.25));
        assert_eq!(p.values["generation_tokens"], (SeriesKind::Counter, 1200.0));
        // Summed over finished_reason.
        assert_eq!(p.values["request_success"], (SeriesKind::Counter, 15.0));
        assert_eq!(p.histograms["time_to_first_token_seconds"], (15.0, 3.0));
        // Nothing else without --server-metrics-include.
        assert_eq!(p.values.len(), 5, "{:?}", p.values);
    }

    #[test]
    fn include_keeps_other_series_under_their_own_name() {
        let re = regex::Regex::new("^(python_gc|process_open|vllm:generation)").expect("re");
        let p = parse(VLLM, Some(&re)).expect("parses");
        assert_eq!(
            p.values["python_gc_collections_total"],
            (SeriesKind::Counter, 120.0)
        );
        assert_eq!(p.values["process_open_fds"], (SeriesKind::Gauge, 31.0));
        // Mapped series stay under their llmsurge name; `_created` is never a value.
        assert!(!p.values.contains_key("vllm:generation_tokens_total"));
        assert!(!p.values.contains_key("vllm:generation_tokens_created"));
    }

    #[test]
    fn tgi_token_counts_come_from_histogram_sums() {
        let body = "# TYPE tgi_request_input_length histogram\n\
            tgi_request_input_length_bucket{le=\"10\"} 1\n\
            tgi_request_input_length_bucket{le=\"+Inf\"} 3\n\
            tgi_request_input_length_sum 300\n\
            tgi_request_input_length_count 3\n\
            # TYPE tgi_request_generated_tokens histogram\n\
            tgi_request_generated_tokens_sum 96\n\
            tgi_request_generated_tokens_count 3\n\
            # TYPE tgi_request_success counter\n\
            tgi_request_success 3\n\
            # TYPE tgi_queue_size gauge\n\
            tgi_queue_size 2\n\
            # TYPE tgi_request_duration histogram\n\
            tgi_request_duration_sum 1.5\n\
            tgi_request_duration_count 3\n";
        let p = parse(body, None).expect("parses");
        assert_eq!(p.server, Some("tgi"));
        assert_eq!(p.values["prompt_tokens"], (SeriesKind::Counter, 300.0));
        assert_eq!(p.values["generation_tokens"], (SeriesKind::Counter, 96.0));
        assert_eq!(p.values["request_success"], (SeriesKind::Counter, 3.0));
        assert_eq!(p.values["num_requests_waiting"], (SeriesKind::Gauge, 2.0));
        assert_eq!(p.histograms["e2e_request_latency_seconds"], (3.0, 1.5));
    }

    #[test]
    fn sglang_and_older_vllm_names_map_to_the_same_series() {
        let body = "sglang:num_queue_reqs{model_name=\"m\"} 4\nsglang:token_usage{model_name=\"m\"} 0.5\nsglang:cache_hit_rate 0.3\n";
        let p = parse(body, None).expect("parses");
        assert_eq!(p.server, Some("sglang"));
        assert_eq!(p.values["num_requests_waiting"].1, 4.0);
        assert_eq!(p.values["kv_cache_usage_perc"].1, 0.5);
        assert_eq!(p.values["cache_hit_rate"].1, 0.3);
        let old = parse("vllm:gpu_cache_usage_perc 0.75\n", None).expect("parses");
        assert_eq!(old.values["kv_cache_usage_perc"].1, 0.75);
    }

    #[test]
    fn garbage_is_a_parse_error() {
        assert!(
            parse("", None)
                .expect_err("empty")
                .contains("no Prometheus samples")
        );
        let html = "<html>\n<body>Service Unavailable</body>\n</html>\n";
        assert!(
            parse(html, None)
                .expect_err("html")
                .contains("not Prometheus text")
        );
        let json = "{\"error\": \"boom\"}";
        assert!(parse(json, None).is_err());
        assert!(parse("hello world\nthis is not metrics\n", None).is_err());
        // A mostly-good body with one odd line is still read.
        let p = parse(
            "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc +Inf\n!!\n",
            None,
        )
        .expect("mostly fine");
        assert_eq!(p.values["num_requests_waiting"].1, 1.0);
        assert!(
            !p.values.contains_key("kv_cache_usage_perc"),
            "infinite: left out"
        );
    }

    #[test]
    fn the_rust_prometheus_client_spelling_is_read() {
        // prometheus-client (the mock's) names the family in TYPE without `_total`, and
        // ends with `# EOF`.
        let body = "# HELP vllm:prompt_tokens Prompt tokens.\n\
            # TYPE vllm:prompt_tokens counter\n\
            vllm:prompt_tokens_total{model_name=\"m\"} 128\n\
            # TYPE vllm:num_requests_waiting gauge\n\
            vllm:num_requests_waiting{model_name=\"m\"} 2\n\
            # EOF\n";
        let p = parse(body, None).expect("parses");
        assert_eq!(p.values["prompt_tokens"], (SeriesKind::Counter, 128.0));
        assert_eq!(p.values["num_requests_waiting"], (SeriesKind::Gauge, 2.0));
    }
}
