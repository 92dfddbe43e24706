//! Simulated embeddings: a small deterministic vector per input (the same
//! text always gets the same vector), in OpenAI's list shape.

use bytes::Bytes;
use serde_json::{Value, json};

use super::{MockResponse, error_response, once};

/// Dimensions of a simulated embedding.
const DIMENSIONS: usize = 8;

pub(super) fn respond(req: &Value, model: &str) -> MockResponse {
    let inputs: Vec<String> = match req.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => {
            return error_response(
                400,
                "mock: `input` must be a string or a list of strings",
                None,
            );
        }
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| json!({"object": "embedding", "index": i, "embedding": vector(text)}))
        .collect();
    let tokens: u64 = inputs.iter().map(|t| (t.len() as u64).div_ceil(4)).sum();
    let body = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    MockResponse {
        status: 200,
        content_type: "application/json",
        retry_after: None,
        body: once(Bytes::from(body.to_string())),
    }
}

/// FNV-1a of the text, spread over a few unit-range floats.
fn vector(text: &str) -> Vec<f64> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (0..DIMENSIONS)
        .map(|i| {
            let bits = h.rotate_left(8 * i as u32) & 0xffff;
            (bits as f64 / 65535.0) * 2.0 - 1.0
        })
        .collect()
}
