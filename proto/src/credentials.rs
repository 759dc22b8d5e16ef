//! The target's credentials and headers: one builder for every request llmsurge makes to
//! the target (the benchmark's requests, `/health`, `/v1/models`, the pre-run probe,
//! `/metrics`, profiler calls, cache resets, a sweep's readiness check), so a gateway
//! that authenticates every route sees the same key everywhere.
//!
//! What a request carries, later entries replacing earlier ones of the same name: the
//! Basic authorization of a user and password in the base URL, the API key in the
//! format's header (`Authorization: Bearer …`; `x-api-key` for Anthropic's Messages API),
//! then the user's own headers (`--backend-kwargs` `headers`: a gateway's `api-key`,
//! `x-api-key`, `Ocp-Apim-Subscription-Key`, …).

use crate::{BackendConfig, RequestFormat, Secret};

/// The header carrying the API key in `format`, and its value.
pub fn api_key_header(format: RequestFormat, key: &str) -> (&'static str, String) {
    match format {
        RequestFormat::Anthropic => ("x-api-key", key.to_string()),
        _ => ("authorization", format!("Bearer {key}")),
    }
}

/// The headers every request to the target at `base_url` carries (see the module's
/// documentation), one per name (case-insensitive), in order. Values are secrets: no
/// caller writes them anywhere but on the wire.
pub fn target_headers(
    format: RequestFormat,
    api_key: Option<&Secret>,
    headers: &[(String, String)],
    base_url: &str,
) -> Vec<(String, Secret)> {
    let mut out: Vec<(String, Secret)> = Vec::new();
    let mut set = |name: &str, value: String| {
        out.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        out.push((name.to_string(), Secret::new(value)));
    };
    if let Some(basic) = url_basic_authorization(base_url) {
        set("authorization", basic);
    }
    if let Some(key) = api_key {
        let (name, value) = api_key_header(format, key.expose());
        set(name, value);
    }
    for (name, value) in headers {
        set(name, value.clone());
    }
    out
}

/// [`target_headers`] of a worker's backend configuration.
pub fn for_backend(cfg: &BackendConfig) -> Vec<(String, Secret)> {
    target_headers(
        cfg.request_format,
        cfg.api_key.as_ref(),
        &cfg.headers,
        &cfg.base_url,
    )
}

/// `base_url` without its user and password (they travel as the Basic authorization of
/// [`target_headers`], never twice); unchanged when it is not a URL or has none.
pub fn without_user_info(base_url: &str) -> String {
    match reqwest::Url::parse(base_url) {
        Ok(mut url) if !url.username().is_empty() || url.password().is_some() => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.to_string()
        }
        _ => base_url.to_string(),
    }
}

/// The `Basic …` authorization of a user and password in `base_url`, percent-decoded;
/// `None` when the URL carries neither.
pub fn url_basic_authorization(base_url: &str) -> Option<String> {
    use base64::Engine as _;
    let url = reqwest::Url::parse(base_url).ok()?;
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let credentials = format!(
        "{}:{}",
        decode(url.username()),
        decode(url.password().unwrap_or(""))
    );
    Some(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(h: &[(String, Secret)]) -> Vec<(String, String)> {
        h.iter()
            .map(|(n, v)| (n.clone(), v.expose().to_string()))
            .collect()
    }

    #[test]
    fn the_key_goes_in_the_formats_header() {
        let key = Secret::new("k");
        let chat = target_headers(RequestFormat::Chat, Some(&key), &[], "http://h");
        assert_eq!(shown(&chat), [("authorization".into(), "Bearer k".into())]);
        let messages = target_headers(RequestFormat::Anthropic, Some(&key), &[], "http://h");
        assert_eq!(shown(&messages), [("x-api-key".into(), "k".into())]);
    }

    #[test]
    fn the_users_headers_replace_the_key_and_the_urls_user() {
        let key = Secret::new("k");
        let headers = vec![
            ("Authorization".to_string(), "Bearer mine".to_string()),
            ("api-key".to_string(), "g".to_string()),
        ];
        let h = target_headers(
            RequestFormat::Chat,
            Some(&key),
            &headers,
            "http://u:p%40ss@h:1",
        );
        assert_eq!(
            shown(&h),
            [
                ("Authorization".into(), "Bearer mine".into()),
                ("api-key".into(), "g".into())
            ]
        );
        let basic = target_headers(RequestFormat::Chat, None, &[], "http://u:p%40ss@h:1");
        // base64("u:p@ss")
        assert_eq!(
            shown(&basic),
            [("authorization".into(), "Basic dTpwQHNz".into())]
        );
        assert_eq!(
            without_user_info("http://u:p@h:1/x?a=b"),
            "http://h:1/x?a=b"
        );
        assert_eq!(without_user_info("http://h:1"), "http://h:1");
    }
}
