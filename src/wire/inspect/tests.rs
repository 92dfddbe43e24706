use super::*;

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
fn null_usage_is_removed_exactly() {
    let cases = [
        (
            r#"{"id":"x","choices":[],"usage":null}"#,
            r#"{"id":"x","choices":[]}"#,
        ),
        (r#"{"usage":null,"id":"x"}"#, r#"{"id":"x"}"#),
        (
            r#"{"c":"a\",\"usage\":null","usage":null}"#,
            r#"{"c":"a\",\"usage\":null"}"#,
        ),
        (r#"{"id": "x", "usage": null}"#, r#"{"id":"x"}"#),
    ];
    for (input, want) in cases {
        let got = match null_usage_span(input.as_bytes()) {
            Some(r) => format!("{}{}", &input[..r.start], &input[r.end..]),
            None => String::from_utf8(strip_usage(input.as_bytes()).unwrap().to_vec()).unwrap(),
        };
        assert_eq!(got, want, "{input}");
    }
}

#[test]
fn a_success_status_is_not_an_answer_by_itself() {
    for body in [
        &b"{}"[..],
        b"[]",
        b"{\"choices\":[]}",
        b"\"x\"",
        b"{\"choices\":[{\"message\":{\"content\":\"\xff\"}}]}",
    ] {
        assert!(
            inspect_completion(body).is_err(),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    assert!(matches!(
        inspect_completion(br#"{"error":{"message":"nope"}}"#),
        Ok(WholeBody::Error(m)) if m == "nope"
    ));
    assert!(matches!(
        inspect_completion(br#"{"choices":[{"message":{}}]}"#),
        Ok(WholeBody::Answer { usage: None, .. })
    ));
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
