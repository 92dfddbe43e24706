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

/// An OpenAI upstream that answers every call with one fixed completion
/// (or a stream of it) and keeps the bytes of each body it was sent.
async fn keeping_upstream() -> (
    String,
    std::sync::Arc<parking_lot::Mutex<Vec<bytes::Bytes>>>,
) {
    use axum::response::IntoResponse;
    let kept = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let sink = kept.clone();
    let answer = move |body: bytes::Bytes| {
        let sink = sink.clone();
        async move {
            let stream = serde_json::from_slice::<Value>(&body).unwrap()["stream"] == true;
            sink.lock().push(body);
            let usage = json!({"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4});
            if stream {
                let chunk = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                    "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}], "usage": usage});
                let sse = format!("data: {chunk}\n\ndata: [DONE]\n\n");
                ([("content-type", "text/event-stream")], sse).into_response()
            } else {
                axum::Json(json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                    "usage": usage}))
                .into_response()
            }
        }
    };
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/v1"), kept)
}

#[tokio::test]
async fn a_request_nothing_changes_goes_upstream_as_the_client_wrote_it() {
    let (base, kept) = keeping_upstream().await;
    let gw = Srv::gateway(&format!(
        "[upstreams.up]\nkind = \"openai\"\nbase_url = \"{base}\"\n\
         [models.same]\nupstream = \"up\"\n\
         [models.renamed]\nupstream = \"up\"\nmodel = \"same\"\n"
    ));
    // Spacing, an escape and a number written as no serializer would.
    let body = |model: &str, tail: &str| {
        format!(
            "{{ \"model\" : \"{model}\",\n \"messages\": [ {{\"role\":\"user\", \"content\":\"\\u0068i\"}} ],\
             \"temperature\": 1.50, \"x_vendor\": {{\"a\": [1, 2]}}{tail} }}"
        )
    };
    let cases = [
        // Sent as written: nothing in it changes.
        (body("same", ""), true),
        // Written anew: another model name upstream, a stream (which asks
        // for usage), a key named twice (a reader keeping the first would
        // see another request than the one admitted).
        (body("renamed", ""), false),
        (body("same", ", \"stream\": true"), false),
        (body("same", ", \"temperature\": 0.5"), false),
    ];
    for (i, (sent, verbatim)) in cases.iter().enumerate() {
        let r = post_raw(&gw.base, sent.clone(), &[]).await;
        assert_eq!(r.status, 200, "{sent}: {}", r.text);
        let got = kept.lock()[i].clone();
        assert_eq!(got == sent.as_bytes(), *verbatim, "{sent}\n{got:?}");
        let got: Value = serde_json::from_slice(&got).unwrap();
        let mut want: Value = serde_json::from_str(sent).unwrap();
        want["model"] = json!("same");
        if want["stream"] == true {
            want["stream_options"] = json!({"include_usage": true});
        }
        assert_eq!(got, want, "{sent}");
    }
}
