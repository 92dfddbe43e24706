//! What redaction costs on the hot path, in nanoseconds: one stream event
//! (its own bytes and the carry-over; and reading its answer text, which
//! the relay's inspection does only when there are secrets), a whole
//! answer, an error message, each with one upstream key and two client
//! keys configured. The baseline is a redactor without secrets (what a
//! keyless upstream costs).
//!
//! cargo bench --bench redact
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use tokio::time::Instant;

use bytes::Bytes;
use conclave::redact::{Carry, Redactor};
use conclave::wire::{inspect_chunk, inspect_chunk_text};

const SECRETS: [&str; 3] = [
    "sk-proj-7Qz9Xk2Lm4Pn8Rt0Vb6Yc3Hd5Jf1Gs9Wq4Ea2Zx7Cv0Bn",
    "team-key-8c1f0e7d2b9a4c6e",
    "admin-key-5b3a9d0e1f7c2a8d",
];

/// Nanoseconds per call of `f`: the fastest of many short timed batches
/// (the machine may be shared; a batch that was not interrupted is the
/// cost of the code).
fn ns(mut f: impl FnMut()) -> f64 {
    const N: u32 = 2_000;
    (0..25)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..N {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(N)
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let event = Bytes::from(
        r#"{"id":"chatcmpl-AbC123xyz","object":"chat.completion.chunk","created":1717171717,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":" jumps over"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    );
    let text =
        "The quick brown fox jumps over the lazy dog and keeps running far away.\n".repeat(14);
    let whole = Bytes::from(
        serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 200, "total_tokens": 210}})
        .to_string(),
    );
    let message = "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.";
    let none = Redactor::default();
    let keys = Redactor::new(SECRETS);
    println!(
        "{:<34} {:>10} {:>10}",
        "ns per call", "no secrets", "3 secrets"
    );
    let row = |name: &str, a: f64, b: f64| println!("{name:<34} {a:>10.0} {b:>10.0}");
    let mut c1 = Carry::default();
    let mut c2 = Carry::default();
    let text = inspect_chunk_text(&event, false).unwrap().text;
    row(
        &format!("stream event ({} B)", event.len()),
        ns(|| drop(black_box(none.event(&mut c1, event.clone(), None)))),
        ns(|| {
            drop(black_box(keys.event(
                &mut c2,
                event.clone(),
                text.as_deref(),
            )))
        }),
    );
    row(
        "its inspection, without/with text",
        ns(|| drop(black_box(inspect_chunk(&event, false)))),
        ns(|| drop(black_box(inspect_chunk_text(&event, false)))),
    );
    row(
        &format!("whole answer ({} B)", whole.len()),
        ns(|| drop(black_box(none.redact_bytes(whole.clone())))),
        ns(|| drop(black_box(keys.redact_bytes(whole.clone())))),
    );
    row(
        &format!("error message ({} B)", message.len()),
        ns(|| drop(black_box(none.clean(message)))),
        ns(|| drop(black_box(keys.clean(message)))),
    );
}
