//! `Deserialize` for the request types that keep every field they do not
//! read ([`ChatRequest`], [`Message`]): the fields they read are taken as
//! they come, and every other one goes to the type's map as a `Value`.
//! serde's `#[serde(flatten)]` would buffer the whole object (messages
//! and all) as generic content first, then read it a second time; this
//! reads it once. Errors read as the derived ones did (`missing field`,
//! `duplicate field`, `expected struct …`). [`ReadRequest`] also says
//! whether any key came twice (the map keeps the last), which decides
//! whether the client's bytes say exactly what was read.

use std::fmt;

use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};
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

/// A [`ChatRequest`] as read from a body, and whether the body named
/// each key once, at the top and in every message: only then do its
/// bytes say exactly what the request holds (a reader that keeps the
/// first of two keys would see another request).
pub struct ReadRequest {
    pub request: ChatRequest,
    pub keys_once: bool,
}

impl<'de> Deserialize<'de> for ChatRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ReadRequest::deserialize(d).map(|r| r.request)
    }
}

impl<'de> Deserialize<'de> for ReadRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ReadRequest;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("struct ChatRequest")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReadRequest, A::Error> {
                let (mut model, mut messages) = (None, None::<Messages>);
                let (mut stream, mut stream_options) = (None, None);
                let mut extra = Map::new();
                let mut keys_once = true;
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
                            keys_once &= extra.insert(key, v).is_none();
                        }
                    }
                }
                let model = model.ok_or_else(|| A::Error::missing_field("model"))?;
                let messages = messages.ok_or_else(|| A::Error::missing_field("messages"))?;
                Ok(ReadRequest {
                    request: ChatRequest {
                        model,
                        messages: messages.list,
                        stream: stream.flatten(),
                        stream_options: stream_options.flatten(),
                        extra,
                    },
                    keys_once: keys_once && messages.keys_once,
                })
            }
        }
        d.deserialize_map(V)
    }
}

/// `messages`, and whether each of them named each key once.
struct Messages {
    list: Vec<Message>,
    keys_once: bool,
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Messages;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sequence")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Messages, A::Error> {
                let mut out = Messages {
                    list: Vec::new(),
                    keys_once: true,
                };
                while let Some(m) = seq.next_element::<ReadMessage>()? {
                    out.list.push(m.message);
                    out.keys_once &= m.keys_once;
                }
                Ok(out)
            }
        }
        d.deserialize_seq(V)
    }
}

/// A [`Message`], and whether it named each key once.
struct ReadMessage {
    message: Message,
    keys_once: bool,
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ReadMessage::deserialize(d).map(|m| m.message)
    }
}

impl<'de> Deserialize<'de> for ReadMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ReadMessage;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("struct Message")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReadMessage, A::Error> {
                let (mut role, mut content) = (None, None);
                let mut rest = Map::new();
                let mut keys_once = true;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "role" => once(&mut role, map.next_value::<String>()?, "role")?,
                        // The last of several wins, as it did in the map.
                        "content" => {
                            keys_once &= content.is_none();
                            content = Some(map.next_value::<Value>()?);
                        }
                        _ => {
                            let v = map.next_value::<Value>()?;
                            keys_once &= rest.insert(key, v).is_none();
                        }
                    }
                }
                Ok(ReadMessage {
                    message: Message {
                        role: role.ok_or_else(|| A::Error::missing_field("role"))?,
                        content,
                        rest,
                    },
                    keys_once,
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
