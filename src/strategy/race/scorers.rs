//! The race's outside scorers: a judge model that scores one candidate
//! blind against the route's criteria (0–10, through a `score_response`
//! tool call or a JSON answer), and a webhook that gets `{request,
//! candidate}` and answers `{"score": x}` with x in [0, 1]. Each has an
//! output cap or a size bound and a timeout; a scorer that fails gives its
//! signal 0 and says why, and never fails the race.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::labels::Role;
use crate::model::{Call, ChatModel};
use crate::wire::{AssistantOutput, ChatRequest};

const TOOL: &str = "score_response";

const INSTRUCTION: &str = "You score one candidate reply to a conversation, written by an \
assistant whose name you are not told, against the criteria given. Call the score_response tool \
once with a score from 0 (useless) to 10 (perfect) and a one-line reason. If you cannot call \
tools, answer only with JSON: {\"score\": <0-10>, \"reason\": \"...\"}.";

/// Largest webhook answer read.
const MAX_WEBHOOK_BODY: usize = 64 * 1024;

pub struct Judge {
    pub name: Arc<str>,
    pub model: Arc<dyn ChatModel>,
    pub criteria: String,
    pub max_tokens: u32,
    pub timeout: Duration,
}

impl Judge {
    /// The candidate's judge signal in [0, 1], or why there is none.
    pub async fn score(
        &self,
        call: &Call,
        original: &ChatRequest,
        answer: &AssistantOutput,
    ) -> Result<f64, String> {
        let call = call.with_role(Role::Judge).with_timeout(self.timeout);
        let (call, _) = call.cancellable();
        let mut extra = Map::new();
        extra.insert("max_tokens".into(), json!(self.max_tokens));
        extra.insert("tools".into(), json!([tool_spec()]));
        extra.insert("tool_choice".into(), json!("auto"));
        let t = original.transcript();
        let user = format!(
            "{}Conversation:\n{}\nCandidate reply:\n<<<\n{}\n>>>\n\nCriteria:\n{}\n\nScore the candidate reply.",
            t.system_block(),
            t.turns,
            answer.render(),
            self.criteria
        );
        let req = ChatRequest::internal(&self.name, INSTRUCTION, user, extra);
        let reply = self
            .model
            .chat(call, Arc::new(req))
            .await
            .map_err(|e| format!("the judge failed: {e}"))?;
        let (reply, said) = reply
            .buffer()
            .await
            .map_err(|e| format!("the judge failed: {e}"))?;
        let score = said
            .tool_calls
            .iter()
            .find(|c| c.name == TOOL)
            .and_then(|c| read_score(&c.arguments))
            .or_else(|| read_score(&said.text));
        match score {
            Some(s) => {
                reply
                    .attempt
                    .set_verdict(crate::labels::Verdict::Ok, Some(format!("score {s}")));
                Ok(s / 10.0)
            }
            None => {
                let shown: String = said.render().chars().take(120).collect();
                Err(format!("the judge's score could not be read: {shown}"))
            }
        }
    }
}

fn tool_spec() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": TOOL,
            "description": "Score the candidate reply.",
            "parameters": {
                "type": "object",
                "properties": {
                    "score": {"type": "number", "minimum": 0, "maximum": 10},
                    "reason": {"type": "string"}
                },
                "required": ["score"]
            }
        }
    })
}

/// A 0–10 `score` from a JSON object somewhere in `text`.
fn read_score(text: &str) -> Option<f64> {
    let start = text.find('{')?;
    let mut objects = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    let v = objects.next()?.ok()?;
    let s = match v.get("score")? {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    (0.0..=10.0).contains(&s).then_some(s)
}

pub struct Webhook {
    pub url: reqwest::Url,
    pub timeout: Duration,
    pub client: reqwest::Client,
}

impl Webhook {
    /// POSTs `{request, candidate}`; the answer's `score` in [0, 1].
    pub async fn score(
        &self,
        original: &ChatRequest,
        answer: &AssistantOutput,
    ) -> Result<f64, String> {
        let body = json!({"request": original, "candidate": answer});
        tokio::time::timeout(self.timeout, self.ask(body))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)))
    }

    async fn ask(&self, body: Value) -> Result<f64, String> {
        let resp = self
            .client
            .post(self.url.clone())
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("the webhook failed: {}", e.without_url()))?;
        if !resp.status().is_success() {
            return Err(format!(
                "the webhook answered HTTP {}",
                resp.status().as_u16()
            ));
        }
        let mut buf = Vec::new();
        let mut parts = resp.bytes_stream();
        while let Some(part) = parts.next().await {
            let part = part.map_err(|e| format!("the webhook failed: {}", e.without_url()))?;
            if buf.len() + part.len() > MAX_WEBHOOK_BODY {
                return Err(format!(
                    "the webhook sent more than {MAX_WEBHOOK_BODY} bytes"
                ));
            }
            buf.extend_from_slice(&part);
        }
        let v: Value = serde_json::from_slice(&buf)
            .map_err(|_| "the webhook's answer is not JSON".to_owned())?;
        match v.get("score").and_then(Value::as_f64) {
            Some(s) if (0.0..=1.0).contains(&s) => Ok(s),
            _ => Err("the webhook's answer has no score from 0 to 1".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_read_from_tool_arguments_or_prose() {
        assert_eq!(read_score(r#"{"score": 7, "reason": "ok"}"#), Some(7.0));
        assert_eq!(read_score(r#"Verdict: {"score": "8.5"} done"#), Some(8.5));
        assert_eq!(read_score(r#"{"score": 11}"#), None);
        assert_eq!(read_score("seven out of ten"), None);
        assert_eq!(read_score(r#"{"grade": 7}"#), None);
    }
}
