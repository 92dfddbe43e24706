use bytes::Bytes;
use serde_json::{Value, json};

use super::{Head, head, is_id, renderer, req};
use crate::api::error::ApiError;
use crate::api::render::Render;
use crate::sink::Totals;

fn whole(head: Head, completion: Value, totals: Totals) -> Value {
    let (mut r, done) = renderer(head);
    let bytes = r
        .whole(&Bytes::from(completion.to_string()), totals)
        .unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(done.lock().as_slice(), std::slice::from_ref(&v));
    v
}

fn completion(message: Value, finish: &str, usage: Option<Value>) -> Value {
    let mut c = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "served-model",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}]});
    if let Some(u) = usage {
        c["usage"] = u;
    }
    c
}

#[test]
fn a_text_answer_is_a_completed_response() {
    let h = head();
    let v = whole(
        h.clone(),
        completion(
            json!({"role": "assistant", "content": "Hello there."}),
            "stop",
            Some(
                json!({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                "prompt_tokens_details": {"cached_tokens": 8}, "completion_tokens_details": {"reasoning_tokens": 0}}),
            ),
        ),
        Totals::default(),
    );
    assert_eq!(v["id"], h.id.as_str());
    assert!(is_id(v["id"].as_str().unwrap(), "resp_"));
    assert_eq!(v["object"], "response");
    assert_eq!(v["created_at"], 1_700_000_000);
    assert_eq!(v["status"], "completed");
    assert_eq!(v["model"], "served-model");
    assert_eq!(v["error"], Value::Null);
    assert_eq!(v["incomplete_details"], Value::Null);
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 1);
    assert!(is_id(out[0]["id"].as_str().unwrap(), "msg_"));
    assert_eq!(
        out[0],
        json!({"id": out[0]["id"], "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello there.", "annotations": [], "logprobs": []}]})
    );
    assert_eq!(v["output_text"], "Hello there.");
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 12, "input_tokens_details": {"cached_tokens": 8}, "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15})
    );
    for (k, want) in [
        ("parallel_tool_calls", json!(true)),
        ("tool_choice", json!("auto")),
        ("tools", json!([])),
        ("store", json!(true)),
        ("text", json!({"format": {"type": "text"}})),
        ("truncation", json!("disabled")),
        ("metadata", json!({})),
        ("instructions", Value::Null),
        ("previous_response_id", Value::Null),
        ("temperature", Value::Null),
    ] {
        assert_eq!(v[k], want, "{k}");
    }
}

#[test]
fn the_request_is_echoed_without_its_dropped_tools() {
    let t = req(json!({"model": "m", "input": "x", "instructions": "I", "max_output_tokens": 9,
        "metadata": {"a": "b"}, "temperature": 0.5, "top_p": 0.8, "user": "u", "store": false,
        "previous_response_id": "resp_prev", "reasoning": {"effort": "high"},
        "tools": [{"type": "web_search"}, {"type": "function", "name": "f"}], "tool_choice": "required",
        "text": {"format": {"type": "json_object"}}}))
    .to_chat(&[])
    .unwrap();
    let v = whole(
        Head::new("m", t.echo, 5),
        completion(json!({"content": "{}"}), "stop", None),
        Totals::default(),
    );
    assert_eq!(v["instructions"], "I");
    assert_eq!(v["max_output_tokens"], 9);
    assert_eq!(v["metadata"], json!({"a": "b"}));
    assert_eq!(v["temperature"], 0.5);
    assert_eq!(v["top_p"], 0.8);
    assert_eq!(v["user"], "u");
    assert_eq!(v["store"], false);
    assert_eq!(v["previous_response_id"], "resp_prev");
    assert_eq!(v["reasoning"], json!({"effort": "high"}));
    assert_eq!(v["tools"], json!([{"type": "function", "name": "f"}]));
    assert_eq!(v["tool_choice"], "required");
    assert_eq!(v["text"], json!({"format": {"type": "json_object"}}));
}

#[test]
fn reasoning_text_and_tool_calls_are_items_in_that_order() {
    let h = head();
    let v = whole(
        h,
        completion(
            json!({"role": "assistant", "content": "Let me look.", "reasoning_content": "The user wants weather.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
                {"type": "function", "function": {"name": "clock", "arguments": "{}"}},
            ]}),
            "tool_calls",
            Some(json!({"prompt_tokens": 5, "completion_tokens": 40,
                "completion_tokens_details": {"reasoning_tokens": 30}})),
        ),
        Totals::default(),
    );
    let out = v["output"].as_array().unwrap();
    let types: Vec<&str> = out.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["reasoning", "message", "function_call", "function_call"]
    );
    assert!(is_id(out[0]["id"].as_str().unwrap(), "rs_"));
    assert_eq!(
        out[0],
        json!({"id": out[0]["id"], "type": "reasoning", "summary": [],
            "content": [{"type": "reasoning_text", "text": "The user wants weather."}]})
    );
    assert!(is_id(out[2]["id"].as_str().unwrap(), "fc_"));
    assert_eq!(
        out[2],
        json!({"id": out[2]["id"], "type": "function_call", "status": "completed",
            "arguments": "{\"city\":\"Oslo\"}", "call_id": "call_1", "name": "weather"})
    );
    assert!(
        is_id(out[3]["call_id"].as_str().unwrap(), "call_"),
        "a call without an id gets one"
    );
    let ids: std::collections::HashSet<&str> =
        out.iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 4);
    assert_eq!(v["output_text"], "Let me look.");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["usage"]["output_tokens_details"]["reasoning_tokens"], 30);
    assert_eq!(v["usage"]["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(v["usage"]["total_tokens"], 45);

    let v = whole(
        head(),
        completion(
            json!({"content": null, "reasoning": "vLLM's field", "tool_calls": [
            {"id": "c", "function": {"name": "f", "arguments": "{}"}}]}),
            "tool_calls",
            None,
        ),
        Totals::default(),
    );
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 2, "no message without text: {out:?}");
    assert_eq!(out[0]["content"][0]["text"], "vLLM's field");
    assert_eq!(v["output_text"], "");
}

#[test]
fn a_length_cut_is_incomplete_with_its_reason() {
    let v = whole(
        head(),
        completion(json!({"content": "Once upon a"}), "length", None),
        Totals {
            input_tokens: 7,
            output_tokens: 4,
            cost_usd: 0.0,
            estimated: true,
        },
    );
    assert_eq!(v["status"], "incomplete");
    assert_eq!(
        v["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(v["output"][0]["status"], "incomplete");
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 7, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 4,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 11}),
        "no usage in the answer: the request's totals"
    );
    let v = whole(
        head(),
        completion(json!({"content": ""}), "content_filter", None),
        Totals::default(),
    );
    assert_eq!(v["status"], "incomplete");
    assert_eq!(v["incomplete_details"], json!({"reason": "content_filter"}));
}

#[test]
fn refusals_logprobs_and_empty_answers() {
    let mut c = completion(
        json!({"content": null, "refusal": "I can't help with that."}),
        "stop",
        None,
    );
    let v = whole(head(), c.clone(), Totals::default());
    assert_eq!(
        v["output"][0]["content"],
        json!([{"type": "refusal", "refusal": "I can't help with that."}])
    );
    assert_eq!(v["output_text"], "");

    c["choices"][0]["message"] = json!({"content": "Hi"});
    c["choices"][0]["logprobs"] = json!({"content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}]});
    let v = whole(head(), c.clone(), Totals::default());
    assert_eq!(v["output"][0]["content"][0]["logprobs"][0]["token"], "Hi");

    c["choices"][0]["message"] = json!({"role": "assistant", "content": null});
    c["choices"][0]["logprobs"] = Value::Null;
    let v = whole(head(), c, Totals::default());
    assert_eq!(
        v["output"][0]["content"],
        json!([{"type": "output_text", "text": "", "annotations": [], "logprobs": []}]),
        "an empty answer is still one message"
    );

    let two = json!({"model": "x", "choices": [
        {"index": 1, "message": {"content": "second"}, "finish_reason": "stop"},
        {"index": 0, "message": {"content": "first"}, "finish_reason": "stop"}]});
    let v = whole(head(), two, Totals::default());
    // Choice 0's items first, then each other choice (an arena's B) as a
    // message of its own.
    assert_eq!(v["output"][0]["content"][0]["text"], "first");
    assert_eq!(v["output"][1]["content"][0]["text"], "second");
    assert_eq!(v["output"].as_array().unwrap().len(), 2);
}

#[test]
fn a_body_that_is_not_a_completion_is_an_internal_error() {
    for body in [&b"not json"[..], b"[]", b"{\"object\": \"list\"}"] {
        let (mut r, done) = renderer(head());
        match r.whole(&Bytes::copy_from_slice(body), Totals::default()) {
            Err(ApiError::Internal(_)) => {}
            other => panic!("{other:?}"),
        }
        assert!(done.lock().is_empty());
    }
}
