//! Chat deltas into the open output item: reasoning text, text and
//! refusals, tool-call fragments (see the parent module for the rules).

use bytes::BytesMut;
use serde_json::{Value, json};

use super::{Other, Responses};
use crate::api::render::MAX_OTHER_CHOICES;
use crate::api::responses::output::{Item, Kind, Part, reasoning_of, text_of};
use crate::wire::MAX_TOOL_CALLS;

impl Responses {
    fn reasoning(&mut self, out: &mut BytesMut, delta: &str) {
        if !self.current(|k| matches!(k, Kind::Reasoning { .. })) {
            let item = Item::reasoning(&self.head.id, self.items.len());
            if !self.start(out, item) {
                return;
            }
        }
        let index = self.items.len().saturating_sub(1);
        let Some(item) = self.items.last_mut() else {
            return;
        };
        if let Kind::Reasoning { text } = &mut item.kind {
            text.push_str(delta);
        }
        let f =
            json!({"item_id": item.id, "output_index": index, "content_index": 0, "delta": delta});
        self.emit(out, "response.reasoning_text.delta", f);
    }

    /// Text (or, `refusal`, a refusal) into the open message's last part.
    pub(super) fn text(
        &mut self,
        out: &mut BytesMut,
        delta: &str,
        refusal: bool,
        logprobs: &[Value],
    ) {
        if !self.current(|k| matches!(k, Kind::Message { .. })) {
            let item = Item::message(&self.head.id, self.items.len());
            if !self.start(out, item) {
                return;
            }
        }
        let index = self.items.len().saturating_sub(1);
        let Some(item) = self.items.last().cloned() else {
            return;
        };
        let Kind::Message { parts } = &item.kind else {
            return;
        };
        if parts.last().is_none_or(|p| p.refusal != refusal) {
            if let Some(last) = parts.len().checked_sub(1) {
                self.close_part(out, &item.id, index, last, &parts[last]);
            }
            self.add_part(out, Part::new(refusal));
        }
        let Some(Item {
            id,
            kind: Kind::Message { parts },
            ..
        }) = self.items.last_mut()
        else {
            return;
        };
        let j = parts.len().saturating_sub(1);
        let Some(part) = parts.last_mut() else {
            return;
        };
        part.text.push_str(delta);
        part.logprobs.extend(logprobs.iter().cloned());
        let mut f =
            json!({"item_id": id, "output_index": index, "content_index": j, "delta": delta});
        if !refusal && let Value::Object(m) = &mut f {
            m.insert("logprobs".into(), Value::Array(logprobs.to_vec()));
        }
        let kind = match refusal {
            true => "response.refusal.delta",
            false => "response.output_text.delta",
        };
        self.emit(out, kind, f);
    }

    /// A new part at the end of the open message.
    pub(super) fn add_part(&mut self, out: &mut BytesMut, part: Part) {
        let index = self.items.len().saturating_sub(1);
        let Some(Item {
            id,
            kind: Kind::Message { parts },
            ..
        }) = self.items.last_mut()
        else {
            return;
        };
        let f = json!({
            "item_id": id, "output_index": index, "content_index": parts.len(),
            "part": part.empty_json(),
        });
        parts.push(part);
        self.emit(out, "response.content_part.added", f);
    }

    /// One chat tool-call fragment.
    fn call(&mut self, out: &mut BytesMut, fragment: &Value) {
        let Some(index) = fragment
            .get("index")
            .and_then(Value::as_u64)
            .or(self.last_call)
            .or(Some(0))
            .filter(|i| *i < MAX_TOOL_CALLS as u64)
        else {
            return;
        };
        self.last_call = Some(index);
        let f = fragment.get("function");
        let name = f.and_then(|f| text_of(f, "name"));
        let id = text_of(fragment, "id");
        let place = self.calls.iter().find(|(i, _)| *i == index).map(|c| c.1);
        let place = match place {
            Some(p) => p,
            None => {
                let item = Item::call(&self.head.id, self.items.len(), id, name.unwrap_or(""));
                if !self.start(out, item) {
                    return;
                }
                let p = self.items.len() - 1;
                self.calls.push((index, p));
                p
            }
        };
        if !self.open || place + 1 != self.items.len() {
            return;
        }
        let Some(Item {
            id: item_id,
            kind:
                Kind::Call {
                    call_id,
                    name: have,
                    arguments,
                },
            ..
        }) = self.items.last_mut()
        else {
            return;
        };
        if let Some(id) = id {
            id.clone_into(call_id);
        }
        match name {
            Some(n) if have.is_empty() => n.clone_into(have),
            Some(n) if n != have.as_str() => have.push_str(n),
            _ => {}
        }
        let Some(delta) = f.and_then(|f| text_of(f, "arguments")) else {
            return;
        };
        arguments.push_str(delta);
        let f = json!({"item_id": item_id, "output_index": place, "delta": delta});
        self.emit(out, "response.function_call_arguments.delta", f);
    }

    pub(super) fn absorb(&mut self, data: &[u8], out: &mut BytesMut) {
        let Ok(Value::Object(v)) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        let v = Value::Object(v);
        // The first chunk's model names the whole answer.
        if let (None, Some(m)) = (&self.model, text_of(&v, "model")) {
            self.model = Some(m.to_owned());
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        if let Some(id) = v.get("arena_id").filter(|id| id.is_string()) {
            self.arena_id = Some(id.clone());
        }
        let choices = v.get("choices").and_then(Value::as_array);
        for c in choices.into_iter().flatten() {
            let i = c.get("index").and_then(Value::as_u64).unwrap_or(0);
            if (1..=MAX_OTHER_CHOICES).contains(&i) {
                let text = c.pointer("/delta/content").and_then(Value::as_str);
                let finish = c.get("finish_reason").and_then(Value::as_str);
                let at = match self.others.iter().position(|o| o.index == i) {
                    Some(at) => at,
                    None => {
                        self.others.push(Other {
                            index: i,
                            text: String::new(),
                            finish_reason: None,
                        });
                        self.others.len() - 1
                    }
                };
                let o = &mut self.others[at];
                o.text.push_str(text.unwrap_or_default());
                if let Some(f) = finish {
                    o.finish_reason = Some(f.to_owned());
                }
            }
        }
        let choice = choices.and_then(|cs| {
            cs.iter()
                .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        });
        let Some(choice) = choice else {
            return;
        };
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(r.to_owned());
        }
        let Some(delta) = choice.get("delta").filter(|d| d.is_object()) else {
            return;
        };
        if let Some(r) = reasoning_of(delta) {
            self.reasoning(out, r);
        }
        if let Some(t) = text_of(delta, "content") {
            let lp = choice
                .pointer("/logprobs/content")
                .and_then(Value::as_array);
            self.text(out, t, false, lp.map_or(&[], Vec::as_slice));
        }
        if let Some(t) = text_of(delta, "refusal") {
            self.text(out, t, true, &[]);
        }
        for c in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.call(out, c);
        }
    }
}
