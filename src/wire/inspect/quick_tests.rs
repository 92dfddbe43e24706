//! The quick read against serde_json's: the same answer for every body
//! it takes, over real answers' shapes and many thousands of mutations
//! of them (the mutations serve `chunk`'s tests too).

use super::{MAX_CHOICES, completion_by_serde, inspect_completion, object_bytes};
use crate::wire::quick::completion;

/// Answers as upstreams write them (OpenAI, llama.cpp, vLLM, a legacy
/// completion, tool calls, escapes, usage details in both dialects).
const ANSWERS: [&str; 12] = [
    r#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":2,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_1"}"#,
    r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the bench upstream."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}"#,
    r#"{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":30,"completion_tokens":12}}"#,
    "{\n  \"choices\": [\n    {\"finish_reason\": \"length\", \"index\": 0, \"message\": {\"content\": \"Line one\\nline \\\"two\\\" \\u00e9 \\ud83d\\ude00 caf\u{e9}\", \"role\": \"assistant\"}}\n  ],\n  \"created\": 1, \"model\": \"qwen\", \"object\": \"chat.completion\",\n  \"usage\": {\"completion_tokens\": 16, \"prompt_tokens\": 9, \"total_tokens\": 25},\n  \"id\": \"chatcmpl-x\", \"timings\": {\"prompt_n\": 9, \"prompt_ms\": 12.5, \"predicted_per_second\": 71.25e0}\n}\n",
    r#"{"id":"cmpl-1","object":"text_completion","choices":[{"text":"once upon a time","index":0,"logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_logprobs":null}],"usage":{"prompt_tokens":5,"completion_tokens":16,"total_tokens":21,"prompt_tokens_details":null}}"#,
    r#"{"choices":[{"message":{"content":"a"},"finish_reason":"stop"},{"message":{"content":"b"},"finish_reason":"stop"}],"usage":null}"#,
    r#"{"choices":[{"message":{"content":[{"type":"text","text":"parts"}]},"finish_reason":null}]}"#,
    r#"{"choices":[{"message":{"content":"x"},"finish_reason":"stop because sk-secret"}],"usage":{"input_tokens":3,"output_tokens":4,"input_tokens_details":{"cached_tokens":1},"output_tokens_details":{"reasoning_tokens":2},"cache_creation_input_tokens":5}}"#,
    r#"{"choices":[{"message":{"content":"x","tool_calls":null},"finish_reason":true}],"error":null,"data":null}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
    r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
    r#"{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"completion_tokens_details":{"reasoning_tokens":null}}}"#,
];

/// Checks one body: where the quick read answers, serde_json answers
/// the same. Whether the quick read answered.
fn agree(text: &str) -> bool {
    let quick = completion(text).is_some_and(|q| (1..=MAX_CHOICES).contains(&q.choices.count));
    if !quick {
        return false;
    }
    match (
        inspect_completion(text.as_bytes()),
        completion_by_serde(text),
    ) {
        (Ok(quick), Ok(slow)) => assert_eq!(format!("{quick:?}"), format!("{slow:?}"), "{text}"),
        (quick, slow) => panic!("the quick read answered {quick:?}, serde {slow:?}: {text}"),
    }
    true
}

#[test]
fn answers_read_quickly_are_read_the_same() {
    let quick = ANSWERS.iter().filter(|a| agree(a)).count();
    // All but the one with no choices and the error object.
    assert_eq!(quick, ANSWERS.len() - 2);
}

#[test]
fn odd_values_are_left_to_serde_or_read_alike() {
    let odd = [
        // Numbers serde_json reads where the scanner would only skip.
        r#"{"choices":[{"finish_reason":5}]}"#,
        r#"{"choices":[{"message":1e400}]}"#,
        r#"{"x":1e400,"choices":[{}]}"#,
        r#"{"x":-0.5E-3,"choices":[1]}"#,
        r#"{"x":01,"choices":[{}]}"#,
        r#"{"x":-,"choices":[{}]}"#,
        r#"{"x":1.,"choices":[{}]}"#,
        r#"{"x":.5,"choices":[{}]}"#,
        r#"{"usage":{"prompt_tokens":-1},"choices":[{}]}"#,
        r#"{"usage":{"prompt_tokens":1.0},"choices":[{}]}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551616},"choices":[{}]}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551615},"choices":[{}]}"#,
        r#"{"usage":{"prompt_tokens_details":{"cached_tokens":"3"}},"choices":[{}]}"#,
        r#"{"usage":{"prompt_tokens_details":[3]},"choices":[{}]}"#,
        r#"{"usage":[1,2],"choices":[{}]}"#,
        // Fields twice: serde refuses the struct's, a choice keeps the last.
        r#"{"usage":null,"usage":null,"choices":[{}]}"#,
        r#"{"choices":[{"finish_reason":"a","finish_reason":null}]}"#,
        r#"{"choices":[{"message":{"content":"a","content":null}}]}"#,
        r#"{"usage":{"prompt_tokens":1,"prompt_tokens":2},"choices":[{}]}"#,
        // Escapes: ignored strings need only hex, text needs real chars.
        r#"{"x":"\ud800","choices":[{}]}"#,
        r#"{"x\ud800":1,"choices":[{}]}"#,
        r#"{"choices":[{"message":{"content":"\ud800"}}]}"#,
        r#"{"choices":[{"message":{"content":"\ud83d\ude00!"}}]}"#,
        r#"{"choices":[{"message":"\udc00"}]}"#,
        r#"{"choices":["\ud800"]}"#,
        r#"{"ch\u006fices":[{"fin\u0069sh_reason":"st\u006fp"}]}"#,
        r#"{"x":"\x","choices":[{}]}"#,
        r#"{"x":"\u00g0","choices":[{}]}"#,
        "{\"x\":\"tab\there\",\"choices\":[{}]}",
        // Objects where serde reads keys as text.
        r#"{"choices":[{"message":{"content":{"a":1}}}]}"#,
        r#"{"choices":[{"finish_reason":{"\ud800":1}}]}"#,
        r#"{"choices":[{"finish_reason":[1,{"a":[]}]}]}"#,
        // Shapes and whitespace.
        r#"{"choices":{}}"#,
        r#"{"choices":"none"}"#,
        r#"{"data":{},"choices":[{}]}"#,
        r#"{"data":[1,2],"choices":[{}]}"#,
        r#"{"error":null,"choices":[{}]} "#,
        r#"{"choices":[{}]} x"#,
        r#"{"choices":[{}],}"#,
        r#"{"choices":[{},]}"#,
        "{\"choices\":[{}]}\u{c}",
        r#"{"choices":[nul]}"#,
        r#"{"choices":[truex]}"#,
    ];
    let quick = odd.iter().filter(|t| agree(t)).count();
    assert!(quick >= 10, "only {quick} read quickly");
}

#[test]
fn nesting_is_followed_only_as_deep_as_serde_follows_it() {
    for depth in [50, 98, 99, 100, 127, 128, 200] {
        let text = format!(
            r#"{{"x":{}{},"choices":[{{}}]}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let quick = agree(&text);
        assert_eq!(quick, depth < 100, "{depth}");
    }
}

/// A small deterministic generator (xorshift), for the mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes and spellings that change what a body means.
const PIECES: [&str; 30] = [
    "\"",
    "\\",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "0",
    "1",
    "-",
    "e",
    ".",
    "n",
    "u",
    " ",
    "\n",
    "\u{1}",
    "x",
    "null",
    "true",
    "[]",
    "{}",
    "1e400",
    "-0",
    "01",
    "\"\\ud800\"",
    "\\u0041",
    "\"choices\":[{}],",
    "\"usage\":{},",
];

fn mutate(rng: &mut Rng, text: &str) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(b.len() + 1);
        match rng.below(4) {
            0 if at < b.len() => {
                b.remove(at);
            }
            1 => {
                let piece = PIECES[rng.below(PIECES.len())];
                b.splice(at..at, piece.bytes());
            }
            2 if at < b.len() => {
                let piece = PIECES[rng.below(PIECES.len())];
                let end = (at + 1 + rng.below(6)).min(b.len());
                b.splice(at..end, piece.bytes());
            }
            _ => {
                // A stretch copied elsewhere: fields twice, values moved.
                let from = rng.below(b.len());
                let len = rng.below(40).min(b.len() - from);
                let copy = b[from..from + len].to_vec();
                b.splice(at..at, copy);
            }
        }
    }
    b
}

/// `each` mutations of every text in `texts` (from the generator's
/// `seed`) that are still JSON objects, each handed to `read`, which says
/// whether the quick read took it: how many were tried, and how many
/// read quickly.
pub(in crate::wire) fn mutations(
    seed: u64,
    texts: &[&str],
    each: usize,
    mut read: impl FnMut(&str) -> bool,
) -> (usize, usize) {
    let mut rng = Rng(seed);
    let (mut tried, mut quick) = (0, 0);
    for text in texts {
        for _ in 0..each {
            let bytes = mutate(&mut rng, text);
            let Ok(text) = object_bytes(&bytes) else {
                continue;
            };
            tried += 1;
            quick += usize::from(read(text));
        }
    }
    (tried, quick)
}

#[test]
fn mutated_answers_read_quickly_are_read_the_same() {
    let (tried, quick) = mutations(0x9e37_79b9_7f4a_7c15, &ANSWERS, 4000, agree);
    // The mutations are not all refused: many still read as answers.
    assert!(tried > 40_000 && quick > tried / 10, "{quick} of {tried}");
}
