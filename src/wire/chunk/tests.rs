//! The scanner's reading of a stream chunk against serde_json's: the
//! same answer for every chunk it takes, over real chunks' shapes and
//! many thousands of mutations of them, and where it says usage sits,
//! cutting that out leaves the chunk without its usage and nothing else.
#![allow(clippy::unwrap_used)]

use super::{ChunkProbe, inspect_chunk, read_by_serde, read_chunk};
use crate::wire::inspect::quick_tests::mutations;
use crate::wire::inspect::{MAX_CHOICES, NotAnAnswer};
use crate::wire::{Usage, UsageField};

/// Stream chunks as upstreams write them: OpenAI's role, content, tool
/// call, finish and usage-only chunks, vLLM's `"usage":null` on each,
/// llama-swap's loading banner, a legacy completion's, escapes, odd
/// layouts, an error in the stream.
const CHUNKS: [&str; 16] = [
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    r#"{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[{"index":0,"delta":{"content":" there,"},"finish_reason":null}],"usage":null}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":16,"total_tokens":28,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#,
    r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}"#,
    r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}},{"index":1,"function":null}]},"finish_reason":null}]}"#,
    r#"{"choices":[{"index":0,"delta":{"reasoning_content":"loading model\n"}}],"created":1,"model":"m"}"#,
    r#"{"id":"cmpl-1","object":"text_completion","created":1,"choices":[{"text":" upon a","index":0,"logprobs":null,"finish_reason":null}],"model":"m"}"#,
    "{\n  \"choices\": [\n    {\"delta\": {\"content\": \"Line one\\nline \\\"two\\\" \\u00e9 \\ud83d\\ude00 caf\u{e9}\"}, \"finish_reason\": null, \"index\": 0}\n  ],\n  \"id\": \"x\", \"usage\": null\n}\n",
    r#"{"id":"c","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null},{"index":1,"delta":{"content":""},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
    r#"{"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop because sk-secret"}],"usage":{"input_tokens":3,"output_tokens":4}}"#,
    r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
    r#"{"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
    r#"{"id":"c","choices":[{"delta":{"content":"x","tool_calls":null,"reasoning_content":null},"finish_reason":5}],"error":null,"object":null}"#,
    r#"{"usage":null,"id":"c","choices":[{"delta":{"content":"hi"},"finish_reason":null}]}"#,
    "{ \"usage\" : { \"prompt_tokens\" : 1 } ,\n \"choices\" : [ { \"delta\" : { \"content\" : \"x\" } } ] , \"usage2\" : null }\n",
];

/// Checks one chunk, read with and without its summary and text: where
/// the scanner reads it, serde_json reads it the same. Whether the
/// scanner read it.
fn chunk_agrees(text: &str) -> bool {
    let Some(probe) = ChunkProbe::scan(text) else {
        return false;
    };
    drop(probe);
    for (summarize, answer) in [(false, false), (true, true)] {
        let mut quick = read_chunk(text.as_bytes(), summarize, answer);
        if let Some(cut) = quick.as_mut().ok().and_then(|info| info.usage_at.take()) {
            usage_is_cut_alone(text, cut);
        }
        let slow = read_by_serde(text.as_bytes(), summarize, answer);
        assert_eq!(format!("{quick:?}"), format!("{slow:?}"), "{text}");
    }
    true
}

/// The chunk without the bytes at `cut` is valid JSON, and it is the
/// chunk without its `usage` member, nothing else changed (where serde
/// can hold the chunk as a value: not a number out of its range).
fn usage_is_cut_alone(text: &str, cut: std::ops::Range<usize>) {
    use serde_json::Value;
    let left = format!("{}{}", &text[..cut.start], &text[cut.end..]);
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&left) {
        panic!("{e}: {text} without {cut:?}: {left}");
    }
    let Ok(mut whole) = serde_json::from_str::<Value>(text) else {
        return;
    };
    assert!(
        whole.as_object_mut().unwrap().remove("usage").is_some(),
        "{text}"
    );
    let left: Value = serde_json::from_str(&left).unwrap();
    assert_eq!(left, whole, "{text} without {cut:?}");
}

#[test]
fn chunks_read_quickly_are_read_the_same() {
    let quick = CHUNKS.iter().filter(|c| chunk_agrees(c)).count();
    // All but the error object and the number where a reason is read.
    assert_eq!(quick, CHUNKS.len() - 2);
}

#[test]
fn odd_chunks_are_left_to_serde_or_read_alike() {
    let odd = [
        r#"{"choices":[{"delta":{"content":5}}]}"#,
        r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
        r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
        r#"{"choices":[{"delta":[1]}]}"#,
        r#"{"choices":[{"delta":"x"}]}"#,
        r#"{"choices":[null]}"#,
        r#"{"choices":[[]]}"#,
        r#"{"choices":null,"usage":null}"#,
        r#"{"choices":null,"usage":{"prompt_tokens":1}}"#,
        r#"{"choices":{}}"#,
        r#"{"usage":null,"usage":null,"choices":[]}"#,
        r#"{"id":1e400,"choices":[]}"#,
        r#"{"id":[1,{"a":"\ud800"}],"choices":[]}"#,
        r#"{"object":"\x","choices":[]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":7}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[null]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":{}}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"function":{},"function":{}}]}}]}"#,
        r#"{"choices":[{"delta":{"reasoning_content":{"a":[1,2]}}}]}"#,
        r#"{"choices":[{"text":null,"delta":null,"finish_reason":["x"]}]}"#,
        r#"{"ch\u006fices":[{"d\u0065lta":{"c\u006fntent":"h\u0069"}}]}"#,
        r#"{"choices":[{}]} x"#,
        r#"{"choices":[{}],}"#,
        r#"{"error":null,"choices":[{"finish_reason":{"a":1}}]}"#,
    ];
    let quick = odd.iter().filter(|t| chunk_agrees(t)).count();
    assert!(quick >= 6, "only {quick} read quickly");
}

#[test]
fn mutated_chunks_read_quickly_are_read_the_same() {
    let (tried, quick) = mutations(0x2545_f491_4f6c_dd1d, &CHUNKS, 3000, chunk_agrees);
    assert!(tried > 30_000 && quick > tried / 10, "{quick} of {tried}");
}

#[test]
fn chunk_inspection_reads_usage_and_errors() {
    let c = inspect_chunk(
        br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
        false,
    )
    .unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(
        c.usage,
        UsageField::Present(Usage {
            prompt_tokens: 3,
            completion_tokens: 4,
            ..Usage::default()
        })
    );
    assert_eq!(c.choices, 0);
    let c = inspect_chunk(br#"{"choices":[{}],"usage":null}"#, false)
        .unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(c.usage, UsageField::Null);
    let c = inspect_chunk(br#"{"error":{"message":"boom"}}"#, false)
        .unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(c.error.as_deref(), Some("boom"));
    assert!(inspect_chunk(b"not json", false).is_err());
}

#[test]
fn llama_swap_s_banner_is_told_from_a_model_s_reasoning() {
    let loading = |data: &[u8]| {
        inspect_chunk(data, true)
            .unwrap_or_else(|e| unreachable!("{e}"))
            .loading
    };
    // What llama-swap writes while it loads a model.
    assert!(loading(
        "{\"choices\":[{\"delta\":{\"reasoning_content\":\"llama-swap loading model: q\\n\"}}]}"
            .as_bytes()
    ));
    assert!(loading(
        br#"{"choices":[{"delta":{"reasoning_content":"."}}]}"#
    ));
    // A reasoning model's own thinking carries the chunk's id.
    assert!(!loading(
        br#"{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":"Let me think"}}]}"#
    ));
    assert!(!loading(br#"{"choices":[{"delta":{"content":"hi"}}]}"#));
    assert!(!loading(br#"{"choices":[{"delta":{"role":"assistant"}}]}"#));
    let c = inspect_chunk(
        br#"{"choices":[{"delta":{"reasoning_content":"."}}]}"#,
        true,
    )
    .unwrap_or_else(|e| unreachable!("{e}"));
    assert!(!c.real);
    assert_eq!(c.text_bytes, 0);
    assert_eq!(c.summary.as_deref(), Some(""));
}

#[test]
fn one_parse_counts_choices_and_summarises_the_first() {
    let data = br#"{"choices":[{"delta":{"content":"Hi","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]},"finish_reason":null},{"delta":{"role":"assistant"}}]}"#;
    let c = inspect_chunk(data, true).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(c.choices, 2);
    assert!(c.real);
    assert!(!c.finished);
    assert_eq!(c.text_bytes, 4);
    assert_eq!(c.summary.as_deref(), Some("Hi\ntool call: f({})"));
    let role_only = inspect_chunk(br#"{"choices":[{"delta":{"role":"assistant"}}]}"#, false)
        .unwrap_or_else(|e| unreachable!("{e}"));
    assert!(!role_only.real);
    assert!(role_only.summary.is_none());
    let many = format!(
        r#"{{"choices":[{}]}}"#,
        vec!["{}"; MAX_CHOICES + 1].join(",")
    );
    assert!(matches!(
        inspect_chunk(many.as_bytes(), false),
        Err(NotAnAnswer::TooManyChoices(n)) if n == MAX_CHOICES + 1
    ));
    assert!(inspect_chunk(br#"{"choices":null}"#, false).is_err());
}

#[test]
fn a_chunk_needs_choices_or_usage() {
    for chunk in [&b"{}"[..], b"[]", b"[{\"choices\":[]}]", b"{\"id\":\"x\"}"] {
        assert!(
            inspect_chunk(chunk, false).is_err(),
            "{}",
            String::from_utf8_lossy(chunk)
        );
    }
    assert!(inspect_chunk(br#"{"choices":[],"usage":{"prompt_tokens":1}}"#, false).is_ok());
    assert!(inspect_chunk(br#"{"usage":{"prompt_tokens":1}}"#, false).is_ok());
}
