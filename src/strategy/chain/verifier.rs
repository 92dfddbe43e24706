//! The chain verifier: asks a model whether a tier's answer is good enough,
//! as JSON `{"accept": bool, "feedback": "…"}`, and reads the verdict
//! leniently (code fences, prose around it, keys in any case, the common
//! synonyms small models use). Each call is capped (`verifier_max_tokens`)
//! and timed (`verifier_timeout`). A verifier that fails or says something
//! unreadable counts as "escalate", the safe default, with no feedback: only
//! a verifier's own words are ever passed to the next tier.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::labels::{Role, Verdict};
use crate::model::{Call, ChatModel};
use crate::wire::{AssistantOutput, ChatRequest};

const SYSTEM: &str = "You are a strict reviewer. You see a conversation and a candidate reply \
written by another model. Decide whether the candidate correctly and completely answers the \
last request, following the original system prompt. Reply only with a JSON object: \
{\"accept\": true or false, \"feedback\": \"what is wrong and what must change, empty when accepting\"}.";

pub struct Verifier {
    pub name: Arc<str>,
    pub model: Arc<dyn ChatModel>,
    /// Ask for `response_format = json_object` (the verifier is a concrete
    /// model whose upstream honours it).
    pub json_mode: bool,
    /// `max_tokens` of each verifier call.
    pub max_tokens: u32,
    /// How long one verifier call may take.
    pub timeout: Duration,
}

/// What the verifier decided about one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Accept,
    /// Rejected, with the verifier's feedback if it gave any.
    Escalate(Option<String>),
    /// The verifier failed or its verdict could not be read (why, for the
    /// attempt trail; never shown to a model).
    Failed(String),
}

impl Verifier {
    pub async fn verify(
        &self,
        call: &Call,
        original: &ChatRequest,
        output: &AssistantOutput,
    ) -> Decision {
        let req = self.request(original, output);
        let call = call.with_role(Role::Verifier).with_timeout(self.timeout);
        let (call, _) = call.cancellable();
        let reply = match self.model.chat(call, Arc::new(req)).await {
            Ok(r) => r,
            Err(e) => return Decision::Failed(format!("the verifier failed: {e}")),
        };
        let (reply, said) = match reply.buffer().await {
            Ok(x) => x,
            Err(e) => return Decision::Failed(format!("the verifier failed: {e}")),
        };
        match parse_verdict(&said.text) {
            Some((true, feedback)) => {
                reply.attempt.set_verdict(Verdict::Accept, feedback);
                Decision::Accept
            }
            Some((false, feedback)) => {
                reply
                    .attempt
                    .set_verdict(Verdict::Escalate, feedback.clone());
                Decision::Escalate(feedback)
            }
            None => {
                let shown: String = said.text.chars().take(120).collect();
                reply
                    .attempt
                    .set_verdict(Verdict::Error, Some(format!("unreadable verdict: {shown}")));
                Decision::Failed("the verifier's verdict could not be read".into())
            }
        }
    }

    fn request(&self, original: &ChatRequest, output: &AssistantOutput) -> ChatRequest {
        let mut extra = Map::new();
        extra.insert("max_tokens".into(), json!(self.max_tokens));
        if self.json_mode {
            extra.insert("response_format".into(), json!({"type": "json_object"}));
        }
        ChatRequest::internal(&self.name, SYSTEM, render(original, output), extra)
    }
}

/// The conversation, the candidate and the question, as one user message
/// (one message keeps strict chat templates happy).
fn render(original: &ChatRequest, output: &AssistantOutput) -> String {
    let t = original.transcript();
    let mut out = t.system_block();
    out.push_str(&format!("Conversation:\n{}\n", t.turns));
    out.push_str(&format!(
        "Candidate reply to check:\n<<<\n{}\n>>>\n\n",
        output.render()
    ));
    out.push_str(
        "Does the candidate reply correctly and completely answer the last request? \
         Reply only with JSON: {\"accept\": true|false, \"feedback\": \"...\"}",
    );
    out
}

/// Keys read as the verdict, in any case.
pub const VERDICT_KEYS: &[&str] = &[
    "accept", "accepted", "approve", "approved", "verdict", "decision",
];
/// Values read as "accept" (strings in any case, trimmed), besides `true` and 1.
pub const YES: &[&str] = &[
    "true", "yes", "y", "accept", "accepted", "approve", "approved", "pass", "ok",
];
/// Values read as "reject", besides `false` and 0.
pub const NO: &[&str] = &[
    "false", "no", "n", "reject", "rejected", "escalate", "fail", "deny", "denied",
];
/// Keys read as the feedback, in any case.
pub const FEEDBACK_KEYS: &[&str] = &["feedback", "reason", "comment", "explanation"];

/// Reads a verdict out of a model's reply, tolerating code fences and
/// prose around the object, keys in any case and the synonyms above.
/// `None` when there is no verdict.
pub fn parse_verdict(text: &str) -> Option<(bool, Option<String>)> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    let obj: Value = serde_json::from_str(text.get(start..=end)?).ok()?;
    let obj = obj.as_object()?;
    let field = |keys: &[&str]| {
        keys.iter().find_map(|k| {
            obj.iter()
                .find(|(name, _)| name.trim().eq_ignore_ascii_case(k))
                .map(|(_, v)| v)
        })
    };
    let accept = match field(VERDICT_KEYS)? {
        Value::Bool(b) => *b,
        Value::Number(n) if n.as_f64() == Some(1.0) => true,
        Value::Number(n) if n.as_f64() == Some(0.0) => false,
        Value::String(s) => {
            let s = s.trim().to_ascii_lowercase();
            if YES.contains(&s.as_str()) {
                true
            } else if NO.contains(&s.as_str()) {
                false
            } else {
                return None;
            }
        }
        _ => return None,
    };
    let feedback = field(FEEDBACK_KEYS)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    Some((accept, feedback))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_read_leniently() {
        assert_eq!(
            parse_verdict(r#"{"accept": true, "feedback": ""}"#),
            Some((true, None))
        );
        assert_eq!(
            parse_verdict("Sure! ```json\n{\"accept\": false, \"feedback\": \"too short\"}\n```"),
            Some((false, Some("too short".into())))
        );
        assert_eq!(parse_verdict(r#"{"accept": "no"}"#), Some((false, None)));
        assert_eq!(parse_verdict(r#"{"Accept": true}"#), Some((true, None)));
        assert_eq!(
            parse_verdict(r#"{"APPROVED": "Yes", "Reason": "fine"}"#),
            Some((true, Some("fine".into())))
        );
        assert_eq!(
            parse_verdict(r#"{"verdict": "reject"}"#),
            Some((false, None))
        );
        assert_eq!(parse_verdict(r#"{"accepted": 0}"#), Some((false, None)));
        assert_eq!(parse_verdict("looks good to me"), None);
        assert_eq!(parse_verdict(r#"{"verdict": "fine"}"#), None);
        assert_eq!(parse_verdict(r#"{"score": 9}"#), None);
        assert_eq!(parse_verdict("{not json}"), None);
    }

    #[test]
    fn render_includes_system_conversation_and_candidate() {
        let req: ChatRequest = serde_json::from_value(json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": "Say hello"}
            ]
        }))
        .unwrap();
        let out = AssistantOutput {
            text: "Bonjour".into(),
            ..Default::default()
        };
        let r = render(&req, &out);
        assert!(r.contains("Answer in French."));
        assert!(r.contains("[user] Say hello"));
        assert!(r.contains("<<<\nBonjour\n>>>"));
    }
}
