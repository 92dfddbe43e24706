use bytes::BytesMut;
use serde_json::{Value, json};

use super::{chunk, events, head, names, raw, renderer, stream, whole_of};
use crate::api::error::ApiError;
use crate::api::render::Render;
use crate::error::ModelError;
use crate::sink::Totals;

fn delta(d: Value) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "served",
        "choices": [{"index": 0, "delta": d, "finish_reason": null}]})
}

fn finish(reason: &str) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "served",
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

fn usage(input: u64, output: u64) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "served", "choices": [],
        "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output,
                  "prompt_tokens_details": {"cached_tokens": 2}}})
}

/// Streams the chunks, checks the sequence numbers and that the final
/// object is the last event's and `whole`'s, and gives the events.
fn check(chunks: &[Value]) -> (Vec<super::Event>, Value) {
    let h = head();
    let totals = Totals {
        input_tokens: 1,
        output_tokens: 1,
        ..Totals::default()
    };
    let (events, last) = stream(h.clone(), chunks, totals);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.data["sequence_number"], i, "{:?}", e);
    }
    assert_eq!(events.last().unwrap().data["response"], last);
    assert_eq!(last, whole_of(h, chunks, totals), "stream and whole differ");
    (events, last)
}

#[test]
fn a_text_stream_sends_the_whole_event_sequence() {
    let (ev, last) = check(&[
        delta(json!({"role": "assistant", "content": ""})),
        delta(json!({"content": "Hel"})),
        delta(json!({"content": "lo"})),
        finish("stop"),
        usage(9, 2),
    ]);
    assert_eq!(
        names(&ev),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let created = &ev[0].data["response"];
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["output"], json!([]));
    // The opening goes out with the first chunk and names its model, as
    // the last event does (not the "m" asked for).
    assert_eq!(created["model"], "served");
    assert_eq!(created["id"], last["id"]);
    assert_eq!(ev[1].data["response"], *created);
    let item = &ev[2].data["item"];
    assert_eq!(ev[2].data["output_index"], 0);
    assert_eq!(item["status"], "in_progress");
    assert_eq!(item["content"], json!([]));
    let id = item["id"].clone();
    assert_eq!(
        ev[3].data["part"],
        json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []})
    );
    assert_eq!(ev[4].data["item_id"], id);
    assert_eq!(ev[4].data["content_index"], 0);
    assert_eq!(ev[4].data["delta"], "Hel");
    assert_eq!(ev[4].data["logprobs"], json!([]));
    assert_eq!(ev[6].data["text"], "Hello");
    assert_eq!(ev[7].data["part"]["text"], "Hello");
    assert_eq!(ev[8].data["item"]["status"], "completed");
    assert_eq!(ev[8].data["item"], last["output"][0]);
    assert_eq!(last["status"], "completed");
    assert_eq!(last["model"], "served");
    assert_eq!(last["output_text"], "Hello");
    assert_eq!(last["usage"]["input_tokens"], 9);
    assert_eq!(last["usage"]["input_tokens_details"]["cached_tokens"], 2);
    assert_eq!(last["usage"]["total_tokens"], 11);
}

#[test]
fn reasoning_then_text_are_two_items() {
    let (ev, last) = check(&[
        delta(json!({"role": "assistant", "reasoning_content": "Think"})),
        delta(json!({"reasoning_content": "ing."})),
        delta(json!({"content": "Done."})),
        finish("stop"),
    ]);
    assert_eq!(
        names(&ev)[2..],
        [
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(ev[2].data["item"]["type"], "reasoning");
    assert_eq!(ev[6].data["text"], "Thinking.");
    assert_eq!(ev[9].data["output_index"], 1);
    let out = last["output"].as_array().unwrap();
    assert_eq!(out[0]["content"][0]["text"], "Thinking.");
    assert_eq!(out[1]["content"][0]["text"], "Done.");
    assert_eq!(
        last["usage"]["input_tokens"], 1,
        "no usage chunk: the totals"
    );
}

#[test]
fn two_tool_calls_are_two_function_call_items() {
    let (ev, last) = check(&[
        delta(json!({"role": "assistant", "content": null, "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "weather", "arguments": ""}}]})),
        delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]})),
        delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Oslo\"}"}}]})),
        delta(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "clock", "arguments": "{}"}}]}),
        ),
        finish("tool_calls"),
        usage(3, 4),
    ]);
    assert_eq!(
        names(&ev)[2..],
        [
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let added = &ev[2].data["item"];
    assert_eq!(added["type"], "function_call");
    assert_eq!(added["status"], "in_progress");
    assert_eq!(added["call_id"], "call_a");
    assert_eq!(added["name"], "weather");
    assert_eq!(added["arguments"], "");
    assert_eq!(ev[3].data["item_id"], added["id"]);
    assert_eq!(ev[3].data["delta"], "{\"city\":");
    assert_eq!(ev[5].data["arguments"], "{\"city\":\"Oslo\"}");
    assert_eq!(ev[5].data["name"], "weather");
    assert_eq!(ev[6].data["item"]["status"], "completed");
    assert_eq!(ev[7].data["output_index"], 1);
    let out = last["output"].as_array().unwrap();
    assert_eq!(out.len(), 2, "no message item: {out:?}");
    assert_eq!(out[1]["call_id"], "call_b");
    assert_eq!(out[1]["arguments"], "{}");
    assert_eq!(last["output_text"], "");
}

#[test]
fn a_length_cut_ends_incomplete() {
    let (ev, last) = check(&[delta(json!({"content": "Once upon"})), finish("length")]);
    assert_eq!(ev.last().unwrap().name, "response.incomplete");
    assert_eq!(last["status"], "incomplete");
    assert_eq!(
        last["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(ev[ev.len() - 2].data["item"]["status"], "incomplete");
}

#[test]
fn text_before_calls_and_refusals_keep_to_the_event_order() {
    let (ev, last) = check(&[
        delta(json!({"content": "Checking."})),
        delta(
            json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]}),
        ),
        finish("tool_calls"),
    ]);
    assert_eq!(last["output"][0]["type"], "message");
    assert_eq!(last["output"][1]["type"], "function_call");
    assert_eq!(ev.len(), 2 + 6 + 4 + 1);

    let (ev, last) = check(&[delta(json!({"refusal": "No."})), finish("stop")]);
    assert!(names(&ev).contains(&"response.refusal.delta"));
    assert!(names(&ev).contains(&"response.refusal.done"));
    assert_eq!(
        last["output"][0]["content"],
        json!([{"type": "refusal", "refusal": "No."}])
    );
}

#[test]
fn an_empty_answer_is_one_empty_message() {
    let (ev, last) = check(&[
        delta(json!({"role": "assistant", "content": ""})),
        finish("stop"),
    ]);
    assert_eq!(last["output"][0]["type"], "message");
    assert_eq!(last["output"][0]["content"][0]["text"], "");
    assert!(names(&ev).contains(&"response.output_text.done"));
}

#[test]
fn an_error_mid_stream_fails_the_response_with_what_was_complete() {
    let (mut r, done) = renderer(head());
    let mut out = BytesMut::new();
    r.open(&mut out);
    assert!(
        r.chunk(chunk(&delta(json!({"reasoning_content": "hm"}))), &mut out)
            .is_ok()
    );
    assert!(
        r.chunk(chunk(&delta(json!({"content": "Part"}))), &mut out)
            .is_ok()
    );
    let err = ApiError::Model(ModelError::StreamCut {
        upstream: "up".into(),
        detail: "the connection closed".into(),
    });
    r.fail(&err, &mut out);
    let ev = events(&out);
    let n = ev.len();
    assert_eq!(names(&ev)[n - 2..], ["error", "response.failed"]);
    let e = &ev[n - 2].data;
    assert_eq!(e["code"], "upstream_stream_cut");
    assert!(e["message"].as_str().unwrap().contains("up"), "{e}");
    assert!(e.get("param").is_some());
    let failed = &ev[n - 1].data["response"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["code"], "upstream_stream_cut");
    assert_eq!(failed["error"]["message"], e["message"]);
    let out_items = failed["output"].as_array().unwrap();
    assert_eq!(out_items.len(), 1, "only the closed reasoning item");
    assert_eq!(out_items[0]["type"], "reasoning");
    for (i, e) in ev.iter().enumerate() {
        assert_eq!(e.data["sequence_number"], i);
    }
    // Whatever comes after the end writes nothing and stores nothing.
    let mut more = BytesMut::new();
    assert!(
        r.chunk(chunk(&delta(json!({"content": "late"}))), &mut more)
            .is_ok()
    );
    r.end(Totals::default(), &mut more);
    r.fail(&err, &mut more);
    assert!(more.is_empty());
    let done = done.lock();
    assert_eq!(done.as_slice(), std::slice::from_ref(failed));
}

#[test]
fn junk_and_loading_chunks_are_skipped_and_open_is_implied() {
    let (mut r, done) = renderer(head());
    let mut out = BytesMut::new();
    assert!(r.chunk(raw(b"not json"), &mut out).is_ok());
    assert!(r.chunk(raw(b"[1,2]"), &mut out).is_ok());
    assert!(r.chunk(raw(br#"{"choices": "no"}"#), &mut out).is_ok());
    assert!(
        r.chunk(
            raw(br#"{"choices": [{"index": 9, "delta": {"content": "past the choices read"}}]}"#),
            &mut out,
        )
        .is_ok()
    );
    let mut banner =
        raw(br#"{"choices": [{"index": 0, "delta": {"reasoning_content": "loading model"}}]}"#);
    banner.loading = true;
    assert!(r.chunk(banner, &mut out).is_ok());
    assert!(
        r.chunk(
            raw(
                br#"{"choices": [{"delta": {"content": "ok", "tool_calls": [{"index": 99999}]}}]}"#
            ),
            &mut out,
        )
        .is_ok()
    );
    r.end(Totals::default(), &mut out);
    let ev = events(&out);
    assert_eq!(
        ev[0].name, "response.created",
        "open written before the first chunk"
    );
    let last = &done.lock()[0];
    assert_eq!(last["output_text"], "ok");
    assert_eq!(last["output"].as_array().unwrap().len(), 1);
    let _: &Value = last;
}

/// An arena's two answers: the one that was cut is the incomplete item,
/// whichever it is, streamed and whole alike.
#[test]
fn the_cut_answer_of_two_is_the_incomplete_item() {
    let second = |text: &str, reason: Option<&str>| {
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "served",
            "choices": [{"index": 1, "delta": {"content": text}, "finish_reason": reason}]})
    };
    // A cut, B complete.
    let (ev, last) = check(&[
        delta(json!({"content": "Once upon"})),
        second("The end.", None),
        second("", Some("stop")),
        finish("length"),
    ]);
    assert_eq!(last["status"], "incomplete");
    assert_eq!(last["output"][0]["status"], "incomplete", "{last}");
    assert_eq!(last["output"][1]["status"], "completed", "{last}");
    let done: Vec<&Value> = ev
        .iter()
        .filter(|e| e.name == "response.output_item.done")
        .map(|e| &e.data["item"]["status"])
        .collect();
    assert_eq!(done, ["incomplete", "completed"]);
    // A complete, B cut.
    let (_, last) = check(&[
        delta(json!({"content": "A whole answer."})),
        second("Once upon", Some("length")),
        finish("stop"),
    ]);
    assert_eq!(last["status"], "completed");
    assert_eq!(last["output"][0]["status"], "completed", "{last}");
    assert_eq!(last["output"][1]["status"], "incomplete", "{last}");
}
