//! The synthesis: a model judges the panel's answers blind. It sees them
//! labelled `A`, `B`, … in a shuffled order (no panellist's name, id or
//! `model` anywhere in its request) with the conversation, and an injected
//! `rank_responses` tool whose schema allows only the labels given. It is
//! asked to call the tool, then write guidance for the default model that
//! judges the candidates rather than merging them. A model that only calls
//! the tool gets a second turn (the tool's result) to write the guidance;
//! one that writes guidance without calling it is still used, and a
//! malformed call is reported and ignored.
//!
//! Servers that ignore `tool_choice: "auto"` (llama-cpp-python's default
//! chat formats) get text only: a ranking the model wrote into it as a
//! call (`{"name": "rank_responses", "arguments": …}`, bare `{"rankings":
//! …}`, in `<tool_call>` tags or a code fence) is read as if called and
//! cut out of the guidance; text without one is guidance without a ranking.
//! No second turn with a named `tool_choice` is made to get one: the
//! ranking only feeds the event log and verdicts, and that turn would put a
//! whole synthesis call on the request's critical path. The assistant turn
//! conclave writes for the second turn has `"content": ""` (never `null`,
//! which llama-cpp-python answers with a 500).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Member;
use crate::labels::Role;
use crate::model::Call;
use crate::wire::{AssistantOutput, ChatRequest, Message};

const TOOL: &str = "rank_responses";

const INSTRUCTION: &str = "You judge a panel. Several assistants answered the same conversation; \
you see their answers labelled A, B, C… in a random order, without their names. First call the \
rank_responses tool once, ranking every label (rank 1 = best) with a score from 0 to 10 and a \
one-line reason. Then write guidance for the model that will write the final answer: what the \
candidates got right, what they got wrong or missed, and what the best answer must contain. Judge \
them; do not write the final answer yourself and do not merge them into one.";

const TOOL_RESULT: &str = "Ranking recorded. Now write your guidance for the model that will write \
the final answer: what is right, what is wrong, and what the best answer must contain.";

pub struct Synthesis {
    pub member: Member,
    /// Replaces [`INSTRUCTION`].
    pub prompt: Option<String>,
    /// `max_tokens` of each synthesis call.
    pub max_tokens: u32,
    /// How long the synthesis (both turns) may take.
    pub timeout: Duration,
}

/// One entry of the synthesis's ranking.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Ranked {
    pub label: String,
    pub rank: u32,
    pub score: f64,
    #[serde(default)]
    pub reason: String,
}

/// What the synthesis said.
pub struct Judgement {
    pub guidance: String,
    /// Its ranking, or why there is none (no call, or a malformed one).
    pub ranking: Result<Vec<Ranked>, String>,
}

impl Synthesis {
    /// Judges `candidates` (label, answer); `Err` says why there is no
    /// guidance.
    pub async fn judge(
        &self,
        call: &Call,
        original: &ChatRequest,
        candidates: &[(String, &AssistantOutput)],
    ) -> Result<Judgement, String> {
        let call = call.with_role(Role::Synthesis).with_timeout(self.timeout);
        let (call, _) = call.cancellable();
        let labels: Vec<&str> = candidates.iter().map(|(l, _)| l.as_str()).collect();
        let mut req = self.request(original, candidates);
        let first = self.ask(&call, &req).await?;
        let called = first.tool_calls.iter().find(|t| t.name == TOOL);
        let (call_args, text) = match called {
            Some(t) => (Some(t.arguments.clone()), first.text.clone()),
            None => match call_in_text(&first.text) {
                Some((args, rest)) => (Some(args), rest),
                None => (None, first.text.clone()),
            },
        };
        let ranking = match &call_args {
            Some(args) => parse_ranking(args, &labels),
            None => Err(format!("the synthesis did not call {TOOL}")),
        };
        let mut guidance = text.trim().to_owned();
        if guidance.is_empty()
            && let Some(args) = call_args
        {
            // It ranked and stopped: give it the tool's result, ask again.
            req.messages.push(tool_call_message(&args));
            let mut result = Message::new("tool", TOOL_RESULT);
            result
                .rest
                .insert("tool_call_id".into(), json!("call_rank"));
            req.messages.push(result);
            req.extra.insert("tool_choice".into(), json!("none"));
            guidance = self.ask(&call, &req).await?.text.trim().to_owned();
        }
        if guidance.is_empty() {
            return Err("the synthesis wrote no guidance".into());
        }
        Ok(Judgement { guidance, ranking })
    }

    async fn ask(&self, call: &Call, req: &ChatRequest) -> Result<AssistantOutput, String> {
        let reply = self
            .member
            .model
            .chat(call.clone(), Arc::new(req.clone()))
            .await
            .map_err(|e| format!("the synthesis failed: {e}"))?;
        let (_, out) = reply
            .buffer()
            .await
            .map_err(|e| format!("the synthesis failed: {e}"))?;
        Ok(out)
    }

    fn request(
        &self,
        original: &ChatRequest,
        candidates: &[(String, &AssistantOutput)],
    ) -> ChatRequest {
        let labels: Vec<&str> = candidates.iter().map(|(l, _)| l.as_str()).collect();
        let mut extra = Map::new();
        extra.insert("max_tokens".into(), json!(self.max_tokens));
        extra.insert("tools".into(), json!([tool_spec(&labels)]));
        extra.insert("tool_choice".into(), json!("auto"));
        let instruction = self.prompt.as_deref().unwrap_or(INSTRUCTION);
        ChatRequest::internal(
            &self.member.name,
            instruction,
            render(original, candidates),
            extra,
        )
    }
}

/// How many `{` of a text are tried as the start of a call written as text.
const MAX_STARTS: usize = 16;

/// A `rank_responses` call a model wrote as text: its arguments, and the
/// text without it (and without the tags or fence around it).
fn call_in_text(text: &str) -> Option<(String, String)> {
    for (at, _) in text.match_indices('{').take(MAX_STARTS) {
        let mut values = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        let Some(Ok(Value::Object(o))) = values.next() else {
            continue;
        };
        let end = at + values.byte_offset();
        let args = if o.contains_key("rankings") {
            Value::Object(o)
        } else if o.get("name").and_then(Value::as_str) == Some(TOOL) {
            match o.get("arguments").or_else(|| o.get("parameters")) {
                Some(a) => a.clone(),
                None => continue,
            }
        } else {
            continue;
        };
        let args = match args {
            Value::String(s) => s,
            v => v.to_string(),
        };
        let mut before = text[..at].trim_end();
        for tag in ["<tool_call>", "```json", "```"] {
            before = before.strip_suffix(tag).unwrap_or(before).trim_end();
        }
        let mut after = text[end..].trim_start();
        for tag in ["</tool_call>", "```"] {
            after = after.strip_prefix(tag).unwrap_or(after).trim_start();
        }
        return Some((args, format!("{before}\n{after}").trim().to_owned()));
    }
    None
}

/// The assistant turn that called the tool, for the second turn.
fn tool_call_message(args: &str) -> Message {
    let mut m = Message::new("assistant", "");
    m.rest.insert(
        "tool_calls".into(),
        json!([{"id": "call_rank", "type": "function", "function": {"name": TOOL, "arguments": args}}]),
    );
    m
}

/// The `rank_responses` function: labels limited to the ones given.
fn tool_spec(labels: &[&str]) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": TOOL,
            "description": "Rank the candidate responses, best first.",
            "parameters": {
                "type": "object",
                "properties": {
                    "rankings": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "label": {"type": "string", "enum": labels},
                                "rank": {"type": "integer", "minimum": 1},
                                "score": {"type": "number", "minimum": 0, "maximum": 10},
                                "reason": {"type": "string"}
                            },
                            "required": ["label", "rank", "score", "reason"]
                        }
                    }
                },
                "required": ["rankings"]
            }
        }
    })
}

/// The conversation, the tools it offers, and the candidates, as one user
/// message (strict chat templates want one).
fn render(original: &ChatRequest, candidates: &[(String, &AssistantOutput)]) -> String {
    let t = original.transcript();
    let mut out = t.system_block();
    let tools: Vec<String> = original
        .extra
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("function"))
        .map(|f| {
            let name = f.get("name").and_then(Value::as_str).unwrap_or("?");
            match f.get("description").and_then(Value::as_str) {
                Some(d) => format!("- {name}: {d}"),
                None => format!("- {name}"),
            }
        })
        .collect();
    if !tools.is_empty() {
        out.push_str(&format!(
            "Tools the assistant may call:\n{}\n\n",
            tools.join("\n")
        ));
    }
    out.push_str(&format!("Conversation:\n{}\n", t.turns));
    out.push_str("Candidate responses (anonymised, in a random order):\n\n");
    for (label, answer) in candidates {
        out.push_str(&format!(
            "Response {label}:\n<<<\n{}\n>>>\n\n",
            answer.render()
        ));
    }
    let labels: Vec<&str> = candidates.iter().map(|(l, _)| l.as_str()).collect();
    out.push_str(&format!(
        "Call {TOOL} ranking {}, then write your guidance.",
        labels.join(", ")
    ));
    out
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Args {
    Wrapped { rankings: Vec<Ranked> },
    Bare(Vec<Ranked>),
}

/// Reads `rank_responses` arguments: every entry must name a label given
/// (once), a rank of at least 1 and a score from 0 to 10.
pub fn parse_ranking(args: &str, labels: &[&str]) -> Result<Vec<Ranked>, String> {
    let shown: String = args.chars().take(120).collect();
    let entries = match serde_json::from_str::<Args>(args) {
        Ok(Args::Wrapped { rankings } | Args::Bare(rankings)) => rankings,
        Err(e) => return Err(format!("malformed {TOOL} arguments ({e}): {shown}")),
    };
    if entries.is_empty() {
        return Err(format!("{TOOL} ranked nothing"));
    }
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for mut e in entries {
        e.label = e.label.trim().to_uppercase();
        if !labels.contains(&e.label.as_str()) {
            return Err(format!("{TOOL} names an unknown label \"{}\"", e.label));
        }
        if seen.contains(&e.label) {
            return Err(format!("{TOOL} ranks \"{}\" twice", e.label));
        }
        if e.rank == 0 || !(0.0..=10.0).contains(&e.score) {
            return Err(format!(
                "{TOOL} gives \"{}\" rank {} and score {} (rank from 1, score 0 to 10)",
                e.label, e.rank, e.score
            ));
        }
        seen.push(e.label.clone());
        out.push(e);
    }
    out.sort_by_key(|e| e.rank);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rankings_are_read_strictly_and_leniently_where_harmless() {
        let labels = ["A", "B", "C"];
        let got = parse_ranking(
            r#"{"rankings":[{"label":"b","rank":2,"score":6,"reason":"ok"},{"label":"A","rank":1,"score":9.5,"reason":"best"}]}"#,
            &labels,
        )
        .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(got[0].label, "A");
        assert_eq!(got[1].label, "B");
        // A bare list is read too; a missing reason is empty.
        let bare = parse_ranking(r#"[{"label":"C","rank":1,"score":3}]"#, &labels);
        assert_eq!(bare.map(|r| r[0].reason.clone()), Ok(String::new()));
        for bad in [
            "not json",
            r#"{"rankings":[]}"#,
            r#"{"rankings":[{"label":"Z","rank":1,"score":5,"reason":""}]}"#,
            r#"{"rankings":[{"label":"A","rank":1,"score":11,"reason":""}]}"#,
            r#"{"rankings":[{"label":"A","rank":0,"score":1,"reason":""}]}"#,
            r#"{"rankings":[{"label":"A","rank":1,"score":1,"reason":""},{"label":"A","rank":2,"score":1,"reason":""}]}"#,
            r#"{"rankings":[{"label":"A","score":1}]}"#,
        ] {
            assert!(parse_ranking(bad, &labels).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_ranking_written_as_text_is_read_and_cut_out() {
        let args = r#"{"rankings": [{"label": "A", "rank": 1, "score": 9, "reason": "ok"}]}"#;
        for text in [
            format!(
                "<tool_call>{{\"name\": \"rank_responses\", \"arguments\": {args}}}</tool_call>\nSay four."
            ),
            format!("```json\n{args}\n```\nSay four."),
            format!(
                "Ranking: {{\"name\": \"rank_responses\", \"arguments\": {}}} Say four.",
                json!(args)
            ),
        ] {
            let (got, rest) = call_in_text(&text).unwrap_or_else(|| unreachable!("{text}"));
            let ranked = parse_ranking(&got, &["A"]).unwrap_or_else(|e| unreachable!("{e}"));
            assert_eq!(ranked[0].label, "A", "{text}");
            assert!(rest.ends_with("Say four.") && !rest.contains('{'), "{rest}");
            assert!(
                !rest.contains("tool_call") && !rest.contains("```"),
                "{rest}"
            );
        }
        assert!(call_in_text("Prefer {the plain one}: it says 4.").is_none());
        assert!(call_in_text(r#"{"name": "other", "arguments": {}}"#).is_none());
    }

    #[test]
    fn the_request_names_no_panellist() {
        let original: ChatRequest = serde_json::from_value(json!({
            "model": "council",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
            "tools": [{"type": "function", "function": {"name": "calc", "description": "adds"}}]
        }))
        .unwrap_or_else(|e| unreachable!("{e}"));
        let a = AssistantOutput {
            text: "4".into(),
            ..Default::default()
        };
        let text = render(&original, &[("A".into(), &a), ("B".into(), &a)]);
        assert!(text.contains("Response A:") && text.contains("Response B:"));
        assert!(text.contains("- calc: adds"));
        assert!(text.contains("Be brief."));
        let spec = tool_spec(&["A", "B"]);
        assert_eq!(
            spec.pointer("/function/parameters/properties/rankings/items/properties/label/enum"),
            Some(&json!(["A", "B"]))
        );
    }
}
