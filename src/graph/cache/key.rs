//! The response cache's key: a SHA-256 over the canonical form of a
//! request as a node sees it (after dialect translation, so chat,
//! Responses and Messages requests share entries). It covers the name
//! answering (route or model), the scope (the API key's name when the
//! rule's scope is `key`), a pin, the messages and every field that
//! changes the answer (tools, `tool_choice`, `response_format`, token
//! caps, each sampling parameter). Left out: fields that do not change
//! the answer ([`IGNORED`]), the order of JSON keys, and the form of
//! whole numbers (`1` and `1.0` are one value).

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

use crate::wire::ChatRequest;

/// Request fields that never change the answer.
pub const IGNORED: &[&str] = &[
    "model",
    "stream",
    "stream_options",
    "user",
    "metadata",
    "store",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
];

/// What besides the request itself tells entries apart.
pub struct KeyParts<'a> {
    /// The route or model the rule is on.
    pub name: &'a str,
    /// The API key's name (scope `key`), or `None` (scope `shared`).
    pub scope: Option<&'a str>,
    /// `x-conclave-pin` when it reaches this node (it picks the member).
    pub pin: Option<&'a str>,
    /// The client's `anthropic-beta`, which an Anthropic upstream gets and
    /// which changes its answer; its flags are compared as a set.
    pub beta: Option<&'a str>,
}

/// The hex digest of `req` under `parts`.
pub fn digest(parts: &KeyParts<'_>, req: &ChatRequest) -> Result<String, serde_json::Error> {
    let mut v = serde_json::to_value(req)?;
    if let Value::Object(m) = &mut v {
        for k in IGNORED {
            m.remove(*k);
        }
    }
    let mut h = Sha256::new();
    let mut field = |tag: &str, s: Option<&str>| {
        h.update(tag.as_bytes());
        match s {
            Some(s) => {
                h.update([1]);
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
            None => h.update([0]),
        }
    };
    field("name", Some(parts.name));
    field("scope", parts.scope);
    field("pin", parts.pin);
    let beta = parts.beta.map(|b| {
        let mut flags: Vec<&str> = b
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .collect();
        flags.sort_unstable();
        flags.dedup();
        flags.join(",")
    });
    field("beta", beta.as_deref());
    let mut out = String::new();
    canonical(&v, &mut out);
    h.update(b"req");
    h.update(out.as_bytes());
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Writes `v` with object keys sorted and whole numbers as integers.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => object(m, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        Value::Number(n) => out.push_str(&number(n)),
        other => out.push_str(&other.to_string()),
    }
}

fn object(m: &Map<String, Value>, out: &mut String) {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    out.push('{');
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(k.clone()).to_string());
        out.push(':');
        if let Some(x) = m.get(k) {
            canonical(x, out);
        }
    }
    out.push('}');
}

/// A whole number in any form as the integer; others as written.
fn number(n: &Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    match n.as_f64() {
        Some(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
            format!("{}", f as i64)
        }
        _ => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap()
    }

    fn base() -> Value {
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0})
    }

    fn key_of(v: Value) -> String {
        let parts = KeyParts {
            name: "r",
            scope: Some("k"),
            pin: None,
            beta: None,
        };
        digest(&parts, &req(v)).unwrap()
    }

    fn with(field: &str, x: Value) -> Value {
        let mut v = base();
        v.as_object_mut().unwrap().insert(field.into(), x);
        v
    }

    #[test]
    fn ignored_fields_leave_the_key_alone() {
        let k = key_of(base());
        for (f, x) in [
            ("stream", json!(true)),
            ("stream_options", json!({"include_usage": true})),
            ("user", json!("u1")),
            ("metadata", json!({"a": "b"})),
            ("store", json!(true)),
            ("model", json!("other")),
        ] {
            assert_eq!(key_of(with(f, x)), k, "{f}");
        }
    }

    #[test]
    fn every_answer_changing_field_changes_the_key() {
        let k = key_of(base());
        for (f, x) in [
            ("messages", json!([{"role": "user", "content": "ho"}])),
            (
                "tools",
                json!([{"type": "function", "function": {"name": "f"}}]),
            ),
            ("tool_choice", json!("required")),
            ("response_format", json!({"type": "json_object"})),
            ("max_tokens", json!(5)),
            ("max_completion_tokens", json!(5)),
            ("temperature", json!(0.5)),
            ("top_p", json!(0.9)),
            ("seed", json!(1)),
            ("stop", json!(["x"])),
            ("n", json!(2)),
            ("presence_penalty", json!(1)),
            ("frequency_penalty", json!(1)),
            ("logit_bias", json!({"1": 2})),
        ] {
            assert_ne!(key_of(with(f, x)), k, "{f}");
        }
    }

    #[test]
    fn key_order_and_whole_number_forms_do_not_matter() {
        let a = json!({"messages": [{"content": "hi", "role": "user"}], "model": "m", "temperature": 0.0, "max_tokens": 10});
        let b = json!({"model": "m", "max_tokens": 10.0, "temperature": 0, "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(key_of(a), key_of(b));
        assert_ne!(
            key_of(with("top_p", json!(0.5))),
            key_of(with("top_p", json!(0.50001)))
        );
    }

    #[test]
    fn name_scope_and_pin_are_part_of_the_key() {
        let r = req(base());
        let d = |name, scope, pin| {
            digest(
                &KeyParts {
                    name,
                    scope,
                    pin,
                    beta: None,
                },
                &r,
            )
            .unwrap()
        };
        let k = d("r", Some("k"), None);
        let beta = |b| {
            digest(
                &KeyParts {
                    name: "r",
                    scope: Some("k"),
                    pin: None,
                    beta: Some(b),
                },
                &r,
            )
            .unwrap()
        };
        assert_ne!(beta("a"), k, "a beta changes the answer");
        assert_eq!(beta("b, a"), beta("a,b"), "its flags are a set");
        assert_ne!(d("r2", Some("k"), None), k);
        assert_ne!(d("r", Some("k2"), None), k);
        assert_ne!(d("r", None, None), k);
        assert_ne!(d("r", Some("k"), Some("a")), k);
        assert_eq!(d("r", Some("k"), None), k);
        assert_eq!(k.len(), 64);
    }
}
