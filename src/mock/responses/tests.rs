use std::sync::Arc;

use futures::StreamExt;
use indexmap::IndexMap;
use serde_json::{Value, json};

use crate::mock::{Behavior, Quirks, Simulator, SwapSim};
use crate::wire::Endpoint;

fn sim(responses: bool, models: IndexMap<String, Behavior>) -> Arc<Simulator> {
    let s = Simulator::new(models, SwapSim::default(), Quirks::default(), true);
    Arc::new(s.with_responses(responses))
}

async fn ask(sim: &Arc<Simulator>, body: Value) -> (u16, String) {
    let r = sim
        .respond(Endpoint::RESPONSES, body.to_string().as_bytes(), None, None)
        .await;
    let mut out = Vec::new();
    let mut b = r.body;
    while let Some(Ok(part)) = b.next().await {
        out.extend_from_slice(&part);
    }
    (r.status, String::from_utf8_lossy(&out).into_owned())
}

/// (event line, data) of each SSE event.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (ev, data) = e.split_once('\n').unwrap_or_default();
            let kind = ev.strip_prefix("event: ").unwrap_or_default().to_owned();
            let data = data.strip_prefix("data: ").unwrap_or_default();
            (kind, serde_json::from_str(data).unwrap_or_default())
        })
        .collect()
}

#[tokio::test]
async fn a_chat_only_mock_says_404() {
    let (status, body) = ask(
        &sim(false, IndexMap::new()),
        json!({"model": "m", "input": "hi"}),
    )
    .await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn a_whole_response_echoes_the_request_s_settings() {
    let tools =
        json!([{"type": "web_search"}, {"type": "function", "name": "f", "parameters": {}}]);
    let (status, body) = ask(
        &sim(true, IndexMap::new()),
        json!({"model": "m", "instructions": "be brief",
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello there"}]}],
            "tools": tools, "include": ["reasoning.encrypted_content"], "store": false}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["tools"], tools);
    assert_eq!(v["instructions"], "be brief");
    assert_eq!(v["store"], false);
    assert_eq!(v["output"][0]["type"], "reasoning");
    assert!(v["output"][0]["encrypted_content"].is_string());
    assert_eq!(v["output"][1]["content"][0]["text"], "hello there");
    assert_eq!(v["usage"]["output_tokens"], 2);
    assert!(v["usage"]["input_tokens"].as_u64().unwrap_or_default() > 0);
}

#[tokio::test]
async fn a_stream_is_the_event_sequence_with_sequence_numbers() {
    let (status, body) = ask(
        &sim(true, IndexMap::new()),
        json!({"model": "m", "input": "a b c", "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    let evs = events(&body);
    let kinds: Vec<&str> = evs.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, (kind, data)) in evs.iter().enumerate() {
        assert_eq!(data["type"], kind.as_str());
        assert_eq!(data["sequence_number"], i);
    }
    let last = &evs[10].1["response"];
    assert_eq!(last["output"][0]["content"][0]["text"], "a b c");
    assert_eq!(last["usage"]["output_tokens"], 3);
}

#[tokio::test]
async fn tool_calls_cuts_and_failures_have_their_events() {
    let models: IndexMap<String, Behavior> = toml::from_str(
        r#"
        [tool]
        reply = { tool_call = { name = "get_weather", arguments = { city = "Paris" } } }
        [bad]
        fail = "error_event"
        error_message = "overloaded"
        "#,
    )
    .unwrap_or_default();
    let s = sim(true, models);
    let (_, body) = ask(&s, json!({"model": "tool", "input": "x", "stream": true})).await;
    let evs = events(&body);
    assert!(
        evs.iter()
            .any(|e| e.0 == "response.function_call_arguments.delta")
    );
    let done = &evs[evs.len() - 1].1["response"]["output"][0];
    assert_eq!(done["type"], "function_call");
    assert_eq!(done["name"], "get_weather");
    assert_eq!(done["arguments"], r#"{"city":"Paris"}"#);

    let (_, body) = ask(&s, json!({"model": "bad", "input": "x", "stream": true})).await;
    let evs = events(&body);
    let last = &evs[evs.len() - 1];
    assert_eq!(last.0, "response.failed");
    assert_eq!(last.1["response"]["error"]["message"], "overloaded");

    let (_, body) = ask(
        &s,
        json!({"model": "m", "input": "one two three", "max_output_tokens": 2}),
    )
    .await;
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(v["status"], "incomplete");
    assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(v["output"][0]["content"][0]["text"], "one two");
}
