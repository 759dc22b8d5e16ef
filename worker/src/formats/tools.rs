//! Function definitions sent with every request of a run that asks for them (the data's
//! `tools=N`): `tools` and an automatic `tool_choice`, in the shape of each API that
//! has them (chat completions, Responses, Anthropic Messages). The definitions are the
//! same for every request, so they are written once, into the body's constant part.
//!
//! Also the shared step of reading a tool call back from an answer, which multi-turn
//! sessions resend: each format finds the call's pieces, [`add_piece`] joins them.

use crate::source::ToolCall;
use llmsurge_proto::RequestFormat;
use serde_json::{Map, Value, json};

/// Whether requests of `format` can carry tools.
pub fn supported(format: RequestFormat) -> bool {
    matches!(
        format,
        RequestFormat::Chat | RequestFormat::Responses | RequestFormat::Anthropic
    )
}

/// The name of the `i`-th function (`tool_0`, `tool_1`, …).
pub fn name(i: u32) -> String {
    format!("tool_{i}")
}

/// `tools` (N definitions) and `tool_choice` for a body of `format`; nothing for none,
/// or for a format without tools.
pub fn fields(format: RequestFormat, n: u32) -> Map<String, Value> {
    let mut fields = Map::new();
    if n == 0 || !supported(format) {
        return fields;
    }
    let parameters = json!({
        "type": "object",
        "properties": {"query": {"type": "string", "description": "what to look up"}},
        "required": ["query"],
    });
    let tools: Vec<Value> = (0..n)
        .map(|i| {
            let description = format!("Looks up a query in data source number {i}.");
            match format {
                RequestFormat::Chat => json!({
                    "type": "function",
                    "function": {"name": name(i), "description": description, "parameters": parameters},
                }),
                RequestFormat::Responses => json!({
                    "type": "function", "name": name(i), "description": description,
                    "parameters": parameters,
                }),
                _ => json!({"name": name(i), "description": description, "input_schema": parameters}),
            }
        })
        .collect();
    fields.insert("tools".into(), tools.into());
    let choice = match format {
        RequestFormat::Anthropic => json!({"type": "auto"}),
        _ => json!("auto"),
    };
    fields.insert("tool_choice".into(), choice);
    fields
}

/// Where a tool call's id, name and arguments are in a piece of an answer (JSON
/// pointers).
#[derive(Clone, Copy, Debug)]
pub struct Fields<'a> {
    /// The call's id.
    pub id: &'a str,
    /// The function's name.
    pub name: &'a str,
    /// The arguments (whole, or a stream's next piece of them).
    pub arguments: &'a str,
}

/// Adds one piece of a tool call read from an answer to `call`: the first piece opens
/// it, an id or a name fills what is still missing, arguments are appended (a stream
/// sends them in pieces). `part` says which call of the answer the piece belongs to:
/// only the first call is kept, as a session resends one.
pub fn add_piece(call: &mut Option<ToolCall>, part: u64, piece: &Value, at: &Fields<'_>) {
    if call.as_ref().is_some_and(|c| c.part != part) {
        return;
    }
    let text = |pointer: &str| piece.pointer(pointer).and_then(Value::as_str);
    let (id, name, args) = (text(at.id), text(at.name), text(at.arguments));
    if id.is_none() && name.is_none() && args.is_none() {
        return;
    }
    let call = call.get_or_insert_with(|| ToolCall {
        part,
        ..ToolCall::default()
    });
    if call.id.is_empty() {
        call.id = id.unwrap_or_default().to_string();
    }
    if call.name.is_empty() {
        call.name = name.unwrap_or_default().to_string();
    }
    call.arguments.push_str(args.unwrap_or_default());
}

/// The whole tool call in `piece` (a non-streamed answer's).
pub fn whole(piece: &Value, at: &Fields<'_>) -> Option<ToolCall> {
    let mut call = None;
    add_piece(&mut call, 0, piece, at);
    call
}

/// A piece's `key` as the number of the call it belongs to (0 when absent).
pub fn part_of(piece: &Value, key: &str) -> u64 {
    piece.get(key).and_then(Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_api_gets_its_own_shape() {
        let chat = fields(RequestFormat::Chat, 2);
        assert_eq!(chat["tools"][1]["function"]["name"], "tool_1");
        assert_eq!(chat["tool_choice"], "auto");
        let responses = fields(RequestFormat::Responses, 1);
        assert_eq!(responses["tools"][0]["name"], "tool_0");
        assert_eq!(responses["tools"][0]["type"], "function");
        let anthropic = fields(RequestFormat::Anthropic, 3);
        assert_eq!(anthropic["tools"].as_array().map(Vec::len), Some(3));
        assert!(anthropic["tools"][0]["input_schema"].is_object());
        assert_eq!(anthropic["tool_choice"]["type"], "auto");
        assert!(fields(RequestFormat::Completions, 2).is_empty());
        assert!(fields(RequestFormat::Chat, 0).is_empty());
    }

    #[test]
    fn a_streamed_call_joins_its_pieces_and_keeps_the_first_id() {
        let mut call = None;
        let at = Fields {
            id: "/id",
            name: "/function/name",
            arguments: "/function/arguments",
        };
        let pieces = [
            (
                1,
                json!({"id": "call_1", "function": {"name": "tool_2", "arguments": ""}}),
            ),
            (1, json!({"function": {"arguments": "{\"query\":"}})),
            // A second call, in parallel: not this one's.
            (
                2,
                json!({"id": "call_2", "function": {"name": "tool_0", "arguments": "{"}}),
            ),
            (
                1,
                json!({"id": "call_9", "function": {"arguments": "\"a b\"}"}}),
            ),
            (1, json!({"unrelated": true})),
        ];
        for (part, p) in &pieces {
            add_piece(&mut call, *part, p, &at);
        }
        assert_eq!(
            call,
            Some(ToolCall {
                id: "call_1".into(),
                name: "tool_2".into(),
                arguments: r#"{"query":"a b"}"#.into(),
                part: 1,
            })
        );
        assert_eq!(whole(&json!({}), &at), None);
    }
}
