//! A client that did not ask for usage gets each event of a streamed
//! answer as the upstream wrote it, byte for byte, less its `usage`
//! member (conclave asks for usage to count it): whatever the layout
//! (spaces, line breaks, usage first or last, `null` or counted), and a
//! chunk that carries both usage and the answer's end keeps its end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::inproc::Gw;
use serde_json::{Value, json};

/// The events the upstream writes, and what the client must get of each.
const EVENTS: [(&str, &str); 4] = [
    (
        r#"{"id":"c1","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"usage: \"null\""},"finish_reason":null}],"usage":null}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"usage: \"null\""},"finish_reason":null}]}"#,
    ),
    (
        r#"{ "usage" : null , "id" : "c1", "choices" : [ { "index" : 0, "delta" : { "content" : " and 1.50e1" } } ] }"#,
        r#"{ "id" : "c1", "choices" : [ { "index" : 0, "delta" : { "content" : " and 1.50e1" } } ] }"#,
    ),
    (
        r#"{"id":"c1","choices":[{"index":0,"delta":{"content":" more"}}],"x":1.50e1,"usage":null,"y":[]}"#,
        r#"{"id":"c1","choices":[{"index":0,"delta":{"content":" more"}}],"x":1.50e1,"y":[]}"#,
    ),
    (
        r#"{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8},"x":1.50e1,"system_fingerprint":"fp"}"#,
        r#"{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"x":1.50e1,"system_fingerprint":"fp"}"#,
    ),
];

async fn upstream() -> String {
    let chat = |body: axum::body::Bytes| async move {
        let req: Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(req["stream_options"]["include_usage"], true, "{req}");
        let mut out = String::new();
        for (event, _) in EVENTS {
            out.push_str(&format!("data: {event}\n\n"));
        }
        out.push_str("data: [DONE]\n\n");
        ([("content-type", "text/event-stream")], out)
    };
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(chat));
    common::serve_app(app).await
}

#[tokio::test]
async fn usage_is_cut_out_of_each_event_and_nothing_else_changes() {
    let base = upstream().await;
    let gw = Gw::start(&format!(
        "[upstreams.u]\nkind = \"openai\"\nbase_url = \"{base}/v1\"\n\
         [models.a]\nupstream = \"u\"\nmodel = \"m\"\n"
    ));
    let ask = json!({"model": "a", "stream": true,
                     "messages": [{"role": "user", "content": "Count."}]});
    let want: Vec<&str> = EVENTS.iter().map(|(_, client)| *client).collect();
    assert_relayed(&gw, &ask, &want).await;

    // Asked for, usage is relayed as written, and every event whole.
    let mut ask = ask;
    ask["stream_options"] = json!({"include_usage": true});
    let want: Vec<&str> = EVENTS.iter().map(|(upstream, _)| *upstream).collect();
    assert_relayed(&gw, &ask, &want).await;
}

/// The client gets exactly the events `want`, then `[DONE]`.
async fn assert_relayed(gw: &Gw, ask: &Value, want: &[&str]) {
    let r = gw.chat(ask).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let got: Vec<&str> = r
        .text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(got[..got.len().saturating_sub(1)], *want, "{}", r.text);
    assert_eq!(got.last(), Some(&"[DONE]"), "{}", r.text);
}
