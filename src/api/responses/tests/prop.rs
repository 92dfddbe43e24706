//! Arbitrary chunk sequences: no panic, sequence numbers from 0 without a
//! gap, one final object, and the deltas add up to what it holds.

use std::collections::HashMap;

use bytes::BytesMut;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::{chunk, events, head, raw, renderer};
use crate::api::error::ApiError;
use crate::api::render::Render;
use crate::sink::Totals;

#[derive(Debug, Clone)]
enum Op {
    Text(String),
    Reasoning(String),
    Refusal(String),
    Call {
        index: Option<u64>,
        id: Option<String>,
        name: Option<String>,
        args: Option<String>,
    },
    Finish(&'static str),
    Usage(u32, u32),
    Junk(Vec<u8>),
    OtherChoice(String),
}

fn op() -> impl Strategy<Value = Op> {
    let s = || "[a-z\"{} \\n]{0,6}";
    prop_oneof![
        s().prop_map(Op::Text),
        s().prop_map(Op::Reasoning),
        s().prop_map(Op::Refusal),
        (
            proptest::option::of(0u64..4),
            proptest::option::of("[a-z_]{1,5}"),
            proptest::option::of("[a-z]{1,4}"),
            proptest::option::of(s()),
        )
            .prop_map(|(index, id, name, args)| Op::Call {
                index,
                id,
                name,
                args
            }),
        prop_oneof![
            Just("stop"),
            Just("length"),
            Just("tool_calls"),
            Just("content_filter")
        ]
        .prop_map(Op::Finish),
        (0u32..1000, 0u32..1000).prop_map(|(a, b)| Op::Usage(a, b)),
        proptest::collection::vec(any::<u8>(), 0..12).prop_map(Op::Junk),
        s().prop_map(Op::OtherChoice),
    ]
}

fn data(op: &Op) -> Option<Value> {
    let choice = |delta: Value| json!({"model": "x", "choices": [{"index": 0, "delta": delta}]});
    Some(match op {
        Op::Text(t) => choice(json!({"content": t})),
        Op::Reasoning(t) => choice(json!({"reasoning": t})),
        Op::Refusal(t) => choice(json!({"refusal": t})),
        Op::Call {
            index,
            id,
            name,
            args,
        } => {
            let mut c = json!({"function": {}});
            if let Some(i) = index {
                c["index"] = json!(i);
            }
            if let Some(id) = id {
                c["id"] = json!(id);
            }
            if let Some(n) = name {
                c["function"]["name"] = json!(n);
            }
            if let Some(a) = args {
                c["function"]["arguments"] = json!(a);
            }
            choice(json!({"tool_calls": [c]}))
        }
        Op::Finish(r) => json!({"choices": [{"index": 0, "delta": {}, "finish_reason": r}]}),
        Op::Usage(a, b) => {
            json!({"choices": [], "usage": {"prompt_tokens": a, "completion_tokens": b}})
        }
        Op::OtherChoice(t) => json!({"choices": [{"index": 2, "delta": {"content": t}}]}),
        Op::Junk(_) => return None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_chunks_make_a_well_formed_stream(ops in proptest::collection::vec(op(), 0..40), fail in any::<bool>(), open in any::<bool>()) {
        let (mut r, done) = renderer(head());
        let mut out = BytesMut::new();
        if open {
            r.open(&mut out);
        }
        for o in &ops {
            match (o, data(o)) {
                (Op::Junk(bytes), _) => assert!(r.chunk(raw(bytes), &mut out).is_ok()),
                (_, Some(v)) => assert!(r.chunk(chunk(&v), &mut out).is_ok()),
                (_, None) => {}
            }
        }
        if fail {
            r.fail(&ApiError::Internal("boom".into()), &mut out);
        } else {
            r.end(Totals::default(), &mut out);
        }
        let ev = events(&out);
        for (i, e) in ev.iter().enumerate() {
            prop_assert_eq!(&e.data["sequence_number"], &json!(i));
        }
        let done = done.lock();
        prop_assert_eq!(done.len(), 1);
        let last = &done[0];
        let final_event = ev.last().unwrap();
        prop_assert_eq!(&final_event.data["response"], last);
        let kinds = ["response.completed", "response.incomplete", "response.failed"];
        prop_assert!(kinds.contains(&final_event.name.as_str()));
        prop_assert_eq!(fail, final_event.name == "response.failed");

        let mut text = String::new();
        let mut args: HashMap<String, String> = HashMap::new();
        let mut added = 0;
        for e in &ev {
            match e.name.as_str() {
                "response.output_text.delta" => text.push_str(e.data["delta"].as_str().unwrap()),
                "response.function_call_arguments.delta" => args
                    .entry(e.data["item_id"].as_str().unwrap().to_owned())
                    .or_default()
                    .push_str(e.data["delta"].as_str().unwrap()),
                "response.output_item.added" => {
                    prop_assert_eq!(&e.data["output_index"], &json!(added));
                    added += 1;
                }
                _ => {}
            }
        }
        if !fail {
            prop_assert_eq!(last["output_text"].as_str().unwrap(), text.as_str());
            prop_assert_eq!(last["output"].as_array().unwrap().len(), added);
            for item in last["output"].as_array().unwrap() {
                if item["type"] == "function_call" {
                    let have = args.get(item["id"].as_str().unwrap()).map_or("", String::as_str);
                    prop_assert_eq!(item["arguments"].as_str().unwrap(), have);
                }
            }
        }
    }
}
