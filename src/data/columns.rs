//! Column mapping: which fields of a record are the prompt, the system part, a chat
//! conversation, and per-row token counts. Defaults cover the usual dataset layouts;
//! `--data-column-mapper` names columns explicitly.

use super::files::{Record, kind};
use super::hub::History;
use super::table::{Row, RowMessage, RowPrompt, RowSession, RowTurn};
use super::tokenizer::Tokenizer;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Prompt columns tried in order.
pub const PROMPT_COLUMNS: &[&str] = &[
    "prompt",
    "instruction",
    "question",
    "input",
    "context",
    "text",
];
/// System-part columns tried in order.
pub const SYSTEM_COLUMNS: &[&str] = &["system", "system_prompt", "prefix"];
/// Conversation columns tried in order (`conversations` is ShareGPT's).
pub const MESSAGES_COLUMNS: &[&str] = &["messages", "conversations"];
/// Image columns tried in order: a URL or file path, or a list of them.
pub const IMAGE_COLUMNS: &[&str] = &["images", "image", "image_url", "image_path"];

/// `--data-column-mapper`: explicit column names (unset keys use the defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnMapper {
    /// The prompt column.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The system-part column.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// A conversation column (role/content list, or ShareGPT from/value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<String>,
    /// Per-row prompt length (informative: the run's tokenizer measures the prompt).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_count: Option<String>,
    /// Per-row output length, sent as `max_tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens_count: Option<String>,
    /// Images: a URL or image file path, or a list of them (chat only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

impl ColumnMapper {
    /// Parses the `--data-column-mapper` JSON object.
    pub fn parse(raw: &str) -> Result<Self, String> {
        serde_json::from_str(raw).map_err(|e| {
            format!("not a JSON object of column names (keys: prompt, system, messages, prompt_tokens_count, output_tokens_count, image): {e}")
        })
    }
}

/// Turns records into rows, measuring prompts with `tok`.
#[derive(Debug)]
pub struct RowMapper<'a> {
    /// Explicit columns.
    pub columns: &'a ColumnMapper,
    /// Measures prompts.
    pub tok: &'a Tokenizer,
    /// Output length of rows that do not give one.
    pub default_output_tokens: Option<u32>,
    /// Keep only a conversation's first user turn (and a system message before it);
    /// the recorded reply to it sets the output length (`vllm bench serve`'s ShareGPT).
    pub first_turn: bool,
    /// Each conversation row is a multi-turn session, its history carrying these replies.
    pub sessions: Option<History>,
}

impl RowMapper<'_> {
    /// The row of `rec`; errors are "FILE line N: ..." with `file` given.
    pub fn row(&self, file: &str, rec: &Record) -> Result<Row, String> {
        if let Some(history) = self.sessions {
            return self.session_row(file, rec, history);
        }
        let err = |m: String| format!("{file} {}: {m}", rec.at);
        let f = &rec.fields;
        let pick = |explicit: &Option<String>,
                    defaults: &[&str]|
         -> Result<Option<(String, Value)>, String> {
            if let Some(col) = explicit {
                return match f.get(col) {
                    Some(v) => Ok(Some((col.clone(), v.clone()))),
                    None => Err(err(format!(
                        "no column {col:?} (named by --data-column-mapper)"
                    ))),
                };
            }
            Ok(defaults.iter().find_map(|c| {
                f.get(*c)
                    .filter(|v| !v.is_null())
                    .map(|v| (c.to_string(), v.clone()))
            }))
        };
        let mut answer_tokens = None;
        let messages_col = if self.columns.prompt.is_some() && self.columns.messages.is_none() {
            None
        } else {
            pick(&self.columns.messages, MESSAGES_COLUMNS)?
        };
        let prompt = if let Some((col, v)) = messages_col {
            let mut msgs = conversation(&v).map_err(|m| err(format!("column {col:?}: {m}")))?;
            if self.first_turn
                && let Some(u) = msgs.iter().position(|m| m.role == "user")
            {
                // The recorded reply to the first turn, if any, stays as the final
                // assistant message: it becomes the reference answer below.
                let reply = msgs.get(u + 1).is_some_and(|m| m.role == "assistant");
                msgs.truncate(u + 1 + usize::from(reply));
            }
            // A final assistant turn is the reference answer: the server writes its own,
            // of about that length.
            if msgs.len() > 1
                && msgs.last().is_some_and(|m| m.role == "assistant")
                && let Some(last) = msgs.pop()
            {
                answer_tokens = Some(self.tok.count(&last.content) as u32);
            }
            if msgs.is_empty() {
                return Err(err(format!("column {col:?}: the conversation is empty")));
            }
            RowPrompt::Messages(msgs)
        } else {
            let Some((col, v)) = pick(&self.columns.prompt, PROMPT_COLUMNS)? else {
                return Err(err(format!(
                    "no prompt column (looked for {}, {}; name one with --data-column-mapper)",
                    PROMPT_COLUMNS.join(", "),
                    MESSAGES_COLUMNS.join(", ")
                )));
            };
            let Value::String(text) = v else {
                return Err(err(format!(
                    "column {col:?} must be a string, got {}",
                    kind(&v)
                )));
            };
            match pick(&self.columns.system, SYSTEM_COLUMNS)? {
                Some((_, Value::String(system))) if !system.is_empty() => {
                    RowPrompt::Messages(vec![
                        RowMessage {
                            role: "system".into(),
                            content: system,
                        },
                        RowMessage {
                            role: "user".into(),
                            content: text,
                        },
                    ])
                }
                Some((_, Value::String(_))) | None => RowPrompt::Text(text),
                Some((col, v)) => {
                    return Err(err(format!(
                        "column {col:?} must be a string, got {}",
                        kind(&v)
                    )));
                }
            }
        };
        let count = |explicit: &Option<String>, default: &str| -> Result<Option<u32>, String> {
            let col = explicit.as_deref().unwrap_or(default);
            match f.get(col) {
                None if explicit.is_some() => Err(err(format!(
                    "no column {col:?} (named by --data-column-mapper)"
                ))),
                None | Some(Value::Null) => Ok(None),
                Some(v) => token_count(v).map(Some).ok_or_else(|| {
                    err(format!(
                        "column {col:?} must be a whole number of tokens, got {v}"
                    ))
                }),
            }
        };
        let _declared_prompt = count(&self.columns.prompt_tokens_count, "prompt_tokens_count")?;
        let output = count(&self.columns.output_tokens_count, "output_tokens_count")?;
        let prompt_tokens: usize = prompt.texts().iter().map(|t| self.tok.count(t)).sum();
        // A default-named column of another shape (a dataset's decoded image object,
        // say) is not ours to read; one named by --data-column-mapper must be.
        let strings = |v: &Value| match v {
            Value::String(_) => true,
            Value::Array(a) => a.iter().all(Value::is_string),
            _ => false,
        };
        let images = match pick(&self.columns.image, IMAGE_COLUMNS)? {
            None => Vec::new(),
            Some((_, v)) if self.columns.image.is_none() && !strings(&v) => Vec::new(),
            Some((col, v)) => {
                let items = match v {
                    Value::String(s) => vec![s],
                    Value::Array(a) => a
                        .into_iter()
                        .map(|v| match v {
                            Value::String(s) => Ok(s),
                            other => Err(err(format!(
                                "column {col:?}: images are URLs or file paths, got {}",
                                kind(&other)
                            ))),
                        })
                        .collect::<Result<_, _>>()?,
                    other => {
                        return Err(err(format!(
                            "column {col:?} must be a URL or file path, or a list of them, got {}",
                            kind(&other)
                        )));
                    }
                };
                items
                    .iter()
                    .filter(|s| !s.is_empty())
                    .map(|s| image_url(file, s).map_err(|m| err(format!("column {col:?}: {m}"))))
                    .collect::<Result<_, _>>()?
            }
        };
        Ok(Row {
            prompt,
            prompt_tokens: u32::try_from(prompt_tokens).unwrap_or(u32::MAX),
            output_tokens: output.or(answer_tokens).or(self.default_output_tokens),
            images,
            session: None,
        })
    }

    /// The row of `rec` as a session: one turn per user message, each asking for as many
    /// tokens as the reply recorded after it (else the default output length).
    fn session_row(&self, file: &str, rec: &Record, history: History) -> Result<Row, String> {
        let err = |m: String| format!("{file} {}: {m}", rec.at);
        let f = &rec.fields;
        if self.columns.output_tokens_count.is_some() || self.columns.image.is_some() {
            // A per-row count or image cannot say which turn it belongs to.
            return Err(
                "--data-column-mapper: output_tokens_count and image do not apply to sessions (each turn's output length is its recorded reply's)".into(),
            );
        }
        let (col, v) = match &self.columns.messages {
            Some(col) => match f.get(col) {
                Some(v) => (col.clone(), v),
                None => {
                    return Err(err(format!(
                        "no column {col:?} (named by --data-column-mapper)"
                    )));
                }
            },
            None => MESSAGES_COLUMNS
                .iter()
                .find_map(|c| f.get(*c).filter(|v| !v.is_null()).map(|v| (c.to_string(), v)))
                .ok_or_else(|| {
                    err(format!(
                        "sessions need a conversation column (looked for {}; name one with --data-column-mapper '{{\"messages\": \"...\"}}')",
                        MESSAGES_COLUMNS.join(", ")
                    ))
                })?,
        };
        if let Some(c) = IMAGE_COLUMNS.iter().find(|c| {
            f.get(**c)
                .is_some_and(|v| v.as_str().is_some_and(|s| !s.is_empty()) || v.is_array())
        }) {
            return Err(err(format!(
                "column {c:?}: images do not combine with sessions"
            )));
        }
        let msgs = conversation(v).map_err(|m| err(format!("column {col:?}: {m}")))?;
        let (system, pairs) =
            session_turns(msgs).map_err(|m| err(format!("column {col:?}: {m}")))?;
        let count = |t: &str| u32::try_from(self.tok.count(t)).unwrap_or(u32::MAX);
        let turns: Vec<RowTurn> = pairs
            .into_iter()
            .map(|(user, reply)| RowTurn {
                prompt_tokens: count(&user),
                output_tokens: reply.as_deref().map(count).or(self.default_output_tokens),
                reply: reply.filter(|_| history == History::Recorded),
                user,
            })
            .collect();
        // The row seen as one request is its first turn.
        let first = turns.first().map(|t| t.user.clone()).unwrap_or_default();
        let prompt = match &system {
            Some(system) => RowPrompt::Messages(vec![
                RowMessage {
                    role: "system".into(),
                    content: system.clone(),
                },
                RowMessage {
                    role: "user".into(),
                    content: first,
                },
            ]),
            None => RowPrompt::Text(first),
        };
        Ok(Row {
            prompt_tokens: prompt.texts().iter().map(|t| count(t)).sum(),
            prompt,
            output_tokens: turns.first().and_then(|t| t.output_tokens),
            images: Vec::new(),
            session: Some(RowSession { system, turns }),
        })
    }
}

/// A conversation's turns: each user message and the reply recorded after it.
type Exchanges = Vec<(String, Option<String>)>;

/// A conversation's system prompt and its (user message, recorded reply) turns. Two
/// messages of one role in a row are one message (joined with a newline: a user who
/// sent two messages before the reply, a reply cut in two); an assistant message before
/// the first user message, or a system message after it, is an error naming it.
fn session_turns(msgs: Vec<RowMessage>) -> Result<(Option<String>, Exchanges), String> {
    let mut system: Option<String> = None;
    let mut turns: Exchanges = Vec::new();
    let mut last = "";
    for (i, m) in msgs.into_iter().enumerate() {
        let n = i + 1;
        let join = |into: &mut String, text: String| {
            into.push('\n');
            into.push_str(&text);
        };
        match (m.role.as_str(), last) {
            ("system", "") => system = Some(m.content),
            ("system", "system") => {
                if let Some(s) = system.as_mut() {
                    join(s, m.content);
                }
            }
            ("system", _) => {
                return Err(format!(
                    "message {n}: a system message after the conversation started"
                ));
            }
            ("user", "user") => {
                if let Some((u, _)) = turns.last_mut() {
                    join(u, m.content);
                }
            }
            ("user", _) => turns.push((m.content, None)),
            ("assistant", "" | "system") => {
                return Err(format!(
                    "message {n}: an assistant message before the first user message"
                ));
            }
            (_, _) => match turns.last_mut() {
                Some((_, Some(reply))) => join(reply, m.content),
                Some((_, reply)) => *reply = Some(m.content),
                None => {}
            },
        }
        last = match m.role.as_str() {
            "system" => "system",
            "user" => "user",
            _ => "assistant",
        };
    }
    if turns.is_empty() {
        return Err("no user message".into());
    }
    Ok((system, turns))
}

/// An image as sent: a URL (`http`, `https`, `data:`) as it is, a file (relative to the
/// working directory, else to the data file's) read now and made a data URL.
fn image_url(data_file: &str, v: &str) -> Result<String, String> {
    use base64::Engine;
    if v.starts_with("http://") || v.starts_with("https://") || v.starts_with("data:") {
        return Ok(v.to_string());
    }
    let mut path = std::path::PathBuf::from(v);
    if !path.is_file()
        && let Some(dir) = std::path::Path::new(data_file).parent()
    {
        path = dir.join(v);
    }
    let mime = super::media::mime_of(&path)
        .ok_or_else(|| format!("{v}: not a .png, .jpg, .jpeg, .webp or .gif image"))?;
    let bytes = std::fs::read(&path).map_err(|e| format!("{v}: {e}"))?;
    Ok(format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    ))
}

/// A whole non-negative number, from a number or a string of digits (CSV).
fn token_count(v: &Value) -> Option<u32> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A role/content list, or ShareGPT's from/value list.
fn conversation(v: &Value) -> Result<Vec<RowMessage>, String> {
    let Value::Array(items) = v else {
        return Err(format!("expected a list of messages, got {}", kind(v)));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(m) = item else {
            return Err(format!(
                "message {} is {}, not an object",
                i + 1,
                kind(item)
            ));
        };
        let role = m
            .get("role")
            .or_else(|| m.get("from"))
            .and_then(Value::as_str);
        let content = m
            .get("content")
            .or_else(|| m.get("value"))
            .and_then(Value::as_str);
        let (Some(role), Some(content)) = (role, content) else {
            return Err(format!(
                "message {} needs role and content (or ShareGPT's from and value) strings",
                i + 1
            ));
        };
        let role = match role.to_ascii_lowercase().as_str() {
            "human" | "user" => "user",
            "gpt" | "assistant" | "chatgpt" | "bard" | "bing" | "model" => "assistant",
            "system" => "system",
            other => return Err(format!("message {}: unknown role {other:?}", i + 1)),
        };
        out.push(RowMessage {
            role: role.into(),
            content: content.to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::TokenizerRef;

    fn rec(v: Value) -> Record {
        let Value::Object(fields) = v else {
            panic!("object")
        };
        Record {
            at: "line 1".into(),
            fields,
        }
    }

    #[test]
    fn defaults_and_explicit_columns_map_rows() {
        let tok = Tokenizer::load(&TokenizerRef::Builtin("cl100k_base".into())).expect("tok");
        let cols = ColumnMapper::default();
        let m = RowMapper {
            columns: &cols,
            tok: &tok,
            default_output_tokens: None,
            first_turn: false,
            sessions: None,
        };
        let r = m
            .row("f", &rec(serde_json::json!({"question": "Why is the sky blue?", "output_tokens_count": "12"})))
            .expect("row");
        assert_eq!(r.prompt, RowPrompt::Text("Why is the sky blue?".into()));
        assert_eq!((r.prompt_tokens, r.output_tokens), (6, Some(12)));
        let r = m
            .row(
                "f",
                &rec(serde_json::json!({"system_prompt": "Be brief.", "instruction": "Hi"})),
            )
            .expect("row");
        assert!(
            matches!(r.prompt, RowPrompt::Messages(ref v) if v.len() == 2 && v[0].role == "system")
        );
        let share = serde_json::json!({"conversations": [
            {"from": "human", "value": "Tell me a joke"}, {"from": "gpt", "value": "No, never."}]});
        let r = m.row("f", &rec(share)).expect("sharegpt");
        assert!(
            matches!(r.prompt, RowPrompt::Messages(ref v) if v.len() == 1 && v[0].role == "user")
        );
        assert_eq!(r.output_tokens, Some(4), "the dropped answer's length");
        // ShareGPT as vllm bench serve samples it: the first human turn, and the length
        // of the reply recorded after it.
        let long = serde_json::json!({"conversations": [
            {"from": "system", "value": "Be kind."},
            {"from": "human", "value": "Tell me a joke"}, {"from": "gpt", "value": "No, never."},
            {"from": "human", "value": "Please?"}, {"from": "gpt", "value": "Fine: a pun walks into a bar."}]});
        let first = RowMapper {
            columns: &cols,
            tok: &tok,
            default_output_tokens: None,
            first_turn: true,
            sessions: None,
        };
        let r = first.row("f", &rec(long.clone())).expect("first turn");
        match &r.prompt {
            RowPrompt::Messages(v) => {
                let roles: Vec<&str> = v.iter().map(|m| m.role.as_str()).collect();
                assert_eq!(roles, ["system", "user"]);
                assert_eq!(v[1].content, "Tell me a joke");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.output_tokens, Some(4), "the first reply's length");
        let all = m.row("f", &rec(long)).expect("all turns");
        assert!(matches!(all.prompt, RowPrompt::Messages(ref v) if v.len() == 4));
        let cols = ColumnMapper::parse(r#"{"prompt": "body", "output_tokens_count": "n"}"#)
            .expect("mapper");
        let m = RowMapper {
            columns: &cols,
            tok: &tok,
            default_output_tokens: None,
            first_turn: false,
            sessions: None,
        };
        let r = m
            .row(
                "f",
                &rec(serde_json::json!({"body": "x y", "prompt": "no", "n": 3})),
            )
            .expect("row");
        assert_eq!(
            (r.prompt, r.output_tokens),
            (RowPrompt::Text("x y".into()), Some(3))
        );
        let e = m
            .row("f", &rec(serde_json::json!({"prompt": "x"})))
            .expect_err("missing");
        assert!(e.contains("f line 1") && e.contains("\"body\""), "{e}");
        assert!(ColumnMapper::parse(r#"{"colour": "x"}"#).is_err());
    }

    #[test]
    fn conversation_rows_become_sessions_one_turn_per_user_message() {
        let tok = Tokenizer::load(&TokenizerRef::Builtin("cl100k_base".into())).expect("tok");
        let cols = ColumnMapper::default();
        let mapper = |history| RowMapper {
            columns: &cols,
            tok: &tok,
            default_output_tokens: Some(7),
            first_turn: false,
            sessions: Some(history),
        };
        let share = serde_json::json!({"conversations": [
            {"from": "system", "value": "Be kind."},
            {"from": "human", "value": "Tell me a joke"}, {"from": "gpt", "value": "No, never."},
            {"from": "human", "value": "Please?"}, {"from": "human", "value": "Pretty please?"},
            {"from": "gpt", "value": "Fine."}, {"from": "gpt", "value": "A pun walks into a bar."},
            {"from": "human", "value": "Thanks"}]});
        let r = mapper(History::Recorded)
            .row("f", &rec(share.clone()))
            .expect("session");
        let s = r.session.expect("a session row");
        assert_eq!(s.system.as_deref(), Some("Be kind."));
        let users: Vec<&str> = s.turns.iter().map(|t| t.user.as_str()).collect();
        // Two user messages in a row are one turn; so are two replies.
        assert_eq!(
            users,
            ["Tell me a joke", "Please?\nPretty please?", "Thanks"]
        );
        let replies: Vec<Option<&str>> = s.turns.iter().map(|t| t.reply.as_deref()).collect();
        assert_eq!(
            replies,
            [
                Some("No, never."),
                Some("Fine.\nA pun walks into a bar."),
                None
            ]
        );
        let outputs: Vec<Option<u32>> = s.turns.iter().map(|t| t.output_tokens).collect();
        let len = |t: &str| Some(tok.count(t) as u32);
        assert_eq!(
            outputs,
            [
                len("No, never."),
                len("Fine.\nA pun walks into a bar."),
                Some(7)
            ],
            "each reply's length; the default for a turn without one"
        );
        assert_eq!(s.turns[0].prompt_tokens, tok.count("Tell me a joke") as u32);
        assert_eq!(r.output_tokens, len("No, never."));
        // The live history needs no recorded replies: they are not kept.
        let live = mapper(History::Live).row("f", &rec(share)).expect("live");
        let live = live.session.expect("a session row");
        assert!(live.turns.iter().all(|t| t.reply.is_none()));
        assert_eq!(live.turns[1].output_tokens, outputs[1]);
        // OpenAI messages, no system message.
        let openai = serde_json::json!({"messages": [
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]});
        let r = mapper(History::Live)
            .row("f", &rec(openai))
            .expect("openai");
        let s = r.session.expect("a session row");
        assert_eq!((s.system, s.turns.len()), (None, 1));
        for (bad, expected) in [
            (
                serde_json::json!({"messages": [{"role": "assistant", "content": "Hi"},
                    {"role": "user", "content": "Hello"}]}),
                "message 1: an assistant message before the first user message",
            ),
            (
                serde_json::json!({"messages": [{"role": "user", "content": "Hi"},
                    {"role": "system", "content": "Be kind."}]}),
                "message 2: a system message after the conversation started",
            ),
            (
                serde_json::json!({"messages": [{"role": "system", "content": "Be kind."}]}),
                "no user message",
            ),
            (
                serde_json::json!({"prompt": "Hi"}),
                "sessions need a conversation column",
            ),
            (
                serde_json::json!({"messages": [{"role": "user", "content": "Hi"}],
                    "image": "https://example.com/a.png"}),
                "images do not combine with sessions",
            ),
        ] {
            let e = mapper(History::Live)
                .row("f", &rec(bad))
                .expect_err(expected);
            assert!(e.starts_with("f line 1: ") && e.contains(expected), "{e}");
        }
    }
}
