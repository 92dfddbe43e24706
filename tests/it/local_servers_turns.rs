//! conclave's own turns and errors in front of servers that behave like
//! llama-cpp-python (issue 23, items 2, 3 and 6), over HTTP against the
//! mock server:
//! - with `quirks = ["rejects_null_content"]` (a 500 with a pydantic dump
//!   and a traceback for any `"content": null`), the oracle's second turn
//!   and the judge synthesis's second turn are accepted: the client gets 200;
//! - an upstream 500 whose message is a Python exception and its
//!   traceback reaches the client (passthrough whole and streamed, a stream
//!   error event, `chain_exhausted`, a failed verifier, an oracle whose
//!   consult or base fails)
//!   only as a short, stable message, while the event log keeps the detail;
//!   nor does it reach another model as a tool result;
//! - a synthesis on a server that ignores `tool_choice: "auto"` answers in
//!   text: its guidance is used, and a ranking it wrote as text is read.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use serde_json::{Value, json};

/// What llama-cpp-python puts in a 500's message when the server itself
/// fails: the exception and a Python traceback. (A 500 that is a
/// request-validation error is the client's 400: tests/it/validation_errors.rs.)
const TRACE: &str = "RuntimeError: llama_decode returned -3 (KV cache slot not found)\\n\\n  \
File \\\"/usr/lib/python3/site-packages/llama_cpp/server/app.py\\\", line 123, \
in create_chat_completion\\n    POST /v1/chat/completions";

/// Pieces of [`TRACE`] a client must never read.
const INTERNALS: &[&str] = &[
    "app.py",
    "site-packages",
    "line 123",
    "RuntimeError",
    "llama_decode",
    "KV cache",
];

const RANK_AB: &str = r#"{ name = "rank_responses", arguments = { rankings = [
  { label = "A", rank = 1, score = 9, reason = "complete" },
  { label = "B", rank = 2, score = 4, reason = "vague" },
] } }"#;

fn mock_toml() -> String {
    format!(
        r#"
[upstreams.sim]
kind = "mock"
quirks = ["rejects_null_content"]

[upstreams.sim.models.base]
reply = {{ text = "An easy answer." }}
[[upstreams.sim.models.base.rules]]
when_contains = "the oracle failed"
then = {{ reply = {{ text = "Answered alone after a failure." }} }}
[[upstreams.sim.models.base.rules]]
when_contains = "SAGE-SAYS"
then = {{ reply = {{ text = "Final answer with the expert's help." }} }}
[[upstreams.sim.models.base.rules]]
when_contains = "hard"
then = {{ reply = {{ tool_call = {{ name = "oracle_consult", arguments = {{ question = "Is a spinlock sound here?" }} }} }} }}

[upstreams.sim.models.sage]
reply = {{ text = "SAGE-SAYS: use a mutex." }}

[upstreams.sim.models.trace500]
status = 500
error_message = "{TRACE}"

[upstreams.sim.models.trace-event]
fail = "error_event"
error_message = "{TRACE}"

[upstreams.sim.models.a-panel]
reply = {{ text = "The answer is four." }}

[upstreams.sim.models.b-panel]
reply = {{ text = "Probably 4." }}

# Ranks with the tool only, then writes guidance on its second turn.
[upstreams.sim.models.syn]
reply = {{ tool_call = {RANK_AB} }}
[[upstreams.sim.models.syn.rules]]
when_contains = "Ranking recorded"
then = {{ reply = {{ text = "GUIDANCE-7Q: say four plainly." }} }}

# What a server that ignores tool_choice "auto" (ignores_tool_choice_auto)
# returns: text only. Here the ranking is in it, as models trained on tool
# calls write one when the server does not parse it, then the guidance.
[upstreams.sim.models.syn-text]
reply = {{ text = "<tool_call>{{\"name\": \"rank_responses\", \"arguments\": {{\"rankings\": [{{\"label\": \"B\", \"rank\": 1, \"score\": 8, \"reason\": \"plain\"}}, {{\"label\": \"A\", \"rank\": 2, \"score\": 5, \"reason\": \"hedges\"}}]}}}}</tool_call>\nGUIDANCE-TXT: say four plainly." }}

[upstreams.sim.models.def]
reply = {{ text = "Final: four." }}
"#
    )
}

const MODELS: &[&str] = &[
    "base",
    "sage",
    "trace500",
    "trace-event",
    "a-panel",
    "b-panel",
    "syn",
    "syn-text",
    "def",
];

const ROUTES: &str = r#"
[routes.wise]
strategy = "oracle"
base = "base"
oracle = "sage"

[routes.unwise]
strategy = "oracle"
base = "base"
oracle = "trace500"

[routes.baseless]
strategy = "oracle"
base = "trace500"
oracle = "sage"

[routes.council]
strategy = "judge"
panel = ["a-panel", "b-panel"]
synthesis = "syn"
default = "def"

[routes.council-text]
strategy = "judge"
panel = ["a-panel", "b-panel"]
synthesis = "syn-text"
default = "def"

[routes.fall]
strategy = "chain"
tiers = ["trace500", "trace-event"]

[routes.checked]
strategy = "chain"
tiers = ["def"]
verifier = "trace500"
verify = ["def"]
"#;

fn world() -> (Srv, Srv) {
    let mock = Srv::mock(&mock_toml());
    // The upstream fails on purpose, more often than `eject.after`, and
    // one call per failure (no upstream retries): the count below is of
    // the routes' calls of trace500.
    let toml = front_of(&mock.v1(), MODELS, ROUTES)
        .replacen("[upstreams.up]\n", "[upstreams.up]\neject = false\n", 1)
        .replace(
            "timeout = \"5s\"\n",
            "timeout = \"5s\"\nretries = { max = 0 }\n",
        );
    let gw = Srv::gateway(&toml);
    (mock, gw)
}

/// The answer's text, whole or streamed.
fn answer(r: &Resp, stream: bool) -> String {
    if stream {
        common::world::streamed_text(&r.data_events())
    } else {
        r.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

fn assert_no_internals(what: &str, text: &str) {
    for bit in INTERNALS {
        assert!(
            !text.contains(bit),
            "{what}: {bit:?} reached the client: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conclaves_own_turns_are_accepted_by_a_server_that_rejects_null_content() {
    let (mock, gw) = world();
    for stream in [false, true] {
        // The oracle: the base calls the tool, conclave writes its turn back.
        let mut body = chat("wise", "a hard question about locks");
        body["stream"] = json!(stream);
        let r = post(&gw.base, &body).await;
        assert_eq!(r.status, 200, "oracle stream={stream}: {}", r.text);
        assert!(answer(&r, stream).contains("expert's help"), "{}", r.text);

        // The judge: the synthesis ranks, then writes guidance on a
        // second turn that carries its tool call.
        let mut body = chat("council", "2+2?");
        body["stream"] = json!(stream);
        let r = post(&gw.base, &body).await;
        assert_eq!(r.status, 200, "judge stream={stream}: {}", r.text);
        assert_eq!(answer(&r, stream), "Final: four.", "{}", r.text);
    }
    let base = mock.asked("base").await;
    let syn = mock.asked("syn").await;
    assert_eq!((base.len(), syn.len()), (4, 4), "{base:?}");
    // Every assistant turn conclave wrote has a string content.
    for req in base.iter().chain(&syn) {
        for m in req["messages"].as_array().unwrap() {
            if m["role"] == "assistant" {
                assert_eq!(m["content"], json!(""), "{m}");
            }
        }
    }
    let ranked = gw.events_of(&["judge_ranking"], 2).await;
    assert_eq!(ranked[0]["ranking"][0]["rank"], 1, "{}", ranked[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_traceback_reaches_the_event_log_but_never_the_client() {
    let (mock, gw) = world();

    // Passthrough, whole and streamed: same status, type and code as ever.
    for stream in [false, true] {
        let mut body = chat("trace500", "hi");
        body["stream"] = json!(stream);
        let r = post(&gw.base, &body).await;
        assert_eq!(r.status, 502, "{}", r.text);
        let e = &r.json()["error"];
        assert_eq!(e["type"], "upstream_error", "{}", r.text);
        assert_eq!(e["code"], "upstream_error", "{}", r.text);
        assert_eq!(
            e["message"], "upstream `up` failed (HTTP 500)",
            "{}",
            r.text
        );
        assert_no_internals("passthrough", &r.text);
    }
    // An error event in place of a stream.
    let r = post(&gw.base, &chat_stream("trace-event", "hi")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(
        r.json()["error"]["message"],
        "upstream `up` reported an error in its stream",
        "{}",
        r.text
    );
    assert_no_internals("stream error event", &r.text);

    // An exhausted chain: each attempt's error is the short one.
    let r = post(&gw.base, &chat("fall", "hi")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "chain_exhausted", "{}", r.text);
    assert_eq!(
        e["attempts"][0]["error"], "upstream `up` failed (HTTP 500)",
        "{}",
        r.text
    );
    assert_no_internals("chain_exhausted", &r.text);

    // A verifier that fails: the trail says so, briefly.
    let r = post(&gw.base, &chat("checked", "hi")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(
        r.json()["error"]["attempts"][0]["feedback"],
        "the verifier failed: upstream `up` failed (HTTP 500)",
        "{}",
        r.text
    );
    assert_no_internals("verifier", &r.text);

    // An oracle whose consult fails: the base answers alone, and neither
    // it nor the client hears the traceback.
    let r = post(&gw.base, &chat("unwise", "a hard one")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("Answered alone"), "{}", r.text);
    assert_no_internals("oracle consult", &r.text);
    for req in mock.asked("base").await {
        assert_no_internals("the base's tool result", &req.to_string());
    }
    // An oracle whose base fails.
    let r = post(&gw.base, &chat("baseless", "hi")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(
        r.json()["error"]["message"],
        "upstream `up` failed (HTTP 500)"
    );
    assert_no_internals("oracle base", &r.text);

    // The event log keeps the detail of each failed call.
    let attempts = gw.events_of(&["attempt"], 11).await;
    let failed: Vec<&Value> = attempts
        .iter()
        .filter(|a| a["model"] == "trace500")
        .collect();
    assert_eq!(failed.len(), 6, "{attempts:#?}");
    for a in failed {
        let error = a["error"].as_str().unwrap();
        assert!(error.contains("answered HTTP 500"), "{a}");
        assert!(error.contains("llama_decode returned -3"), "{a}");
        assert!(error.contains("llama_cpp/server/app.py"), "{a}");
    }
    let consult = gw.events_of(&["oracle_consult"], 1).await;
    assert!(
        consult[0]["error"]
            .as_str()
            .unwrap()
            .contains("the oracle failed"),
        "{}",
        consult[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synthesis_that_answers_in_text_still_guides_and_ranks() {
    let (mock, gw) = world();
    for stream in [false, true] {
        let mut body = chat("council-text", "2+2?");
        body["stream"] = json!(stream);
        let r = post(&gw.base, &body).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(answer(&r, stream), "Final: four.", "{}", r.text);
        assert!(!r.text.contains("GUIDANCE"), "{}", r.text);
    }
    // One synthesis call each (no second turn), and the default got the
    // guidance without the ranking's JSON.
    assert_eq!(mock.asked("syn-text").await.len(), 2);
    for def in mock.asked("def").await {
        let text = def["messages"].to_string();
        assert!(text.contains("GUIDANCE-TXT: say four plainly."), "{text}");
        assert!(!text.contains("rank_responses"), "{text}");
        assert!(!text.contains("tool_call"), "{text}");
    }
    let ranked = gw.events_of(&["judge_ranking"], 2).await;
    for ev in ranked {
        let rows = ev["ranking"].as_array().unwrap_or_else(|| panic!("{ev}"));
        assert_eq!(rows.len(), 2, "{ev}");
        assert_eq!(rows[0]["rank"], 1, "{ev}");
        assert_eq!(rows[0]["reason"], "plain", "{ev}");
    }
}
