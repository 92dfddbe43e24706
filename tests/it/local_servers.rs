//! conclave's own calls in front of servers that behave like real local
//! ones (the simulator with `quirks`): cancelled internal calls stop
//! generating, and tools work where a server refuses them on a stream.
//! What a server generates after its caller left is counted in-process on
//! paused time; the tests of connections run the mock server over HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A local server: whole answers go on after their client leaves, tools
/// are refused on a stream, streams carry no usage (llama-cpp-python).
fn mock_toml() -> String {
    let long = "word ".repeat(120);
    format!(
        r#"
[upstreams.local]
kind = "mock"
quirks = ["generates_after_disconnect", "no_stream_tool_choice", "no_stream_usage"]

[upstreams.local.models.quick]
reply = {{ text = "{{\"n\": 4}}" }}
ttft = "20ms"

[upstreams.local.models.slowpoke]
reply = {{ text = "{long}" }}
ttft = "20ms"
tokens_per_second = 150

[upstreams.local.models.caller]
reply = {{ tool_call = {{ name = "calc", arguments = {{ n = 4 }} }} }}

[upstreams.local.models.base]
reply = {{ text = "An easy answer." }}

[[upstreams.local.models.base.rules]]
when_contains = "SAGE-SAYS"
then = {{ reply = {{ text = "Final answer with the expert's help." }} }}

[[upstreams.local.models.base.rules]]
when_contains = "hard"
then = {{ reply = {{ tool_call = {{ name = "oracle_consult", arguments = {{ question = "Is a spinlock sound here?" }} }} }} }}

[upstreams.local.models.sage]
reply = {{ text = "SAGE-SAYS: no, use a mutex." }}
"#
    )
}

fn routes() -> &'static str {
    r#"
[routes.best]
strategy = "race"
candidates = ["quick", "slowpoke"]
rubric = { format = 1 }

[routes.hedge]
strategy = "race"
mode = "first"
candidates = ["quick", "slowpoke"]

[routes.wise]
strategy = "oracle"
base = "base"
oracle = "sage"

[routes.council]
strategy = "judge"
panel = ["quick", "slowpoke"]
synthesis = "quick"
default = "quick"
panel_timeout = "150ms"
"#
}

fn world() -> (Srv, Srv) {
    let mock = Srv::mock(&mock_toml());
    let gw = Srv::gateway(&front_of(
        &mock.v1(),
        &["quick", "slowpoke", "caller", "base", "sage"],
        routes(),
    ));
    (mock, gw)
}

/// The same world in-process: the local server is a `kind = "mock"`
/// upstream of the gateway, so under paused time what it generates after
/// a call is dropped is counted on tokio's timers, not waited for.
fn world_in() -> inproc::Gw {
    let models: String = ["quick", "slowpoke", "caller", "base", "sage"]
        .iter()
        .map(|m| format!("[models.{m}]\nupstream = \"local\"\n\n"))
        .collect();
    inproc::Gw::start(&format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n{}\n{models}{}",
        mock_toml(),
        routes()
    ))
}

fn json_request(route: &str) -> Value {
    let mut b = chat(route, "2+2 as JSON");
    b["response_format"] = json!({"type": "json_object"});
    b
}

fn calc_tool() -> Value {
    json!([{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}])
}

/// Tokens the in-process mock generated for callers that had left, once
/// the slowest abandoned answer (121 tokens at 150 a second, 7 ms apart
/// on tokio's millisecond timers, after 20 ms) has surely ended: 1.2 s of
/// paused time, let run timer by timer.
async fn wasted(gw: &inproc::Gw) -> u64 {
    tokio::time::sleep(Duration::from_millis(1200)).await;
    gw.sim("local")
        .stats
        .tokens_generated_after_disconnect
        .load(Ordering::Relaxed)
}

/// The data events of a stream that ended with `[DONE]`.
fn done(r: &Resp) -> Vec<String> {
    let events = r.data_events();
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{}",
        r.text
    );
    events
}

/// Issue 23, finding 1: a race's loser, a hedge's straggler and a panellist
/// past `panel_timeout` are cancelled, and their servers stop generating.
#[tokio::test(start_paused = true)]
async fn cancelled_internal_calls_stop_generating() {
    let gw = world_in();
    let r = gw.chat(&json_request("best")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("quick"));
    assert_eq!(r.json()["choices"][0]["message"]["content"], "{\"n\": 4}");
    assert_eq!(r.json()["object"], "chat.completion", "{}", r.text);
    // Its stream carried no usage: the answer still says what it cost.
    assert!(
        r.json()["usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{}",
        r.text
    );

    let r = gw.chat(&chat("hedge", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("quick"));

    let t = tokio::time::Instant::now();
    let r = gw.chat(&chat("council", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // slowpoke's 820 ms are cut at the panel's 150; the synthesis and
    // the default take 20 ms each.
    assert_eq!(t.elapsed(), Duration::from_millis(190));

    assert_eq!(wasted(&gw).await, 0, "{:?}", gw.sim("local").stats);
    // Every call to the slow model was cancellable, and went out streamed.
    let slow = gw.asked("local", "slowpoke");
    assert_eq!(slow.len(), 3, "{slow:?}");
    for q in slow {
        assert_eq!(q["stream"], true, "{q}");
    }
    let ev = gw.events(&["race_candidate", "race_finished"]).await;
    let loser = ev
        .iter()
        .find(|e| e["event"] == "race_candidate" && e["model"] == "slowpoke")
        .unwrap();
    assert_eq!(loser["verdict"], "cancelled", "{ev:?}");
    assert_eq!(loser["generation_stopped"], true, "{ev:?}");
    let fin = ev.iter().find(|e| e["event"] == "race_finished").unwrap();
    assert!(fin["tokens_saved_estimate"].as_u64().unwrap() > 0, "{fin}");
}

/// Finding 3: a server that refuses tools on a stream answers them whole;
/// it is remembered, and a cancelled call that had to go whole is not
/// claimed as saved.
#[tokio::test(start_paused = true)]
async fn tools_go_whole_where_streams_are_refused() {
    let gw = world_in();
    let sim = gw.sim("local");
    let mut body = chat_stream("caller", "use the tool");
    body["tools"] = calc_tool();
    let r = gw.chat(&body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    done(&r);
    assert!(r.text.contains("\"calc\""), "{}", r.text);
    let asked: Vec<Value> = sim
        .recorded()
        .into_iter()
        .map(|q| q.body["stream"].clone())
        .collect();
    assert_eq!(asked, [json!(true), Value::Null], "refused, then whole");

    // Learned: the next call with tools goes whole at once.
    let r = gw.chat(&body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(sim.recorded().len(), 3);
    // A whole request with tools works as before.
    let mut whole = chat("caller", "use the tool");
    whole["tools"] = calc_tool();
    let r = gw.chat(&whole).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let call = &r.json()["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "calc", "{}", r.text);

    // A race with tools: its candidates learn the refusal, go whole, and
    // the loser's server keeps generating: not counted as saved.
    sim.clear_recorded();
    let mut race = json_request("best");
    race["tools"] = calc_tool();
    let t = tokio::time::Instant::now();
    let r = gw.chat(&race).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(t.elapsed(), Duration::from_millis(20));
    // The loser was dropped at 20 ms, after the first of its 121 tokens:
    // the other 120 were generated for nobody.
    assert_eq!(wasted(&gw).await, 120, "the mock did keep generating");
    let ev = gw.events(&["race_candidate", "race_finished"]).await;
    let loser = ev
        .iter()
        .rev()
        .find(|e| e["event"] == "race_candidate" && e["model"] == "slowpoke")
        .unwrap();
    assert_eq!(loser["generation_stopped"], false, "{ev:?}");
    let fin = ev
        .iter()
        .rev()
        .find(|e| e["event"] == "race_finished")
        .unwrap();
    assert_eq!(fin["tokens_saved_estimate"], 0, "{fin}");
}

/// Finding 3: a streamed oracle route whose base turns carry the consult
/// tool, on a server that refuses tools on a stream: the turns go whole,
/// the final answer streams to the client.
#[tokio::test]
async fn a_streamed_oracle_route_works_where_tools_cannot_stream() {
    let (mock, gw) = world();
    let r = post(&gw.base, &chat_stream("wise", "a hard question")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let events = done(&r);
    let text = common::world::streamed_text(&events);
    assert_eq!(text, "Final answer with the expert's help.", "{}", r.text);
    assert!(!r.text.contains("oracle_consult"), "{}", r.text);
    assert_eq!(mock.asked("sage").await.len(), 1, "one consult");
}

/// A server that answers a streamed request as llama-cpp-python (uvicorn)
/// does when it cannot stream it: a 200 event stream that ends at once,
/// sent as `keep-alive`, and then the connection closed. Whole requests
/// get an answer. Returns its base URL and how many requests it read.
async fn closes_after_empty_streams() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let count = count.clone();
            tokio::spawn(async move {
                loop {
                    let Some(body) = read_request(&mut sock).await else {
                        return;
                    };
                    count.fetch_add(1, Ordering::SeqCst);
                    if body.contains("\"stream\":true") {
                        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                                    transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n0\r\n\r\n";
                        let _ = sock.write_all(head.as_bytes()).await;
                        return; // and the connection closes
                    }
                    let answer = json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole after all"}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}})
                    .to_string();
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                        answer.len()
                    );
                    if sock.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (base, seen)
}

/// One HTTP/1.1 request's body (headers up to the blank line, then
/// `content-length` bytes); `None` once the client closes.
async fn read_request(sock: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while buf.len() < end + 4 + len {
                let n = sock.read(&mut byte).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&byte[..n]);
            }
            return Some(String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned());
        }
        let n = sock.read(&mut byte).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
    }
}

/// Seen in front of llama-cpp-python: the retry of an empty stream must
/// not fail on the connection the server closed after it.
#[tokio::test]
async fn an_empty_stream_is_asked_again_whole_on_a_live_connection() {
    let (base, seen) = closes_after_empty_streams().await;
    let gw = Srv::gateway(&front_of(&base, &["m"], ""));
    for _ in 0..10 {
        let r = post(&gw.base, &chat_stream("m", "hi")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let events = done(&r);
        assert_eq!(common::world::streamed_text(&events), "whole after all");
    }
    assert!(
        seen.load(Ordering::SeqCst) >= 6,
        "a stream, then whole, each time"
    );
}

/// A server whose stream sends its answer and `finish_reason`, then
/// breaks the connection (`cut` in the prompt) or goes silent without
/// `[DONE]` (otherwise).
async fn ends_badly_after_finishing() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let Some(body) = read_request(&mut sock).await else {
                    return;
                };
                let chunk = |delta: Value, finish: Value| {
                    let c = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                    let event = format!("data: {c}\n\n");
                    format!("{:x}\r\n{event}\r\n", event.len())
                };
                let out = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{}{}",
                    chunk(
                        json!({"role": "assistant", "content": "all of it"}),
                        Value::Null
                    ),
                    chunk(json!({}), json!("stop")),
                );
                let _ = sock.write_all(out.as_bytes()).await;
                if body.contains("cut") {
                    // The chunked body never ends: a broken connection.
                    let _ = sock.shutdown().await;
                    return;
                }
                tokio::time::sleep(Duration::from_secs(20)).await;
            });
        }
    });
    base
}

/// Issue 40: a stream cut (or stalled) after its `finish_reason` is a
/// whole answer, not an error.
#[tokio::test(start_paused = true)]
async fn a_stream_that_breaks_after_its_finish_is_a_whole_answer() {
    let base = ends_badly_after_finishing().await;
    let gw = Srv::gateway(&format!(
        "[upstreams.up]\nkind = \"openai\"\nbase_url = \"{base}\"\nstream_idle_timeout = \"300ms\"\n\
         retries = {{ max = 0 }}\n\n[models.m]\nupstream = \"up\"\n"
    ));
    for prompt in ["cut", "stall"] {
        let r = post(&gw.base, &chat_stream("m", prompt)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let events = done(&r);
        assert_eq!(common::world::streamed_text(&events), "all of it");
        assert!(!r.text.contains("\"error\""), "{prompt}: {}", r.text);
    }
}
