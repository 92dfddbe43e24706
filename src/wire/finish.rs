//! A choice's `finish_reason` as upstreams send it: read leniently, since
//! an odd value there must not make an answer unreadable, and kept only
//! when it looks like one (a short word), since it is upstream text.

use serde::Deserialize;
use serde::de::IgnoredAny;

/// Visitor methods that accept a scalar or an array and keep nothing of
/// it: what a lenient reader does with whatever it does not expect.
macro_rules! keep_nothing_of_the_rest {
    ($nothing:expr) => {
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut a: A,
        ) -> Result<Self::Value, A::Error> {
            while a.next_element::<IgnoredAny>()?.is_some() {}
            Ok($nothing)
        }
    };
}

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
                let word = v.len() <= MAX_REASON
                    && v.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                Ok(Reason(word.then(|| v.to_owned())))
            }
            keep_nothing_of_the_rest!(Reason(None));
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Reason, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Reason(None))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// The longest finish reason kept.
const MAX_REASON: usize = 64;

/// A whole answer's `choices`, read without keeping them: how many, and
/// the first one's `finish_reason` (each choice may be any JSON value).
#[derive(Default)]
pub struct WholeChoices {
    pub count: usize,
    pub finish_reason: Option<String>,
    /// The first choice has a `finish_reason` that is not null (a word
    /// or not): it ended, rather than being cut short.
    pub finished: bool,
}

impl<'de> Deserialize<'de> for WholeChoices {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = WholeChoices;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<WholeChoices, A::Error> {
                let mut out = WholeChoices::default();
                if let Some(first) = seq.next_element::<FirstChoice>()? {
                    out.count = 1;
                    out.finish_reason = first.reason;
                    out.finished = first.finished;
                }
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    out.count += 1;
                }
                Ok(out)
            }
        }
        d.deserialize_seq(Visit)
    }
}

/// The first choice: its `finish_reason` when it is an object that has
/// one (and whether it has one that is not null); anything else is
/// accepted and not kept.
#[derive(Default)]
struct FirstChoice {
    reason: Option<String>,
    finished: bool,
}

impl<'de> Deserialize<'de> for FirstChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = FirstChoice;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a choice")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<FirstChoice, A::Error> {
                let mut out = FirstChoice::default();
                while let Some(key) = a.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "finish_reason" {
                        let reason = a.next_value::<Option<Reason>>()?;
                        out.finished = reason.is_some();
                        out.reason = reason.and_then(|r| r.0);
                    } else {
                        a.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(out)
            }
            keep_nothing_of_the_rest!(FirstChoice::default());
            fn visit_str<E>(self, _: &str) -> Result<FirstChoice, E> {
                Ok(FirstChoice::default())
            }
        }
        d.deserialize_any(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::{Reason, WholeChoices};

    fn read(json: &str) -> Option<String> {
        serde_json::from_str::<Reason>(json)
            .map(|r| r.0)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn words_are_kept_and_anything_else_is_accepted() {
        assert_eq!(read(r#""length""#).as_deref(), Some("length"));
        // Not a word: too long, or text an upstream put there.
        assert_eq!(read(&format!("\"{}\"", "x".repeat(65))), None);
        assert_eq!(read(r#""stop because sk-123""#), None);
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

    #[test]
    fn whole_choices_are_counted_not_kept() {
        let read = |json: &str| serde_json::from_str::<WholeChoices>(json).unwrap();
        let c = read(r#"[{"message": {}, "finish_reason": "length"}, {}, null, 3]"#);
        assert_eq!((c.count, c.finish_reason.as_deref()), (4, Some("length")));
        assert!(c.finished);
        let c = read(r#"[null, {"finish_reason": "stop"}]"#);
        assert_eq!((c.count, c.finish_reason, c.finished), (2, None, false));
        // Null or absent: not finished; an odd value: finished, not kept.
        assert!(!read(r#"[{"finish_reason": null}]"#).finished);
        assert!(!read(r#"[{"message": {}}]"#).finished);
        let c = read(r#"[{"finish_reason": 7}]"#);
        assert_eq!((c.finish_reason, c.finished), (None, true));
        assert_eq!(read("[]").count, 0);
        // A million empty choices cost no memory of their own.
        let many = format!("[{}{{}}]", "{},".repeat(1_000_000));
        assert_eq!(read(&many).count, 1_000_001);
    }
}
