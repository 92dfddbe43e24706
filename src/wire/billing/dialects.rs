//! The chat rule ([`ChatRequest::billable`](super::ChatRequest::billable))
//! for the bodies conclave forwards verbatim: a Responses body to an
//! upstream that speaks the Responses API, a Messages body to an
//! Anthropic upstream. The same [`Size`] measures them, so they are
//! counted as chat is, whole:
//!
//! - the text of every turn (`instructions` and each `input` item; `system`
//!   and each message) by its bytes, with the chat template's tokens for
//!   each turn;
//! - images (`input_image`, `image` blocks, also inside tool results) as
//!   images, audio by its decoded size, files and documents by their data;
//! - every other part of a turn (tool calls and their results, reasoning
//!   items with their `encrypted_content`, thinking and its signature) by
//!   its JSON;
//! - every request field that is not a sampling parameter by its JSON:
//!   `tools`, `tool_choice`, the `text.format` schema (`text.verbosity` is
//!   a parameter), Anthropic's `output_config.format`, and any field
//!   unknown here.
//!
//! The output is the dialect's cap, checked by the one rule ([`cap`]):
//! `max_output_tokens` for Responses (or chat's names, which an
//! OpenAI-compatible server may read too: the largest counts), `max_tokens`
//! for Messages (required there; its absence is the dialect's to refuse).

use serde_json::{Map, Value};

use super::{BadCap, Billable, NOT_PROMPT, Size, cap, fields_but, json_len, template_tokens};

/// Responses request fields that are parameters, not prompt (besides
/// chat's [`NOT_PROMPT`]); `input` and `instructions` are measured apart.
const RESPONSES_PARAMS: &[&str] = &[
    "input",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "truncation",
    "include",
    "background",
    "previous_response_id",
    "prompt_cache_retention",
    "client_metadata",
];

/// Responses fields that hold parameters beside prompt: these
/// sub-fields are left out, the rest (the `text.format` schema) counted.
const RESPONSES_NESTED: &[(&str, &[&str])] = &[
    ("text", &["verbosity"]),
    ("reasoning", &["effort", "summary", "generate_summary"]),
];

/// The caps a Responses body may set.
const RESPONSES_CAPS: &[&str] = &["max_output_tokens", "max_completion_tokens", "max_tokens"];

/// Messages request fields that are parameters, not prompt (besides
/// chat's [`NOT_PROMPT`]); `system` and `messages` are measured apart.
const MESSAGES_PARAMS: &[&str] = &[
    "system",
    "max_tokens",
    "stop_sequences",
    "thinking",
    "container",
    "context_management",
];

/// Messages fields that hold parameters beside prompt.
const MESSAGES_NESTED: &[(&str, &[&str])] = &[("output_config", &["effort"])];

impl Billable {
    /// What one call of a Responses body forwarded verbatim may be
    /// billed for; a cap that is not a positive integer is a [`BadCap`].
    pub fn responses(body: &Map<String, Value>) -> Result<Billable, BadCap> {
        let output = largest_cap(body, RESPONSES_CAPS)?;
        Ok(Billable {
            output,
            ..Billable::responses_input(body)
        })
    }

    /// [`Billable::responses`] without its output (caps not read).
    pub fn responses_input(body: &Map<String, Value>) -> Billable {
        let mut size = Size::default();
        let mut turns = 0usize;
        for key in ["instructions", "input"] {
            match body.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) if key == "input" => {
                    turns = turns.saturating_add(items.len());
                    items.iter().for_each(|i| size.item(i));
                }
                Some(v) => {
                    turns += 1;
                    size.item(v);
                }
            }
        }
        size.json += prompt(body, RESPONSES_PARAMS, RESPONSES_NESTED);
        size.billable(turns, None)
    }

    /// What one call of a Messages body forwarded verbatim may be billed
    /// for; a `max_tokens` that is not a positive integer is a [`BadCap`]
    /// (a missing one leaves `output` at `None`).
    pub fn messages(body: &Map<String, Value>) -> Result<Billable, BadCap> {
        let output = cap(body, "max_tokens")?;
        Ok(Billable {
            output,
            ..Billable::messages_input(body)
        })
    }

    /// [`Billable::messages`] without its output (`max_tokens` not read).
    pub fn messages_input(body: &Map<String, Value>) -> Billable {
        let mut size = Size::default();
        let mut turns = 0usize;
        match body.get("system") {
            None | Some(Value::Null) => {}
            Some(Value::Array(blocks)) => {
                turns += 1;
                blocks.iter().for_each(|b| size.part(b));
            }
            Some(v) => {
                turns += 1;
                size.item(v);
            }
        }
        match body.get("messages") {
            None => {}
            Some(Value::Array(messages)) => {
                turns = turns.saturating_add(messages.len());
                messages.iter().for_each(|m| size.item(m));
            }
            Some(v) => size.json += json_len(v),
        }
        size.json += prompt(body, MESSAGES_PARAMS, MESSAGES_NESTED);
        size.billable(turns, None)
    }
}

impl Size {
    /// The billable of what was measured: `turns` turns, `output` the cap.
    fn billable(&self, turns: usize, output: Option<u64>) -> Billable {
        Billable {
            input: self.tokens().saturating_add(template_tokens(turns)),
            images: self.images,
            output,
        }
    }
}

/// The largest of the caps named in `caps` that the body sets.
fn largest_cap(body: &Map<String, Value>, caps: &[&'static str]) -> Result<Option<u64>, BadCap> {
    let mut largest = None;
    for param in caps {
        largest = largest.max(cap(body, param)?);
    }
    Ok(largest)
}

/// JSON bytes of the fields of `body` that reach the prompt: all but
/// chat's [`NOT_PROMPT`] and the dialect's `params`; of a `nested` field,
/// all but its parameters.
fn prompt(body: &Map<String, Value>, params: &[&str], nested: &[(&str, &[&str])]) -> u64 {
    body.iter()
        .filter(|(k, _)| !NOT_PROMPT.contains(&k.as_str()) && !params.contains(&k.as_str()))
        .map(|(k, v)| {
            let inner = nested.iter().find(|(n, _)| *n == k.as_str());
            let size = match (inner, v) {
                (Some((_, left_out)), Value::Object(o)) => fields_but(o, left_out) + 2,
                _ => json_len(v),
            };
            k.len() as u64 + size
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::billing::TEMPLATE_PER_MESSAGE;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    /// `n` function tools of about 1,000 bytes each, in the Responses
    /// shape (flat) or Anthropic's (`input_schema`).
    fn tools(n: usize, anthropic: bool) -> Value {
        let tools: Vec<Value> = (0..n)
            .map(|i| {
                let schema = json!({"type": "object", "properties": {"x": {"type": "string"}}});
                if anthropic {
                    json!({"name": format!("t{i}"), "description": "d".repeat(900), "input_schema": schema})
                } else {
                    json!({"type": "function", "name": format!("t{i}"), "description": "d".repeat(900),
                           "parameters": schema})
                }
            })
            .collect();
        Value::Array(tools)
    }

    fn responses(v: Value) -> Billable {
        Billable::responses(&obj(v)).unwrap()
    }

    fn messages(v: Value) -> Billable {
        Billable::messages(&obj(v)).unwrap()
    }

    #[test]
    fn a_plain_responses_body_counts_as_its_chat_form() {
        let b = responses(
            json!({"model": "m", "input": "hello there", "max_output_tokens": 100,
                                 "temperature": 0.2, "store": false, "stream": true}),
        );
        assert_eq!(
            b,
            Billable {
                input: 3 + template_tokens(1),
                images: 0,
                output: Some(100)
            }
        );
        let with =
            responses(json!({"model": "m", "input": "hello there", "instructions": "be brief"}));
        assert_eq!(with.input, 3 + 2 + template_tokens(2));
        assert_eq!(with.output, None);
    }

    #[test]
    fn tools_schemas_and_reasoning_items_count_in_a_responses_body() {
        let base = || json!({"model": "m", "input": "hi", "max_output_tokens": 10});
        let plain = responses(base()).input;
        let mut t = base();
        t["tools"] = tools(31, false);
        let tools_in = responses(t).input - plain;
        assert!((7_500..8_500).contains(&tools_in), "{tools_in}");
        // The schema of `text.format` is prompt; `text.verbosity` and
        // `reasoning.effort` are not.
        let mut f = base();
        f["text"] = json!({"format": {"type": "json_schema", "name": "s",
                                      "schema": {"description": "s".repeat(30_000)}}});
        let schema_in = responses(f).input - plain;
        assert!((7_500..7_700).contains(&schema_in), "{schema_in}");
        let mut p = base();
        p["text"] = json!({"verbosity": "low"});
        p["reasoning"] = json!({"effort": "high", "summary": "auto"});
        assert!(responses(p).input - plain <= 5, "parameters are not prompt");
        // A reasoning item handed back, encrypted.
        let mut r = base();
        r["input"] = json!([
            {"type": "reasoning", "id": "rs_1", "summary": [],
             "encrypted_content": "e".repeat(30_000)},
            {"role": "user", "content": "hi"}]);
        let b = responses(r);
        assert!(b.input >= 7_500 + template_tokens(2), "{b:?}");
        // An unknown field is counted, a sampling parameter is not.
        let mut u = base();
        u["vendor_prompt"] = json!("v".repeat(4_000));
        u["top_p"] = json!(0.5);
        let unknown_in = responses(u).input - plain;
        assert!((1_000..1_010).contains(&unknown_in), "{unknown_in}");
    }

    #[test]
    fn images_count_as_images_and_tool_outputs_by_what_they_hold() {
        let png = format!("data:image/png;base64,{}", "A".repeat(40_000));
        let b = responses(json!({"model": "m", "input": [
            {"role": "user", "content": [
                {"type": "input_text", "text": "what is this?"},
                {"type": "input_image", "image_url": png}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{\"a\": 1}"},
            {"type": "function_call_output", "call_id": "c", "output": [
                {"type": "input_image", "image_url": "https://x/y.png"},
                {"type": "input_text", "text": "o".repeat(4_000)}]}]}));
        assert_eq!(b.images, 2);
        assert!(b.input > 1_000 + template_tokens(3), "{b:?}");
        assert!(
            b.input < 1_100 + template_tokens(3),
            "the image's data is not text: {b:?}"
        );
        // A file counts by its data.
        let f = responses(json!({"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_file", "filename": "a.pdf", "file_data": "F".repeat(8_000)}]}]}));
        assert!(f.input >= 2_000, "{f:?}");
    }

    #[test]
    fn a_messages_body_counts_system_tools_blocks_and_images() {
        let plain = messages(json!({"model": "m", "max_tokens": 64,
                                    "messages": [{"role": "user", "content": "hello there"}]}));
        assert_eq!(plain.output, Some(64));
        assert!(plain.input >= 3 + template_tokens(1), "{plain:?}");
        assert!(plain.input <= 3 + template_tokens(1) + 5, "{plain:?}");
        let b = messages(
            json!({"model": "m", "max_tokens": 64, "temperature": 1, "top_k": 5,
            "system": [{"type": "text", "text": "s".repeat(4_000), "cache_control": {"type": "ephemeral"}}],
            "tools": tools(8, true),
            "thinking": {"type": "enabled", "budget_tokens": 32},
            "messages": [
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": "A".repeat(40_000)}},
                    {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                                    "data": "P".repeat(8_000)}},
                    {"type": "text", "text": "what are these?"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "t".repeat(400), "signature": "g".repeat(400)},
                    {"type": "tool_use", "id": "tu", "name": "f", "input": {"q": "x"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu",
                    "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                                {"type": "text", "text": "r".repeat(400)}]}]}]}),
        );
        assert_eq!(b.images, 2);
        // 4,000 bytes of system, 8 tools of ~1,000, 8,000 of document,
        // 800 of thinking, 400 of tool result.
        let floor = (4_000 + 8_000 + 8_000 + 800 + 400) / 4 + template_tokens(4);
        assert!(b.input >= floor, "{b:?}");
        assert!(b.input < floor + 300, "{b:?}");
        let mut o = obj(json!({"model": "m", "max_tokens": 64,
                               "messages": [{"role": "user", "content": "hello there"}]}));
        o.insert(
            "output_config".into(),
            json!({"effort": "high", "format": {"type": "json_schema", "schema": {"d": "x".repeat(4_000)}}}),
        );
        let with_format = Billable::messages(&o).unwrap().input - plain.input;
        assert!((1_000..1_030).contains(&with_format), "{with_format}");
        assert_eq!(TEMPLATE_PER_MESSAGE, 7);
    }

    #[test]
    fn caps_follow_the_one_rule() {
        for (bad, param) in [
            (json!({"max_output_tokens": 100_000.0}), "max_output_tokens"),
            (json!({"max_output_tokens": "5000"}), "max_output_tokens"),
            (json!({"max_output_tokens": -1}), "max_output_tokens"),
            (json!({"max_output_tokens": true}), "max_output_tokens"),
            (
                json!({"max_output_tokens": 10, "max_tokens": 0}),
                "max_tokens",
            ),
        ] {
            let e = Billable::responses(&obj(bad.clone())).unwrap_err();
            assert_eq!(e.param, param, "{bad}");
        }
        for bad in [
            json!(100_000.0),
            json!("5000"),
            json!(-1),
            json!(true),
            json!(0),
        ] {
            let body = obj(json!({"max_tokens": bad, "messages": []}));
            let e = Billable::messages(&body).unwrap_err();
            assert_eq!(e.param, "max_tokens", "{bad}");
        }
        let both = obj(json!({"input": "x", "max_output_tokens": 10, "max_tokens": 500}));
        assert_eq!(Billable::responses(&both).unwrap().output, Some(500));
        let none = obj(json!({"messages": [], "max_tokens": null}));
        assert_eq!(Billable::messages(&none).unwrap().output, None);
    }
}
