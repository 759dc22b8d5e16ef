//! Function definitions sent with every request of a run that asks for them (the data's
//! `tools=N`): `tools` and an automatic `tool_choice`, in the shape of each API that
//! has them (chat completions, Responses, Anthropic Messages). The definitions are the
//! same for every request, so they are written once, into the body's constant part.

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
}
