//! Passthrough through a real OpenAI client: what the upstream sends is
//! what the client gets, fields conclave has never heard of included.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
};
use common::*;
use futures::StreamExt;
use serde_json::{Value, json};

/// A mock whose answers are byte-for-byte deterministic (fixed id and
/// created) and carry fields no OpenAI type knows.
const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.upstream-echo]
reply = { text = "You said: {last_user}" }
extra = { id = "chatcmpl-fixed", created = 1700000000, x_vendor = { shard = 7, tags = ["a", "b"] } }

[upstreams.sim.models.final-usage]
reply = { text = "one two three" }
usage_in_final_chunk = true
usage = { prompt_tokens = 11, completion_tokens = 3 }
extra = { id = "chatcmpl-fixed", created = 1700000000 }
"#;

fn gateway_for(mock: &Srv) -> Srv {
    Srv::gateway(&format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"

[upstreams.up]
kind = "openai"
base_url = "{}"

[models.echo]
upstream = "up"
model = "upstream-echo"

[models.final-usage]
upstream = "up"

[routes.fast]
strategy = "passthrough"
model = "echo"
"#,
        mock.v1()
    ))
}

fn openai(base: &str) -> Client<OpenAIConfig> {
    Client::with_config(
        OpenAIConfig::new()
            .with_api_base(base)
            .with_api_key("unused"),
    )
}

fn request(model: &str, text: &str) -> async_openai::types::chat::CreateChatCompletionRequest {
    CreateChatCompletionRequestArgs::default()
        .model(model)
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content(text)
            .build()
            .unwrap()
            .into()])
        .build()
        .unwrap()
}

#[tokio::test]
async fn async_openai_whole_answer_is_what_the_upstream_sent() {
    let mock = Srv::mock(MOCK);
    let gw = gateway_for(&mock);

    let through = openai(&gw.v1())
        .chat()
        .create(request("fast", "hello"))
        .await
        .unwrap();
    let direct = openai(&mock.v1())
        .chat()
        .create(request("upstream-echo", "hello"))
        .await
        .unwrap();
    assert_eq!(through, direct);
    assert_eq!(
        through.choices[0].message.content.as_deref(),
        Some("You said: hello")
    );

    // Byte for byte, including the vendor field no client type knows.
    let raw_gw = post(&gw.base, &chat("fast", "hello")).await;
    let raw_direct = post(&mock.base, &chat("upstream-echo", "hello")).await;
    assert_eq!(raw_gw.status, 200);
    assert_eq!(raw_gw.text, raw_direct.text);
    assert_eq!(raw_gw.json()["x_vendor"]["tags"][1], "b");
    assert_eq!(raw_gw.header("x-conclave-route"), Some("fast"));
    assert_eq!(raw_gw.header("x-conclave-strategy"), Some("passthrough"));
    assert_eq!(raw_gw.header("x-conclave-served-by"), Some("echo"));
    assert_eq!(raw_gw.header("x-conclave-attempts"), Some("1"));
    let id = raw_gw.header("x-request-id").unwrap_or_default();
    assert!(uuid::Uuid::try_parse(id).is_ok(), "{id}");
}

/// Upstreams get a UUID as `x-request-id` (llama-cpp-python rejects any
/// other); the client keeps its own id in the response.
#[tokio::test]
async fn the_upstream_request_id_is_always_a_uuid() {
    let mock = Srv::mock(MOCK);
    let gw = gateway_for(&mock);
    let sent = |r: &Value| r["request_id"].as_str().unwrap_or_default().to_owned();
    let own = post_with(
        &gw.base,
        &chat("fast", "a"),
        &[("x-request-id", "my-trace-42")],
    )
    .await;
    assert_eq!(own.header("x-request-id"), Some("my-trace-42"));
    let uuid = "0b3c7a52-8f0e-4a8e-9a57-4f1f3c1d2e10";
    let same = post_with(&gw.base, &chat("fast", "b"), &[("x-request-id", uuid)]).await;
    assert_eq!(same.header("x-request-id"), Some(uuid));
    let got = mock.received().await;
    let ids: Vec<String> = got.iter().map(sent).collect();
    assert_eq!(ids.len(), 2, "{got:?}");
    assert!(
        uuid::Uuid::try_parse(&ids[0]).is_ok() && ids[0] != "my-trace-42",
        "{ids:?}"
    );
    assert_eq!(ids[1], uuid);
}

#[tokio::test]
async fn async_openai_stream_is_what_the_upstream_sent() {
    let mock = Srv::mock(MOCK);
    let gw = gateway_for(&mock);

    let collect = |base: String, model: &'static str| async move {
        let mut s = openai(&base)
            .chat()
            .create_stream(request(model, "stream me please"))
            .await
            .unwrap();
        let mut chunks = Vec::new();
        while let Some(c) = s.next().await {
            chunks.push(c.unwrap());
        }
        chunks
    };
    let through = collect(gw.v1(), "fast").await;
    let direct = collect(mock.v1(), "upstream-echo").await;
    assert_eq!(through, direct);
    let text: String = through
        .iter()
        .filter_map(|c| c.choices.first()?.delta.content.clone())
        .collect();
    assert_eq!(text, "You said: stream me please");

    // Raw events: identical, one for one, and no usage the client did not ask for.
    let raw_gw = post(&gw.base, &chat_stream("fast", "abc def")).await;
    let raw_direct = post(&mock.base, &chat_stream("upstream-echo", "abc def")).await;
    assert_eq!(raw_gw.header("content-type"), Some("text/event-stream"));
    assert_eq!(raw_gw.data_events(), raw_direct.data_events());
    assert_eq!(
        raw_gw.data_events().last().map(String::as_str),
        Some("[DONE]")
    );
    assert!(!raw_gw.text.contains("usage"), "{}", raw_gw.text);
}

#[tokio::test]
async fn usage_is_relayed_when_asked_and_counted_when_not() {
    let mock = Srv::mock(MOCK);
    let gw = gateway_for(&mock);

    // Asked for: the client gets exactly the upstream's usage chunk.
    let mut body = chat_stream("fast", "count me");
    body["stream_options"] = json!({"include_usage": true});
    let through = post(&gw.base, &body).await;
    body["model"] = json!("upstream-echo");
    let direct = post(&mock.base, &body).await;
    assert_eq!(through.data_events(), direct.data_events());
    let events = through.data_events();
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 4);

    // Not asked for, and the upstream puts usage on its last content chunk
    // (as llama.cpp does): the chunk is kept, the usage removed, and the
    // tokens still counted.
    let r = post(&gw.base, &chat_stream("final-usage", "x")).await;
    let events = r.data_events();
    assert!(!r.text.contains("\"usage\""), "{}", r.text);
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    let text = gw.metrics().await;
    assert!(
        text.contains(r#"conclave_tokens_total{model="final-usage",kind="input"} 11"#),
        "{text}"
    );
    assert!(text.contains(r#"conclave_tokens_total{model="final-usage",kind="output"} 3"#));

    // The upstream was asked for usage both times, and saw its own model name.
    let received = mock.received().await;
    let last = &received.last().unwrap()["body"];
    assert_eq!(last["model"], "final-usage");
    assert_eq!(last["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn unknown_request_fields_reach_the_upstream_unchanged() {
    let mock = Srv::mock(MOCK);
    let gw = gateway_for(&mock);
    let body = json!({
        "model": "fast",
        "messages": [
            {"role": "system", "content": "be brief", "x_msg_meta": {"k": [1, 2]}},
            {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ann"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"}
        ],
        "temperature": 0.25,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "response_format": {"type": "json_object"},
        "x_never_heard_of": {"nested": [true, null, 1.5]},
        "stream_options": {"include_usage": false, "x_opt": 1}
    });
    let r = post(&gw.base, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let got = &mock.received().await[0]["body"];
    let mut want = body.clone();
    want["model"] = json!("upstream-echo");
    assert_eq!(got, &want);
}
