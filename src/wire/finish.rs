//! A choice's `finish_reason` as upstreams send it: read leniently, since
//! an odd value there must not make an answer unreadable.

use serde::Deserialize;
use serde::de::IgnoredAny;

/// A `finish_reason` that is not null: its text when it is a string
/// (anything else an upstream sends there is accepted and not kept).
pub struct Reason(pub Option<String>);

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Reason;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a finish reason")
            }
            fn visit_str<E>(self, v: &str) -> Result<Reason, E> {
                Ok(Reason(Some(v.chars().take(MAX_REASON).collect())))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Reason, E> {
                Ok(Reason(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Reason, E> {
                Ok(Reason(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Reason, E> {
                Ok(Reason(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Reason, E> {
                Ok(Reason(None))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Reason, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Reason(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Reason, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Reason(None))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// The most characters of a finish reason kept.
const MAX_REASON: usize = 64;

#[cfg(test)]
mod tests {
    use super::Reason;

    fn read(json: &str) -> Option<String> {
        serde_json::from_str::<Reason>(json)
            .map(|r| r.0)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn strings_are_kept_and_anything_else_is_accepted() {
        assert_eq!(read(r#""length""#).as_deref(), Some("length"));
        assert_eq!(
            read(&format!("\"{}\"", "x".repeat(500))).map(|s| s.len()),
            Some(64)
        );
        for odd in [
            "5",
            "-1",
            "1.5",
            "true",
            "[1, {\"a\": 2}]",
            "{\"why\": [\"stop\"]}",
        ] {
            assert_eq!(read(odd), None, "{odd}");
        }
    }
}
