//! Answers made from a stored entry (a hit, or a coalesced waiter's share
//! of another request's call), and the test of what may be stored: a
//! complete answer, every choice finished for `stop`, `length` or
//! `tool_calls`.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::attempt::Attempt;
use crate::context::RequestCtx;
use crate::error::ModelError;
use crate::labels::Role;
use crate::model::{Completion, Meta, Reply, ReplyBody};
use crate::sink::ModelInfo;
use crate::store::cache::Entry;
use crate::stream::whole_to_stream;
use crate::wire::{WholeBody, inspect_completion};

/// Why an answer ended that lets it be stored.
const COMPLETE: &[&str] = &["stop", "length", "tool_calls"];

/// Whether a whole chat completion may be stored: an answer (not an
/// error), every choice finished for a reason in [`COMPLETE`].
pub fn complete(body: &[u8]) -> bool {
    if !matches!(inspect_completion(body), Ok(WholeBody::Answer { .. })) {
        return false;
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let Some(choices) = v.get("choices").and_then(Value::as_array) else {
        return false;
    };
    !choices.is_empty()
        && choices.iter().all(|c| {
            c.get("finish_reason")
                .and_then(Value::as_str)
                .is_some_and(|r| COMPLETE.contains(&r))
        })
}

/// The tokens a whole completion's usage reports.
pub fn tokens(body: &[u8]) -> u64 {
    match inspect_completion(body) {
        Ok(WholeBody::Answer { usage: Some(u), .. }) => {
            u.prompt_tokens.saturating_add(u.completion_tokens)
        }
        _ => 0,
    }
}

/// What a hit answers with: the stored body with a new `id` and
/// `created`, whole or replayed as a stream as `stream` asks, with the
/// `x-conclave-cache` and `age` headers, and an attempt that records
/// nothing (no upstream call, nothing billed).
pub fn reply(
    entry: &Entry,
    ctx: &Arc<RequestCtx>,
    info: &Arc<ModelInfo>,
    role: Role,
    stream: bool,
    served_by: Option<Arc<str>>,
) -> Result<Reply, ModelError> {
    let mut v: Value = serde_json::from_slice(&entry.body)?;
    let now = ctx.clock.unix_secs();
    if let Value::Object(m) = &mut v {
        m.insert(
            "id".into(),
            json!(format!("chatcmpl-{}", uuid::Uuid::new_v4().simple())),
        );
        m.insert("created".into(), json!(now));
    }
    let body = Bytes::from(serde_json::to_vec(&v)?);
    let usage = match inspect_completion(&body) {
        Ok(WholeBody::Answer { usage, .. }) => usage,
        _ => None,
    };
    let completion = Completion { body, usage };
    let body = if stream {
        ReplyBody::Stream(whole_to_stream(&completion)?)
    } else {
        ReplyBody::Whole(completion)
    };
    let mut meta = Meta {
        served_by,
        headers: Vec::new(),
    };
    meta.add_header("x-conclave-cache", "hit");
    meta.add_header("age", &now.saturating_sub(entry.stored_at).to_string());
    Ok(Reply {
        body,
        meta,
        attempt: Attempt::unrecorded(ctx, info, role),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_finished_answers_are_complete() {
        let ok = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}]}"#;
        assert!(complete(ok));
        let cut = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":null}]}"#;
        assert!(!complete(cut));
        let filtered = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"content_filter"}]}"#;
        assert!(!complete(filtered));
        let error = br#"{"error":{"message":"no"}}"#;
        assert!(!complete(error));
    }
}
