//! `strategy = "chain"`: what each tier and the verifier receive
//! (feedback on the last user message, never the client's to see).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::world::*;
use common::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// What each tier and the verifier receive.
// ---------------------------------------------------------------------------

fn last_content(req: &Value) -> Value {
    req["body"]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn feedback_reaches_the_next_tier_and_never_the_client() {
    let w = world(
        &(r(&["l-bad", "l-meh", "c-good"], Some("v"), "")
            + &route("plain", &["l-good"], Some("v-nojson"), "")
            + &route("errfirst", &["l-down", "c-good"], Some("v"), "")
            + &route("unreadable", &["l-bad", "c-good"], Some("v-garbage"), "")
            + &route("vdown", &["l-bad", "c-good"], Some("v-down"), "")
            + &route("caps", &["l-bad", "c-good"], Some("v-caps"), "")
            + &route(
                "hasty",
                &["l-good", "c-good"],
                Some("v-slow"),
                "verifier_timeout = \"100ms\"",
            )),
    )
    .await;
    let original = json!([
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Name a colour."}
    ]);
    for stream in [false, true] {
        w.clear().await;
        let body = json!({"model": "r", "messages": original, "stream": stream});
        let resp = w.ask(&body).await;
        assert_eq!(resp.status, 200, "{}", resp.text);
        assert_eq!(resp.header("x-conclave-served-by"), Some("c-good"));
        assert!(!resp.text.contains("rejected"), "{}", resp.text);
        assert!(!resp.text.contains(NEEDS), "{}", resp.text);
        assert!(!resp.text.contains(VAGUE), "{}", resp.text);

        let got = w.received().await;
        let models: Vec<&str> = got.iter().map(|g| g["model"].as_str().unwrap()).collect();
        assert_eq!(models, ["l-bad", "v", "l-meh", "v", "c-good"]);

        // The first tier gets the conversation unchanged.
        assert_eq!(got[0]["body"]["messages"], original);
        assert_eq!(got[0]["body"]["stream"], json!(stream));
        // Later tiers: the notes so far, on the last user message.
        let note1 = format!("A previous attempt was rejected: {NEEDS}");
        let note2 = format!("A previous attempt was rejected: {VAGUE}");
        assert_eq!(
            got[2]["body"]["messages"],
            json!([
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": format!("Name a colour.\n\n{note1}")}
            ])
        );
        assert_eq!(
            got[4]["body"]["messages"],
            json!([
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": format!("Name a colour.\n\n{note1}\n{note2}")}
            ])
        );
        // The verifier: the original conversation (system prompt included,
        // no notes), the candidate, JSON mode, streamed from the server
        // (so a verifier past its timeout stops generating).
        for (i, candidate) in [
            (1, "BAD draft from l-bad"),
            (3, "BAD draft, take two, from l-meh"),
        ] {
            let vb = &got[i]["body"];
            assert_eq!(vb["response_format"], json!({"type": "json_object"}));
            assert_eq!(vb["max_tokens"], 256, "the verifier call is capped");
            assert_eq!(vb["stream"], true, "{vb}");
            let msgs = vb["messages"].as_array().unwrap();
            assert_eq!(msgs[0]["role"], "system");
            let text = msgs
                .iter()
                .map(|m| m["content"].as_str().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n");
            assert!(text.contains("Answer in French."), "{text}");
            assert!(text.contains("Name a colour."), "{text}");
            assert!(text.contains(candidate), "{text}");
            assert!(!text.contains("previous attempt"), "{text}");
        }
    }

    // A tier that failed leaves no note: there is no feedback to pass on.
    w.clear().await;
    let body = json!({"model": "errfirst", "messages": original});
    let resp = w.ask(&body).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    let got = w.received().await;
    assert_eq!(got[1]["model"], "c-good");
    assert_eq!(got[1]["body"]["messages"], original);

    // json_mode = false: no response_format for the verifier.
    // (Below.) First: a verifier that fails or cannot be read leaves no
    // note either: conclave's own words never reach a model.
    for route in ["unreadable", "vdown"] {
        w.clear().await;
        let resp = w.ask(&json!({"model": route, "messages": original})).await;
        assert_eq!(resp.status, 200, "{}", resp.text);
        assert_eq!(resp.header("x-conclave-served-by"), Some("c-good"));
        let got = w.received().await;
        assert_eq!(got[2]["model"], "c-good", "{got:?}");
        assert_eq!(got[2]["body"]["messages"], original, "{route}");
    }

    // A verdict in another case and wording is still read.
    w.clear().await;
    let resp = w.ask(&chat("caps", "hi")).await;
    assert_eq!(
        resp.header("x-conclave-served-by"),
        Some("l-bad"),
        "{}",
        resp.text
    );

    // A verifier slower than verifier_timeout counts as failed: escalate.
    let resp = w.ask(&chat("hasty", "hi")).await;
    assert_eq!(
        resp.header("x-conclave-served-by"),
        Some("c-good"),
        "{}",
        resp.text
    );

    w.clear().await;
    let resp = w.ask(&chat("plain", "hi")).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    let got = w.received().await;
    assert_eq!(got[1]["model"], "v");
    assert!(
        got[1]["body"].get("response_format").is_none(),
        "{}",
        got[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn feedback_after_a_tool_message_or_content_parts() {
    let w = world(&r(&["l-bad", "c-good"], Some("v"), "")).await;
    let note = format!("A previous attempt was rejected: {NEEDS}");

    // The last message is a tool result: the note is a new user message.
    let convo = json!([
        {"role": "user", "content": "What is 6*7?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\":\"6*7\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"}
    ]);
    let resp = w.ask(&json!({"model": "r", "messages": convo})).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    let got = w.received().await;
    assert_eq!(got[0]["body"]["messages"], convo);
    let verifier_text = got[1]["body"]["messages"][1]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(verifier_text.contains("calc"), "{verifier_text}");
    assert!(verifier_text.contains("42"), "{verifier_text}");
    let mut want = convo.as_array().unwrap().clone();
    want.push(json!({"role": "user", "content": note}));
    assert_eq!(got[2]["body"]["messages"], Value::Array(want));

    // Content parts: the note is one more text part.
    w.clear().await;
    let parts = json!([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]);
    let resp = w.ask(&json!({"model": "r", "messages": parts})).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    let got = w.received().await;
    assert_eq!(
        last_content(&got[2]),
        json!([{"type": "text", "text": "Hi"}, {"type": "text", "text": note}])
    );
}
