//! A choice's `finish_reason` as upstreams send it: read leniently, since
//! an odd value there must not make an answer unreadable, and kept only
//! when it looks like one (a short word), since it is upstream text.

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::borrowed::Text;
use super::scan::Scan;

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
                Ok(Reason::of(v))
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

impl Reason {
    /// A string `finish_reason`: kept when it is a word.
    fn of(v: &str) -> Reason {
        let word = v.len() <= MAX_REASON
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        Reason(word.then(|| v.to_owned()))
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
    /// The first choice's text when it is plain (a string or null
    /// `message.content` and no tool calls), at most [`TEXT_KEPT`] chars
    /// of it: an attempt's summary without reading the body again.
    pub plain_text: Option<String>,
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
                    out.plain_text = first.text.and_then(|t| t.0);
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
    text: Option<PlainText>,
}

/// The most of a whole answer's text [`WholeChoices`] keeps, in chars:
/// more than an attempt's summary takes.
pub const TEXT_KEPT: usize = 256;

/// A `content` that is a string: its first [`TEXT_KEPT`] chars; `None`
/// for anything else (parts, an object), accepted and not kept.
struct ContentText(Option<String>);

impl<'de> Deserialize<'de> for ContentText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = ContentText;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a message's content")
            }
            fn visit_str<E>(self, s: &str) -> Result<ContentText, E> {
                Ok(ContentText::of(s))
            }
            keep_nothing_of_the_rest!(ContentText(None));
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<ContentText, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(ContentText(None))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A message's text when it is plain: `Some` for a string or null
/// `content` with no (or null) `tool_calls`, cut at [`TEXT_KEPT`] chars;
/// `None` for anything else (content parts, tool calls, not an object).
struct PlainText(Option<String>);

impl<'de> Deserialize<'de> for PlainText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = PlainText;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a message")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<PlainText, A::Error> {
                let (mut text, mut plain) = (String::new(), true);
                while let Some(key) = a.next_key::<Text<'de>>()? {
                    match &*key.0 {
                        "content" => match a.next_value::<Option<ContentText>>()? {
                            None => text.clear(),
                            Some(ContentText(Some(s))) => text = s,
                            Some(ContentText(None)) => plain = false,
                        },
                        "tool_calls" => {
                            plain &= a.next_value::<Option<IgnoredAny>>()?.is_none();
                        }
                        _ => {
                            a.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(PlainText(plain.then_some(text)))
            }
            keep_nothing_of_the_rest!(PlainText(None));
            fn visit_str<E>(self, _: &str) -> Result<PlainText, E> {
                Ok(PlainText(None))
            }
        }
        d.deserialize_any(Visit)
    }
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
                while let Some(key) = a.next_key::<Text<'de>>()? {
                    if key.0 == "finish_reason" {
                        let reason = a.next_value::<Option<Reason>>()?;
                        out.finished = reason.is_some();
                        out.reason = reason.and_then(|r| r.0);
                    } else if key.0 == "message" {
                        out.text = Some(a.next_value::<PlainText>()?);
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

/// A value read leniently (serde's `deserialize_any`), for the scanner:
/// an object still to read, or something read past, of which nothing is
/// kept.
enum Lenient {
    Object,
    Nothing,
}

/// Reads past a lenient value unless it is an object; `None` for a
/// number, which serde_json reads (and refuses out of range) where the
/// scanner only skips.
fn lenient(s: &mut Scan<'_>) -> Option<Lenient> {
    match s.peek()? {
        b'{' => Some(Lenient::Object),
        b'[' | b't' | b'f' | b'n' => s.skip().map(|()| Lenient::Nothing),
        // Read as text, so held to text's rules.
        b'"' => s.string()?.is_text().then_some(Lenient::Nothing),
        _ => None,
    }
}

impl WholeChoices {
    /// `choices` (the array, its `[` next) read by the scanner as serde
    /// reads them; `None` where serde_json would read them otherwise or
    /// refuse them.
    pub(super) fn scan(s: &mut Scan<'_>) -> Option<WholeChoices> {
        let mut out = WholeChoices::default();
        s.open_array()?;
        let mut first = true;
        if !s.element(&mut first)? {
            return Some(out);
        }
        let choice = FirstChoice::scan(s)?;
        out.count = 1;
        out.finish_reason = choice.reason;
        out.finished = choice.finished;
        out.plain_text = choice.text.and_then(|t| t.0);
        while s.element(&mut first)? {
            s.skip()?;
            out.count += 1;
        }
        Some(out)
    }
}

impl FirstChoice {
    fn scan(s: &mut Scan<'_>) -> Option<FirstChoice> {
        let mut out = FirstChoice::default();
        if let Lenient::Nothing = lenient(s)? {
            return Some(out);
        }
        s.open_object()?;
        let mut first = true;
        while let Some(key) = s.member(&mut first)? {
            match &*key.text()? {
                "finish_reason" => {
                    let reason = Reason::scan(s)?;
                    out.finished = reason.is_some();
                    out.reason = reason.and_then(|r| r.0);
                }
                "message" => out.text = Some(PlainText::scan(s)?),
                _ => s.skip()?,
            }
        }
        Some(out)
    }
}

/// An `Option` of a value read leniently that keeps nothing but a
/// string, read by the scanner: `null` is `None`, a string `of` its text,
/// anything else `nothing`. An object is left to serde_json, which reads
/// its keys as text.
fn optional_text<T>(s: &mut Scan<'_>, of: fn(&str) -> T, nothing: T) -> Option<Option<T>> {
    if s.null()? {
        return Some(None);
    }
    match s.peek()? {
        b'"' => Some(Some(of(&s.string()?.text()?))),
        b'{' => None,
        _ => lenient(s).map(|_| Some(nothing)),
    }
}

impl Reason {
    /// `Option<Reason>`, read by the scanner.
    pub(super) fn scan(s: &mut Scan<'_>) -> Option<Option<Reason>> {
        optional_text(s, Reason::of, Reason(None))
    }
}

impl PlainText {
    fn scan(s: &mut Scan<'_>) -> Option<PlainText> {
        if let Lenient::Nothing = lenient(s)? {
            return Some(PlainText(None));
        }
        s.open_object()?;
        let (mut text, mut plain) = (String::new(), true);
        let mut first = true;
        while let Some(key) = s.member(&mut first)? {
            match &*key.text()? {
                "content" => match ContentText::scan(s)? {
                    None => text.clear(),
                    Some(ContentText(Some(t))) => text = t,
                    Some(ContentText(None)) => plain = false,
                },
                "tool_calls" => {
                    if !s.null()? {
                        s.skip()?;
                        plain = false;
                    }
                }
                _ => s.skip()?,
            }
        }
        Some(PlainText(plain.then_some(text)))
    }
}

impl ContentText {
    /// A string `content`: its first [`TEXT_KEPT`] chars.
    fn of(s: &str) -> ContentText {
        ContentText(Some(crate::text::first_chars(s, TEXT_KEPT).to_owned()))
    }

    /// `Option<ContentText>`, read by the scanner.
    fn scan(s: &mut Scan<'_>) -> Option<Option<ContentText>> {
        optional_text(s, ContentText::of, ContentText(None))
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
    fn a_plain_first_answer_is_read_as_what_the_general_reading_renders() {
        use crate::wire::AssistantOutput;
        let long = "é".repeat(super::TEXT_KEPT + 10);
        let bodies = [
            (r#"{"choices":[{"message":{"role":"assistant","content":"Hi \"there\""},"finish_reason":"stop"}]}"#.to_owned(), true),
            (r#"{"choices":[{"message":{"content":null,"tool_calls":null}}]}"#.to_owned(), true),
            (r#"{"choices":[{"message":{"role":"assistant"}},{"message":{"content":"second"}}]}"#.to_owned(), true),
            (format!(r#"{{"choices":[{{"message":{{"content":"{long}"}}}}]}}"#), true),
            (r#"{"choices":[{"message":{"content":[{"type":"text","text":"parts"}]}}]}"#.to_owned(), false),
            (r#"{"choices":[{"message":{"content":"x","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}}]}"#.to_owned(), false),
            (r#"{"choices":[{"message":"not an object"}]}"#.to_owned(), false),
            (r#"{"choices":[{"message":{"content":{"odd":1}}}]}"#.to_owned(), false),
            (r#"{"choices":[7]}"#.to_owned(), false),
        ];
        for (body, plain) in bodies {
            let c: WholeChoices = serde_json::from_str::<serde_json::Value>(&body)
                .map(|v| serde_json::from_value(v["choices"].clone()).unwrap())
                .unwrap();
            assert_eq!(c.plain_text.is_some(), plain, "{body}");
            if let Some(text) = c.plain_text {
                let general = AssistantOutput::from_completion(body.as_bytes())
                    .unwrap()
                    .render();
                let kept: String = general.chars().take(super::TEXT_KEPT).collect();
                assert_eq!(text, kept, "{body}");
            }
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
