//! The sweep's one redaction of what it is given: server and hook commands (shell text),
//! `benchmark run` command lines, and parameter files. Built on
//! [`llmsurge_proto::redact`]: each value it hides is also registered
//! ([`register_secret`]), so every later output of the process (the sweep's reports,
//! its console, the lines of a point's run.log it quotes) is scrubbed of it too.
//!
//! Hidden: the value of a flag named like a credential (`--api-key K`, `--hf-token=K`,
//! see [`is_credential_name`]), of an environment word (`HF_TOKEN=K`), of a header
//! (`'Authorization: Bearer K'`, a `headers` object), of a JSON field named like a
//! credential (`{"extra_body": {"api_key": K}}`), and a URL's password and query values.

use super::params::{Params, shell_quote};
use llmsurge_proto::REDACTED;
use llmsurge_proto::redact::{Redaction, is_credential_name, json_credentials, register_secret};

/// A shell command (`--serve-cmd`, `--after-bench-cmd`) as it may be printed or saved:
/// words that carry a credential rewritten (and quoted again), every other byte kept.
pub fn command(text: &str) -> String {
    let words = lex(text);
    let values: Vec<&str> = words.iter().map(|w| w.value.as_str()).collect();
    let redacted = redact_words(&values);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (w, r) in words.iter().zip(redacted) {
        out.push_str(&text[at..w.start]);
        match r {
            Some(r) => out.push_str(&requote(&r)),
            None => out.push_str(&text[w.start..w.end]),
        }
        at = w.end;
    }
    out.push_str(&text[at..]);
    out
}

/// A rewritten word as shell text: `NAME=` or `--flag=` stays outside the quotes, so an
/// assignment stays one.
fn requote(word: &str) -> String {
    match word.split_once('=') {
        Some((prefix, rest))
            if !prefix.is_empty()
                && prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c)) =>
        {
            format!("{prefix}={}", shell_quote(rest))
        }
        _ => shell_quote(word),
    }
}

/// A command line (a point's `benchmark run` arguments) as it may be printed.
pub fn argv(words: &[String]) -> Vec<String> {
    let values: Vec<&str> = words.iter().map(String::as_str).collect();
    redact_words(&values)
        .into_iter()
        .zip(words)
        .map(|(r, w)| r.unwrap_or_else(|| w.clone()))
        .collect()
}

/// A configuration's parameters as they may be written: values of keys named like a
/// credential, at any depth, and header values hidden.
pub fn params(p: &Params) -> Params {
    let mut v = serde_json::Value::Object(p.clone());
    for hidden in json_credentials(&mut v, &Redaction::default()) {
        register_secret(&hidden);
    }
    match v {
        serde_json::Value::Object(map) => map,
        _ => Params::new(),
    }
}

/// Registers every secret `text` carries (a URL's password and query values too), for
/// text given as a whole value: a target URL.
pub fn register_url(url: &str) {
    llmsurge_proto::config::register_secrets(None, &[], &[], url, &Redaction::default());
}

/// Each word's redacted value, `None` where it stays; every hidden value is registered.
fn redact_words(words: &[&str]) -> Vec<Option<String>> {
    let redaction = Redaction::default();
    let hide = |value: &str| {
        register_secret(value);
        // The token of `Bearer <token>`.
        if let Some(last) = value.split_whitespace().last() {
            register_secret(last);
        }
    };
    let mut out = Vec::with_capacity(words.len());
    // The previous word was a credential flag (or a header flag) whose value follows.
    let mut value_of: Option<bool> = None;
    for w in words {
        if let Some(header) = value_of.take()
            && !w.starts_with('-')
        {
            if header {
                out.push(header_word(w, &redaction, &hide));
            } else {
                hide(w);
                out.push(Some(REDACTED.to_string()));
            }
            continue;
        }
        out.push(word(w, &redaction, &hide, &mut value_of));
    }
    out
}

/// One word that is not a flag's value.
fn word(
    w: &str,
    redaction: &Redaction,
    hide: &dyn Fn(&str),
    value_of: &mut Option<bool>,
) -> Option<String> {
    if let Some(name) = w.strip_prefix('-') {
        return match name.split_once('=') {
            Some((flag, value)) if is_credential_name(flag) => {
                hide(value);
                Some(format!("-{flag}={REDACTED}"))
            }
            Some((flag, value)) if is_header_flag(flag) => {
                header_word(value, redaction, hide).map(|v| format!("-{flag}={v}"))
            }
            Some(_) => generic(w, redaction, hide),
            None => {
                if is_credential_name(name) {
                    *value_of = Some(false);
                } else if is_header_flag(name) {
                    *value_of = Some(true);
                }
                None
            }
        };
    }
    // An environment word: NAME=value.
    if let Some((name, value)) = w.split_once('=')
        && !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && is_credential_name(name)
    {
        hide(value);
        return Some(format!("{name}={REDACTED}"));
    }
    if let Some(r) = header_word(w, redaction, hide) {
        return Some(r);
    }
    generic(w, redaction, hide)
}

/// `-H`, `--header`, `--headers`: curl's and others' header flags.
fn is_header_flag(name: &str) -> bool {
    matches!(name, "H" | "-header" | "-headers")
}

/// A header written `Name: value`, its value hidden unless the header is harmless.
fn header_word(w: &str, redaction: &Redaction, hide: &dyn Fn(&str)) -> Option<String> {
    let (name, value) = w.split_once(':')?;
    let header = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
        && value.starts_with(' ');
    if !header || redaction.shows_header(name) {
        return None;
    }
    hide(value.trim());
    Some(format!("{name}: {REDACTED}"))
}

/// Any other word: a JSON object's credentials, a URL's password and query values.
fn generic(w: &str, redaction: &Redaction, hide: &dyn Fn(&str)) -> Option<String> {
    if w.trim_start().starts_with('{')
        && let Ok(mut v) = serde_json::from_str::<serde_json::Value>(w)
    {
        let hidden = json_credentials(&mut v, redaction);
        if hidden.is_empty() {
            return None;
        }
        hidden.iter().for_each(|h| hide(h));
        return Some(v.to_string());
    }
    if w.contains("://") {
        for part in w.split(|c: char| c.is_whitespace() || "\"'".contains(c)) {
            if part.contains("://") {
                register_url(part);
            }
        }
    }
    match redaction.text(w) {
        std::borrow::Cow::Owned(r) => Some(r),
        std::borrow::Cow::Borrowed(_) => None,
    }
}

/// One shell word: where it is in the text and its value once unquoted.
struct Word {
    start: usize,
    end: usize,
    value: String,
}

/// The words of a shell command, as `sh` would split them (quotes, backslashes; the
/// operators `;&|<>()` end a word and are no word). No expansion.
fn lex(text: &str) -> Vec<Word> {
    let mut words = Vec::new();
    let mut chars = text.char_indices().peekable();
    let mut current: Option<Word> = None;
    let end_word = |current: &mut Option<Word>, words: &mut Vec<Word>, at: usize| {
        if let Some(mut w) = current.take() {
            w.end = at;
            words.push(w);
        }
    };
    while let Some((i, c)) = chars.next() {
        if c.is_whitespace() || ";&|<>()".contains(c) {
            end_word(&mut current, &mut words, i);
            continue;
        }
        let w = current.get_or_insert_with(|| Word {
            start: i,
            end: i,
            value: String::new(),
        });
        match c {
            '\'' => {
                for (_, q) in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    w.value.push(q);
                }
            }
            '"' => {
                while let Some((_, q)) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' if chars.peek().is_some_and(|(_, n)| "\"\\$`".contains(*n)) => {
                            if let Some((_, n)) = chars.next() {
                                w.value.push(n);
                            }
                        }
                        q => w.value.push(q),
                    }
                }
            }
            '\\' => {
                if let Some((_, n)) = chars.next() {
                    w.value.push(n);
                }
            }
            c => w.value.push(c),
        }
    }
    end_word(&mut current, &mut words, text.len());
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_lose_every_kind_of_credential_and_keep_the_rest() {
        let cmd = r#"HF_TOKEN=hf1 OTHER=x vllm serve m --port 8000 --api-key k2 --hf-token=k3 --tokenizer t --max-num-batched-tokens 8 && curl -H 'Authorization: Bearer k4' -H "Content-Type: text/plain" http://u:pw5@h:1/x?key=k6 --data '{"api_key": "k7", "n": 1}'; AWS_SECRET_ACCESS_KEY=k8 true"#;
        let shown = command(cmd);
        for secret in ["hf1", "k2", "k3", "k4", "pw5", "k6", "k7", "k8"] {
            assert!(!shown.contains(secret), "{secret}: {shown}");
        }
        assert_eq!(
            shown,
            r#"HF_TOKEN='<redacted>' OTHER=x vllm serve m --port 8000 --api-key '<redacted>' --hf-token='<redacted>' --tokenizer t --max-num-batched-tokens 8 && curl -H 'Authorization: <redacted>' -H "Content-Type: text/plain" 'http://<redacted>@h:1/x?key=<redacted>' --data '{"api_key":"<redacted>","n":1}'; AWS_SECRET_ACCESS_KEY='<redacted>' true"#
        );
        // Nothing to hide: the very same text.
        let plain = "vllm serve m --port {port} --max-num-seqs 8";
        assert_eq!(command(plain), plain);
    }

    #[test]
    fn command_lines_lose_flag_header_and_body_credentials() {
        let words: Vec<String> = [
            "benchmark",
            "run",
            "--target",
            "http://u:pw1@h:1/v1",
            "--api-key",
            "k2",
            "--backend-kwargs",
            r#"{"headers": {"X-Gw": "k3"}, "extra_body": {"token": "k4"}}"#,
            "--max-requests",
            "4",
        ]
        .map(String::from)
        .to_vec();
        let shown = argv(&words).join(" ");
        for secret in ["pw1", "k2", "k3", "k4"] {
            assert!(!shown.contains(secret), "{secret}: {shown}");
        }
        assert!(shown.contains("--max-requests 4"), "{shown}");
    }

    #[test]
    fn params_lose_credential_values_at_any_depth() {
        let p: Params = serde_json::from_str(
            r#"{"api_key": "k1", "backend_kwargs": {"extra_body": {"token": "k2"}}, "max_num_seqs": 8}"#,
        )
        .expect("json");
        let shown = serde_json::Value::Object(params(&p)).to_string();
        assert_eq!(
            shown,
            r#"{"api_key":"<redacted>","backend_kwargs":{"extra_body":{"token":"<redacted>"}},"max_num_seqs":8}"#
        );
    }
}
