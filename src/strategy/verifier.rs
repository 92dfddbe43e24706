//! The chain verifier: asks a model whether a tier's answer is good enough,
//! as JSON `{"accept": bool, "feedback": "…"}`, and reads the verdict
//! leniently (code fences, leading prose). A verifier that fails or says
//! something unreadable counts as "escalate", the safe default.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::model::{Call, ChatModel, Role};
use crate::openai::{AssistantOutput, ChatRequest, Message};
use crate::telemetry::Verdict;

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
}

/// What the verifier decided about one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Accept,
    Escalate(String),
}

impl Verifier {
    pub async fn verify(
        &self,
        call: &Call,
        original: &ChatRequest,
        output: &AssistantOutput,
    ) -> Decision {
        let req = self.request(original, output);
        let reply = match self.model.chat(call.with_role(Role::Verifier), req).await {
            Ok(r) => r,
            Err(e) => return Decision::Escalate(format!("the verifier failed: {e}")),
        };
        let (reply, said) = match reply.buffer().await {
            Ok(x) => x,
            Err(e) => return Decision::Escalate(format!("the verifier failed: {e}")),
        };
        match parse_verdict(&said.text) {
            Some((true, feedback)) => {
                reply.attempt.set_verdict(Verdict::Accept, feedback);
                Decision::Accept
            }
            Some((false, feedback)) => {
                let feedback = feedback.unwrap_or_else(|| "rejected without feedback".into());
                reply
                    .attempt
                    .set_verdict(Verdict::Escalate, Some(feedback.clone()));
                Decision::Escalate(feedback)
            }
            None => {
                let shown: String = said.text.chars().take(120).collect();
                reply
                    .attempt
                    .set_verdict(Verdict::Error, Some(format!("unreadable verdict: {shown}")));
                Decision::Escalate("the verifier's verdict could not be read".into())
            }
        }
    }

    fn request(&self, original: &ChatRequest, output: &AssistantOutput) -> ChatRequest {
        let mut extra = Map::new();
        if self.json_mode {
            extra.insert("response_format".into(), json!({"type": "json_object"}));
        }
        ChatRequest {
            model: self.name.to_string(),
            messages: vec![
                Message::new("system", SYSTEM),
                Message::new("user", render(original, output)),
            ],
            stream: None,
            stream_options: None,
            extra,
        }
    }
}

/// The conversation, the candidate and the question, as one user message
/// (one message keeps strict chat templates happy).
fn render(original: &ChatRequest, output: &AssistantOutput) -> String {
    let mut system = Vec::new();
    let mut convo = String::new();
    for m in &original.messages {
        let mut text = m.text();
        if let Some(calls) = m.rest.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                let f = c.get("function");
                let name = f
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                let args = f
                    .and_then(|f| f.get("arguments"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                text.push_str(&format!("\ntool call: {name}({args})"));
            }
        }
        if m.role == "system" || m.role == "developer" {
            system.push(text);
        } else {
            convo.push_str(&format!("[{}] {}\n", m.role, text.trim()));
        }
    }
    let mut out = String::new();
    if !system.is_empty() {
        out.push_str(&format!(
            "Original system prompt:\n<<<\n{}\n>>>\n\n",
            system.join("\n")
        ));
    }
    out.push_str(&format!("Conversation:\n{convo}\n"));
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

/// Reads `{"accept": …, "feedback": …}` out of a model's reply, tolerating
/// code fences and prose around the object. `None` when there is no verdict.
pub fn parse_verdict(text: &str) -> Option<(bool, Option<String>)> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    let obj: Value = serde_json::from_str(text.get(start..=end)?).ok()?;
    let accept = match obj.get("accept")? {
        Value::Bool(b) => *b,
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "accept" => true,
            "false" | "no" | "reject" | "escalate" => false,
            _ => return None,
        },
        _ => return None,
    };
    let feedback = obj
        .get("feedback")
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
        assert_eq!(parse_verdict("looks good to me"), None);
        assert_eq!(parse_verdict(r#"{"verdict": "fine"}"#), None);
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
