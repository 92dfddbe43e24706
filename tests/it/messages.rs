//! `POST /v1/messages` (Anthropic's Messages API) on every route and
//! strategy, in-process with paused time: the same answers as chat
//! completions in Anthropic's shape, whole and streamed (a stream's
//! grammar checked event by event), tools, `ping` keep-alives,
//! `count_tokens`, keys by `x-api-key`, and errors in Anthropic's shape.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use serde_json::{Value, json};

fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        // Comments (a committed stream's trailing `x-conclave-*` meta)
        // are skipped, as SSE readers do.
        .filter(|ev| ev.lines().any(|l| !l.starts_with(':') && !l.is_empty()))
        .map(|ev| {
            let name = ev
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or_else(|| panic!("no event name: {ev}"));
            let data = ev.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name.to_owned(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

/// Checks a Messages event stream's grammar (as Anthropic's SDKs read
/// it) and returns the message it puts together.
fn check_stream(text: &str) -> Value {
    let evs = events(text);
    assert_eq!(evs[0].0, "message_start", "{text}");
    assert_eq!(evs.last().unwrap().0, "message_stop", "{text}");
    let mut msg = evs[0].1["message"].clone();
    let mut open: Option<usize> = None;
    let mut json_parts: Vec<String> = Vec::new();
    for (name, data) in &evs[1..] {
        assert_eq!(data["type"], name.as_str(), "{data}");
        match name.as_str() {
            "ping" | "message_stop" => {}
            "content_block_start" => {
                assert!(open.is_none(), "a block opened inside another: {text}");
                let i = data["index"].as_u64().unwrap() as usize;
                assert_eq!(i, msg["content"].as_array().unwrap().len(), "{text}");
                msg["content"]
                    .as_array_mut()
                    .unwrap()
                    .push(data["content_block"].clone());
                json_parts.push(String::new());
                open = Some(i);
            }
            "content_block_delta" => {
                let i = data["index"].as_u64().unwrap() as usize;
                assert_eq!(Some(i), open, "{text}");
                let d = &data["delta"];
                let b = &mut msg["content"][i];
                let add = |b: &mut Value, k: &str, s: &Value| {
                    let joined = format!("{}{}", b[k].as_str().unwrap(), s.as_str().unwrap());
                    b[k] = Value::from(joined);
                };
                match d["type"].as_str().unwrap() {
                    "text_delta" => add(b, "text", &d["text"]),
                    "thinking_delta" => add(b, "thinking", &d["thinking"]),
                    "signature_delta" => b["signature"] = d["signature"].clone(),
                    "input_json_delta" => {
                        json_parts[i].push_str(d["partial_json"].as_str().unwrap())
                    }
                    other => panic!("unknown delta {other}"),
                }
            }
            "content_block_stop" => {
                let i = data["index"].as_u64().unwrap() as usize;
                assert_eq!(open.take(), Some(i), "{text}");
                if msg["content"][i]["type"] == "tool_use" {
                    msg["content"][i]["input"] = serde_json::from_str(&json_parts[i]).unwrap();
                }
            }
            "message_delta" => {
                assert!(open.is_none(), "{text}");
                msg["stop_reason"] = data["delta"]["stop_reason"].clone();
                msg["usage"] = data["usage"].clone();
            }
            other => panic!("unexpected event {other}: {text}"),
        }
    }
    msg
}

/// The text blocks of a message, joined.
fn said(m: &Value) -> String {
    m["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().unwrap())
        .collect()
}

fn msg(model: &str, text: &str, stream: bool) -> Value {
    json!({"model": model, "max_tokens": 256, "stream": stream,
           "messages": [{"role": "user", "content": text}]})
}

#[tokio::test(start_paused = true)]
async fn every_strategy_answers_the_messages_api_as_it_answers_chat() {
    let gw = inproc::Gw::demo();
    let confirm = [("x-conclave-confirm", "yes")];
    for route in [
        "fast",
        "review",
        "failover",
        "council",
        "hedge",
        "wise",
        "best-of-3",
    ] {
        let input = format!("hello from {route}");
        let mut c = common::chat(route, &input);
        c["max_tokens"] = json!(256);
        let chat = gw.chat_with(&c, &confirm).await;
        assert_eq!(chat.status, 200, "{route}: {}", chat.text);
        let chat_text = chat.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned();
        let r = gw
            .post_with("/v1/messages", &msg(route, &input, false), &confirm)
            .await;
        assert_eq!(r.status, 200, "{route}: {}", r.text);
        assert_eq!(r.header("x-conclave-route"), Some(route));
        let v = r.json();
        assert!(v["id"].as_str().unwrap().starts_with("msg_"), "{v}");
        assert_eq!(v["type"], "message");
        assert_eq!(v["role"], "assistant");
        assert_eq!(v["stop_reason"], "end_turn", "{route}: {v}");
        if route != "best-of-3" {
            assert_eq!(said(&v), chat_text, "{route}: {v}");
        }
        assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0, "{v}");
        assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0, "{v}");

        let r = gw
            .post_with("/v1/messages", &msg(route, &input, true), &confirm)
            .await;
        assert_eq!(r.status, 200, "{route}: {}", r.text);
        assert_eq!(r.header("content-type"), Some("text/event-stream"));
        let s = check_stream(&r.text);
        if route != "best-of-3" {
            assert_eq!(said(&s), chat_text, "{route}: {}", r.text);
        }
        assert_eq!(s["stop_reason"], "end_turn");
        assert!(
            s["usage"]["output_tokens"].as_u64().unwrap() > 0,
            "{}",
            r.text
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_arena_answers_with_two_text_blocks_and_its_id() {
    let gw = inproc::Gw::demo();
    for stream in [false, true] {
        let r = gw
            .post_with("/v1/messages", &msg("ab", "hi", stream), &[])
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let id = r.header("x-conclave-arena-id").unwrap().to_owned();
        let m = if stream {
            check_stream(&r.text)
        } else {
            r.json()
        };
        let texts = m["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "text")
            .count();
        assert_eq!(texts, 2, "{m}");
        if !stream {
            assert_eq!(m["arena_id"], id.as_str());
        }
        let vote = gw
            .post_with(&format!("/v1/arena/{id}/vote"), &json!({"pick": "A"}), &[])
            .await;
        assert_eq!(vote.status, 200, "{}", vote.text);
    }
}

const TOOLS: &str = r#"
[server]
event_log = "{dir}/events.jsonl"
sse_keepalive = "1s"

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.agent]
reply = { tool_call = { name = "get_weather", arguments = { city = "Paris" } } }
rules = [{ when_contains = "sunny", then = { reply = { text = "It is sunny in Paris." } } }]

[upstreams.sim.models.slow]
ttft = "5s"

[models.agent]
upstream = "sim"

[models.slow]
upstream = "sim"
"#;

/// A tool round trip: the call comes back as a `tool_use` block, its
/// result goes back as `tool_result`, and the model sees both as chat.
#[tokio::test(start_paused = true)]
async fn a_tool_round_trip() {
    let gw = inproc::Gw::start(TOOLS);
    let tools = json!([
        {"name": "get_weather", "description": "Weather",
         "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"type": "web_search_20250305", "name": "web_search"},
    ]);
    for stream in [false, true] {
        let mut body = msg("agent", "weather in Paris?", stream);
        body["tools"] = tools.clone();
        let r = gw.post_with("/v1/messages", &body, &[]).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.header("x-conclave-dropped-tools"),
            Some("web_search_20250305")
        );
        let m = if stream {
            check_stream(&r.text)
        } else {
            r.json()
        };
        assert_eq!(m["stop_reason"], "tool_use", "{m}");
        let call = m["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_use")
            .unwrap()
            .clone();
        assert_eq!(call["name"], "get_weather");
        assert_eq!(call["input"], json!({"city": "Paris"}));
        body["messages"] = json!([
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "sunny, 21C"}]},
        ]);
        let r = gw.post_with("/v1/messages", &body, &[]).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let m = if stream {
            check_stream(&r.text)
        } else {
            r.json()
        };
        assert_eq!(said(&m), "It is sunny in Paris.", "{m}");
        assert_eq!(m["stop_reason"], "end_turn");
    }
    let asked = gw.asked("sim", "agent");
    let last = asked.last().unwrap();
    assert_eq!(last["tools"].as_array().unwrap().len(), 1, "{last}");
    let msgs = last["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(msgs[2]["role"], "tool");
    assert_eq!(msgs[2]["content"], "sunny, 21C");
    assert_eq!(gw.events(&["tools_dropped"]).await.len(), 4);
}

/// While a slow model works, a stream is kept alive with `ping` events
/// after its `message_start`, never with SSE comments.
#[tokio::test(start_paused = true)]
async fn keepalives_are_ping_events() {
    let gw = inproc::Gw::start(TOOLS);
    let r = gw
        .post_with("/v1/messages", &msg("slow", "hi", true), &[])
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains(": keep-alive"), "{}", r.text);
    let evs = events(&r.text);
    assert_eq!(evs[1].0, "ping", "{}", r.text);
    check_stream(&r.text);
}

const KEYS: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.echo]

[models.echo]
upstream = "sim"

[[keys]]
name = "alice"
key_env = "ALICE"
rpm = 1
"#;

#[tokio::test(start_paused = true)]
async fn keys_limits_and_errors_speak_anthropic() {
    let now = std::time::SystemTime::now();
    let gw = inproc::Gw::start_with(KEYS, &[("ALICE", "sk-alice")], now);
    let body = msg("echo", "hi", false);
    let anth = |r: &Resp, status: u16, kind: &str| {
        assert_eq!(r.status, status, "{}", r.text);
        let v = r.json();
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], kind, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
    };
    let r = gw.post_with("/v1/messages", &body, &[]).await;
    anth(&r, 401, "authentication_error");
    let r = gw
        .post_with("/v1/messages", &body, &[("x-api-key", "sk-wrong")])
        .await;
    anth(&r, 401, "authentication_error");
    let key = [
        ("x-api-key", "sk-alice"),
        ("anthropic-version", "2023-06-01"),
    ];
    let r = gw
        .post_with("/v1/messages", &msg("nope", "hi", false), &key)
        .await;
    anth(&r, 404, "not_found_error");
    let mut no_max = body.clone();
    no_max.as_object_mut().unwrap().remove("max_tokens");
    let r = gw.post_with("/v1/messages", &no_max, &key).await;
    anth(&r, 400, "invalid_request_error");
    assert!(r.text.contains("max_tokens"), "{}", r.text);
    let r = gw.post_with("/v1/messages", &body, &key).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Anthropic's SDKs read the id from `request-id`.
    assert_eq!(r.header("request-id"), r.header("x-request-id"));
    assert!(r.header("request-id").is_some());
    let r = gw
        .post_with(
            "/v1/messages",
            &body,
            &[("authorization", "Bearer sk-alice")],
        )
        .await;
    anth(&r, 429, "rate_limit_error");
    assert!(r.header("retry-after").is_some());

    // count_tokens: a request like any other to the key's `rpm` (no
    // tokens): refused while the minute's one request is spent, then an
    // estimate, said so, which spends the next minute's.
    let count = json!({"model": "echo", "messages": [{"role": "user", "content": "hello there, how are you today?"}]});
    let r = gw
        .post_with("/v1/messages/count_tokens", &count, &key)
        .await;
    anth(&r, 429, "rate_limit_error");
    assert!(r.header("retry-after").is_some());
    tokio::time::advance(std::time::Duration::from_secs(60)).await;
    let r = gw
        .post_with("/v1/messages/count_tokens", &count, &key)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-token-count"), Some("estimate"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert!(r.json()["input_tokens"].as_u64().unwrap() > 5, "{}", r.text);
    let r = gw
        .post_with("/v1/messages/count_tokens", &count, &key)
        .await;
    anth(&r, 429, "rate_limit_error");
    tokio::time::advance(std::time::Duration::from_secs(60)).await;
    let r = gw
        .post_with(
            "/v1/messages/count_tokens",
            &json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}),
            &key,
        )
        .await;
    anth(&r, 404, "not_found_error");
}

/// A passthrough to an Anthropic upstream gets the body verbatim (only
/// `model` rewritten): fields conclave does not translate (`top_k`,
/// `cache_control`, system turns, `output_config`) reach it, and its own
/// events come back under their own names, its usage recorded.
#[tokio::test(start_paused = true)]
async fn an_anthropic_upstream_gets_the_body_verbatim() {
    let gw = inproc::Gw::demo();
    let mut body = json!({"model": "claude", "max_tokens": 300, "top_k": 5,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "output_config": {"effort": "low"},
        "messages": [{"role": "user", "content": "hello verbatim"},
                     {"role": "system", "content": "a system turn"},
                     {"role": "user", "content": [{"type": "text", "text": "again"}]}]});
    let beta = [("anthropic-beta", "prompt-caching-2024-07-31")];
    let r = gw.post_with("/v1/messages", &body, &beta).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("sonnet"));
    let v = r.json();
    assert_eq!(v["type"], "message", "{v}");
    assert!(said(&v).starts_with("Claude's answer:"), "{v}");
    let sent = gw.asked("claude", "claude-sim");
    let sent = sent.last().unwrap();
    assert_eq!(sent["top_k"], 5, "{sent}");
    assert_eq!(sent["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(sent["messages"][1]["role"], "system");
    assert_eq!(sent["output_config"]["effort"], "low");

    body["stream"] = json!(true);
    let r = gw.post_with("/v1/messages", &body, &beta).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let m = check_stream(&r.text);
    assert!(said(&m).starts_with("Claude's answer:"), "{}", r.text);
    assert!(
        m["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{}",
        r.text
    );
    let metrics = gw.metrics();
    let tokens = samples(
        &metrics,
        "conclave_tokens_total",
        &[("model", "sonnet"), ("kind", "output")],
    );
    assert!(tokens.iter().sum::<f64>() > 0.0, "{metrics}");

    // count_tokens: asked of the upstream itself.
    let count =
        json!({"model": "claude", "messages": [{"role": "user", "content": "hello there"}]});
    let r = gw.post_with("/v1/messages/count_tokens", &count, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-token-count"), Some("upstream"));
    assert!(r.json()["input_tokens"].as_u64().unwrap() > 0);
}

/// Claude Code's own request (recorded: system blocks with
/// `cache_control`, a dozen tools, adaptive thinking, system turns,
/// `stream: true`) is answered on a chain (translated) and verbatim by
/// an Anthropic upstream.
#[tokio::test(start_paused = true)]
async fn a_recorded_claude_code_request_is_answered() {
    let gw = inproc::Gw::demo();
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/claude_code_request.json"
    );
    let body: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let beta = [(
        "anthropic-beta",
        "claude-code-20250219,interleaved-thinking-2025-05-14",
    )];
    for route in ["review", "claude", "claude-review"] {
        let mut b = body.clone();
        b["model"] = json!(route);
        let r = gw.post_with("/v1/messages?beta=true", &b, &beta).await;
        assert_eq!(r.status, 200, "{route}: {}", r.text);
        let m = check_stream(&r.text);
        assert!(!said(&m).is_empty(), "{route}: {}", r.text);
    }
}
