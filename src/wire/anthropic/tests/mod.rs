//! Unit tests of the translation, by direction; `props` checks the
//! conversation rules over arbitrary message sequences.

mod answer;
mod props;
mod request;
mod stream;

use serde_json::{Map, Value, json};

use super::*;

/// Translates a chat body that must translate.
fn req(chat: Value) -> (Value, Translation) {
    let Value::Object(chat) = chat else {
        unreachable!("a test body is an object")
    };
    to_messages(&chat, "claude-test", 4096).unwrap()
}

/// Translates a chat body that must not, returning the field named.
fn refused(chat: Value) -> String {
    let Value::Object(chat) = chat else {
        unreachable!("a test body is an object")
    };
    to_messages(&chat, "claude-test", 4096).unwrap_err().field
}

/// A chat body with these messages and extra fields.
fn chat(messages: Value, extra: Value) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), "m".into());
    body.insert("messages".into(), messages);
    if let Value::Object(extra) = extra {
        body.extend(extra);
    }
    Value::Object(body)
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}
