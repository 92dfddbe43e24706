//! One consult: the `oracle_consult` tool conclave adds to the base's
//! request, the question it sends the oracle (with a hint and the last
//! few messages), the most that question can cost, and what the base gets
//! back as the tool's result.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::error::ModelError;
use crate::labels::{Role, Verdict};
use crate::model::{Call, CallSize};
use crate::strategy::Member;
use crate::wire::{ChatRequest, Message};

/// The tool's name.
pub const TOOL: &str = "oracle_consult";

/// Tokens a chat template may add per message, beyond its text.
const TEMPLATE_TOKENS: u64 = 8;

const DESCRIPTION: &str = "Ask a stronger expert model one focused question when the answer \
needs judgement you are unsure of: a design trade-off, a subtle bug, whether an approach is \
sound, how to weigh conflicting requirements. Not for facts you can look up or things you \
already know. Ask at most once or twice; you will get the expert's answer as this tool's \
result, then answer the user yourself.";

const INSTRUCTION: &str = "You are an expert consulted by another assistant in the middle of \
its conversation with a user. Answer its question directly and concisely, with your \
reasoning where it matters; the assistant will use your answer to reply to the user.";

/// The tool definition added to the base's `tools`.
pub fn tool() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": TOOL,
            "description": DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {
                    "question": {"type": "string", "description": "The one question for the expert."},
                    "context_hint": {"type": "string", "description": "What the expert needs to know to answer it (optional)."}
                },
                "required": ["question"]
            }
        }
    })
}

/// How the oracle is asked.
pub struct OracleCall {
    pub member: Member,
    pub context_messages: usize,
    pub temperature: f64,
    pub max_tokens: u32,
    pub reasoning_effort: Option<String>,
    pub timeout: Duration,
}

/// A consult's question, read from the tool call's arguments.
pub struct Question {
    pub question: String,
    pub hint: Option<String>,
}

impl Question {
    pub fn read(arguments: &str) -> Result<Question, String> {
        let v: Value = serde_json::from_str(arguments)
            .map_err(|e| format!("the arguments are not JSON ({e})"))?;
        let question = v
            .get("question")
            .and_then(Value::as_str)
            .filter(|q| !q.trim().is_empty())
            .ok_or("`question` is missing")?;
        Ok(Question {
            question: question.to_owned(),
            hint: v
                .get("context_hint")
                .and_then(Value::as_str)
                .filter(|h| !h.trim().is_empty())
                .map(str::to_owned),
        })
    }
}

impl OracleCall {
    /// The last `context_messages` messages of the conversation, as text.
    fn recent(&self, conversation: &[Message]) -> String {
        let said: Vec<String> = conversation
            .iter()
            .filter(|m| m.role != "system" && m.role != "developer")
            .map(|m| (m.role.as_str(), m.text()))
            .filter(|(_, text)| !text.trim().is_empty())
            .map(|(role, text)| format!("[{role}] {}", text.trim()))
            .collect();
        let from = said.len().saturating_sub(self.context_messages);
        said[from..].join("\n")
    }

    /// The request that asks the oracle `q`.
    pub fn request(&self, q: &Question, conversation: &[Message]) -> ChatRequest {
        let mut user = format!("Question: {}\n", q.question);
        if let Some(h) = &q.hint {
            user.push_str(&format!("\nContext hint: {h}\n"));
        }
        let recent = self.recent(conversation);
        if !recent.is_empty() {
            user.push_str(&format!(
                "\nThe conversation so far (latest messages):\n<<<\n{recent}\n>>>\n"
            ));
        }
        let mut extra = Map::new();
        match &self.reasoning_effort {
            // Reasoning models take neither `temperature` nor `max_tokens`.
            Some(e) => {
                extra.insert("reasoning_effort".into(), json!(e));
                extra.insert("max_completion_tokens".into(), json!(self.max_tokens));
            }
            None => {
                extra.insert("temperature".into(), json!(self.temperature));
                extra.insert("max_tokens".into(), json!(self.max_tokens));
            }
        }
        ChatRequest::internal(&self.member.name, INSTRUCTION, user, extra)
    }

    /// The most `req` can cost: every byte of its text a token, plus the
    /// chat template's tokens per message, in; `oracle_max_tokens` out.
    pub fn worst_usd(&self, req: &ChatRequest) -> f64 {
        let template = TEMPLATE_TOKENS.saturating_mul(req.messages.len() as u64);
        let input = (req.text_bytes() as u64).saturating_add(template);
        self.member
            .model
            .estimate(CallSize {
                input,
                images: 0,
                output: u64::from(self.max_tokens),
            })
            .cost_usd
    }

    /// Asks the oracle `req`; its answer.
    pub async fn ask(&self, call: &Call, req: ChatRequest) -> Result<String, ModelError> {
        let (_phase, consulting) = call.phase("oracle.consult");
        let call = consulting
            .with_role(Role::Oracle)
            .with_timeout(self.timeout);
        let (call, _) = call.cancellable();
        let reply = self.member.model.chat(call, req.into()).await?;
        let (reply, out) = reply.buffer().await?;
        reply.attempt.set_verdict(Verdict::Ok, None);
        if out.text.trim().is_empty() {
            return Err(ModelError::Invalid {
                upstream: self.member.name.clone(),
                detail: "the oracle answered nothing".into(),
            });
        }
        Ok(out.text)
    }
}
