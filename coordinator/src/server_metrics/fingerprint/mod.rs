//! The server's fingerprint: what it served and how it was set up, read from what servers
//! already publish (the model list, the version and server-info endpoints, the `server`
//! header, configuration published as metrics, the process start time and counters) once
//! before the load and once after it. Every fact says where it came from; a fact the
//! server does not publish is `unknown`, with the reason. `benchmark compare` refuses to
//! judge two runs whose servers differ ([`changes`]); a restart during the run, and a
//! server warm before the first request, are warnings.
//!
//! Where each server kind publishes each fact is one table, [`sources`].

pub mod read;
pub mod sources;

pub use read::{Prefetched, ReadConfig, Source, read};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Why a fact is unknown, or where it was read.
const UNKNOWN: &str = "unknown";

/// One fact about the server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    /// The value as the server published it (booleans as `true`/`false`); absent when
    /// unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Where it was read (`GET /version`, `metric vllm:cache_config_info`), or `unknown`.
    pub source: String,
    /// Why it is unknown (the server does not publish it, or the answer was unreadable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Default for Fact {
    fn default() -> Self {
        Fact::unknown("not read")
    }
}

impl Fact {
    /// A value read from `source`.
    pub fn known(value: impl Into<String>, source: impl Into<String>) -> Self {
        Fact {
            value: Some(value.into()),
            source: source.into(),
            reason: None,
        }
    }

    /// A fact the server did not give, and why.
    pub fn unknown(reason: impl Into<String>) -> Self {
        Fact {
            value: None,
            source: UNKNOWN.into(),
            reason: Some(reason.into()),
        }
    }

    /// The value, or `unknown`.
    pub fn shown(&self) -> &str {
        self.value.as_deref().unwrap_or(UNKNOWN)
    }

    /// The value as a number, when it is one.
    pub fn number(&self) -> Option<f64> {
        self.value.as_deref().and_then(|v| v.parse().ok())
    }
}

/// The server as read once.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// When it was read, Unix seconds.
    pub read_at: f64,
    /// The engine (`vllm`, `sglang`, `tgi`).
    pub engine: Fact,
    /// Its version.
    pub engine_version: Fact,
    /// The `server` response header (no other header is kept).
    pub server_header: Fact,
    /// The model id the run asked for, as the model list has it.
    pub model: Fact,
    /// What that id serves: a path or hub id (`root` in vLLM's model list).
    pub model_root: Fact,
    /// The longest context the server takes.
    pub max_model_len: Fact,
    /// LoRA adapters loaded on that model, comma-separated (`none` when the list says so).
    pub lora_adapters: Fact,
    /// Configuration the server publishes (`block_size`, `enable_prefix_caching`,
    /// `cache_dtype`, and whatever else its configuration metric carries).
    pub config: BTreeMap<String, Fact>,
    /// The server process's start time, Unix seconds (`process_start_time_seconds`).
    pub process_start_time: Fact,
    /// Requests the server had finished (its success counter).
    pub requests_served: Fact,
    /// Prompt tokens answered from its prefix cache.
    pub prefix_cache_hits: Fact,
    /// Prompt tokens looked up in its prefix cache.
    pub prefix_cache_queries: Fact,
}

/// The configuration keys every reading states, known or not.
pub const CONFIG_KEYS: [&str; 4] = [
    "block_size",
    "enable_prefix_caching",
    "cache_dtype",
    "enable_chunked_prefill",
];

/// The fields a difference in fails `benchmark compare`'s gate (unless allowed with
/// `--allow-server-change`); a difference in another field is a warning.
pub const GATED: [&str; 9] = [
    "model",
    "model_root",
    "max_model_len",
    "engine",
    "engine_version",
    "lora_adapters",
    "block_size",
    "enable_prefix_caching",
    "cache_dtype",
];

impl Reading {
    /// Every comparable field by name: the named ones, then the configuration's.
    pub fn fields(&self) -> Vec<(String, &Fact)> {
        let mut out: Vec<(String, &Fact)> = vec![
            ("model".into(), &self.model),
            ("model_root".into(), &self.model_root),
            ("max_model_len".into(), &self.max_model_len),
            ("engine".into(), &self.engine),
            ("engine_version".into(), &self.engine_version),
            ("lora_adapters".into(), &self.lora_adapters),
        ];
        out.extend(self.config.iter().map(|(k, f)| (k.clone(), f)));
        out
    }

    /// Whether the server had served requests, or answered prompts from its prefix
    /// cache, before this reading: the line that says so, with the counts.
    pub fn warmth(&self) -> Option<String> {
        let served = self.requests_served.number().unwrap_or(0.0);
        let hits = self.prefix_cache_hits.number().unwrap_or(0.0);
        if served <= 0.0 && hits <= 0.0 {
            return None;
        }
        Some(format!(
            "the server was warm before the first request: it had served {} requests and answered {} prompt tokens from its prefix cache (of {} looked up)",
            self.requests_served.shown(),
            self.prefix_cache_hits.shown(),
            self.prefix_cache_queries.shown()
        ))
    }

    /// Whether the reading shows a cold server: counters known and zero.
    fn cold(&self) -> bool {
        self.requests_served.number() == Some(0.0)
            && self.prefix_cache_hits.number().is_none_or(|h| h == 0.0)
    }
}

/// The server's fingerprint in a report: read before the load and after it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerFingerprint {
    /// Read before the first request of the run.
    pub before: Reading,
    /// Read after the last benchmark (absent while the run is under way, or when it was
    /// interrupted before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Reading>,
    /// What a reader must know: the server was warm, it restarted or changed during the
    /// run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl ServerFingerprint {
    /// The fingerprint of a reading before the load; a warm server is said.
    pub fn new(before: Reading) -> Self {
        let warnings = before.warmth().into_iter().collect();
        ServerFingerprint {
            before,
            after: None,
            warnings,
        }
    }

    /// Adds the reading after the load, with a warning for a restart (the process start
    /// time changed, or a counter went down) or a change of any field during the run.
    pub fn finish(&mut self, after: Reading) {
        let (b, a) = (&self.before, &after);
        let mut restart = Vec::new();
        if let (Some(x), Some(y)) = (b.process_start_time.number(), a.process_start_time.number())
            && x != y
        {
            restart.push(format!(
                "process_start_time_seconds was {x} before the load and {y} after"
            ));
        }
        for (name, x, y) in [
            ("requests_served", &b.requests_served, &a.requests_served),
            (
                "prefix_cache_queries",
                &b.prefix_cache_queries,
                &a.prefix_cache_queries,
            ),
        ] {
            if let (Some(x), Some(y)) = (x.number(), y.number())
                && y < x
            {
                restart.push(format!("{name} went down from {x} to {y}"));
            }
        }
        if !restart.is_empty() {
            self.warnings.push(format!(
                "the server restarted during the run: {}; its figures may cover only part of the run, and a cold cache after the restart slowed what followed",
                restart.join("; ")
            ));
        }
        let during: Vec<String> = during(b, a).iter().map(Change::describe).collect();
        if !during.is_empty() {
            self.warnings.push(format!(
                "the server changed during the run: {}",
                during.join("; ")
            ));
        }
        self.after = Some(after);
    }
}

/// How a field differs between two fingerprints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Both sides know it and the values differ: a gated field fails the gate.
    Changed,
    /// One side knows it, the other does not: a warning.
    Unknown,
}

/// One field that differs between a baseline's and a candidate's server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The field (`model`, `engine_version`, `enable_prefix_caching`, ...).
    pub field: String,
    /// The baseline's value (`None`: unknown).
    pub baseline: Option<String>,
    /// The candidate's value.
    pub candidate: Option<String>,
    /// Changed or unknown on one side.
    pub kind: ChangeKind,
    /// Whether the field is one the gate judges ([`GATED`]).
    pub gated: bool,
    /// The run it changed during (`baseline`, `current`), when it changed while that run
    /// went on rather than between the two runs: `baseline` and `candidate` are then that
    /// run's readings before and after its load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub during: Option<String>,
}

impl Change {
    /// `field: baseline → candidate`, unknown sides named.
    pub fn describe(&self) -> String {
        let side = |v: &Option<String>| v.as_deref().unwrap_or(UNKNOWN).to_string();
        format!(
            "{} {} -> {}",
            self.field,
            side(&self.baseline),
            side(&self.candidate)
        )
    }
}

/// Every field that differs between two readings, in field order.
fn changes_between(b: &Reading, c: &Reading) -> Vec<Change> {
    let cf = c.fields();
    let mut names: Vec<String> = b.fields().into_iter().map(|(n, _)| n).collect();
    for (n, _) in &cf {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let unknown = Fact::unknown("");
    let find = |fields: &[(String, &Fact)], name: &str| -> Option<String> {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&unknown, |(_, f)| *f)
            .value
            .clone()
    };
    let bf = b.fields();
    names
        .into_iter()
        .filter_map(|field| {
            let (x, y) = (find(&bf, &field), find(&cf, &field));
            let kind = match (&x, &y) {
                (Some(x), Some(y)) if x == y => return None,
                (None, None) => return None,
                (Some(_), Some(_)) => ChangeKind::Changed,
                _ => ChangeKind::Unknown,
            };
            Some(Change {
                during: None,
                gated: GATED.contains(&field.as_str()),
                field,
                baseline: x,
                candidate: y,
                kind,
            })
        })
        .collect()
}

/// The fields that changed between two readings of one run, each read from the same
/// source both times (the reading after the load asks fewer sources: a model root from
/// the model list before and from /server_info after is two answers, not a change).
fn during(before: &Reading, after: &Reading) -> Vec<Change> {
    let (bf, af) = (before.fields(), after.fields());
    let source = |fields: &[(String, &Fact)], name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f.source.clone())
    };
    changes_between(before, after)
        .into_iter()
        .filter(|c| c.kind == ChangeKind::Changed)
        .filter(|c| source(&bf, &c.field) == source(&af, &c.field))
        .collect()
}

impl ServerFingerprint {
    /// The gated fields that changed while the run went on (same source before and
    /// after): the run measured two servers.
    pub fn changed_during(&self) -> Vec<Change> {
        self.after
            .as_ref()
            .map(|a| {
                during(&self.before, a)
                    .into_iter()
                    .filter(|c| c.gated)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// What differs between the servers of a baseline run and a candidate run, as each was
/// read before its load: a gated field changed fails a gate, anything else is a warning.
pub fn changes(baseline: &ServerFingerprint, candidate: &ServerFingerprint) -> Vec<Change> {
    changes_between(&baseline.before, &candidate.before)
}

/// The warning when the candidate's server was warm before its first request and the
/// baseline's was cold, with the counts of both.
pub fn warm_warning(baseline: &ServerFingerprint, candidate: &ServerFingerprint) -> Option<String> {
    let (b, c) = (&baseline.before, &candidate.before);
    if !b.cold() || c.warmth().is_none() {
        return None;
    }
    Some(format!(
        "the current run's server was warm before its first request ({} requests served, {} prompt tokens answered from its prefix cache) while the baseline's was cold ({} requests, {} hits): a warm cache flatters the current run",
        c.requests_served.shown(),
        c.prefix_cache_hits.shown(),
        b.requests_served.shown(),
        b.prefix_cache_hits.shown()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(version: &str, caching: &str, served: f64) -> Reading {
        let mut r = Reading {
            model: Fact::known("m", "GET /v1/models"),
            engine_version: Fact::known(version, "GET /version"),
            requests_served: Fact::known(served.to_string(), "metric"),
            prefix_cache_hits: Fact::known("0", "metric"),
            process_start_time: Fact::known("100.5", "metric"),
            ..Reading::default()
        };
        r.config.insert(
            "enable_prefix_caching".into(),
            Fact::known(caching, "metric"),
        );
        r
    }

    #[test]
    fn changes_name_each_field_and_unknown_sides_are_not_failures() {
        let b = ServerFingerprint::new(reading("0.9.0", "true", 0.0));
        let c = ServerFingerprint::new(reading("0.9.1", "false", 0.0));
        let got = changes(&b, &c);
        let fields: Vec<&str> = got.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["engine_version", "enable_prefix_caching"]);
        assert!(got.iter().all(|c| c.kind == ChangeKind::Changed && c.gated));
        assert_eq!(got[0].describe(), "engine_version 0.9.0 -> 0.9.1");
        let mut unknown = reading("0.9.0", "true", 0.0);
        unknown.engine_version = Fact::unknown("no /version");
        let got = changes(&b, &ServerFingerprint::new(unknown));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].kind, ChangeKind::Unknown);
    }

    #[test]
    fn a_restart_and_a_warm_server_are_said() {
        let mut fp = ServerFingerprint::new(reading("1", "true", 3.0));
        assert!(
            fp.warnings[0].contains("served 3 requests"),
            "{:?}",
            fp.warnings
        );
        let mut after = reading("1", "true", 1.0);
        after.process_start_time = Fact::known("200.25", "metric");
        fp.finish(after);
        assert!(
            fp.warnings[1].contains("restarted")
                && fp.warnings[1].contains("100.5")
                && fp.warnings[1].contains("went down from 3 to 1"),
            "{:?}",
            fp.warnings
        );
        let cold = ServerFingerprint::new(reading("1", "true", 0.0));
        assert!(warm_warning(&cold, &fp).is_some());
        assert!(warm_warning(&fp, &cold).is_none());
    }

    #[test]
    fn a_change_during_the_run_counts_only_from_the_same_source() {
        // Before: the adapter's root from the model list; after: the base model's from
        // /server_info (the reading after asks no model list). Two answers, no change.
        let mut before = reading("1", "true", 0.0);
        before.model_root = Fact::known("/adapters/sql", "GET /v1/models");
        let mut after = reading("1", "true", 3.0);
        after.model_root = Fact::known("base", "GET /server_info");
        let mut fp = ServerFingerprint::new(before.clone());
        fp.finish(after);
        assert!(fp.warnings.is_empty(), "{:?}", fp.warnings);
        assert!(fp.changed_during().is_empty());
        // The same source with another value is a change, gated: compare fails on it.
        let mut after = reading("2", "true", 3.0);
        after.model_root = before.model_root.clone();
        let mut fp = ServerFingerprint::new(before);
        fp.finish(after);
        let during = fp.changed_during();
        assert_eq!(during.len(), 1, "{during:?}");
        assert_eq!(during[0].describe(), "engine_version 1 -> 2");
        assert!(
            fp.warnings[0].contains("changed during the run"),
            "{:?}",
            fp.warnings
        );
    }

    #[test]
    fn a_warm_server_with_unknown_counters_says_unknown_not_zero() {
        let mut r = reading("1", "true", 4.0);
        r.prefix_cache_hits = Fact::unknown("not in /metrics");
        let w = r.warmth().expect("warm");
        assert!(w.contains("answered unknown prompt tokens"), "{w}");
    }

    #[test]
    fn a_report_without_optional_parts_loads() {
        let fp: ServerFingerprint = serde_json::from_str(r#"{"before": {"read_at": 1.0, "engine": {"source": "unknown", "reason": "x"}, "engine_version": {"value": "1", "source": "GET /version"}, "server_header": {"source": "unknown"}, "model": {"source": "unknown"}, "model_root": {"source": "unknown"}, "max_model_len": {"source": "unknown"}, "lora_adapters": {"source": "unknown"}, "config": {}, "process_start_time": {"source": "unknown"}, "requests_served": {"source": "unknown"}, "prefix_cache_hits": {"source": "unknown"}, "prefix_cache_queries": {"source": "unknown"}}}"#).expect("loads");
        assert_eq!(fp.before.engine_version.shown(), "1");
        assert!(fp.after.is_none());
    }
}
