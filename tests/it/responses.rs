//! `POST /v1/responses` on every route and strategy, in-process with
//! paused time: the same answers as chat completions, in the Responses
//! API's shape, whole and streamed; tools, dropped built-in tools, stored
//! responses and their continuation, errors, keys and the native path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use serde_json::{Value, json};

/// One SSE event: its `event:` name and its JSON data.
#[derive(Debug)]
struct Event {
    name: String,
    data: Value,
}

fn events(text: &str) -> Vec<Event> {
    text.split("\n\n")
        .filter_map(|ev| {
            let name = ev.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            Some(Event {
                name: name.to_owned(),
                data: serde_json::from_str(&data.join("\n")).unwrap(),
            })
        })
        .collect()
}

/// Checks a Responses event stream's grammar and returns its final
/// response object: created and in_progress first, one terminal event
/// last, strictly increasing sequence numbers, every event's `type` its
/// name, the deltas adding up to the final text and arguments.
fn check_stream(text: &str) -> Value {
    let evs = events(text);
    assert!(evs.len() >= 3, "{text}");
    assert_eq!(evs[0].name, "response.created", "{text}");
    assert_eq!(evs[1].name, "response.in_progress", "{text}");
    let mut seq = -1i64;
    let mut deltas = String::new();
    let mut args = String::new();
    for e in &evs {
        assert_eq!(e.data["type"], e.name.as_str(), "{e:?}");
        let n = e.data["sequence_number"].as_i64().unwrap();
        assert!(n > seq, "sequence_number {n} after {seq}: {text}");
        seq = n;
        match e.name.as_str() {
            "response.output_text.delta" => deltas.push_str(e.data["delta"].as_str().unwrap()),
            "response.function_call_arguments.delta" => {
                args.push_str(e.data["delta"].as_str().unwrap())
            }
            _ => {}
        }
    }
    let last = evs.last().unwrap();
    assert!(
        [
            "response.completed",
            "response.incomplete",
            "response.failed"
        ]
        .contains(&last.name.as_str()),
        "{text}"
    );
    let done = last.data["response"].clone();
    assert_eq!(said(&done), deltas, "{done}");
    let calls: String = done["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call")
        .map(|i| i["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(calls, args);
    done
}

/// The text of a response's messages (what the SDKs' `output_text` is;
/// OpenAI's own bodies do not carry it, conclave's do).
fn said(v: &Value) -> String {
    let text: String = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().unwrap().clone())
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect();
    if let Some(t) = v.get("output_text") {
        assert_eq!(t.as_str().unwrap(), text, "{v}");
    }
    text
}

/// The text of a chat completion's first choice.
fn chat_text(r: &Resp) -> String {
    r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(start_paused = true)]
async fn every_strategy_answers_the_responses_api_as_it_answers_chat() {
    let gw = inproc::Gw::demo();
    for route in ["fast", "review", "failover", "council", "hedge", "wise"] {
        let input = format!("hello from {route}");
        let chat = gw.chat(&common::chat(route, &input)).await;
        assert_eq!(chat.status, 200, "{route}: {}", chat.text);
        let body = json!({"model": route, "input": input, "store": false});
        let r = gw.post_with("/v1/responses", &body, &[]).await;
        assert_eq!(r.status, 200, "{route}: {}", r.text);
        assert_eq!(r.header("x-conclave-route"), Some(route));
        let v = r.json();
        assert!(v["id"].as_str().unwrap().starts_with("resp_"), "{v}");
        assert_eq!(v["object"], "response");
        assert_eq!(v["status"], "completed", "{route}: {v}");
        assert_eq!(v["output_text"], chat_text(&chat), "{route}: {v}");
        let msg = &v["output"].as_array().unwrap().last().unwrap();
        assert_eq!(msg["type"], "message");
        assert_eq!(msg["content"][0]["type"], "output_text");
        assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0, "{v}");
        assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0, "{v}");

        let body = json!({"model": route, "input": input, "stream": true, "store": false});
        let r = gw.post_with("/v1/responses", &body, &[]).await;
        assert_eq!(r.status, 200, "{route}: {}", r.text);
        assert_eq!(r.header("content-type"), Some("text/event-stream"));
        let done = check_stream(&r.text);
        assert_eq!(done["status"], "completed", "{route}: {done}");
        assert_eq!(done["output_text"], chat_text(&chat), "{route}");
        assert!(done["usage"]["output_tokens"].as_u64().unwrap() > 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_race_and_an_arena_answer_too() {
    let gw = inproc::Gw::demo();
    let confirm = [("x-conclave-confirm", "yes")];
    for stream in [false, true] {
        let body =
            json!({"model": "best-of-3", "input": "hi", "stream": stream, "max_output_tokens": 64});
        let r = gw.post_with("/v1/responses", &body, &confirm).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let v = if stream {
            check_stream(&r.text)
        } else {
            r.json()
        };
        assert_eq!(v["status"], "completed", "{v}");
        assert!(!v["output_text"].as_str().unwrap().is_empty());
    }
    // The arena's two blind answers are two messages; its id is the body's
    // and the header's, as in chat.
    for stream in [false, true] {
        let body = json!({"model": "ab", "input": "hi", "stream": stream});
        let r = gw.post_with("/v1/responses", &body, &[]).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let id = r.header("x-conclave-arena-id").map(str::to_owned);
        let v = if stream {
            check_stream(&r.text)
        } else {
            r.json()
        };
        let messages = v["output"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["type"] == "message")
            .count();
        assert_eq!(messages, 2, "{v}");
        if !stream {
            assert_eq!(v["arena_id"].as_str(), id.as_deref(), "{v}");
        }
    }
}

const TOOLS: &str = r#"
[server]
event_log = "{dir}/events.jsonl"

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.agent]
reply = { tool_call = { name = "get_weather", arguments = { city = "Paris" } } }
rules = [{ when_contains = "sunny", then = { reply = { text = "It is sunny in Paris." } } }]

[models.agent]
upstream = "sim"
"#;

/// A function tool round trip: the call comes back as a `function_call`
/// item, its output goes back as `function_call_output`, and the model
/// sees both as chat messages.
#[tokio::test(start_paused = true)]
async fn a_function_tool_round_trip() {
    let gw = inproc::Gw::start(TOOLS);
    let tools = json!([
        {"type": "function", "name": "get_weather", "description": "Weather",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"type": "web_search"},
        {"type": "local_shell"},
    ]);
    for stream in [false, true] {
        let body = json!({"model": "agent", "input": "weather in Paris?", "tools": tools, "stream": stream, "store": false});
        let r = gw.post_with("/v1/responses", &body, &[]).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let dropped = r.header("x-conclave-dropped-tools").unwrap_or_default();
        assert!(
            dropped.contains("web_search") && dropped.contains("local_shell"),
            "{dropped}"
        );
        let v = if stream {
            check_stream(&r.text)
        } else {
            r.json()
        };
        let call = v["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "function_call")
            .unwrap_or_else(|| panic!("no call in {v}"))
            .clone();
        assert_eq!(call["name"], "get_weather");
        assert_eq!(
            serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
            json!({"city": "Paris"})
        );
        let call_id = call["call_id"].as_str().unwrap();
        let body = json!({"model": "agent", "tools": tools, "stream": stream, "store": false, "input": [
            {"role": "user", "content": "weather in Paris?"},
            call,
            {"type": "function_call_output", "call_id": call_id, "output": "sunny, 21C"},
        ]});
        let r = gw.post_with("/v1/responses", &body, &[]).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let v = if stream {
            check_stream(&r.text)
        } else {
            r.json()
        };
        assert_eq!(v["output_text"], "It is sunny in Paris.", "{v}");
    }
    // Upstream, the tools were chat tools (built-ins dropped) and the
    // round trip was an assistant tool call and a tool message.
    let asked = gw.asked("sim", "agent");
    let last = asked.last().unwrap();
    assert_eq!(last["tools"].as_array().unwrap().len(), 1, "{last}");
    assert_eq!(last["tools"][0]["function"]["name"], "get_weather");
    let msgs = last["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["role"], "assistant", "{last}");
    assert_eq!(msgs[1]["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(msgs[2]["role"], "tool");
    assert_eq!(msgs[2]["content"], "sunny, 21C");
    let dropped = gw.events(&["tools_dropped"]).await;
    assert_eq!(dropped.len(), 4, "{dropped:?}");
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

[[keys]]
name = "bob"
key_env = "BOB"
"#;

/// A stored response is its key's: retrieved, continued, listed and
/// deleted by it, and a 404 for anyone else.
#[tokio::test(start_paused = true)]
async fn stored_responses_are_continued_and_kept_per_key() {
    let env = [
        ("ALICE", "sk-alice-0123456789"),
        ("BOB", "sk-bob-0123456789"),
    ];
    let gw = inproc::Gw::start_with(KEYS, &env, std::time::UNIX_EPOCH + inproc::START);
    let alice = [("authorization", "Bearer sk-alice-0123456789")];
    let bob = [("authorization", "Bearer sk-bob-0123456789")];
    let body = json!({"model": "echo", "input": "my name is Ada", "instructions": "Be brief."});
    let first = gw.post_with("/v1/responses", &body, &alice).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let first = first.json();
    let id = first["id"].as_str().unwrap();

    let got = gw.get_with(&format!("/v1/responses/{id}"), &alice).await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.json()["output_text"], first["output_text"]);
    let theirs = gw.get_with(&format!("/v1/responses/{id}"), &bob).await;
    assert_eq!(theirs.status, 404, "{}", theirs.text);

    // Continued: the model sees the first turn, its answer, then this one.
    for stream in [false, true] {
        let body = json!({"model": "echo", "input": "what is my name?", "previous_response_id": id, "stream": stream});
        let r = gw.post_with("/v1/responses", &body, &alice).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let asked = gw.asked("sim", "echo");
        let msgs = asked.last().unwrap()["messages"]
            .as_array()
            .unwrap()
            .clone();
        let said: Vec<(&str, &str)> = msgs
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap(),
                    m["content"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            said,
            vec![
                ("user", "my name is Ada"),
                ("assistant", "my name is Ada"),
                ("user", "what is my name?"),
            ],
            "{msgs:?}"
        );
    }
    let r = gw
        .post_with(
            "/v1/responses",
            &json!({"model": "echo", "input": "x", "previous_response_id": id}),
            &bob,
        )
        .await;
    assert!(r.status == 400 || r.status == 404, "{}", r.text);
    assert_eq!(r.json()["error"]["param"], "previous_response_id");

    let items = gw
        .get_with(&format!("/v1/responses/{id}/input_items"), &alice)
        .await;
    assert_eq!(items.status, 200, "{}", items.text);
    assert_eq!(
        items.json()["data"][0]["content"][0]["text"],
        "my name is Ada"
    );

    let del = gw
        .send(
            axum::http::Request::delete(format!("/v1/responses/{id}"))
                .header("authorization", "Bearer sk-alice-0123456789")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(del.status, 200, "{}", del.text);
    assert_eq!(del.json()["deleted"], true);
    assert_eq!(
        gw.get_with(&format!("/v1/responses/{id}"), &alice)
            .await
            .status,
        404
    );

    // `store: false` keeps nothing.
    let body = json!({"model": "echo", "input": "forget me", "store": false});
    let r = gw.post_with("/v1/responses", &body, &alice).await.json();
    let gone = gw
        .get_with(
            &format!("/v1/responses/{}", r["id"].as_str().unwrap()),
            &alice,
        )
        .await;
    assert_eq!(gone.status, 404);
}

#[tokio::test(start_paused = true)]
async fn what_cannot_be_honoured_is_a_400_naming_the_field() {
    let gw = inproc::Gw::demo();
    let cases = [
        (
            json!({"model": "fast", "input": "x", "background": true}),
            "background",
        ),
        (
            json!({"model": "fast", "input": "x", "frobnicate": 1}),
            "frobnicate",
        ),
        (
            json!({"model": "fast", "input": "x", "max_output_tokens": -1}),
            "max_output_tokens",
        ),
        (json!({"model": "fast"}), "input"),
        (json!({"model": "", "input": "x"}), "model"),
        (
            json!({"model": "fast", "input": [{"type": "item_reference", "id": "msg_1"}]}),
            "input[0]",
        ),
    ];
    for (body, param) in cases {
        let r = gw.post_with("/v1/responses", &body, &[]).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        let e = &r.json()["error"];
        assert_eq!(e["type"], "invalid_request_error", "{e}");
        assert!(
            e["param"].as_str().unwrap_or_default().starts_with(param),
            "{body}: {e}"
        );
    }
    let r = gw
        .post_with(
            "/v1/responses",
            &json!({"model": "nope", "input": "x"}),
            &[],
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
}

const NATIVE: &str = r#"
[server]
event_log = "{dir}/events.jsonl"

[upstreams.oai]
kind = "mock"
responses = true

[upstreams.oai.models.gpt-sim]
reply = { text = "native answer" }

[upstreams.chat]
kind = "mock"

[upstreams.chat.models.local-sim]
reply = { text = "translated answer" }

[models.gpt]
upstream = "oai"
model = "gpt-sim"

[models.local]
upstream = "chat"
model = "local-sim"

[routes.smart]
strategy = "passthrough"
model = "gpt"

[routes.review]
strategy = "chain"
tiers = ["local", "gpt"]
"#;

/// A passthrough route to an upstream that speaks the Responses API is
/// forwarded verbatim (built-in tools, reasoning items and `include`
/// reach it, and it echoes them); its events keep their names. A
/// strategy route in front of the same model translates instead.
#[tokio::test(start_paused = true)]
async fn a_native_upstream_gets_the_body_verbatim() {
    let gw = inproc::Gw::start(NATIVE);
    let body = |stream: bool| {
        json!({"model": "smart", "stream": stream, "store": false,
            "include": ["reasoning.encrypted_content"],
            "input": [
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
            "tools": [{"type": "web_search"}, {"type": "custom", "name": "apply_patch"}],
            "background": false})
    };
    let r = gw.post_with("/v1/responses", &body(false), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.header("x-conclave-dropped-tools").is_none());
    let v = r.json();
    assert_eq!(said(&v), "native answer", "{v}");
    assert_eq!(v["tools"][0]["type"], "web_search", "{v}");
    assert_eq!(v["model"], "gpt-sim");

    let r = gw.post_with("/v1/responses", &body(true), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let done = check_stream(&r.text);
    assert_eq!(said(&done), "native answer");
    assert!(r.text.ends_with("\n\n"), "{}", r.text);
    assert!(!r.text.contains("[DONE]"), "{}", r.text);

    // The upstream saw the client's body, model renamed.
    let asked = gw.asked("oai", "gpt-sim");
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[0]["input"][0]["encrypted_content"], "opaque");
    assert_eq!(asked[0]["include"][0], "reasoning.encrypted_content");

    // Usage reached the request's accounting, as for chat.
    let m = gw.metrics();
    let tokens = samples(&m, "conclave_tokens_total", &[("model", "gpt")]);
    assert!(tokens.iter().sum::<f64>() > 0.0, "{m}");

    // A chain in front of it translates (built-in tools dropped, named).
    let mut chained = body(false);
    chained["model"] = json!("review");
    chained["input"] = json!("hi");
    chained.as_object_mut().unwrap().remove("background");
    let r = gw.post_with("/v1/responses", &chained, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["output_text"], "translated answer");
    assert_eq!(
        r.header("x-conclave-dropped-tools"),
        Some("web_search, custom")
    );
}
