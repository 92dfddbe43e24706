//! Upstreams that speak the Responses API natively (`responses = true`),
//! at the model level: a config's graph is built as the gateway builds it,
//! and its concrete model's `forward(call, Endpoint::RESPONSES, body)` is
//! called as the `/v1/responses` handler calls it. The body reaches the
//! upstream verbatim but for `model`; whole answers and streams come back
//! as the upstream wrote them; the attempt gets the usage, the first
//! token, the finish reason or the failure (redacted). Mock upstreams run
//! on tokio's paused clock; a real HTTP upstream (reqwest transport) on
//! 127.0.0.1 where the connection itself is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::Served;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use conclave::clock::Clock;
use conclave::context::RequestCtx;
use conclave::error::ModelError;
use conclave::graph::Graph;
use conclave::model::{Call, Reply, ReplyBody};
use conclave::sink::{AttemptRecord, AttemptSink, Metrics, Reporters};
use conclave::store::Store;
use conclave::upstream::ConcreteModel;
use conclave::wire::{Endpoint, Usage};
use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const SECRET: &str = "sk-conclave-test-5b1f9c0e2d7a4468";

/// What an attempt recorded.
#[derive(Debug, Clone)]
struct Seen {
    usage: Option<Usage>,
    error: Option<String>,
    verdict: &'static str,
    ttft: Option<Duration>,
    finish_reason: Option<String>,
}

#[derive(Default)]
struct Rec(Mutex<Vec<Seen>>);

impl AttemptSink for Rec {
    fn record(&self, a: &AttemptRecord) {
        self.0.lock().push(Seen {
            usage: a.usage,
            error: a.error.as_ref().map(|e| e.1.clone()),
            verdict: a.verdict.as_str(),
            ttft: a.ttft,
            finish_reason: a.finish_reason.clone(),
        });
    }
}

impl Rec {
    fn only(&self) -> Seen {
        let all = self.0.lock();
        assert_eq!(all.len(), 1, "{all:?}");
        all[0].clone()
    }
}

struct Rig {
    graph: Graph,
    rec: Arc<Rec>,
}

impl Rig {
    /// The graph of `toml` (with `SECRET` as a key's secret, so the
    /// redactor knows it).
    fn new(toml: &str) -> Rig {
        let text = format!("{toml}\n[[keys]]\nname = \"k\"\nkey_env = \"K\"\n");
        let env = |v: &str| (v == "K").then(|| SECRET.to_owned());
        let config = conclave::config::parse(&text, "t.toml", &env, &conclave::strategy::ALL)
            .unwrap_or_else(|e| panic!("{e}"));
        let store = Arc::new(Store::in_memory(Clock::system()).unwrap());
        let graph = Graph::build(
            &config,
            &conclave::store::records::Records::sqlite(&store),
            &conclave::upstream::registry::Registry::new(),
            &conclave::graph::Kept::default(),
            &Metrics::noop(),
            conclave::strategy::STRATEGIES,
        )
        .unwrap();
        Rig {
            graph,
            rec: Arc::new(Rec::default()),
        }
    }

    fn model(&self, name: &str) -> Arc<ConcreteModel> {
        let (_, node) = self.graph.get(name).unwrap();
        node.concrete.clone().unwrap()
    }

    fn call(&self) -> Call {
        let ctx = RequestCtx::new(
            "test".into(),
            "gpt".into(),
            "passthrough",
            "k".into(),
            Duration::from_secs(60),
            Reporters::none(),
            CancellationToken::new(),
        )
        .with_sink(self.rec.clone());
        Call::new(Arc::new(ctx))
    }

    async fn forward(&self, name: &str, body: &Value) -> Result<Reply, ModelError> {
        let Value::Object(body) = body.clone() else {
            panic!("not an object")
        };
        self.model(name)
            .forward(self.call(), Endpoint::RESPONSES, body)
            .await
    }
}

/// The events of a streamed reply (each event's JSON), and its error if
/// it ended with one.
async fn drain(reply: Reply) -> (Vec<Value>, Option<ModelError>) {
    let ReplyBody::Stream(mut s) = reply.body else {
        panic!("a whole reply")
    };
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        match c {
            Ok(c) => out.push(serde_json::from_slice(&c.data).unwrap()),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

fn whole(reply: Reply) -> (Value, Option<Usage>) {
    let ReplyBody::Whole(c) = reply.body else {
        panic!("a streamed reply")
    };
    (serde_json::from_slice(&c.body).unwrap(), c.usage)
}

const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"
responses = true

[upstreams.sim.models.sim-gpt]
usage = { prompt_tokens = 120, completion_tokens = 7 }

[upstreams.sim.models.slow]
ttft = "300ms"
tokens_per_second = 10.0

[upstreams.sim.models.broken]
fail = "error_event"
error_message = "overloaded, key sk-conclave-test-5b1f9c0e2d7a4468 refused"

[upstreams.chatonly]
kind = "mock"

[models.gpt]
upstream = "sim"
model = "sim-gpt"

[models.slow]
upstream = "sim"

[models.broken]
upstream = "sim"

[models.plain]
upstream = "chatonly"
"#;

/// What Codex CLI sends: mixed tool types, `store: false`, `include`,
/// reasoning items with encrypted content, fields conclave never reads.
fn codex_body(stream: bool) -> Value {
    json!({
        "model": "gpt",
        "instructions": "You are Codex, a coding agent.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Listing."}],
             "encrypted_content": "gAAAAABo-opaque-encrypted-reasoning=="},
            {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "Cargo.toml\nsrc"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]}
        ],
        "tools": [
            {"type": "function", "name": "shell", "description": "run", "strict": false,
             "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}},
            {"type": "local_shell"},
            {"type": "web_search", "search_context_size": "low"},
            {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}}
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": stream,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "019a-session",
        "text": {"verbosity": "low"}
    })
}

#[tokio::test(start_paused = true)]
async fn a_whole_request_goes_verbatim_and_its_usage_is_recorded() {
    let rig = Rig::new(MOCK);
    assert!(rig.model("gpt").speaks(Endpoint::RESPONSES));
    assert!(!rig.model("plain").speaks(Endpoint::RESPONSES));
    let sent = codex_body(false);
    let (body, usage) = whole(rig.forward("gpt", &sent).await.unwrap());

    let sim = rig.graph.upstreams[0].transport.simulator().unwrap();
    let got = sim.recorded().pop().unwrap().body;
    let mut expected = sent.clone();
    expected["model"] = json!("sim-gpt");
    // Field for field, in the client's order.
    assert_eq!(
        got.to_string(),
        expected.to_string(),
        "only `model` may change on the way"
    );
    // The mock echoes what OpenAI echoes: the built-in tools came through.
    assert_eq!(body["tools"], sent["tools"]);
    assert_eq!(body["output"][0]["type"], "reasoning");
    assert_eq!(body["output"][1]["content"][0]["text"], "thanks");

    let seen = rig.rec.only();
    assert_eq!(seen.verdict, "ok");
    let u = seen.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.estimated),
        (120, 7, false)
    );
    assert_eq!(usage, Some(u));
    assert_eq!(seen.finish_reason.as_deref(), Some("stop"));
}

#[tokio::test(start_paused = true)]
async fn a_stream_is_relayed_event_by_event_with_its_usage_and_first_token() {
    let rig = Rig::new(MOCK);
    let mut body = codex_body(true);
    body["model"] = json!("slow");
    body["input"] = json!("one two three");
    let (events, err) = drain(rig.forward("slow", &body).await.unwrap()).await;
    assert!(err.is_none(), "{err:?}");
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"));
    assert_eq!(kinds.last(), Some(&"response.completed"));
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "response.output_text.delta")
            .count(),
        3
    );
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i, "{e}");
    }
    let last = &events[events.len() - 1]["response"];
    let seen = rig.rec.only();
    assert_eq!(seen.verdict, "ok");
    let u = seen.usage.unwrap();
    assert!(!u.estimated);
    assert_eq!(u.completion_tokens, 3);
    assert_eq!(json!(u.prompt_tokens), last["usage"]["input_tokens"]);
    // `response.created` came at once; the first token after the mock's
    // 300 ms `ttft`.
    assert_eq!(seen.ttft, Some(Duration::from_millis(300)));
    assert_eq!(seen.finish_reason.as_deref(), Some("stop"));
}

#[tokio::test(start_paused = true)]
async fn a_failed_event_fails_the_attempt_without_the_secret() {
    let rig = Rig::new(MOCK);
    let body = json!({"model": "broken", "input": "hi", "stream": true});
    // Failed after `response.created` and `response.in_progress`, before
    // any of the answer: the call fails, nothing was handed on.
    let err = rig
        .forward("broken", &body)
        .await
        .err()
        .expect("the call fails")
        .to_string();
    assert!(err.contains("overloaded"), "{err}");
    assert!(!err.contains(SECRET), "{err}");
    let seen = rig.rec.only();
    assert_eq!(seen.verdict, "error");
    let recorded = seen.error.unwrap();
    assert!(
        recorded.contains("overloaded") && !recorded.contains(SECRET),
        "{recorded}"
    );

    // Whole, the same model answers 500.
    let body = json!({"model": "broken", "input": "hi"});
    let e = rig.forward("broken", &body).await.err().expect("an error");
    assert!(matches!(e, ModelError::Status { status: 500, .. }), "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_chat_only_upstream_answers_404() {
    let rig = Rig::new(MOCK);
    let body = json!({"model": "plain", "input": "hi"});
    let e = rig.forward("plain", &body).await.err().expect("an error");
    assert!(matches!(e, ModelError::Status { status: 404, .. }), "{e}");
    assert_eq!(rig.rec.only().verdict, "error");
}

// ---- a real HTTP upstream, over the reqwest transport ----

/// A Responses upstream on 127.0.0.1: the request's `input` (a string)
/// picks what it does; it keeps every body it received.
async fn upstream() -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = Router::new().route(
        "/v1/responses",
        post(move |body: Bytes| {
            let kept = kept.clone();
            async move {
                let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                kept.lock().push(req.clone());
                act(&req)
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), seen)
}

fn event(v: Value) -> Bytes {
    Bytes::from(format!(
        "event: {}\ndata: {v}\n\n",
        v["type"].as_str().unwrap()
    ))
}

fn sse(events: Vec<Bytes>, then_hang: bool) -> Response {
    let s = futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>));
    let body = match then_hang {
        true => Body::from_stream(s.chain(futures::stream::pending())),
        false => Body::from_stream(s),
    };
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(body)
        .unwrap()
}

fn completed(usage: Value) -> Bytes {
    event(
        json!({"type": "response.completed", "sequence_number": 9, "response": {
        "id": "resp_1", "object": "response", "status": "completed",
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}],
        "usage": usage}}),
    )
}

fn act(req: &Value) -> Response {
    let created = || {
        event(json!({"type": "response.created", "sequence_number": 0,
        "response": {"id": "resp_1", "status": "in_progress", "output": []}}))
    };
    let delta = |d: &str| event(json!({"type": "response.output_text.delta", "delta": d}));
    let usage = json!({"input_tokens": 40, "input_tokens_details": {"cached_tokens": 32},
        "output_tokens": 25, "output_tokens_details": {"reasoning_tokens": 20}, "total_tokens": 65});
    match req["input"].as_str().unwrap_or_default() {
        // Completed, then the connection stays open (no `[DONE]`).
        "completed-then-open" => sse(vec![created(), delta("hi"), completed(usage)], true),
        // A secret handed out a few characters a delta.
        "split-secret" => {
            let mut evs = vec![created(), delta("the key is ")];
            evs.extend(
                SECRET
                    .as_bytes()
                    .chunks(6)
                    .map(|p| delta(std::str::from_utf8(p).unwrap())),
            );
            evs.push(completed(usage));
            sse(evs, false)
        }
        "error-event" => sse(
            vec![
                created(),
                event(json!({"type": "error", "code": "server_error",
                    "message": format!("upstream broke, key {SECRET}"), "param": null})),
            ],
            true,
        ),
        "whole-failed" => Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(
                json!({"id": "resp_1", "object": "response", "status": "failed", "output": [],
                    "error": {"code": "rate_limit_exceeded", "message": "slow down"}})
                .to_string(),
            ))
            .unwrap(),
        "whole-usage" => Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(
                json!({"id": "resp_1", "object": "response", "status": "incomplete",
                    "incomplete_details": {"reason": "max_output_tokens"}, "error": null,
                    "output": [], "usage": usage})
                .to_string(),
            ))
            .unwrap(),
        // 100 MB without a line end, as fast as it goes.
        "no-newline" => {
            let block = Bytes::from(vec![b'x'; 1 << 20]);
            let s = futures::stream::once(async { Bytes::from("data: ") })
                .chain(futures::stream::iter((0..100).map(move |_| block.clone())))
                .map(Ok::<_, Infallible>);
            let stream = req["stream"].as_bool() == Some(true);
            Response::builder()
                .header(
                    header::CONTENT_TYPE,
                    if stream {
                        "text/event-stream"
                    } else {
                        "application/json"
                    },
                )
                .body(Body::from_stream(s))
                .unwrap()
        }
        other => panic!("no act {other}"),
    }
}

fn real(base: &str) -> String {
    format!(
        r#"
[upstreams.openai]
kind = "openai"
base_url = "{base}"
responses = true
stream_idle_timeout = "20s"

[models.gpt]
upstream = "openai"
model = "gpt-5-codex"
"#
    )
}

#[tokio::test]
async fn a_completed_stream_ends_without_done_while_the_connection_stays_open() {
    let (base, seen) = upstream().await;
    let rig = Rig::new(&real(&base));
    let body = json!({"model": "gpt", "input": "completed-then-open", "stream": true,
        "tools": [{"type": "web_search"}], "include": ["reasoning.encrypted_content"]});
    let started = tokio::time::Instant::now();
    let (events, err) = drain(rig.forward("gpt", &body).await.unwrap()).await;
    let took = started.elapsed();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(events.len(), 3);
    // Far under the 20 s stream_idle_timeout it would otherwise wait for.
    assert!(
        took < Duration::from_secs(15),
        "waited {took:?} after response.completed"
    );
    let mut expected = body.clone();
    expected["model"] = json!("gpt-5-codex");
    let got = seen.lock().last().unwrap().to_string();
    assert_eq!(got, expected.to_string(), "only `model` changes");
    let s = rig.rec.only();
    assert_eq!(s.verdict, "ok");
    let u = s.usage.unwrap();
    assert_eq!(
        (
            u.prompt_tokens,
            u.completion_tokens,
            u.cached_tokens,
            u.reasoning_tokens
        ),
        (40, 25, 32, 20)
    );
    eprintln!("ended {took:?} after the request, the connection still open");
}

#[tokio::test]
async fn a_secret_split_across_deltas_is_redacted() {
    let (base, _) = upstream().await;
    let rig = Rig::new(&real(&base));
    let body = json!({"model": "gpt", "input": "split-secret", "stream": true});
    let (events, err) = drain(rig.forward("gpt", &body).await.unwrap()).await;
    assert!(err.is_none(), "{err:?}");
    let text: String = events.iter().filter_map(|e| e["delta"].as_str()).collect();
    assert!(text.starts_with("the key is "), "{text}");
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("[REDACTED]"), "{text}");
}

#[tokio::test]
async fn an_error_event_and_a_failed_body_fail_the_attempt() {
    let (base, _) = upstream().await;
    let rig = Rig::new(&real(&base));
    let body = json!({"model": "gpt", "input": "error-event", "stream": true});
    let err = match rig.forward("gpt", &body).await {
        Ok(reply) => drain(reply).await.1.unwrap().to_string(),
        // An error before any of the answer fails the call itself.
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("upstream broke") && !err.contains(SECRET),
        "{err}"
    );
    let s = rig.rec.only();
    assert_eq!(s.verdict, "error");
    assert!(!s.error.unwrap().contains(SECRET));

    let rig = Rig::new(&real(&base));
    let e = rig
        .forward("gpt", &json!({"model": "gpt", "input": "whole-failed"}))
        .await
        .err()
        .expect("an error");
    assert!(
        matches!(&e, ModelError::Reported { message, streamed: false, .. } if message == "slow down"),
        "{e}"
    );
    assert_eq!(rig.rec.only().verdict, "error");

    let rig = Rig::new(&real(&base));
    let (_, usage) = whole(
        rig.forward("gpt", &json!({"model": "gpt", "input": "whole-usage"}))
            .await
            .unwrap(),
    );
    assert_eq!(usage.map(|u| u.cached_tokens), Some(32));
    let s = rig.rec.only();
    assert_eq!(s.finish_reason.as_deref(), Some("length"));
    assert_eq!(s.usage.map(|u| u.reasoning_tokens), Some(20));
}

#[tokio::test]
async fn a_hundred_megabytes_without_a_line_end_stay_bounded() {
    let (base, _) = upstream().await;
    for stream in [true, false] {
        let rig = Rig::new(&real(&base));
        let body = json!({"model": "gpt", "input": "no-newline", "stream": stream});
        let started = tokio::time::Instant::now();
        let e = rig.forward("gpt", &body).await.err().expect("refused");
        let took = started.elapsed();
        assert!(matches!(e, ModelError::Invalid { .. }), "{e}");
        assert!(e.to_string().contains("larger than"), "{e}");
        assert!(took < Duration::from_secs(60), "{took:?}");
        assert_eq!(rig.rec.only().verdict, "error");
        eprintln!("stream={stream}: refused in {took:?}: {e}");
    }
}

// ---- the mock server over HTTP ----

#[tokio::test]
async fn conclave_mock_serves_responses_over_http_only_when_asked() {
    let on = common::Srv::mock(
        "[upstreams.sim]\nkind = \"mock\"\nresponses = true\n[upstreams.sim.models.m]\nreply = { text = \"hello there\" }\n",
    );
    let http = common::client();
    let r = common::send(http.post(on.url("/v1/responses")).json(
        &json!({"model": "m", "input": "hi", "stream": true, "tools": [{"type": "web_search"}]}),
    ))
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    // Each event names itself on an `event:` line, as the SDKs read it.
    let first = r.text.split("\n\n").next().unwrap_or_default();
    assert!(
        first.starts_with("event: response.created\ndata: {"),
        "{first}"
    );
    assert!(!r.text.contains("[DONE]"));

    // Through the reqwest transport, as an `openai` upstream with
    // `responses = true` reaches it.
    let rig = Rig::new(&format!(
        "[upstreams.up]\nkind = \"openai\"\nbase_url = \"{}\"\nresponses = true\n[models.gpt]\nupstream = \"up\"\nmodel = \"m\"\n",
        on.v1()
    ));
    let body = json!({"model": "gpt", "input": "hi", "stream": true});
    let (events, err) = drain(rig.forward("gpt", &body).await.unwrap()).await;
    assert!(err.is_none(), "{err:?}");
    let text: String = events.iter().filter_map(|e| e["delta"].as_str()).collect();
    assert_eq!(text, "hello there");
    let s = rig.rec.only();
    assert_eq!(s.verdict, "ok");
    assert_eq!(
        s.usage.map(|u| (u.completion_tokens, u.estimated)),
        Some((2, false))
    );

    let off = common::Srv::mock("[upstreams.sim]\nkind = \"mock\"\n[upstreams.sim.models.m]\n");
    let r = common::send(
        http.post(off.url("/v1/responses"))
            .json(&json!({"model": "m", "input": "hi"})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.text);
}
