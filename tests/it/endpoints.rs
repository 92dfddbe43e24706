//! The OpenAI surface beyond chat: `GET /v1/models/{id}`, and
//! `/v1/completions` and `/v1/embeddings` relayed to concrete models and
//! their aliases exactly as chat is (auth, key model lists, `model`
//! rewritten, attempts recorded, errors mapped, streams relayed), proven
//! with the `async-openai` client. Strategy routes there, and the
//! Responses API, get clear errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::completions::CreateCompletionRequestArgs;
use async_openai::types::embeddings::CreateEmbeddingRequestArgs;
use common::*;
use futures::StreamExt;
use serde_json::json;

const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.text-up]
reply = { text = "once upon a time" }

[upstreams.sim.models.vec-up]

[upstreams.sim.models.broken]
status = 500
error_message = "embedding service down"
"#;

fn gateway(mock: &Srv) -> Srv {
    Srv::gateway_env(
        &format!(
            r#"
[server]
event_log = "{{dir}}/events.jsonl"

[[keys]]
name = "all"
key_env = "KEY_ALL"

[[keys]]
name = "narrow"
key_env = "KEY_NARROW"
models = ["writer"]

[upstreams.up]
kind = "openai"
base_url = "{}"

[models.text]
upstream = "up"
model = "text-up"

[models.vec]
upstream = "up"
model = "vec-up"

[models.broken]
upstream = "up"

[routes.writer]
strategy = "passthrough"
model = "text"

[routes.ladder]
strategy = "chain"
tiers = ["broken", "text"]
"#,
            mock.v1()
        ),
        &[
            ("KEY_ALL", "sk-all-0123456789"),
            ("KEY_NARROW", "sk-narrow-0123456789"),
        ],
    )
}

fn openai(gw: &Srv, key: &str) -> Client<OpenAIConfig> {
    Client::with_config(OpenAIConfig::new().with_api_base(gw.v1()).with_api_key(key))
}

async fn post_to(gw: &Srv, path: &str, key: &str, body: serde_json::Value) -> Resp {
    let r = client()
        .post(gw.url(path))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    Resp {
        status: r.status().as_u16(),
        headers: r.headers().clone(),
        text: r.text().await.unwrap(),
    }
}

#[tokio::test]
async fn completions_and_embeddings_are_relayed_like_chat() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock);
    let sdk = openai(&gw, "sk-all-0123456789");

    // Completions, whole, through an alias: the upstream gets its own name.
    let req = CreateCompletionRequestArgs::default()
        .model("writer")
        .prompt("Tell me a story")
        .build()
        .unwrap();
    let done = sdk.completions().create(req).await.unwrap();
    assert_eq!(done.choices[0].text, "once upon a time");
    assert_eq!(done.object, "text_completion");

    // Completions, streamed.
    let req = CreateCompletionRequestArgs::default()
        .model("text")
        .prompt("Tell me a story")
        .build()
        .unwrap();
    let mut s = sdk.completions().create_stream(req).await.unwrap();
    let mut text = String::new();
    while let Some(c) = s.next().await {
        text.push_str(&c.unwrap().choices[0].text);
    }
    assert_eq!(text, "once upon a time");

    // Embeddings.
    let req = CreateEmbeddingRequestArgs::default()
        .model("vec")
        .input(vec!["alpha", "beta"])
        .build()
        .unwrap();
    let e = sdk.embeddings().create(req).await.unwrap();
    assert_eq!(e.data.len(), 2);
    assert_eq!(e.data[0].embedding.len(), 8);
    assert_ne!(e.data[0].embedding, e.data[1].embedding);

    let got = mock.received().await;
    let models: Vec<&str> = got.iter().map(|r| r["model"].as_str().unwrap()).collect();
    assert_eq!(models, ["text-up", "text-up", "vec-up"]);
    assert_eq!(got[1]["body"]["stream_options"]["include_usage"], true);
    assert_eq!(got[2]["body"]["input"], json!(["alpha", "beta"]));

    // Each call is an attempt in the event log.
    let events = gw.events(3).await;
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e["route"].as_str().unwrap(), e["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(seen, [("writer", "ok"), ("text", "ok"), ("vec", "ok")]);

    // Headers as for chat.
    let r = post_to(
        &gw,
        "/v1/embeddings",
        "sk-all-0123456789",
        json!({"model": "vec", "input": "x"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("vec"));
    assert_eq!(r.header("x-conclave-attempts"), Some("1"));
}

#[tokio::test]
async fn outside_chat_strategies_keys_and_errors_answer_clearly() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock);
    let all = "sk-all-0123456789";

    let r = post_to(
        &gw,
        "/v1/completions",
        all,
        json!({"model": "ladder", "prompt": "x"}),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "unsupported_model");
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("chat completions and responses only")
    );

    let r = post_to(
        &gw,
        "/v1/embeddings",
        "sk-narrow-0123456789",
        json!({"model": "vec", "input": "x"}),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    let r = post_to(
        &gw,
        "/v1/embeddings",
        "wrong",
        json!({"model": "vec", "input": "x"}),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.text);
    let r = post_to(
        &gw,
        "/v1/embeddings",
        all,
        json!({"model": "nope", "input": "x"}),
    )
    .await;
    assert_eq!(r.json()["error"]["code"], "model_not_found");

    let r = post_to(
        &gw,
        "/v1/embeddings",
        all,
        json!({"model": "broken", "input": "x"}),
    )
    .await;
    assert_eq!(r.status, 502, "{}", r.text);
    // An upstream's 5xx text stays in the logs (issue 23, item 6).
    assert!(r.text.contains("upstream `up` failed (HTTP"), "{}", r.text);
    assert!(!r.text.contains("embedding service down"), "{}", r.text);

    let r = post_to(
        &gw,
        "/v1/responses",
        all,
        json!({"model": "text", "input": "x"}),
    )
    .await;
    // The Responses API is served on every model (translated to chat).
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["object"], "response", "{}", r.text);
}

#[tokio::test]
async fn models_retrieve_answers_for_every_name_a_key_may_use() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock);
    let sdk = openai(&gw, "sk-all-0123456789");
    for id in ["text", "writer", "ladder"] {
        let m = sdk.models().retrieve(id).await.unwrap();
        assert_eq!(m.id, id);
        assert_eq!(m.object, "model");
    }
    let missing = sdk.models().retrieve("nope").await;
    assert!(missing.is_err());
    let r = client()
        .get(gw.url("/v1/models/nope"))
        .bearer_auth("sk-all-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "model_not_found");
    // A model the key may not use does not exist for it.
    let r = client()
        .get(gw.url("/v1/models/text"))
        .bearer_auth("sk-narrow-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// A model the key may not use answers exactly as a model that does not
/// exist, on every endpoint that names one: status, body, headers and
/// metrics, so a key cannot enumerate the gateway's model names.
#[tokio::test]
async fn a_forbidden_model_answers_exactly_like_an_unknown_one() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock);
    let narrow = "sk-narrow-0123456789";
    // `text` exists (the narrow key may not use it); `nope` does not.
    // Same length, so even Content-Length cannot tell them apart.
    let (forbidden, unknown) = ("text", "nope");
    let ask = |model: &'static str| {
        let http = client();
        let gw = &gw;
        async move {
            let post = |path: &str, body: serde_json::Value| {
                send(http.post(gw.url(path)).bearer_auth(narrow).json(&body))
            };
            vec![
                post("/v1/chat/completions", chat(model, "hi")).await,
                post("/v1/chat/completions", chat_stream(model, "hi")).await,
                post("/v1/completions", json!({"model": model, "prompt": "x"})).await,
                post("/v1/embeddings", json!({"model": model, "input": "x"})).await,
                send(
                    http.get(gw.url(&format!("/v1/models/{model}")))
                        .bearer_auth(narrow),
                )
                .await,
            ]
        }
    };
    let before = gw.metrics().await;
    let a = ask(forbidden).await;
    let b = ask(unknown).await;
    for (i, (a, b)) in a.iter().zip(&b).enumerate() {
        assert_eq!(a.status, 404, "{i}: {}", a.text);
        assert_eq!(a.status, b.status, "{i}");
        assert_eq!(
            a.text.replace(forbidden, "X"),
            b.text.replace(unknown, "X"),
            "{i}"
        );
        let e = a.json()["error"].clone();
        assert_eq!(e["code"], "model_not_found", "{i}");
        assert_eq!(
            e["message"],
            "The model `text` does not exist or you do not have access to it."
        );
        let headers = |r: &Resp| {
            let mut h: Vec<(String, String)> = r
                .headers
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "date" | "x-request-id"))
                .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
                .collect();
            h.sort();
            h
        };
        assert_eq!(headers(a), headers(b), "{i}");
    }
    // Both are counted alike, under no model's name.
    let after = gw.metrics().await;
    let unknown_404 = |m: &str| {
        samples(
            m,
            "conclave_requests_total",
            &[("route", "unknown"), ("status", "404")],
        )
        .iter()
        .sum::<f64>()
    };
    assert_eq!(unknown_404(&after) - unknown_404(&before), 8.0, "{after}");
    assert!(!after.contains("route=\"text\""), "{after}");
    assert!(mock.received().await.is_empty());
}
