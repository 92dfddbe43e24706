use super::*;
use serde_json::json;

/// A usage detail is a count only when it is a non-negative integer;
/// anything else there (of any shape, nested or not) reads as none and
/// leaves the rest of the usage read.
#[test]
fn usage_details_that_are_not_counts_read_as_none() {
    for odd in [
        json!(-3),
        json!(2.5),
        json!("12"),
        json!(true),
        json!(null),
        json!([1, [2]]),
        json!({"n": {"m": 1}}),
    ] {
        let u: Usage = serde_json::from_value(json!({
            "prompt_tokens": 9, "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": odd, "audio_tokens": 1},
            "completion_tokens_details": {"reasoning_tokens": 3},
            "cache_creation_input_tokens": odd,
        }))
        .unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (9, 4, 0),
            "{odd}"
        );
        assert_eq!((u.reasoning_tokens, u.cache_write_tokens), (3, 0), "{odd}");
    }
    let u: Usage = serde_json::from_str(
        r#"{"input_tokens":7,"output_tokens":2,"cache_creation_input_tokens":5,
            "input_tokens_details":{"cached_tokens":6}}"#,
    )
    .unwrap();
    assert_eq!(
        (u.prompt_tokens, u.cached_tokens, u.cache_write_tokens),
        (7, 6, 5)
    );
}
