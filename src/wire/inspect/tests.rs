use super::*;

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
}
