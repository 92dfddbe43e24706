//! Stored Responses API answers over HTTP, in-process on paused time:
//! answers put through the gateway's `Responses` store are read back,
//! paged and deleted by the key that stored them only, and are gone once
//! `server.responses_retention` has passed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Method, Request};
use common::{Resp, inproc};
use conclave::store::responses::StoredResponse;
use serde_json::{Value, json};

const ONE: &[(&str, &str)] = &[("authorization", "Bearer k-one")];
const TWO: &[(&str, &str)] = &[("authorization", "Bearer k-two")];

fn gateway(server: &str) -> inproc::Gw {
    let toml = format!(
        r#"
[server]
{server}

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.alpha]
reply = {{ text = "hi" }}

[models.alpha]
upstream = "sim"

[[keys]]
name = "one"
key_env = "K1"

[[keys]]
name = "two"
key_env = "K2"
"#
    );
    let env = [("K1", "k-one"), ("K2", "k-two")];
    inproc::Gw::start_with(&toml, &env, UNIX_EPOCH + inproc::START)
}

fn answer(id: &str, key: &str, items: usize) -> StoredResponse {
    StoredResponse {
        id: id.into(),
        key: key.into(),
        previous: None,
        input: (1..=items)
            .map(|i| {
                json!({"id": format!("msg_{i}"), "type": "message", "role": "user",
                            "content": [{"type": "input_text", "text": format!("item {i}")}]})
            })
            .collect(),
        response: json!({
            "id": id, "object": "response", "status": "completed", "model": "alpha",
            "output": [{"id": "msg_out", "type": "message", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "hello", "annotations": []}]}],
            "output_text": "hello",
        }),
    }
}

async fn delete(gw: &inproc::Gw, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut req = Request::builder().method(Method::DELETE).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    gw.send(req.body(Body::empty()).unwrap()).await
}

fn ids(page: &Value) -> Vec<&str> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_stored_answer_is_read_by_its_own_key_only() {
    let gw = gateway("");
    let a = answer("resp_abc123", "one", 1);
    gw.responses().put(a.clone());
    for path in ["/v1/responses/resp_abc123", "/responses/resp_abc123"] {
        let r = gw.get_with(path, ONE).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json(), a.response);
        assert!(r.header("x-request-id").is_some());
    }
    assert_eq!(gw.get("/v1/responses/resp_abc123").await.status, 401);
    for id in ["resp_abc123", "resp_unknown"] {
        let r = gw.get_with(&format!("/v1/responses/{id}"), TWO).await;
        assert_eq!(r.status, 404, "{}", r.text);
        assert_eq!(
            r.json(),
            json!({"error": {
                "message": format!("Response with id '{id}' not found."),
                "type": "invalid_request_error", "param": null, "code": null,
            }})
        );
    }
    // Ids out of bounds are not looked up.
    let long = format!("/v1/responses/resp_{}", "a".repeat(200));
    let r = gw.get_with(&long, ONE).await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(
        gw.get_with("/v1/responses/resp%20abc123", ONE).await.status,
        404
    );
    let metrics = gw.metrics();
    assert!(
        metrics
            .contains(r#"conclave_requests_total{route="unknown",strategy="none",status="404"} 4"#),
        "{metrics}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_deleted_answer_is_gone() {
    let gw = gateway("");
    gw.responses().put(answer("resp_gone", "one", 1));
    let path = "/v1/responses/resp_gone";
    let r = delete(&gw, path, TWO).await;
    assert_eq!(r.status, 404, "{}", r.text);
    let r = delete(&gw, path, ONE).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"id": "resp_gone", "object": "response.deleted", "deleted": true})
    );
    assert_eq!(gw.get_with(path, ONE).await.status, 404);
    assert_eq!(delete(&gw, path, ONE).await.status, 404);
    let r = gw.get_with(&format!("{path}/input_items"), ONE).await;
    assert_eq!(r.status, 404, "{}", r.text);
}

#[tokio::test(start_paused = true)]
async fn input_items_page_in_both_orders() {
    let gw = gateway("");
    gw.responses().put(answer("resp_items", "one", 5));
    let page = |q: &str| {
        let path = format!("/v1/responses/resp_items/input_items{q}");
        let gw = &gw;
        async move {
            let r = gw.get_with(&path, ONE).await;
            assert_eq!(r.status, 200, "{path}: {}", r.text);
            r.json()
        }
    };
    let all = page("").await;
    assert_eq!(ids(&all), ["msg_5", "msg_4", "msg_3", "msg_2", "msg_1"]);
    assert_eq!(all["object"], "list");
    assert_eq!(
        (&all["first_id"], &all["last_id"], &all["has_more"]),
        (&json!("msg_5"), &json!("msg_1"), &json!(false))
    );
    assert_eq!(all["data"][0]["content"][0]["text"], "item 5");
    let first = page("?limit=2").await;
    assert_eq!(ids(&first), ["msg_5", "msg_4"]);
    assert_eq!(first["has_more"], true);
    let next = page("?limit=2&after=msg_4").await;
    assert_eq!(ids(&next), ["msg_3", "msg_2"]);
    let asc = page("?order=asc&limit=3").await;
    assert_eq!(ids(&asc), ["msg_1", "msg_2", "msg_3"]);
    assert_eq!(asc["has_more"], true);
    let rest = page("?order=asc&limit=3&after=msg_3&include[]=message.input_image.image_url").await;
    assert_eq!(ids(&rest), ["msg_4", "msg_5"]);
    assert_eq!(rest["has_more"], false);
    let r = gw
        .get_with("/responses/resp_items/input_items?limit=1", ONE)
        .await;
    assert_eq!(ids(&r.json()), ["msg_5"]);

    for (q, param) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=many", "limit"),
        ("order=up", "order"),
        ("after=msg_9", "after"),
    ] {
        let path = format!("/v1/responses/resp_items/input_items?{q}");
        let r = gw.get_with(&path, ONE).await;
        assert_eq!(r.status, 400, "{q}: {}", r.text);
        let e = &r.json()["error"];
        assert_eq!(e["param"], param, "{q}: {}", r.text);
        assert_eq!(e["type"], "invalid_request_error");
    }
    let r = gw
        .get_with("/v1/responses/resp_items/input_items", TWO)
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
}

#[tokio::test(start_paused = true)]
async fn answers_expire_after_the_retention() {
    let gw = gateway(r#"responses_retention = "1h""#);
    gw.responses().put(answer("resp_kept", "one", 1));
    tokio::time::advance(Duration::from_secs(3599)).await;
    let r = gw.get_with("/v1/responses/resp_kept", ONE).await;
    assert_eq!(r.status, 200, "{}", r.text);
    tokio::time::advance(Duration::from_secs(1)).await;
    let r = gw.get_with("/v1/responses/resp_kept", ONE).await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(
        delete(&gw, "/v1/responses/resp_kept", ONE).await.status,
        404
    );
}

#[tokio::test(start_paused = true)]
async fn a_zero_retention_keeps_nothing() {
    let gw = gateway(r#"responses_retention = "0s""#);
    gw.responses().put(answer("resp_none", "one", 1));
    let r = gw.get_with("/v1/responses/resp_none", ONE).await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(
        r.json()["error"]["message"],
        "Response with id 'resp_none' not found."
    );
}
