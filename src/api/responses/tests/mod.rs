//! Unit tests of the Responses translator: requests (`request`), whole
//! answers (`whole`), streams (`stream`) and arbitrary streams (`prop`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod codex;
mod prop;
mod request;
mod stream;
mod whole;

use std::sync::Arc;

use parking_lot::Mutex;

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use super::{Head, Responses, parse};
use crate::api::error::ApiError;
use crate::api::render::Render;
use crate::model::Chunk;
use crate::sink::Totals;
use crate::wire::UsageField;
use crate::wire::assemble::Assembler;

/// Parses a body that must be valid.
fn req(body: Value) -> super::ResponsesRequest {
    parse(body.to_string().as_bytes()).unwrap()
}

/// The chat request of a body, as JSON.
fn chat(body: Value) -> Value {
    let t = req(body).to_chat(&[]).unwrap();
    serde_json::to_value(&t.chat).unwrap()
}

/// The 400 a body gets: (param, code).
fn refused(body: &Value) -> (Option<String>, Option<&'static str>, String) {
    match parse(body.to_string().as_bytes()) {
        Err(ApiError::BadRequest {
            param,
            code,
            message,
        }) => (param, code, message),
        Err(other) => panic!("not a 400 for {body}: {other}"),
        Ok(_) => panic!("accepted: {body}"),
    }
}

fn is_id(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix).is_some_and(|hex| {
        hex.len() == 32
            && hex
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    })
}

fn head() -> Head {
    let echo = req(serde_json::json!({"model": "m", "input": "hi"}))
        .to_chat(&[])
        .unwrap()
        .echo;
    Head::new("m", echo, 1_700_000_000)
}

/// A renderer whose final objects land in the returned list.
fn renderer(head: Head) -> (Responses, Arc<Mutex<Vec<Value>>>) {
    let done = Arc::new(Mutex::new(Vec::new()));
    let sink = done.clone();
    let r = Responses::new(head, Box::new(move |v| sink.lock().push(v.clone())));
    (r, done)
}

fn chunk(v: &Value) -> Chunk {
    raw(v.to_string().as_bytes())
}

fn raw(data: &[u8]) -> Chunk {
    Chunk {
        data: Bytes::copy_from_slice(data),
        usage: UsageField::Absent,
        usage_at: None,
        choices: 1,
        real: true,
        loading: false,
    }
}

/// One SSE event: its `event:` name and its JSON.
#[derive(Debug)]
struct Event {
    name: String,
    data: Value,
}

/// Splits what a stream wrote into events, checking the framing.
fn events(out: &[u8]) -> Vec<Event> {
    let text = std::str::from_utf8(out).unwrap();
    assert!(text.is_empty() || text.ends_with("\n\n"), "{text}");
    text.split("\n\n")
        .filter(|b| !b.is_empty())
        .map(|block| {
            let mut lines = block.lines();
            let name = lines.next().unwrap().strip_prefix("event: ").unwrap();
            let data = lines.next().unwrap().strip_prefix("data: ").unwrap();
            assert!(lines.next().is_none(), "{block}");
            let data: Value = serde_json::from_str(data).unwrap();
            assert_eq!(data["type"], name, "{block}");
            Event {
                name: name.to_owned(),
                data,
            }
        })
        .collect()
}

/// Streams `chunks` through a renderer (open, chunks, end): the events
/// and the final object.
fn stream(head: Head, chunks: &[Value], totals: Totals) -> (Vec<Event>, Value) {
    let (mut r, done) = renderer(head);
    let mut out = BytesMut::new();
    r.open(&mut out);
    for c in chunks {
        assert!(r.chunk(chunk(c), &mut out).is_ok());
    }
    r.end(totals, &mut out);
    let done = done.lock();
    assert_eq!(done.len(), 1);
    (events(&out), done[0].clone())
}

/// The response `whole` builds from the chunks put together.
fn whole_of(head: Head, chunks: &[Value], totals: Totals) -> Value {
    let mut a = Assembler::default();
    for c in chunks {
        a.add(c.to_string().as_bytes()).unwrap();
    }
    let body = Bytes::from(a.finish().to_string());
    let (mut r, done) = renderer(head);
    let bytes = r.whole(&body, totals).unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(done.lock().as_slice(), std::slice::from_ref(&v));
    v
}

fn names(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.name.as_str()).collect()
}
