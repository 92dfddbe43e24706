//! Oracle consults, over HTTP: a gateway in front of the mock server, a
//! base model that calls `oracle_consult` on hard questions, and oracles
//! that answer, fail or cost too much.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use serde_json::{Value, json};

const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.base]
reply = { text = "An easy answer." }

[[upstreams.sim.models.base.rules]]
when_contains = "oracle budget exhausted"
then = { reply = { text = "Answered on my own." } }

[[upstreams.sim.models.base.rules]]
when_contains = "the oracle failed"
then = { reply = { text = "Answered alone after a failure." } }

[[upstreams.sim.models.base.rules]]
when_contains = "twice"
then = { reply = { tool_call = { name = "oracle_consult", arguments = { question = "And again?" } } } }

[[upstreams.sim.models.base.rules]]
when_contains = "SAGE-SAYS"
then = { reply = { text = "Final answer with the expert's help." } }

[[upstreams.sim.models.base.rules]]
when_contains = "hard"
then = { reply = { tool_call = { name = "oracle_consult", arguments = { question = "Is a spinlock sound here?", context_hint = "a kernel driver" } } } }

[upstreams.sim.models.sage]
reply = { text = "SAGE-SAYS: no, use a mutex." }
usage = { prompt_tokens = 100, completion_tokens = 6 }

[upstreams.sim.models.broken-sage]
status = 500
error_message = "the sage is out"
"#;

fn routes(extra: &str) -> String {
    format!(
        "[routes.wise]\nstrategy = \"oracle\"\nbase = \"base\"\noracle = \"sage\"\n{extra}\n\n\
         [routes.unwise]\nstrategy = \"oracle\"\nbase = \"base\"\noracle = \"broken-sage\"\n\n"
    )
}

fn world(extra: &str) -> (Srv, Srv) {
    let mock = Srv::mock(MOCK);
    let gw = Srv::gateway(&front_of(
        &mock.v1(),
        &["base", "sage", "broken-sage"],
        &routes(extra),
    ));
    (mock, gw)
}

/// What the client must never see of a consult.
fn assert_private(text: &str) {
    for secret in ["SAGE-SAYS", "spinlock", "kernel driver", "oracle_consult"] {
        assert!(
            !text.contains(secret),
            "{secret} reached the client: {text}"
        );
    }
}

#[tokio::test]
async fn the_base_consults_once_then_answers_and_the_client_sees_only_that() {
    let (mock, gw) = world("");
    let mut body = chat("wise", "a hard question about locks");
    body["messages"] = json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "first message"},
        {"role": "assistant", "content": "first reply"},
        {"role": "user", "content": "a hard question about locks"},
    ]);
    let r = post(&gw.base, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_private(&r.text);
    let v = r.json();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Final answer with the expert's help."
    );
    assert_eq!(r.header("x-conclave-served-by"), Some("base"));

    // The base was offered the tool, then given the oracle's answer.
    let base = mock.asked("base").await;
    assert_eq!(base.len(), 2);
    let tools = base[0]["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .any(|t| t["function"]["name"] == "oracle_consult")
    );
    let msgs = base[1]["messages"].as_array().unwrap();
    let n = msgs.len();
    assert_eq!(msgs[n - 2]["role"], "assistant");
    let call_id = msgs[n - 2]["tool_calls"][0]["id"].as_str().unwrap();
    assert_eq!(msgs[n - 1]["role"], "tool");
    assert_eq!(msgs[n - 1]["tool_call_id"], call_id);
    assert!(
        msgs[n - 1]["content"]
            .as_str()
            .unwrap()
            .contains("SAGE-SAYS")
    );

    // The oracle got the question, the hint, the last messages and its own settings.
    let sage = mock.asked("sage").await;
    assert_eq!(sage.len(), 1);
    assert_eq!(sage[0]["temperature"], 0.2);
    assert_eq!(sage[0]["max_tokens"], 4096);
    let prompt = sage[0]["messages"][1]["content"].as_str().unwrap();
    for part in [
        "Is a spinlock sound here?",
        "a kernel driver",
        "first reply",
        "a hard question about locks",
    ] {
        assert!(prompt.contains(part), "{part} not in {prompt}");
    }

    // Usage counts all three calls; the consult is an event; roles are set.
    let usage = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        usage > 100,
        "the oracle's 100 input tokens are counted: {usage}"
    );
    let ev = gw.events_of(&["oracle_consult"], 1).await;
    assert_eq!(ev[0]["question"], "Is a spinlock sound here?");
    assert_eq!(ev[0]["context_hint"], "a kernel driver");
    assert!(ev[0]["answer"].as_str().unwrap().starts_with("SAGE-SAYS"));
    assert_eq!(
        (
            ev[0]["calls_total"].as_u64(),
            ev[0]["calls_this_turn"].as_u64()
        ),
        (Some(1), Some(1))
    );
    let attempts = gw.events_of(&["attempt"], 3).await;
    let roles: Vec<&str> = attempts
        .iter()
        .map(|a| a["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles.iter().filter(|r| **r == "base").count(),
        2,
        "{roles:?}"
    );
    assert_eq!(
        roles.iter().filter(|r| **r == "oracle").count(),
        1,
        "{roles:?}"
    );

    // An easy question is answered by the base alone.
    let r = post(&gw.base, &chat("wise", "an easy one")).await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "An easy answer."
    );
    assert_eq!(mock.asked("sage").await.len(), 1);
}

#[tokio::test]
async fn a_streamed_answer_never_shows_the_consult() {
    let (_mock, gw) = world("");
    let r = post(&gw.base, &chat_stream("wise", "a hard one, streamed")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_private(&r.text);
    let text: String = r
        .data_events()
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "Final answer with the expert's help.");
}

#[tokio::test]
async fn a_second_consult_is_refused_by_the_per_request_cap() {
    let (mock, gw) = world("");
    let r = post(&gw.base, &chat("wise", "hard, and ask twice")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_private(&r.text);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "Answered on my own."
    );
    assert_eq!(
        mock.asked("sage").await.len(),
        1,
        "the oracle is asked once"
    );
    let ev = gw.events_of(&["oracle_consult"], 2).await;
    assert!(
        ev[1]["error"]
            .as_str()
            .unwrap()
            .contains("oracle budget exhausted")
    );
    assert_eq!(ev[1]["calls_total"], 1);
}

#[tokio::test]
async fn a_failing_oracle_is_a_tool_error_and_the_base_answers_alone() {
    let (_mock, gw) = world("");
    let r = post(&gw.base, &chat("unwise", "a hard one")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "Answered alone after a failure."
    );
    let ev = gw.events_of(&["oracle_consult"], 1).await;
    assert!(
        ev[0]["error"]
            .as_str()
            .unwrap()
            .contains("the oracle failed")
    );
}

/// The oracle priced by output only ($2000 per Mtok): a consult reserves
/// `oracle_max_tokens = 25` tokens, $0.05, and costs what the mock says
/// it wrote (6 tokens), $0.012.
const PRICED_SAGE: &str = "\n[models.sage]\nupstream = \"up\"\nprice = { input_per_mtok = 0.0, output_per_mtok = 2000.0 }\n";
const CONSULT_USD: f64 = 0.012;

fn priced(mock: &Srv, extra: &str, server: &str) -> String {
    front_of(
        &mock.v1(),
        &["base", "broken-sage"],
        &routes(&format!("oracle_max_tokens = 25\n{extra}")),
    )
    .replace("[server]\n", &format!("[server]\n{server}"))
        + PRICED_SAGE
}

#[tokio::test]
async fn a_sessions_cost_cap_holds_across_requests_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Srv::mock(MOCK);
    // The first consult reserves $0.05 of $0.06 and costs $0.012; a
    // second would reserve $0.05 more: over the cap, so it is refused.
    let toml = priced(
        &mock,
        "max_session_cost_usd = 0.06",
        &format!("state_path = \"{}\"\n", dir.path().join("s.db").display()),
    );
    let in_session = |s: &'static str| [("x-conclave-session", s)];
    let gw = Proc::gateway(&toml);
    let r = post_with(&gw.base, &chat("wise", "hard one"), &in_session("s1")).await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "Final answer with the expert's help."
    );
    let r = post_with(&gw.base, &chat("wise", "hard two"), &in_session("s1")).await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "Answered on my own."
    );
    gw.signal("KILL");
    drop(gw);
    let gw = Proc::gateway(&toml);
    let r = post_with(&gw.base, &chat("wise", "hard three"), &in_session("s1")).await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "Answered on my own."
    );
    let ev = gw.events_of(&["oracle_consult"], 1).await;
    assert!(
        ev[0]["error"]
            .as_str()
            .unwrap()
            .contains("this session has spent $0.0120 of its $0.0600"),
        "{ev:?}"
    );
    // Another session has its own budget.
    let r = post_with(&gw.base, &chat("wise", "hard four"), &in_session("s2")).await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "Final answer with the expert's help."
    );
    assert_eq!(mock.asked("sage").await.len(), 2);
}

/// Ten requests of one session at once: each consult reserves its worst
/// case before it is made, so together they stay within the session's cap.
#[tokio::test]
async fn concurrent_consults_of_one_session_stay_within_its_cap() {
    let mock = Srv::mock(MOCK);
    let cap = 0.1;
    let gw = Srv::gateway(&priced(&mock, &format!("max_session_cost_usd = {cap}"), ""));
    let asks = (0..10).map(|i| {
        let base = gw.base.clone();
        async move {
            let r = post_with(
                &base,
                &chat("wise", &format!("hard question {i}")),
                &[("x-conclave-session", "shared")],
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.text);
        }
    });
    futures::future::join_all(asks).await;
    let consults = mock.asked("sage").await.len();
    let spent = consults as f64 * CONSULT_USD;
    assert!(consults >= 1, "no consult at all");
    assert!(
        spent <= cap + 1e-9,
        "{consults} consults: ${spent} > ${cap}"
    );
    // The events say the same.
    let ev = gw.events_of(&["oracle_consult"], 10).await;
    let charged: f64 = ev.iter().filter_map(|e| e["cost_usd"].as_f64()).sum();
    assert!(
        (charged - spent).abs() < 1e-9,
        "{charged} vs {spent}: {ev:?}"
    );
}

/// A new `x-conclave-session` per request does not reset what a key may
/// spend: its daily cap on the route holds across sessions; another key
/// has its own.
#[tokio::test]
async fn new_sessions_do_not_escape_the_keys_daily_cap() {
    let mock = Srv::mock(MOCK);
    let cap = 0.1;
    let keys = "[[keys]]\nname = \"one\"\nkey_env = \"K1\"\n\n[[keys]]\nname = \"two\"\nkey_env = \"K2\"\n\n";
    let toml = priced(&mock, &format!("max_key_daily_cost_usd = {cap}"), "")
        .replace("[upstreams.up]", &format!("{keys}[upstreams.up]"));
    let gw = Srv::gateway_env(&toml, &[("K1", "k-one"), ("K2", "k-two")]);
    for i in 0..10 {
        let session = format!("fresh-{i}");
        let r = post_with(
            &gw.base,
            &chat("wise", &format!("hard question {i}")),
            &[
                ("authorization", "Bearer k-one"),
                ("x-conclave-session", session.as_str()),
            ],
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let consults = mock.asked("sage").await.len();
    let spent = consults as f64 * CONSULT_USD;
    assert!(consults >= 1, "no consult at all");
    assert!(
        spent <= cap + 1e-9,
        "{consults} consults: ${spent} > ${cap}"
    );
    let ev = gw.events_of(&["oracle_consult"], 10).await;
    assert!(
        ev.iter().any(|e| e["error"]
            .as_str()
            .is_some_and(|e| e.contains("this key has spent"))),
        "{ev:?}"
    );
    // The other key still gets its consult.
    let r = post_with(
        &gw.base,
        &chat("wise", "hard one"),
        &[("authorization", "Bearer k-two")],
    )
    .await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "Final answer with the expert's help."
    );
    assert_eq!(mock.asked("sage").await.len(), consults + 1);
}

/// A base that calls a client tool and the oracle in one turn: the client
/// gets its tool call, the oracle is not asked.
#[tokio::test]
async fn client_tool_calls_beside_a_consult_go_to_the_client_alone() {
    use axum::Json;
    use axum::response::IntoResponse;
    use axum::routing::post as route_post;
    let calls = json!([
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "oracle_consult", "arguments": "{\"question\": \"spinlock?\"}"}},
        {"index": 1, "id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}
    ]);
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        route_post(move |Json(req): Json<Value>| {
            let calls = calls.clone();
            async move {
                let head = json!({"id": "chatcmpl-both", "created": 1, "model": "both"});
                if req["stream"] == true {
                    let chunk = |choice: Value| {
                        let mut c = head.clone();
                        c["object"] = json!("chat.completion.chunk");
                        c["choices"] = json!([choice]);
                        format!("data: {c}\n\n")
                    };
                    let body = chunk(
                        json!({"index": 0, "delta": {"role": "assistant", "tool_calls": calls}}),
                    ) + &chunk(
                        json!({"index": 0, "delta": {}, "finish_reason": "tool_calls"}),
                    ) + "data: [DONE]\n\n";
                    return ([("content-type", "text/event-stream")], body).into_response();
                }
                let mut whole = head;
                whole["object"] = json!("chat.completion");
                whole["choices"] = json!([{"index": 0, "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": null, "tool_calls": calls}}]);
                whole["usage"] =
                    json!({"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20});
                Json(whole).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let both = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mock = Srv::mock(MOCK);
    let toml = front_of(&mock.v1(), &["sage"], "")
        + &format!(
            "[upstreams.two]\nkind = \"openai\"\nbase_url = \"{both}\"\n\n[models.both]\nupstream = \"two\"\n\n\
             [routes.mixed]\nstrategy = \"oracle\"\nbase = \"both\"\noracle = \"sage\"\n"
        );
    let gw = Srv::gateway(&toml);
    let mut body = chat("mixed", "weather and a hard question");
    body["tools"] = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    for stream in [false, true] {
        body["stream"] = json!(stream);
        let r = post(&gw.base, &body).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_private(&r.text);
        assert!(
            r.text.contains("get_weather") && r.text.contains("call_2"),
            "{}",
            r.text
        );
    }
    assert!(
        mock.asked("sage").await.is_empty(),
        "the oracle was paid for nothing"
    );
    let ev = gw.events_of(&["oracle_consult"], 2).await;
    assert!(ev.iter().all(|e| e["dropped"] == true));
}
