//! Strings read out of a payload without copying them: borrowed from the
//! payload when it spells them plainly, owned only when JSON escapes had
//! to be undone. serde's own `Cow<str>` always copies (its `borrow`
//! attribute borrows a bare `Cow<str>` field, not one in an `Option`),
//! and `&str` refuses an escaped string, which an upstream may send.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};

/// A string or an object key, borrowed where it can be.
pub struct Text<'de>(pub Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(Visit)
    }
}

/// For `#[serde(borrow, deserialize_with = "borrowed::option")]` on an
/// `Option<Cow<'a, str>>` field: `null` or a string, borrowed where it can be.
pub fn option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    Ok(Option::<Text<'de>>::deserialize(d)?.map(|t| t.0))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Deserialize)]
    struct Field<'a> {
        #[serde(default, borrow, deserialize_with = "option")]
        s: Option<Cow<'a, str>>,
    }

    #[test]
    fn plain_text_is_borrowed_and_escaped_text_is_unescaped() {
        let plain: Field = serde_json::from_str(r#"{"s":"hello"}"#).unwrap();
        assert!(matches!(plain.s, Some(Cow::Borrowed("hello"))));
        let escaped: Field = serde_json::from_str(r#"{"s":"a\"b\u00e9"}"#).unwrap();
        assert!(matches!(escaped.s.as_deref(), Some("a\"bé")));
        assert!(matches!(escaped.s, Some(Cow::Owned(_))));
        let null: Field = serde_json::from_str(r#"{"s":null}"#).unwrap();
        assert!(null.s.is_none());
        let absent: Field = serde_json::from_str("{}").unwrap();
        assert!(absent.s.is_none());
        assert!(serde_json::from_str::<Field>(r#"{"s":5}"#).is_err());
    }

    #[test]
    fn keys_are_read_the_same_way() {
        let mut de = serde_json::Deserializer::from_str(r#""plain""#);
        assert!(matches!(
            Text::deserialize(&mut de).unwrap().0,
            Cow::Borrowed("plain")
        ));
        let mut de = serde_json::Deserializer::from_str(r#""t\u0065xt""#);
        assert_eq!(Text::deserialize(&mut de).unwrap().0, "text");
    }
}
