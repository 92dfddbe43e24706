//! What the assistant said, assembled from a whole answer or from stream
//! chunks, for strategies that judge an answer and for event summaries.

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{MAX_TOOL_CALLS, NotAnAnswer, content_text};

/// One tool call the assistant made, flattened for verifiers and summaries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// What the assistant said: its text and any tool calls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AssistantOutput {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
}

impl AssistantOutput {
    /// Reads `choices[0].message` of a whole response body.
    pub fn from_completion(body: &[u8]) -> Result<Self, NotAnAnswer> {
        if let Some(out) = plain_completion(body) {
            return Ok(out);
        }
        let v: Value = serde_json::from_slice(body)?;
        let choice = v.get("choices").and_then(|c| c.get(0));
        let msg = choice.and_then(|c| c.get("message"));
        let mut out = AssistantOutput {
            text: content_text(msg.and_then(|m| m.get("content"))),
            finish_reason: choice
                .and_then(|c| c.get("finish_reason"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            ..Default::default()
        };
        if let Some(calls) = msg
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
        {
            for call in calls {
                let f = call.get("function");
                if out.tool_calls.len() >= MAX_TOOL_CALLS {
                    return Err(NotAnAnswer::ToolCallIndex(out.tool_calls.len() as u64));
                }
                out.tool_calls.push(ToolCall {
                    name: str_at(f, "name"),
                    arguments: str_at(f, "arguments"),
                });
            }
        }
        Ok(out)
    }

    /// Adds one stream chunk's `choices[0].delta` to the text so far.
    /// A tool call index past [`MAX_TOOL_CALLS`] is refused, so an
    /// upstream cannot make the answer reserve memory it never sends.
    pub fn absorb_chunk(&mut self, data: &[u8]) -> Result<(), NotAnAnswer> {
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            return Ok(());
        };
        let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
            return Ok(());
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(());
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(text);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                let idx = match call.get("index").and_then(Value::as_u64) {
                    Some(i) if i >= MAX_TOOL_CALLS as u64 => {
                        return Err(NotAnAnswer::ToolCallIndex(i));
                    }
                    Some(i) => i as usize,
                    None => self.tool_calls.len().saturating_sub(1),
                };
                while self.tool_calls.len() <= idx {
                    self.tool_calls.push(ToolCall::default());
                }
                let f = call.get("function");
                if let Some(slot) = self.tool_calls.get_mut(idx) {
                    slot.name.push_str(&str_at(f, "name"));
                    slot.arguments.push_str(&str_at(f, "arguments"));
                }
            }
        }
        Ok(())
    }

    /// A one-line rendering: the text, then `name(arguments)` per tool call.
    pub fn render(&self) -> String {
        let mut out = self.text.clone();
        for call in &self.tool_calls {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!("tool call: {}({})", call.name, call.arguments));
        }
        out
    }
}

/// The common case of [`AssistantOutput::from_completion`] read without
/// building the body as a `Value`: every choice's text content a string
/// (or null), no tool calls. `None` for anything else, which the general
/// reading then handles (alike where both apply).
fn plain_completion(body: &[u8]) -> Option<AssistantOutput> {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow, default)]
        choices: Vec<Choice<'a>>,
    }
    #[derive(Deserialize)]
    struct Choice<'a> {
        #[serde(borrow, default)]
        message: Option<Message<'a>>,
        #[serde(borrow, default, deserialize_with = "super::borrowed::option")]
        finish_reason: Option<Cow<'a, str>>,
    }
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow, default, deserialize_with = "super::borrowed::option")]
        content: Option<Cow<'a, str>>,
        #[serde(default)]
        tool_calls: Option<IgnoredAny>,
    }
    let body: Body<'_> = serde_json::from_slice(body).ok()?;
    let Some(first) = body.choices.into_iter().next() else {
        return Some(AssistantOutput::default());
    };
    let (text, calls) = match first.message {
        Some(m) => (m.content, m.tool_calls),
        None => (None, None),
    };
    if calls.is_some() {
        return None;
    }
    Some(AssistantOutput {
        text: text.map(Cow::into_owned).unwrap_or_default(),
        finish_reason: first.finish_reason.map(Cow::into_owned),
        ..Default::default()
    })
}

fn str_at(v: Option<&Value>, key: &str) -> String {
    v.and_then(|v| v.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_completion_reads_as_the_general_reading_does() {
        let general = |b: &str| {
            let v: Value = serde_json::from_str(b).unwrap();
            let c = v.get("choices").and_then(|c| c.get(0));
            let m = c.and_then(|c| c.get("message"));
            (
                content_text(m.and_then(|m| m.get("content"))),
                c.and_then(|c| c.get("finish_reason"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            )
        };
        for b in [
            r#"{"choices":[{"message":{"role":"assistant","content":"hi \"there\"\n"},"finish_reason":"stop"}],"usage":{"x":1}}"#,
            r#"{"choices":[{"message":{"content":null},"finish_reason":null}]}"#,
            r#"{"choices":[{"message":null}]}"#,
            r#"{"choices":[]}"#,
            r#"{"id":"x"}"#,
            r#"{"choices":[{"message":{"content":"a","tool_calls":null}}]}"#,
        ] {
            let fast = plain_completion(b.as_bytes()).unwrap_or_else(|| panic!("{b}"));
            assert_eq!(
                (fast.text.clone(), fast.finish_reason.clone()),
                general(b),
                "{b}"
            );
            assert_eq!(
                AssistantOutput::from_completion(b.as_bytes()).unwrap(),
                fast
            );
        }
        // Anything else is the general reading's.
        for b in [
            r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"}]}}]}"#,
            r#"{"choices":[{"message":{"content":"a","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":{"0":1}}"#,
            r#"{"choices":[{"finish_reason":7}]}"#,
            "not json",
        ] {
            assert!(plain_completion(b.as_bytes()).is_none(), "{b}");
        }
        let parts = r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"}]}}]}"#;
        assert_eq!(
            AssistantOutput::from_completion(parts.as_bytes())
                .unwrap()
                .text,
            "a"
        );
    }

    #[test]
    fn assistant_output_from_chunks() {
        let mut out = AssistantOutput::default();
        out.absorb_chunk(br#"{"choices":[{"delta":{"content":"Hel"}}]}"#)
            .unwrap();
        out.absorb_chunk(br#"{"choices":[{"delta":{"content":"lo"}}]}"#)
            .unwrap();
        out.absorb_chunk(br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\""}}]}}]}"#).unwrap();
        out.absorb_chunk(br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"}]}"#).unwrap();
        assert_eq!(out.text, "Hello");
        assert_eq!(out.tool_calls[0].name, "f");
        assert_eq!(out.tool_calls[0].arguments, "{\"a\":1}");
        assert_eq!(out.finish_reason.as_deref(), Some("tool_calls"));
        let huge = br#"{"choices":[{"delta":{"tool_calls":[{"index":4000000000,"function":{"name":"f"}}]}}]}"#;
        assert!(matches!(
            out.absorb_chunk(huge),
            Err(NotAnAnswer::ToolCallIndex(4000000000))
        ));
        assert_eq!(out.tool_calls.len(), 1);
    }
}
