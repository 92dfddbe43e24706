use super::*;

#[test]
fn tokens_keep_their_whitespace() {
    assert_eq!(
        split_tokens("Hello  big world"),
        vec!["Hello", "  big", " world"]
    );
    assert_eq!(split_tokens("").len(), 0);
}

#[test]
fn last_user_leaves_out_a_chains_rejection_notes() {
    let note = |f: &str| format!("{}{f}", crate::wire::FEEDBACK_NOTE);
    let two = format!("hi\n\n{}\n{}", note("too short"), note("vague"));
    let cases = [
        // Appended to a string content.
        (
            json!({"messages": [{"role": "user", "content": two}]}),
            "hi",
        ),
        // A text part of its own.
        (
            json!({"messages": [{"role": "user", "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "text", "text": note("too short")}]}]}),
            "hi",
        ),
        // A user message of its own (after a tool result): passed over.
        (
            json!({"messages": [
                    {"role": "user", "content": "what is 6*7?"},
                    {"role": "tool", "content": "42"},
                    {"role": "user", "content": note("say 42")}]}),
            "what is 6*7?",
        ),
        // The phrase inside the client's own line is the client's.
        (
            json!({"messages": [{"role": "user", "content": format!("quote: {}", note("x"))}]}),
            "quote: A previous attempt was rejected: x",
        ),
        (json!({"messages": [{"role": "user", "content": ""}]}), ""),
    ];
    for (req, want) in cases {
        assert_eq!(last_user(&req), want, "{req}");
    }
}
