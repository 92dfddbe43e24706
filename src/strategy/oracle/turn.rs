//! One base-model turn, assembled from a whole answer or from its stream
//! chunks: its text, its tool calls (with their ids, which tool results
//! must name), and how it finished; a turn written back into the
//! conversation (its `content` always a string, which every server takes);
//! and a turn rendered back as a whole chat completion for the client
//! (after the oracle's calls were taken out of it).

use serde_json::{Map, Value, json};

use crate::wire::{MAX_TOOL_CALLS, content_text};

/// One tool call as the model made it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// What the base said in one turn.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub text: String,
    pub calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    /// `id`, `created`, `model` of the answer, for rendering it again.
    pub head: Map<String, Value>,
}

fn str_at(v: Option<&Value>, key: &str) -> String {
    v.and_then(|v| v.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn head_of(v: &Value) -> Map<String, Value> {
    ["id", "created", "model", "system_fingerprint"]
        .iter()
        .filter_map(|k| v.get(*k).map(|x| ((*k).to_owned(), x.clone())))
        .collect()
}

impl Turn {
    /// `choices[0].message` of a whole answer.
    pub fn from_completion(body: &[u8]) -> Option<Turn> {
        let v: Value = serde_json::from_slice(body).ok()?;
        let choice = v.pointer("/choices/0")?;
        let msg = choice.get("message");
        let calls = msg
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .take(MAX_TOOL_CALLS)
                    .map(|c| ToolCall {
                        id: str_at(Some(c), "id"),
                        name: str_at(c.get("function"), "name"),
                        arguments: str_at(c.get("function"), "arguments"),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(Turn {
            text: content_text(msg.and_then(|m| m.get("content"))),
            calls,
            finish_reason: choice
                .get("finish_reason")
                .and_then(Value::as_str)
                .map(str::to_owned),
            head: head_of(&v),
        })
    }

    /// Adds one stream chunk's `choices[0].delta`.
    pub fn absorb(&mut self, data: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if self.head.is_empty() {
            self.head = head_of(&v);
        }
        let Some(choice) = v.pointer("/choices/0") else {
            return;
        };
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(f.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return;
        };
        if let Some(t) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(t);
        }
        for c in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .filter(|i| !i.is_empty());
            // Servers that send no `index` mean the current call, or a new
            // one when the delta carries a new id.
            let i = match c.get("index").and_then(Value::as_u64) {
                Some(i) => usize::try_from(i).unwrap_or(usize::MAX),
                None => match (id, self.calls.last()) {
                    (Some(id), Some(last)) if last.id != id => self.calls.len(),
                    (_, Some(_)) => self.calls.len() - 1,
                    (_, None) => 0,
                },
            };
            if i >= MAX_TOOL_CALLS {
                continue;
            }
            if self.calls.len() <= i {
                self.calls.resize(i + 1, ToolCall::default());
            }
            let call = &mut self.calls[i];
            if let Some(id) = id {
                call.id = id.to_owned();
            }
            let f = c.get("function");
            if let Some(n) = f.and_then(|f| f.get("name")).and_then(Value::as_str) {
                // Some servers repeat the whole name in every delta.
                if call.name != n {
                    call.name.push_str(n);
                }
            }
            if let Some(a) = f.and_then(|f| f.get("arguments")).and_then(Value::as_str) {
                call.arguments.push_str(a);
            }
        }
    }

    /// Gives every call without an id one of its own (tool results must
    /// name the call they answer).
    pub fn name_calls(&mut self, turn: u32) {
        for (i, c) in self.calls.iter_mut().enumerate() {
            if c.id.is_empty() {
                c.id = format!("call_conclave_{turn}_{i}");
            }
        }
    }

    /// The assistant message of this turn with only `calls` in it, as the
    /// next turn's conversation carries it. Its `content` is a string, `""`
    /// beside tool calls: llama-cpp-python answers 500 to `null` (and to a
    /// missing `content`), and every server takes `""`.
    pub fn message(&self, calls: &[&ToolCall]) -> Value {
        let mut m = json!({"role": "assistant", "content": self.text});
        if !calls.is_empty() {
            m["tool_calls"] = Value::Array(
                calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments}})
                    })
                    .collect(),
            );
        }
        m
    }

    /// This turn as a whole chat completion with only `calls` left in it.
    pub fn completion(&self, calls: &[&ToolCall]) -> Value {
        let mut out = Value::Object(self.head.clone());
        out["object"] = json!("chat.completion");
        let finish = if calls.is_empty() {
            self.finish_reason
                .clone()
                .filter(|f| f != "tool_calls")
                .unwrap_or_else(|| "stop".to_owned())
        } else {
            "tool_calls".to_owned()
        };
        // For the client, OpenAI's shape: `null` when there is no text.
        let mut message = self.message(calls);
        if self.text.is_empty() {
            message["content"] = Value::Null;
        }
        out["choices"] = json!([{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish,
        }]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_turn_assembles_like_a_whole_one() {
        let chunks = [
            json!({"id": "c1", "model": "m", "created": 1, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "oracle_", "arguments": "{\"que"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "consult", "arguments": "stion\": \"x\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "search", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ];
        let mut t = Turn::default();
        for c in &chunks {
            t.absorb(c.to_string().as_bytes());
        }
        assert_eq!(t.calls.len(), 2);
        assert_eq!(t.calls[0].name, "oracle_consult");
        assert_eq!(t.calls[0].arguments, "{\"question\": \"x\"}");
        assert_eq!(t.calls[1].id, "call_b");
        let client: Vec<&ToolCall> = t
            .calls
            .iter()
            .filter(|c| c.name != "oracle_consult")
            .collect();
        let whole = t.completion(&client);
        assert_eq!(whole["id"], "c1");
        assert_eq!(
            whole["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "search"
        );
        assert_eq!(whole["choices"][0]["finish_reason"], "tool_calls");
        // The client gets OpenAI's `null`; the conversation gets `""`.
        assert_eq!(whole["choices"][0]["message"]["content"], Value::Null);
        let oracle: Vec<&ToolCall> = t.calls.iter().take(1).collect();
        assert_eq!(t.message(&oracle)["content"], json!(""));
        let again = Turn::from_completion(whole.to_string().as_bytes()).unwrap();
        assert_eq!(again.calls, vec![t.calls[1].clone()]);
    }

    #[test]
    fn deltas_without_an_index_or_with_the_name_repeated() {
        let chunks = [
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"id": "a", "function": {"name": "oracle_consult", "arguments": "{\"q"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"name": "oracle_consult", "arguments": "\": 1}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"id": "b", "function": {"name": "search", "arguments": "{}"}}]}}]}),
        ];
        let mut t = Turn::default();
        for c in &chunks {
            t.absorb(c.to_string().as_bytes());
        }
        assert_eq!(t.calls.len(), 2, "{:?}", t.calls);
        assert_eq!(
            (t.calls[0].name.as_str(), t.calls[0].arguments.as_str()),
            ("oracle_consult", "{\"q\": 1}")
        );
        assert_eq!(
            (t.calls[1].id.as_str(), t.calls[1].name.as_str()),
            ("b", "search")
        );
        let mut unnamed = Turn::default();
        unnamed.absorb(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "x"}}]}}]}).to_string().as_bytes());
        unnamed.name_calls(3);
        assert_eq!(unnamed.calls[0].id, "call_conclave_3_0");
    }
}
