//! A simulated model continuing a partial answer (`continue_repeats`):
//! the conversation ends with an assistant message (a prefill), or with
//! one and a user message asking to go on, whose text begins the reply;
//! the model answers the rest, repeating the word the partial stops in
//! and a few before it, as real models do at a seam (mid-stream failover
//! trims that repeat, see `strategy::failover::seam`).

use serde_json::Value;

use crate::wire::content_text;

/// The partial answer a request asks to continue: a final assistant
/// message, or one followed by a last user message.
fn partial_answer(req: &Value) -> Option<String> {
    let ms = req.get("messages")?.as_array()?;
    let role = |m: &Value| m.get("role").and_then(Value::as_str).map(str::to_owned);
    let last = ms.last()?;
    let m = match role(last).as_deref() {
        Some("assistant") => last,
        Some("user") if ms.len() >= 2 => ms.get(ms.len() - 2)?,
        _ => return None,
    };
    (role(m).as_deref() == Some("assistant")).then(|| content_text(m.get("content")))
}

/// What is left of `text` after the partial answer `req` ends with,
/// from the start of the word the partial stops in and `repeats` words
/// before it (a model repeats a little at the seam); `text` whole when
/// the request continues nothing of it.
pub(super) fn continued(text: &str, req: &Value, repeats: usize) -> String {
    let Some(partial) = partial_answer(req) else {
        return text.to_owned();
    };
    let partial = partial.trim_end();
    if partial.is_empty() || !text.starts_with(partial) {
        return text.to_owned();
    }
    let ws = |c: char| c.is_whitespace();
    let mut start = partial.len();
    if !text[start..].starts_with(ws) {
        // Inside a word (or at its end): back to its start.
        start = text[..start].rfind(ws).map_or(0, |i| i + 1);
    }
    for _ in 0..repeats {
        let before = text[..start].trim_end_matches(ws);
        start = before.rfind(ws).map_or(0, |i| i + 1);
    }
    text[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_continuation_repeats_the_seam() {
        let text = "The quick brown fox jumps.";
        let req = |partial: &str| json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": partial}]});
        assert_eq!(
            continued(text, &req("The quick bro"), 0),
            "brown fox jumps."
        );
        assert_eq!(
            continued(text, &req("The quick bro"), 1),
            "quick brown fox jumps."
        );
        assert_eq!(continued(text, &req("The quick"), 0), " brown fox jumps.");
        assert_eq!(
            continued(text, &req("The quick "), 1),
            "quick brown fox jumps."
        );
        assert_eq!(continued(text, &req("The quick "), 0), " brown fox jumps.");
        assert_eq!(continued(text, &req("Other"), 2), text);
        let asked = json!({"messages": [{"role": "assistant", "content": "The quick brown f"}, {"role": "user", "content": "go on"}]});
        assert_eq!(continued(text, &asked, 1), "brown fox jumps.");
    }
}
