//! `--affinity`, `--session-token` and `--sticky-connections` (issue 39): the flags read
//! into the worker's [`Affinity`], each refused with one line naming it when it cannot
//! work.

use super::args::TargetArgs;
use super::usage::UsageError;
use llmsurge_proto::affinity::{AFFINITY_PRESETS, Affinity, SessionToken};

/// A header name given as `header:NAME` to `flag`: valid, not hop-by-hop, framing or a
/// credential (the data's `session_header` rule), lowercase.
fn header_name(flag: &str, what: &str, raw: &str) -> Result<String, UsageError> {
    crate::data::synthetic::session_header_name(raw).map_err(|_| {
        UsageError(format!(
            "{flag} {raw:?}: not a header name {what} may go in (letters, digits and - _ . …; not a hop-by-hop, framing, credential or response header such as connection, host, content-*, authorization, cookie, set-cookie, nor one llmsurge sends itself: user-agent, accept, x-request-id, traceparent); e.g. x-session-id"
        ))
    })
}

/// The affinity settings of `args`.
pub fn resolve(args: &TargetArgs) -> Result<Affinity, UsageError> {
    let mut affinity = Affinity {
        sticky_connections: args.sticky_connections,
        ..Affinity::default()
    };
    if let Some(raw) = &args.affinity {
        let value = raw.trim();
        if let Some(name) = value.strip_prefix("header:") {
            affinity.key_header = Some(header_name("--affinity", "a key", name)?);
        } else if let Some(p) = AFFINITY_PRESETS.iter().find(|p| p.name == value) {
            affinity.key_header = Some(p.key_header.to_string());
            affinity.parent_header = p.parent_header.map(str::to_string);
        } else {
            let names: Vec<&str> = AFFINITY_PRESETS.iter().map(|p| p.name).collect();
            return Err(UsageError(format!(
                "--affinity {raw:?}: not a router llmsurge knows ({}) nor header:NAME; give one of those",
                names.join(", ")
            )));
        }
    }
    if let Some(raw) = &args.session_token {
        let value = raw.trim();
        let token = if let Some(name) = value.strip_prefix("header:") {
            SessionToken::Header(header_name("--session-token", "a token", name)?)
        } else if let Some(name) = value.strip_prefix("cookie:") {
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if name.is_empty() || !name.chars().all(token) {
                return Err(UsageError(format!(
                    "--session-token {raw:?}: {name:?} is not a cookie name (letters, digits and - _ . etc.)"
                )));
            }
            SessionToken::Cookie(name.to_string())
        } else {
            return Err(UsageError(format!(
                "--session-token {raw:?}: give header:NAME (a response header) or cookie:NAME (a cookie the server sets)"
            )));
        };
        if let (SessionToken::Header(name), Some(key)) = (&token, &affinity.key_header)
            && name == key
        {
            return Err(UsageError(format!(
                "--session-token {raw:?}: the same header as --affinity's key; a token the server hands out would replace the key (choose another header)"
            )));
        }
        affinity.token = Some(token);
    }
    if affinity.sticky_connections && args.http2 {
        return Err(UsageError(
            "--sticky-connections: keeps connections of llmsurge's own HTTP/1.1 client only (http:// and https://), not HTTP/2 ones; drop --http2 or --sticky-connections".into(),
        ));
    }
    Ok(affinity)
}

/// Refuses affinity flags where the data makes no conversation for them to act on
/// (independent synthetic requests, a request trace): they would have no effect.
pub fn check_data(affinity: &Affinity, data: &llmsurge_proto::DataSpec) -> Result<(), UsageError> {
    use llmsurge_proto::DataSpec;
    let alone = match data {
        DataSpec::Synthetic(s) => s.turns == 0,
        DataSpec::Trace(_) => true,
        // A table's rows may be sessions (conversation datasets); agent traces are.
        DataSpec::Table(_) | DataSpec::AgentTrace(_) => false,
    };
    let flag = if affinity.key_header.is_some() {
        "--affinity"
    } else if affinity.token.is_some() {
        "--session-token"
    } else if affinity.sticky_connections {
        "--sticky-connections"
    } else {
        return Ok(());
    };
    if alone {
        return Err(UsageError(format!(
            "{flag}: the data's requests stand alone, so there is no conversation to key, pin or hand a token to; give sessions (turns=N), a conversation dataset or agent traces (--profile replay), or drop {flag}"
        )));
    }
    if let (Some(key), Some(session)) = (&affinity.key_header, data.session_header())
        && key.eq_ignore_ascii_case(session)
    {
        return Err(UsageError(format!(
            "--affinity: the data's session_header={session} sends header {key} already, so every request would carry it twice; drop one of them"
        )));
    }
    Ok(())
}

/// The headers affinity sends itself, with the flag that sends each.
fn own_headers(affinity: &Affinity) -> Vec<(&str, &'static str)> {
    let mut own = Vec::new();
    if let Some(key) = &affinity.key_header {
        own.push((key.as_str(), "--affinity"));
    }
    if let Some(parent) = &affinity.parent_header {
        own.push((parent.as_str(), "--affinity"));
    }
    match &affinity.token {
        Some(SessionToken::Header(name)) => own.push((name.as_str(), "--session-token")),
        Some(SessionToken::Cookie(_)) => own.push(("cookie", "--session-token")),
        None => {}
    }
    own
}

/// Refuses a header of the user's (`--backend-kwargs` `headers`) that affinity sends
/// itself: the request would carry both, and a router reads the first, so every
/// conversation would go under the user's one value.
pub fn check_headers(affinity: &Affinity, headers: &[(String, String)]) -> Result<(), UsageError> {
    for (name, _) in headers {
        if let Some((own, flag)) = own_headers(affinity)
            .into_iter()
            .find(|(own, _)| own.eq_ignore_ascii_case(name.trim()))
        {
            return Err(UsageError(format!(
                "{flag}: sends header {own} itself, and --backend-kwargs headers sets {name:?} too; a request would carry both and a router read one value for every conversation: drop one of them"
            )));
        }
    }
    Ok(())
}
