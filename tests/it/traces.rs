//! OpenTelemetry traces: a local OTLP/HTTP receiver (started here, on
//! 127.0.0.1:0) gets the request span, its strategy phases, the attempts
//! under them and a lane wait, with the GenAI attributes; the client's
//! `traceparent` is continued and the upstream is sent the attempt's. The
//! gateway runs in-process, and a test flushes its spans as shutdown does
//! rather than waiting for the batch exporter's schedule.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;

use parking_lot::Mutex;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing;
use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

#[derive(Default)]
struct Seen {
    spans: Vec<Span>,
    service_names: Vec<String>,
    /// `traceparent` headers of the upstream calls.
    traceparents: Vec<String>,
}

type Shared = Arc<Mutex<Seen>>;

async fn traces(State(seen): State<Shared>, body: Bytes) -> &'static str {
    let req = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
    let mut seen = seen.lock();
    for rs in req.resource_spans {
        for kv in rs.resource.map(|r| r.attributes).unwrap_or_default() {
            if kv.key == "service.name" {
                seen.service_names
                    .push(text(kv.value.and_then(|v| v.value)));
            }
        }
        for ss in rs.scope_spans {
            seen.spans.extend(ss.spans);
        }
    }
    ""
}

/// An OpenAI-compatible upstream that notes the `traceparent` it is sent.
async fn upstream_chat(
    State(seen): State<Shared>,
    headers: HeaderMap,
) -> axum::Json<serde_json::Value> {
    if let Some(tp) = headers.get("traceparent").and_then(|v| v.to_str().ok()) {
        seen.lock().traceparents.push(tp.to_owned());
    }
    axum::Json(json!({
        "id": "c1", "object": "chat.completion", "created": 1, "model": "remote-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "the final answer"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }))
}

async fn receiver() -> (String, Shared) {
    let seen = Shared::default();
    let app = Router::new()
        .route("/v1/traces", routing::post(traces))
        .route("/v1/chat/completions", routing::post(upstream_chat))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

fn text(v: Option<Any>) -> String {
    match v {
        Some(Any::StringValue(s)) => s,
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::ArrayValue(a)) => {
            let items: Vec<String> = a.values.into_iter().map(|v| text(v.value)).collect();
            format!("[{}]", items.join(","))
        }
        other => format!("{other:?}"),
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| text(kv.value.clone().and_then(|v| v.value)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The gateway in-process (on tokio's real clock: the receiver and the
/// remote upstream are real sockets), whose telemetry a test flushes as
/// shutdown does instead of waiting for the batch exporter.
fn gateway(otlp: &str, extra: &str) -> inproc::Gw {
    inproc::Gw::start(&format!(
        r#"
[telemetry]
otlp_endpoint = "{otlp}"
service_name = "conclave-under-test"
{extra}

[upstreams.remote]
kind = "openai"
base_url = "{otlp}/v1"

[upstreams.sim]
kind = "mock"
lane = "local"
swap_delay = "20ms"

[upstreams.sim.models.a]
reply = {{ text = "answer a" }}

[upstreams.sim.models.b]
reply = {{ text = "answer b" }}

[upstreams.sim.models.judge]
reply = {{ tool_call = {{ name = "rank_responses", arguments = {{ rankings = [
  {{ label = "A", rank = 1, score = 8, reason = "good" }},
  {{ label = "B", rank = 2, score = 5, reason = "weaker" }},
] }} }} }}

[[upstreams.sim.models.judge.rules]]
when_contains = "Ranking recorded"
then = {{ reply = {{ text = "Be plain." }} }}

[models.a]
upstream = "sim"
[models.b]
upstream = "sim"
[models.judge]
upstream = "sim"
[models.final]
upstream = "remote"
model = "remote-1"

[routes.council]
strategy = "judge"
panel = ["a", "b"]
synthesis = "judge"
default = "final"
"#
    ))
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_judge_request_is_one_trace_with_phases_attempts_and_a_lane_wait() {
    let (otlp, seen) = receiver().await;
    let gw = gateway(&otlp, "");
    let parent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let r = gw
        .chat_with(
            &chat("council", "what is 2+2?"),
            &[("traceparent", &parent)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Everything queued is exported by the time the flush returns.
    gw.flush().await;
    let seen = std::mem::take(&mut *seen.lock());
    assert!(
        seen.spans.iter().any(|s| s.name == "chat council"),
        "no request span arrived"
    );
    let spans = &seen.spans;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let by_name = |name: &str| -> &Span {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no span {name} in {names:?}"))
    };
    assert!(
        seen.service_names
            .iter()
            .all(|n| n == "conclave-under-test")
    );
    for s in spans {
        assert_eq!(hex(&s.trace_id), TRACE, "{} is in another trace", s.name);
        assert!(s.end_time_unix_nano >= s.start_time_unix_nano, "{}", s.name);
        // A child lies within its parent's time (the client's span is not
        // ours to check).
        if let Some(p) = spans.iter().find(|p| p.span_id == s.parent_span_id) {
            assert!(
                p.start_time_unix_nano <= s.start_time_unix_nano
                    && s.end_time_unix_nano <= p.end_time_unix_nano,
                "{} outside its parent {}",
                s.name,
                p.name
            );
        }
    }

    // The request continues the client's span.
    let request = by_name("chat council");
    assert_eq!(hex(&request.parent_span_id), CLIENT_SPAN);
    assert_eq!(request.kind, 2, "a server span");
    assert_eq!(attr(request, "conclave.route").as_deref(), Some("council"));
    assert_eq!(attr(request, "conclave.strategy").as_deref(), Some("judge"));
    assert_eq!(
        attr(request, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(
        attr(request, "gen_ai.request.model").as_deref(),
        Some("council")
    );
    assert_eq!(attr(request, "conclave.attempts").as_deref(), Some("5"));
    let input: u64 = attr(request, "gen_ai.usage.input_tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert!(input >= 12, "{input}");

    // Phases hang under the request; attempts under their phase.
    let panel = by_name("judge.panel");
    let synthesis = by_name("judge.synthesis");
    for phase in [panel, synthesis] {
        assert_eq!(phase.parent_span_id, request.span_id, "{}", phase.name);
    }
    let attempts: Vec<&Span> = spans.iter().filter(|s| s.kind == 3).collect();
    assert_eq!(attempts.len(), 5, "{names:?}");
    for name in ["chat a", "chat b"] {
        let a = by_name(name);
        assert_eq!(a.parent_span_id, panel.span_id, "{name}");
        assert_eq!(attr(a, "conclave.role").as_deref(), Some("panel"));
        assert!(
            matches!(
                attr(a, "conclave.verdict").as_deref(),
                Some("winner" | "loser")
            ),
            "{:?}",
            attr(a, "conclave.verdict")
        );
        assert!(attr(a, "conclave.warm").is_some());
        assert_eq!(attr(a, "conclave.upstream").as_deref(), Some("sim"));
        assert_eq!(
            attr(a, "gen_ai.response.finish_reasons").as_deref(),
            Some("[stop]")
        );
        assert!(attr(a, "gen_ai.usage.output_tokens").is_some());
    }
    let judging: Vec<&&Span> = attempts
        .iter()
        .filter(|s| attr(s, "conclave.role").as_deref() == Some("synthesis"))
        .collect();
    assert_eq!(judging.len(), 2, "the ranking turn and the guidance turn");
    assert!(
        judging
            .iter()
            .all(|s| s.parent_span_id == synthesis.span_id)
    );
    let last = by_name("chat remote-1");
    assert_eq!(last.parent_span_id, request.span_id);
    assert_eq!(attr(last, "conclave.role").as_deref(), Some("default"));
    assert_eq!(
        attr(last, "gen_ai.usage.input_tokens").as_deref(),
        Some("12")
    );

    // One panellist waited for the single-slot local lane.
    let queued: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "conclave.queue")
        .collect();
    assert!(!queued.is_empty(), "no lane wait span in {names:?}");
    assert_eq!(queued.len(), 1, "only the second panellist waited");
    let q = queued[0];
    assert!(
        attempts.iter().any(|a| a.span_id == q.parent_span_id),
        "a lane wait outside its attempt"
    );
    // It waited at least for the first panellist's 20 ms swap.
    let waited = q.end_time_unix_nano - q.start_time_unix_nano;
    assert!(waited >= 15_000_000, "{waited} ns");

    // The upstream was told which span called it.
    assert_eq!(
        seen.traceparents,
        vec![format!("00-{TRACE}-{}-01", hex(&last.span_id))]
    );
}

#[tokio::test]
async fn unsampled_and_unsampled_by_ratio_requests_export_nothing() {
    let (otlp, seen) = receiver().await;
    let gw = gateway(&otlp, "sample_ratio = 0.0");
    // The client's trace is not sampled: it is not recorded either.
    let unsampled = format!("00-{TRACE}-{CLIENT_SPAN}-00");
    let r = gw
        .chat_with(&chat("a", "hi"), &[("traceparent", &unsampled)])
        .await;
    assert_eq!(r.status, 200);
    // No traceparent, and a ratio of 0.
    assert_eq!(gw.chat(&chat("a", "hi")).await.status, 200);
    // A sampled client trace is followed whatever the ratio; a malformed
    // traceparent is ignored (not an error).
    let sampled = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let r = gw
        .chat_with(&chat("a", "hi"), &[("traceparent", &sampled)])
        .await;
    assert_eq!(r.status, 200);
    let r = gw
        .chat_with(&chat("a", "hi"), &[("traceparent", "garbage")])
        .await;
    assert_eq!(r.status, 200);
    // Everything any of them queued is exported by the time the flush
    // returns: no wait for a span that should not come.
    gw.flush().await;
    let seen = seen.lock();
    let requests: Vec<&Span> = seen.spans.iter().filter(|s| s.kind == 2).collect();
    assert_eq!(requests.len(), 1, "only the sampled request is traced");
    assert!(seen.spans.iter().all(|s| hex(&s.trace_id) == TRACE));
}
