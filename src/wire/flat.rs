//! `Deserialize` for the request types that keep every field they do not
//! read ([`ChatRequest`], [`Message`]): the fields they read are taken as
//! they come, and every other one goes to the type's map as a `Value`.
//! serde's `#[serde(flatten)]` would buffer the whole object (messages
//! and all) as generic content first, then read it a second time; this
//! reads it once. Errors read as the derived ones did (`missing field`,
//! `duplicate field`, `expected struct …`).

use std::fmt;

use serde::de::{Deserialize, Deserializer, Error, MapAccess, Visitor};
use serde_json::{Map, Value};

use super::request::{ChatRequest, Message, StreamOptions};

/// Puts `value` in `slot`, unless the field came before.
fn once<T, E: Error>(slot: &mut Option<T>, value: T, field: &'static str) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(field));
    }
    *slot = Some(value);
    Ok(())
}

impl<'de> Deserialize<'de> for ChatRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ChatRequest;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("struct ChatRequest")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ChatRequest, A::Error> {
                let (mut model, mut messages) = (None, None);
                let (mut stream, mut stream_options) = (None, None);
                let mut extra = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "model" => once(&mut model, map.next_value::<String>()?, "model")?,
                        "messages" => once(&mut messages, map.next_value()?, "messages")?,
                        "stream" => once(&mut stream, map.next_value::<Option<bool>>()?, "stream")?,
                        "stream_options" => once(
                            &mut stream_options,
                            map.next_value::<Option<StreamOptions>>()?,
                            "stream_options",
                        )?,
                        _ => {
                            let v = map.next_value::<Value>()?;
                            extra.insert(key, v);
                        }
                    }
                }
                Ok(ChatRequest {
                    model: model.ok_or_else(|| A::Error::missing_field("model"))?,
                    messages: messages.ok_or_else(|| A::Error::missing_field("messages"))?,
                    stream: stream.flatten(),
                    stream_options: stream_options.flatten(),
                    extra,
                })
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Message;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("struct Message")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
                let (mut role, mut content) = (None, None);
                let mut rest = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "role" => once(&mut role, map.next_value::<String>()?, "role")?,
                        // The last of several wins, as it did in the map.
                        "content" => content = Some(map.next_value::<Value>()?),
                        _ => {
                            let v = map.next_value::<Value>()?;
                            rest.insert(key, v);
                        }
                    }
                }
                Ok(Message {
                    role: role.ok_or_else(|| A::Error::missing_field("role"))?,
                    content,
                    rest,
                })
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(s: &str) -> Result<ChatRequest, String> {
        serde_json::from_str(s).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_its_fields_and_keeps_the_rest_in_order() {
        let r = parse(
            r#"{"temperature":0.5,"model":"m","stream":null,"messages":[{"content":null,"role":"user","name":"x"}],"tools":[],"stream_options":{"include_usage":true,"z":1}}"#,
        )
        .unwrap();
        assert_eq!(r.model, "m");
        assert_eq!(r.stream, None);
        assert!(r.wants_stream_usage());
        assert_eq!(r.extra.keys().collect::<Vec<_>>(), ["temperature", "tools"]);
        let m = &r.messages[0];
        assert_eq!(m.role, "user");
        assert_eq!(m.rest.keys().collect::<Vec<_>>(), ["name"]);
        assert_eq!(m.content, Some(Value::Null));
        let back = serde_json::to_value(&r).unwrap();
        assert_eq!(back["stream_options"]["z"], 1);
        // Written back with its content, `null` and all.
        let text = serde_json::to_string(&r.messages[0]).unwrap();
        assert_eq!(text, r#"{"role":"user","content":null,"name":"x"}"#);
        let none: Message =
            serde_json::from_str(r#"{"role":"assistant","tool_calls":[]}"#).unwrap();
        assert_eq!(none.content, None);
        let text = serde_json::to_string(&none).unwrap();
        assert_eq!(text, r#"{"role":"assistant","tool_calls":[]}"#);
        // A content sent twice: the last one, as a map keeps it.
        let twice =
            parse(r#"{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}"#);
        assert_eq!(twice.unwrap().messages[0].content, Some(Value::from("b")));
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse(r#"{"messages":[]}"#).unwrap_err();
        assert!(e.contains("missing field `model`"), "{e}");
        let e = parse(r#"{"model":"m","messages":[{"content":"hi"}]}"#).unwrap_err();
        assert!(e.contains("missing field `role`"), "{e}");
        let e = parse(r#"{"model":"m","model":"n","messages":[]}"#).unwrap_err();
        assert!(e.contains("duplicate field `model`"), "{e}");
        let e = parse(r#"{"model":"m","messages":["hi"]}"#).unwrap_err();
        assert!(e.contains("expected struct Message"), "{e}");
        let e = parse(r#"{"model":"m","messages":[],"stream":"yes"}"#).unwrap_err();
        assert!(e.contains("expected a boolean"), "{e}");
    }
}
