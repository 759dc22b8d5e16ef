//! The bytes on the wire every format shares: a JSON body's constant prefix and field
//! writers, and the checks an event's text passes before it is parsed. The lowest layer
//! of `formats`: it knows no format.

use crate::source::PreparedRequest;
use bytes::Bytes;
use llmsurge_proto::BackendConfig;
#[cfg(test)]
use llmsurge_proto::RequestFormat;
use std::borrow::Cow;

/// The body keys that set a request's output length, in every format.
pub const LENGTH_KEYS: [&str; 3] = ["max_tokens", "max_completion_tokens", "max_output_tokens"];

/// The constant part of a JSON body (model, format fields, the user's `extra_body`),
/// serialised once; each request writes only its own fields after it.
#[derive(Clone, Debug)]
pub(crate) struct JsonPrefix {
    /// `"model":…,` — the configured model, unless a request names its own.
    model: Vec<u8>,
    /// Every other constant field, each followed by a comma.
    prefix: Vec<u8>,
    /// Keys the user's `extra_body` sets, which the request must not write again.
    overridden: Vec<String>,
    /// `ignore_eos` goes with each request that asks for a length (see
    /// [`JsonPrefix::write_ignore_eos`]), not in the prefix.
    ignore_eos_per_request: bool,
}

impl JsonPrefix {
    /// The prefix of a generating format: `stream` as configured beside the format's
    /// `fields`, the model and `extra_body` (see [`JsonPrefix::new`]); `ignore_eos`, when
    /// asked for, only where a length is asked: in the prefix when `extra_body` sets
    /// the length of every request, else with each request that asks for one.
    pub(crate) fn generating(
        cfg: &BackendConfig,
        mut fields: serde_json::Map<String, serde_json::Value>,
        per_request: &[&str],
    ) -> Self {
        fields.insert("stream".into(), cfg.stream.into());
        fields.extend(super::tools::fields(cfg.request_format, cfg.tools));
        // Without a length, `ignore_eos` makes vLLM generate up to its context limit.
        let user_length = LENGTH_KEYS.iter().any(|k| cfg.extra_body.contains_key(*k));
        if cfg.ignore_eos && user_length {
            fields.insert("ignore_eos".into(), true.into());
        }
        let mut prefix = Self::new(cfg, fields, per_request);
        prefix.ignore_eos_per_request =
            cfg.ignore_eos && !user_length && !cfg.extra_body.contains_key("ignore_eos");
        prefix
    }

    /// Writes `"ignore_eos":true,` when it goes with each request: call it where a
    /// request writes the length it asks for.
    pub(crate) fn write_ignore_eos(&self, out: &mut Vec<u8>) {
        if self.ignore_eos_per_request {
            write_field(out, "ignore_eos", &serde_json::Value::Bool(true));
        }
    }

    /// `fields` are the format's constant fields; `extra_body` overrides them and any of
    /// `per_request` (written once, from `extra_body`, and then skipped per request).
    pub(crate) fn new(
        cfg: &BackendConfig,
        fields: serde_json::Map<String, serde_json::Value>,
        per_request: &[&str],
    ) -> Self {
        let mut fields = fields;
        fields.insert("model".into(), cfg.model.clone().into());
        for (k, v) in &cfg.extra_body {
            fields.insert(k.clone(), v.clone());
        }
        let mut model = Vec::with_capacity(64);
        if let Some(v) = fields.get("model") {
            write_field(&mut model, "model", v);
        }
        let mut prefix = Vec::with_capacity(256);
        let mut overridden = Vec::new();
        for (k, v) in &fields {
            if k == "model" {
                continue;
            }
            if per_request.contains(&k.as_str()) {
                overridden.push(k.clone());
            }
            write_field(&mut prefix, k, v);
        }
        Self {
            model,
            prefix,
            overridden,
            ignore_eos_per_request: false,
        }
    }

    /// Whether the user's `extra_body` sets `key`.
    pub(crate) fn overrides(&self, key: &str) -> bool {
        self.overridden.iter().any(|k| k == key)
    }

    /// A body opened with `{`, the model and the constant fields; `extra` is room for
    /// the request's own fields.
    pub(crate) fn open(&self, req: &PreparedRequest, extra: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.model.len() + self.prefix.len() + extra + 64);
        out.push(b'{');
        match &req.model {
            Some(name) => write_field(&mut out, "model", &**name),
            None => out.extend_from_slice(&self.model),
        }
        out.extend_from_slice(&self.prefix);
        out
    }
}

/// Closes a body whose every field ends in a comma.
pub(crate) fn close(mut out: Vec<u8>) -> Bytes {
    if out.last() == Some(&b',') {
        out.pop();
    }
    out.push(b'}');
    Bytes::from(out)
}

/// `"key":value,`.
pub(crate) fn write_field<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, key: &str, value: &T) {
    write_json(out, key);
    out.push(b':');
    write_json(out, value);
    out.push(b',');
}

/// A JSON value.
pub(crate) fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Serialising a string or a JSON value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// A number field, without going through serde.
pub(crate) fn write_u32_field(out: &mut Vec<u8>, key: &str, n: u32) {
    write_json(out, key);
    out.push(b':');
    out.extend_from_slice(n.to_string().as_bytes());
    out.push(b',');
}

/// The start of an event or body for an error message.
pub(crate) fn shown(data: &[u8]) -> String {
    String::from_utf8_lossy(&data[..data.len().min(80)]).into_owned()
}

/// Checks an event is UTF-8 once (fast on ASCII), so the JSON parse can borrow strings
/// without a check per string.
pub(crate) fn event_text(data: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(data).map_err(|e| format!("malformed SSE event ({e}): {}", shown(data)))
}

/// The `type` of an event as a borrowed string (escapes, which no event name has, would
/// make it owned).
pub(crate) type Kind<'a> = Cow<'a, str>;

/// A configuration for unit tests: `format` to model `m` at an unused local port.
#[cfg(test)]
pub(crate) fn test_config(format: RequestFormat, stream: bool) -> BackendConfig {
    BackendConfig {
        base_url: "http://127.0.0.1:1".into(),
        request_format: format,
        model: "m".into(),
        stream,
        api_key: None,
        headers: vec![],
        params: vec![],
        extra_body: serde_json::Map::new(),
        http2: false,
        http2_streams: 1,
        request_timeout: std::time::Duration::from_secs(1),
        connect_timeout: std::time::Duration::from_secs(1),
        tls: Default::default(),
        ttft_timeout: None,
        idle_timeout: None,
        ignore_eos: false,
        traceparent: false,
        min_tokens: false,
        session_header: None,
        tools: 0,
        request_id: None,
        affinity: Default::default(),
    }
}
