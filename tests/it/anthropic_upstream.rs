//! Anthropic upstreams (`kind = "anthropic"`, and the mock with `api =
//! "anthropic"`): chat in and out through the Messages API, whole and
//! streamed, as a passthrough and as a member of every strategy; its
//! errors (529, 429 with `retry-after`) handled as any upstream's; its
//! key never coming back; cache tokens priced.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::inproc::Gw;
use common::world::streamed_text;
use common::*;
use serde_json::{Value, json};

const WORLD: &str = r#"
[server]
event_log = "{dir}/events.jsonl"

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.local]
reply = { text = "BAD draft from {model}" }

[upstreams.sim.models.gpt]
reply = { text = "GPT says four." }

[upstreams.claude]
kind = "mock"
api = "anthropic"

[upstreams.claude.models.sonnet]
reply = { text = "Hello from {model}" }
usage = { prompt_tokens = 1000, completion_tokens = 3, cached_tokens = 600, cache_write_tokens = 300 }

[upstreams.claude.models.tooly]
reply = { tool_call = { name = "get_weather", arguments = { city = "Paris" } } }

[upstreams.claude.models.verifier]
reply = { json = { accept = true, feedback = "" } }

[[upstreams.claude.models.verifier.rules]]
when_contains = "BAD draft"
then = { reply = { json = { accept = false, feedback = "needs more detail" } } }

[upstreams.claude.models.overloaded]
status = 529

[upstreams.claude.models.limited]
status = 429
retry_after = 30

[upstreams.claude.models.ranker]
reply = { tool_call = { name = "rank_responses", arguments = { rankings = [
  { label = "A", rank = 1, score = 9, reason = "complete" },
  { label = "B", rank = 2, score = 4, reason = "vague" },
] } } }

[[upstreams.claude.models.ranker.rules]]
when_contains = "Ranking recorded"
then = { reply = { text = "GUIDANCE: say four plainly." } }

[upstreams.claude.models.base]
reply = { text = "An easy answer." }

[[upstreams.claude.models.base.rules]]
when_contains = "SAGE-SAYS"
then = { reply = { text = "Final answer with the expert's help." } }

[[upstreams.claude.models.base.rules]]
when_contains = "hard"
then = { reply = { tool_call = { name = "oracle_consult", arguments = { question = "Is a spinlock sound here?" } } } }

[upstreams.claude.models.sage]
reply = { text = "SAGE-SAYS: no, use a mutex." }

[upstreams.claude.models.trickle]
reply = { text = "one two three" }
tokens_per_second = 2

[models.local]
upstream = "sim"

[models.gpt]
upstream = "sim"

[models.sonnet]
upstream = "claude"
model = "sonnet"
max_tokens = 1000
price = { input_per_mtok = 3.0, output_per_mtok = 15.0, cached_input_per_mtok = 0.3, cache_write_per_mtok = 3.75 }

[models.tooly]
upstream = "claude"

[models.verifier]
upstream = "claude"

[models.overloaded]
upstream = "claude"

[models.limited]
upstream = "claude"

[models.ranker]
upstream = "claude"

[models.base]
upstream = "claude"

[models.sage]
upstream = "claude"

[models.trickle]
upstream = "claude"

[routes.review]
strategy = "chain"
tiers = ["local", "sonnet"]
verifier = "verifier"
verify = ["local"]

[routes.failover]
strategy = "chain"
tiers = ["overloaded", "gpt"]

[routes.council]
strategy = "judge"
panel = ["gpt", "sonnet"]
synthesis = "ranker"
default = "sonnet"

[routes.best]
strategy = "race"
candidates = ["sonnet", "gpt"]

[routes.wise]
strategy = "oracle"
base = "base"
oracle = "sage"
"#;

fn user(text: &str) -> Value {
    json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}])
}

/// The answer's text: the streamed deltas, or the whole message's content.
fn answer_text(r: &Resp, stream: bool) -> String {
    if stream {
        return streamed_text(&r.data_events());
    }
    r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn ask(gw: &Gw, model: &str, text: &str, stream: bool) -> Resp {
    gw.chat(&json!({"model": model, "messages": user(text), "stream": stream}))
        .await
}

/// The chunks of a streamed answer, `[DONE]` left out.
fn chunks(r: &Resp) -> Vec<Value> {
    let events = r.data_events();
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{}",
        r.text
    );
    events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

#[tokio::test]
async fn a_passthrough_to_claude_whole_and_streamed() {
    let gw = Gw::start(WORLD);
    let r = ask(&gw, "sonnet", "hi there", false).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from sonnet");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["prompt_tokens"], 1000);
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 600);

    let body = json!({"model": "sonnet", "messages": user("hi there"), "stream": true,
        "stream_options": {"include_usage": true}});
    let r = gw.chat(&body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let cs = chunks(&r);
    assert_eq!(streamed_text(&r.data_events()), "Hello from sonnet");
    assert!(
        cs.iter()
            .any(|c| c["choices"][0]["finish_reason"] == "stop")
    );
    let usage = cs.iter().rev().find(|c| c["usage"].is_object()).unwrap();
    assert_eq!(usage["usage"]["prompt_tokens"], 1000);
    assert_eq!(usage["usage"]["completion_tokens"], 3);

    // What Anthropic received: the system prompt at the top, the model's
    // max_tokens, nothing OpenAI-only.
    let asked = gw.asked("claude", "sonnet");
    assert_eq!(asked.len(), 2);
    for (body, stream) in asked.iter().zip([false, true]) {
        assert_eq!(body["max_tokens"], 1000, "{body}");
        assert!(body["system"].to_string().contains("Be brief."), "{body}");
        assert!(
            body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["role"] != "system")
        );
        assert!(body.get("stream_options").is_none(), "{body}");
        assert_eq!(body["stream"].as_bool().unwrap_or(false), stream);
    }
}

#[tokio::test]
async fn a_tool_call_comes_back_as_tool_calls_whole_and_streamed() {
    let gw = Gw::start(WORLD);
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    for stream in [false, true] {
        let body = json!({"model": "tooly", "messages": user("weather?"), "tools": tools, "stream": stream});
        let r = gw.chat(&body).await;
        assert_eq!(r.status, 200, "{}", r.text);
        if stream {
            let cs = chunks(&r);
            let first = cs
                .iter()
                .find_map(|c| c.pointer("/choices/0/delta/tool_calls/0/function/name"))
                .unwrap();
            assert_eq!(first, "get_weather");
            let args: String = cs
                .iter()
                .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0/function/arguments"))
                .filter_map(Value::as_str)
                .collect();
            assert_eq!(
                serde_json::from_str::<Value>(&args).unwrap(),
                json!({"city": "Paris"})
            );
            assert!(
                cs.iter()
                    .any(|c| c["choices"][0]["finish_reason"] == "tool_calls")
            );
        } else {
            let v = r.json();
            let call = &v["choices"][0]["message"]["tool_calls"][0];
            assert_eq!(call["function"]["name"], "get_weather");
            let args: Value =
                serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
            assert_eq!(args, json!({"city": "Paris"}));
            assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        }
    }
    let sent = &gw.asked("claude", "tooly")[0];
    assert_eq!(sent["tools"][0]["name"], "get_weather");
    assert!(sent["tools"][0]["input_schema"].is_object(), "{sent}");
}

#[tokio::test]
async fn a_chain_verified_by_claude_accepts_and_escalates() {
    let gw = Gw::start(WORLD);
    for stream in [false, true] {
        let r = ask(&gw, "review", "what is 2+2?", stream).await;
        assert_eq!(r.status, 200, "{}", r.text);
        // The local draft is rejected by Claude, Claude's own tier answers.
        assert_eq!(
            r.header("x-conclave-served-by"),
            Some("sonnet"),
            "{}",
            r.text
        );
    }
    let verdicts = gw.asked("claude", "verifier");
    assert_eq!(verdicts.len(), 2, "one verifier call per request");
    let events = gw.events(&["attempt"]).await;
    let verifier: Vec<&Value> = events.iter().filter(|e| e["role"] == "verifier").collect();
    assert!(
        verifier.iter().all(|e| e["verdict"] == "escalate"),
        "{verifier:?}"
    );
}

#[tokio::test]
async fn a_chain_verified_by_claude_accepts_a_good_draft() {
    let toml = WORLD.replace("BAD draft from {model}", "A fine answer from {model}");
    let gw = Gw::start(&toml);
    let r = ask(&gw, "review", "what is 2+2?", false).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("local"));
    assert!(gw.asked("claude", "sonnet").is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_overloaded_claude_tier_escalates_and_a_429_reaches_the_client() {
    let gw = Gw::start(WORLD);
    let r = ask(&gw, "failover", "hi", false).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("gpt"));

    // Anthropic's "overloaded" stays what it is: a 503 the OpenAI client
    // retries, and (below) Anthropic's own 529 `overloaded_error` on a
    // verbatim `/v1/messages`, which Anthropic's clients retry.
    let r = ask(&gw, "overloaded", "hi", false).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "upstream_overloaded");
    assert!(r.text.contains("HTTP 529"), "{}", r.text);

    let r = ask(&gw, "limited", "hi", false).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.header("retry-after"), Some("30"));
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    let body = json!({"model": "overloaded", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    let r = gw.post_with("/v1/messages", &body, &[]).await;
    assert_eq!(r.status, 529, "{}", r.text);
    assert_eq!(r.json()["error"]["type"], "overloaded_error", "{}", r.text);
}

#[tokio::test]
async fn claude_on_a_judge_panel_and_as_its_synthesis() {
    let gw = Gw::start(WORLD);
    let r = ask(&gw, "council", "what is 2+2?", false).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("sonnet"));
    let syn = gw.asked("claude", "ranker");
    assert!(!syn.is_empty());
    assert_eq!(syn[0]["tools"][0]["name"], "rank_responses");
    let events = gw.events(&["judge_ranking", "judge_fallback"]).await;
    assert!(
        events.iter().any(|e| e["event"] == "judge_ranking"),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|e| e["event"] == "judge_fallback"),
        "{events:?}"
    );
    // The second turn answered the tool_use with a tool_result.
    assert!(syn[1].to_string().contains("tool_result"), "{}", syn[1]);
    let default = gw.asked("claude", "sonnet");
    assert!(
        default.last().unwrap().to_string().contains("GUIDANCE"),
        "{default:?}"
    );
}

#[tokio::test]
async fn claude_in_a_race_and_as_an_oracle() {
    let gw = Gw::start(WORLD);
    let r = ask(&gw, "best", "what is 2+2?", false).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(gw.asked("claude", "sonnet").len() == 1);

    // The base (on Claude too) calls the oracle; its tool result goes
    // back to Claude as a tool_result after its tool_use.
    for stream in [false, true] {
        let r = ask(&gw, "wise", "a hard question", stream).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let text = answer_text(&r, stream);
        assert_eq!(text, "Final answer with the expert's help.");
    }
    let second = &gw.asked("claude", "base")[1];
    assert!(second.to_string().contains("tool_result"), "{second}");
}

#[tokio::test]
async fn pings_keep_a_slow_stream_alive() {
    // Two tokens a second, an idle limit of 400 ms: only the mock's pings
    // (every 200 ms) keep the stream from stalling.
    let toml = WORLD.replace(
        "[upstreams.claude]\nkind = \"mock\"\napi = \"anthropic\"\n",
        "[upstreams.claude]\nkind = \"mock\"\napi = \"anthropic\"\nstream_idle_timeout = \"400ms\"\n",
    );
    let gw = Gw::start(&toml);
    let r = ask(&gw, "trickle", "hi", true).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        streamed_text(&r.data_events()),
        "one two three",
        "{}",
        r.text
    );
    assert!(!r.text.contains("error"), "{}", r.text);
}

#[tokio::test]
async fn what_messages_cannot_take_is_a_400() {
    let gw = Gw::start(WORLD);
    let r = gw
        .post_with(
            "/v1/embeddings",
            &json!({"model": "sonnet", "input": "hi"}),
            &[],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("does not serve Embeddings"), "{}", r.text);
    let r = gw
        .post_with(
            "/v1/completions",
            &json!({"model": "sonnet", "prompt": "hi"}),
            &[],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
}

#[tokio::test]
async fn cache_reads_and_writes_are_priced() {
    let gw = Gw::start(WORLD);
    let r = ask(&gw, "sonnet", "hi", false).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let events = gw.events(&["attempt"]).await;
    let cost = events[0]["cost_usd"].as_f64().unwrap();
    // 100 fresh input at $3, 600 cache reads at $0.30, 300 cache writes
    // at $3.75, 3 output at $15 (per million).
    let want = (100.0 * 3.0 + 600.0 * 0.3 + 300.0 * 3.75 + 3.0 * 15.0) / 1e6;
    assert!((cost - want).abs() < 1e-12, "cost {cost}, want {want}");
}

/// Over HTTP: `kind = "anthropic"` against the mock server playing
/// Anthropic, which sees the key and version headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_anthropic_over_http() {
    let mock = Srv::mock(
        "[upstreams.claude]\nkind = \"mock\"\napi = \"anthropic\"\n\
         [upstreams.claude.models.claude-sonnet-4-5]\nreply = { text = \"Over the wire.\" }\n\
         [upstreams.claude.models.limited]\nstatus = 429\n",
    );
    let toml = format!(
        "[upstreams.anthropic]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"ANTHROPIC_KEY\"\n\
         [models.sonnet]\nupstream = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\n\
         [models.limited]\nupstream = \"anthropic\"\n",
        mock.base
    );
    let key = "sk-ant-T3st-q7Zr9XwP2mVt4LbN8cJd";
    let gw = Gw::start_with(
        &toml,
        &[("ANTHROPIC_KEY", key)],
        std::time::SystemTime::now(),
    );
    for stream in [false, true] {
        let r = ask(&gw, "sonnet", "hi", stream).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let text = answer_text(&r, stream);
        assert_eq!(text, "Over the wire.");
    }
    let got = mock.received().await;
    assert_eq!(got.len(), 2, "{got:?}");
    for r in &got {
        assert_eq!(r["api_key"], key);
        assert_eq!(r["anthropic_version"], "2023-06-01");
        assert_eq!(r["body"]["max_tokens"], 4096, "the default");
        assert!(r["request_id"].is_string());
    }
    // A 429 with retry-after and rate-limit headers: the client gets the
    // wait (a second: no retry within it for a whole request's deadline).
    let r = ask(&gw, "limited", "hi", false).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert!(r.header("retry-after").is_some());
    assert!(!r.text.contains(key));
}

/// An Anthropic server that echoes the `x-api-key` it was sent back, in
/// the way `model` says: in a whole answer's text, spelled over stream
/// deltas, in an error body, in a stream's `error` event.
async fn echoing_anthropic() -> String {
    use axum::http::HeaderMap;
    use axum::response::IntoResponse;
    async fn messages(headers: HeaderMap, body: axum::body::Bytes) -> axum::response::Response {
        let key = headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let req: Value = serde_json::from_slice(&body).unwrap_or_default();
        let model = req["model"].as_str().unwrap_or("").to_owned();
        let sse = |events: Vec<Value>| {
            let text: String = events
                .iter()
                .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
                .collect();
            ([("content-type", "text/event-stream")], text).into_response()
        };
        let start = json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": model, "content": [], "stop_reason": null,
            "usage": {"input_tokens": 5, "output_tokens": 1}}});
        match model.as_str() {
            "echo-text" => axum::Json(
                json!({"id": "msg_1", "type": "message", "role": "assistant",
                "model": model, "content": [{"type": "text", "text": format!("your key is {key}")}],
                "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 5}}),
            )
            .into_response(),
            "echo-stream" => {
                let mut events = vec![
                    start,
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ];
                let spelled: Vec<char> = format!("key: {key}").chars().collect();
                for piece in spelled.chunks(3) {
                    let t: String = piece.iter().collect();
                    events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}));
                }
                events.push(json!({"type": "content_block_stop", "index": 0}));
                events.push(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}));
                events.push(json!({"type": "message_stop"}));
                sse(events)
            }
            "echo-stream-error" => sse(vec![
                start,
                json!({"type": "error", "error": {"type": "overloaded_error", "message": format!("overloaded for {key}")}}),
            ]),
            _ => (
                axum::http::StatusCode::BAD_REQUEST,
                axum::Json(
                    json!({"type": "error", "error": {"type": "invalid_request_error",
                    "message": format!("bad request from key {key}")}}),
                ),
            )
                .into_response(),
        }
    }
    let app = axum::Router::new().route("/v1/messages", axum::routing::post(messages));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_an_anthropic_upstream_echoes_never_gets_through() {
    let base = echoing_anthropic().await;
    let key = "sk-ant-api03-Zq7Xr9WpT2mVt4LbN8cJdK";
    let mut toml = format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\
         [upstreams.evil]\nkind = \"anthropic\"\nbase_url = \"{base}\"\napi_key_env = \"EVIL_KEY\"\n"
    );
    let models = [
        "echo-text",
        "echo-stream",
        "echo-stream-error",
        "echo-error",
    ];
    for m in models {
        toml.push_str(&format!("[models.{m}]\nupstream = \"evil\"\n"));
    }
    let gw = Gw::start_with(&toml, &[("EVIL_KEY", key)], std::time::SystemTime::now());
    let mut seen = 0;
    for m in models {
        for stream in [false, true] {
            let r = ask(&gw, m, "hi", stream).await;
            seen += 1;
            let spelled = streamed_text(&r.data_events());
            let headers = format!("{:?}", r.headers);
            for text in [&r.text, &spelled, &headers] {
                assert!(!text.contains(key), "{m} (stream {stream}): {text}");
                assert!(!text.contains(&key[8..]), "{m} (stream {stream}): {text}");
            }
        }
    }
    assert_eq!(seen, 8);
    let events = gw.events(&[]).await;
    let log = serde_json::to_string(&events).unwrap();
    assert!(!log.contains(&key[8..]), "{log}");
    assert!(log.contains("echo-stream-error"), "the calls were logged");
}
