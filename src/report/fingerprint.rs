//! The server's fingerprint (`Report::server_fingerprint`) as the formats show it: a
//! short "Server" block (console, Markdown, HTML) of the reading before the load and the
//! warnings (warm, restarted, changed), and a few key columns in the CSV. One place, so
//! the formats agree; docs/report.md lists the fields and their sources.

use super::Report;
use llmsurge_coordinator::server_metrics::fingerprint::{Fact, Reading, ServerFingerprint};

/// The block's rows: (label, text), then the warnings, each one line.
pub fn rows(fp: &ServerFingerprint) -> (Vec<(&'static str, String)>, Vec<String>) {
    let r = &fp.before;
    let cfg = |k: &str| r.config.get(k).map_or("unknown", Fact::shown).to_string();
    let mut config: Vec<String> = r
        .config
        .iter()
        .map(|(k, f)| format!("{k} {}", f.shown()))
        .collect();
    if config.is_empty() {
        config.push(format!("block_size {}", cfg("block_size")));
    }
    let rows = vec![
        (
            "Engine",
            format!(
                "{} {} (server header: {})",
                r.engine.shown(),
                r.engine_version.shown(),
                r.server_header.shown()
            ),
        ),
        (
            "Model",
            format!(
                "{} (root {}, max_model_len {}, LoRA adapters {})",
                r.model.shown(),
                r.model_root.shown(),
                r.max_model_len.shown(),
                r.lora_adapters.shown()
            ),
        ),
        ("Configuration", config.join(", ")),
        (
            "Before the run",
            format!(
                "{} requests served, {} prefix-cache hits of {} queried; process started {}",
                r.requests_served.shown(),
                r.prefix_cache_hits.shown(),
                r.prefix_cache_queries.shown(),
                started(r)
            ),
        ),
    ];
    (rows, fp.warnings.clone())
}

/// The process start as UTC, or `unknown`.
fn started(r: &Reading) -> String {
    r.process_start_time
        .number()
        .map_or_else(|| "unknown".into(), super::cells::utc)
}

/// The console block; empty without a fingerprint.
pub fn console(report: &Report) -> String {
    let Some(fp) = &report.server_fingerprint else {
        return String::new();
    };
    let (rows, warnings) = rows(fp);
    let mut out = String::from("Server");
    for (label, text) in rows {
        out.push_str(&format!(
            "\n  {label}: {}",
            llmsurge_proto::inert::terminal(&text)
        ));
    }
    for w in warnings {
        out.push_str(&format!(
            "\n  warning: {}",
            llmsurge_proto::inert::terminal(&w)
        ));
    }
    out
}

/// The Markdown section; empty without a fingerprint.
pub fn markdown(report: &Report) -> String {
    let Some(fp) = &report.server_fingerprint else {
        return String::new();
    };
    let (rows, warnings) = rows(fp);
    let mut out = String::from("\n### Server\n\n");
    for (label, text) in rows {
        out.push_str(&format!(
            "- **{label}**: {}\n",
            llmsurge_proto::inert::markdown(&text)
        ));
    }
    for w in warnings {
        out.push_str(&format!(
            "- ⚠️ warning: {}\n",
            llmsurge_proto::inert::markdown(&w)
        ));
    }
    out
}

/// The CSV columns (the same on every row): the fields a gate compares.
pub const CSV_NAMES: [&str; 6] = [
    "server_engine",
    "server_engine_version",
    "server_model_root",
    "server_max_model_len",
    "server_enable_prefix_caching",
    "server_block_size",
];

/// The CSV column names; none without a fingerprint.
pub fn csv_names(report: &Report) -> Vec<String> {
    match &report.server_fingerprint {
        Some(_) => CSV_NAMES.iter().map(|n| n.to_string()).collect(),
        None => Vec::new(),
    }
}

/// The CSV values, in [`CSV_NAMES`] order (empty for an unknown fact).
pub fn csv_values(report: &Report) -> Vec<String> {
    let Some(fp) = &report.server_fingerprint else {
        return Vec::new();
    };
    let r = &fp.before;
    let value = |f: Option<&Fact>| f.and_then(|f| f.value.clone()).unwrap_or_default();
    vec![
        value(Some(&r.engine)),
        value(Some(&r.engine_version)),
        value(Some(&r.model_root)),
        value(Some(&r.max_model_len)),
        value(r.config.get("enable_prefix_caching")),
        value(r.config.get("block_size")),
    ]
}
