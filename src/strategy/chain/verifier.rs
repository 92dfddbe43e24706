//! The chain verifier: asks a model whether a tier's answer is good enough,
//! as a JSON object with `accept` (a boolean) and `feedback` (a string),
//! and reads the verdict leniently ([`verdict`](super::verdict): code
//! fences, prose, the keys and words small models use, a verdict leading
//! an answer cut at `verifier_max_tokens`). The prompt describes the object
//! in words and shows two complete examples, never a template a small model
//! could copy as its answer. Each call is capped (`verifier_max_tokens`)
//! and timed (`verifier_timeout`). A verifier that fails or says something
//! unreadable counts as "escalate", the safe default, with no feedback;
//! feedback that only repeats the verifier's own instructions, or copies
//! the prompt's example feedback with small edits, is dropped: only a
//! verifier's own words about the answer reach the next tier.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, json};

use super::verdict;
use crate::labels::{Role, Verdict};
use crate::model::{Call, ChatModel};
use crate::wire::{AssistantOutput, ChatRequest};

/// The example feedback the prompt shows (a literal, for `concat!`):
/// feedback that copies it is no feedback ([`verdict::copies_example`]).
macro_rules! example_feedback {
    () => {
        "The reply gives the tower's year of opening, 1889, but the question asked for its \
         height: it is 330 metres."
    };
}

const SYSTEM: &str = concat!(
    "You are a strict reviewer. You see a conversation and a candidate reply \
written by another model. Decide whether the candidate correctly and completely answers the \
last request, following the original system prompt. Answer with one JSON object and nothing \
else. Its key accept is true when the candidate is good enough and false when it is not. Its \
key feedback is empty when you accept; when you reject, it says in your own words which \
mistake or omission you found in this candidate and how to fix it. Two examples of complete \
answers, about other conversations:\n\
{\"accept\": true, \"feedback\": \"\"}\n\
{\"accept\": false, \"feedback\": \"",
    example_feedback!(),
    "\"}"
);

/// The example's feedback, as a verifier may copy it.
const EXAMPLE: &str = example_feedback!();

/// The question closing the verifier's user message.
const QUESTION: &str = "Does the candidate reply correctly and completely answer the last \
request? Answer with the JSON object only.";

/// Headings of the verifier's user message.
const CONVERSATION: &str = "Conversation:";
const CANDIDATE: &str = "Candidate reply to check:";

/// Everything conclave writes into a verifier's request: feedback that
/// only repeats it is no feedback.
const PROMPT: &[&str] = &[SYSTEM, QUESTION, CONVERSATION, CANDIDATE];

/// What the event log records for feedback dropped as a copy.
const ECHO: &str = "(feedback dropped: it only repeats the verifier's instructions)";
/// What it records for feedback dropped as the example's, edited.
const COPIED_EXAMPLE: &str = "(feedback dropped: it copies the verifier prompt's example)";

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
        // The conversation and the candidate, as the verifier reads them.
        let context = render(original, output);
        let req = self.request(context.clone());
        let call = call.with_role(Role::Verifier).with_timeout(self.timeout);
        let (call, _) = call.cancellable();
        let reply = match self.model.chat(call, Arc::new(req)).await {
            Ok(r) => r,
            Err(e) => {
                return Decision::Failed(format!("the verifier failed: {}", e.public_message()));
            }
        };
        let (reply, said) = match reply.buffer().await {
            Ok(x) => x,
            Err(e) => {
                return Decision::Failed(format!("the verifier failed: {}", e.public_message()));
            }
        };
        match verdict::parse(&said.text) {
            Some(read) => {
                let (feedback, noted) = match read.feedback {
                    Some(f) if verdict::echoes(&f, PROMPT) => (None, Some(ECHO.to_owned())),
                    Some(f) if verdict::copies_example(&f, EXAMPLE, &[&context]) => {
                        (None, Some(COPIED_EXAMPLE.to_owned()))
                    }
                    f => (f.clone(), f),
                };
                if read.accept {
                    reply.attempt.set_verdict(Verdict::Accept, noted);
                    Decision::Accept
                } else {
                    reply.attempt.set_verdict(Verdict::Escalate, noted);
                    Decision::Escalate(feedback)
                }
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

    fn request(&self, user: String) -> ChatRequest {
        let mut extra = Map::new();
        extra.insert("max_tokens".into(), json!(self.max_tokens));
        if self.json_mode {
            extra.insert("response_format".into(), json!({"type": "json_object"}));
        }
        ChatRequest::internal(&self.name, SYSTEM, user, extra)
    }
}

/// The conversation, the candidate and the question, as one user message
/// (one message keeps strict chat templates happy).
fn render(original: &ChatRequest, output: &AssistantOutput) -> String {
    let t = original.transcript();
    let mut out = t.system_block();
    out.push_str(&format!("{CONVERSATION}\n{}\n", t.turns));
    out.push_str(&format!("{CANDIDATE}\n<<<\n{}\n>>>\n\n", output.render()));
    out.push_str(QUESTION);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_has_no_template_to_copy() {
        let req: ChatRequest = serde_json::from_value(json!({
            "model": "m", "messages": [{"role": "user", "content": "Say hello"}]
        }))
        .unwrap();
        let out = AssistantOutput::default();
        let all = format!("{SYSTEM}\n{}", render(&req, &out));
        for template in [
            "what is wrong",
            "what must change",
            "true|false",
            "true or false",
            "\"...\"",
        ] {
            assert!(!all.contains(template), "{template} in {all}");
        }
        // Its examples are whole verdicts; copied back, their feedback
        // is an echo, not feedback.
        let examples: Vec<&str> = SYSTEM.lines().filter(|l| l.starts_with('{')).collect();
        assert_eq!(examples.len(), 2, "{SYSTEM}");
        let read: Vec<_> = examples.iter().filter_map(|e| verdict::parse(e)).collect();
        assert_eq!(read.len(), 2);
        assert!(read[0].accept && read[0].feedback.is_none());
        assert!(!read[1].accept);
        assert_eq!(read[1].feedback.as_deref(), Some(EXAMPLE));
        assert!(verdict::echoes(
            read[1].feedback.as_deref().unwrap(),
            PROMPT
        ));
        assert!(verdict::echoes(
            "Decide whether the candidate correctly and completely answers the last request",
            PROMPT
        ));
        assert!(!verdict::echoes(
            "The reply is in English; the system prompt asks for French.",
            PROMPT
        ));
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
