//! One chat or completions stream chunk, read without keeping a parsed
//! copy of it: its usage, how many choices it has and whether any is
//! real, the first choice's finish reason and delta. Read first by one
//! pass of the strict scanner (`scan`), as the whole answer is read
//! (`quick`): a relayed stream reads every event, and serde_json's
//! machinery for each field and value cost more than the rest of an
//! event's relay. Where the scanner declines (an error object, a field
//! twice, a number where text is read, an escape serde_json would refuse
//! as text, a shape it does not follow) serde_json reads the chunk, as
//! before; a differential test (`tests`) holds the two
//! to the same answer. Each probe's scanner reader sits beside its serde
//! reader.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use super::finish::Reason;
use super::inspect::{ChunkInfo, MAX_CHOICES, NotAnAnswer, error_message, object_bytes};
use super::scan::{Fields, Scan};
use super::usage::{self, Usage, UsageField};

#[derive(Deserialize)]
struct ChunkProbe<'a> {
    /// Outer `None`: no `usage` key; `Some(None)`: `"usage": null`.
    #[serde(default, deserialize_with = "present")]
    usage: Option<Option<Usage>>,
    #[serde(default, borrow)]
    choices: Option<Choices<'a>>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    id: Option<IgnoredAny>,
    #[serde(default)]
    object: Option<IgnoredAny>,
    /// Where the `usage` member sits, with its comma
    /// ([`ChunkInfo::usage_at`]): known to the scanner only.
    #[serde(skip)]
    usage_at: Option<Range<usize>>,
}

/// `choices` read in one pass without keeping them: how many, whether any
/// is real, and the first one (whose delta is all that is borrowed).
#[derive(Default)]
struct Choices<'a> {
    count: usize,
    real: bool,
    first: Option<ChoiceProbe<'a>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Choices<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Choices<'a>, A::Error> {
                let mut out = Choices::default();
                while let Some(choice) = seq.next_element::<ChoiceProbe<'a>>()? {
                    out.count += 1;
                    out.real |= choice.is_real();
                    if out.first.is_none() {
                        out.first = Some(choice);
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_seq(Visit(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct ChoiceProbe<'a> {
    #[serde(default)]
    finish_reason: Option<Reason>,
    #[serde(default, borrow)]
    delta: Option<DeltaProbe<'a>>,
    /// A legacy `/v1/completions` chunk's text.
    #[serde(default, borrow, deserialize_with = "super::borrowed::option")]
    text: Option<Cow<'a, str>>,
}

impl ChoiceProbe<'_> {
    /// The answer text this choice adds, in [`ChunkInfo::text`]'s order.
    fn answer_text(&self) -> String {
        let mut out = String::new();
        if let Some(d) = &self.delta {
            out.push_str(d.content.as_deref().unwrap_or_default());
            for f in d.functions() {
                out.push_str(f.arguments.as_deref().unwrap_or_default());
            }
        }
        out.push_str(self.text.as_deref().unwrap_or_default());
        out
    }

    fn is_real(&self) -> bool {
        self.delta.as_ref().is_some_and(DeltaProbe::is_real)
            || self.text.as_ref().is_some_and(|t| !t.is_empty())
    }
}

#[derive(Deserialize)]
struct DeltaProbe<'a> {
    #[serde(default, borrow, deserialize_with = "super::borrowed::option")]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolDeltaProbe<'a>>>,
    #[serde(default)]
    reasoning_content: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ToolDeltaProbe<'a> {
    #[serde(default, borrow)]
    function: Option<FunctionProbe<'a>>,
}

#[derive(Deserialize)]
struct FunctionProbe<'a> {
    #[serde(default, borrow, deserialize_with = "super::borrowed::option")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "super::borrowed::option")]
    arguments: Option<Cow<'a, str>>,
}

impl DeltaProbe<'_> {
    fn is_real(&self) -> bool {
        self.content.as_ref().is_some_and(|c| !c.is_empty())
            || self.tool_calls.as_ref().is_some_and(|t| !t.is_empty())
    }

    fn functions(&self) -> impl Iterator<Item = &FunctionProbe<'_>> {
        self.tool_calls
            .iter()
            .flatten()
            .filter_map(|t| t.function.as_ref())
    }

    fn text_bytes(&self) -> usize {
        let args: usize = self
            .functions()
            .filter_map(|f| f.arguments.as_ref())
            .map(|a| a.len())
            .sum();
        self.content.as_ref().map_or(0, |c| c.len()) + args
    }

    /// The delta as [`AssistantOutput::render`](super::AssistantOutput::render)
    /// writes a whole answer: the text, then each tool-call piece.
    fn summary(&self) -> String {
        let mut out = self.content.as_deref().unwrap_or_default().to_owned();
        for f in self.functions() {
            if !out.is_empty() {
                out.push('\n');
            }
            let name = f.name.as_deref().unwrap_or_default();
            let args = f.arguments.as_deref().unwrap_or_default();
            out.push_str(&format!("tool call: {name}({args})"));
        }
        out
    }
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<Usage>>, D::Error> {
    Option::<Usage>::deserialize(d).map(Some)
}

/// Inspects one stream chunk in one parse, without keeping a parsed copy
/// of it (and with its delta summarised when `summarize`). A chunk is a
/// JSON object with a `choices` array (possibly empty, for the usage
/// chunk), a usage-only object, or an error object; anything else is not
/// part of an answer.
pub fn inspect_chunk(data: &[u8], summarize: bool) -> Result<ChunkInfo, NotAnAnswer> {
    read_chunk(data, summarize, false)
}

/// [`inspect_chunk`], with the first choice's answer text
/// ([`ChunkInfo::text`]).
pub fn inspect_chunk_text(data: &[u8], summarize: bool) -> Result<ChunkInfo, NotAnAnswer> {
    read_chunk(data, summarize, true)
}

/// [`inspect_chunk`], with the answer text when `text`: a chat
/// stream event as [`super::Endpoint::inspect_event`] reads it.
pub(super) fn read_chunk(
    data: &[u8],
    summarize: bool,
    text: bool,
) -> Result<ChunkInfo, NotAnAnswer> {
    let json = object_bytes(data)?;
    let probe = match ChunkProbe::scan(json) {
        Some(probe) => probe,
        None => serde_json::from_str(json)?,
    };
    info(probe, summarize, text)
}

/// [`read_chunk`] by serde_json alone: what the scanner's reading is
/// held to.
#[cfg(test)]
fn read_by_serde(data: &[u8], summarize: bool, text: bool) -> Result<ChunkInfo, NotAnAnswer> {
    info(serde_json::from_str(object_bytes(data)?)?, summarize, text)
}

/// What a chunk's probe says of it.
fn info(probe: ChunkProbe<'_>, summarize: bool, text: bool) -> Result<ChunkInfo, NotAnAnswer> {
    let usage = match probe.usage {
        None => UsageField::Absent,
        Some(None) => UsageField::Null,
        Some(Some(u)) => UsageField::Present(u),
    };
    let mut info = ChunkInfo::with_usage(usage);
    info.usage_at = probe.usage_at;
    if let Some(e) = probe.error.filter(|e| !e.is_null()) {
        info.error = Some(error_message(&e));
        return Ok(info);
    }
    let choices = match probe.choices {
        Some(c) => c,
        None if matches!(usage, UsageField::Present(_)) => Choices::default(),
        None => return Err(NotAnAnswer::NoChoices),
    };
    if choices.count > MAX_CHOICES {
        return Err(NotAnAnswer::TooManyChoices(choices.count));
    }
    let first = choices.first.as_ref();
    let delta = first.and_then(|c| c.delta.as_ref());
    info.choices = choices.count;
    info.real = choices.real;
    info.loading = !info.real
        && probe.id.is_none()
        && probe.object.is_none()
        && delta.is_some_and(|d| d.reasoning_content.is_some());
    let reason = first.and_then(|c| c.finish_reason.as_ref());
    info.finished = reason.is_some();
    info.finish_reason = reason.and_then(|r| r.0.clone());
    info.text_bytes = delta.map_or(0, DeltaProbe::text_bytes);
    info.summary = delta.filter(|_| summarize).map(DeltaProbe::summary);
    info.text = first
        .filter(|_| text)
        .map(ChoiceProbe::answer_text)
        .filter(|t| !t.is_empty());
    Ok(info)
}

/// A string or `null`, borrowed where it can be (`borrowed::option`), by
/// the scanner: `None` for anything else, which serde refuses.
fn optional_text<'a>(s: &mut Scan<'a>) -> Option<Option<Cow<'a, str>>> {
    if s.null()? {
        return Some(None);
    }
    s.string()?.text().map(Some)
}

/// `Option<IgnoredAny>` by the scanner: whether the value is not `null`,
/// checked as serde_json checks a value it ignores.
fn present_value(s: &mut Scan<'_>) -> Option<Option<IgnoredAny>> {
    if s.null()? {
        return Some(None);
    }
    s.skip()?;
    Some(Some(IgnoredAny))
}

impl<'a> ChunkProbe<'a> {
    /// The chunk (a JSON object, its UTF-8 checked) read by the scanner
    /// as serde reads it; `None` where serde_json would read it
    /// otherwise or refuse it, and for an error object.
    fn scan(text: &'a str) -> Option<Self> {
        let mut probe = ChunkProbe {
            usage: None,
            choices: None,
            error: None,
            id: None,
            object: None,
            usage_at: None,
        };
        let mut s = Scan::new(text);
        let mut fields = Fields::open(&mut s, &["usage", "choices", "error", "id", "object"])?;
        while let Some(n) = fields.next(&mut s)? {
            match n {
                0 => {
                    let null = s.null()?;
                    probe.usage = Some(if null {
                        None
                    } else {
                        Some(usage::scan(&mut s)?)
                    });
                    probe.usage_at = fields.cut(&mut s);
                }
                1 if s.null()? => {}
                1 => probe.choices = Some(Choices::scan(&mut s)?),
                // An error object, read by serde_json.
                2 if !s.null()? => return None,
                2 => {}
                3 => probe.id = present_value(&mut s)?,
                _ => probe.object = present_value(&mut s)?,
            }
        }
        s.end()?;
        Some(probe)
    }
}

impl<'a> Choices<'a> {
    /// `choices` (the array, its `[` next), each choice an object.
    fn scan(s: &mut Scan<'a>) -> Option<Self> {
        let mut out = Choices::default();
        s.open_array()?;
        let mut first = true;
        while s.element(&mut first)? {
            let choice = ChoiceProbe::scan(s)?;
            out.count += 1;
            out.real |= choice.is_real();
            if out.first.is_none() {
                out.first = Some(choice);
            }
        }
        Some(out)
    }
}

impl<'a> ChoiceProbe<'a> {
    fn scan(s: &mut Scan<'a>) -> Option<Self> {
        let mut out = ChoiceProbe {
            finish_reason: None,
            delta: None,
            text: None,
        };
        let mut fields = Fields::open(s, &["finish_reason", "delta", "text"])?;
        while let Some(n) = fields.next(s)? {
            match n {
                0 => out.finish_reason = Reason::scan(s)?,
                1 if s.null()? => {}
                1 => out.delta = Some(DeltaProbe::scan(s)?),
                _ => out.text = optional_text(s)?,
            }
        }
        Some(out)
    }
}

impl<'a> DeltaProbe<'a> {
    fn scan(s: &mut Scan<'a>) -> Option<Self> {
        let mut out = DeltaProbe {
            content: None,
            tool_calls: None,
            reasoning_content: None,
        };
        let mut fields = Fields::open(s, &["content", "tool_calls", "reasoning_content"])?;
        while let Some(n) = fields.next(s)? {
            match n {
                0 => out.content = optional_text(s)?,
                1 if s.null()? => {}
                1 => out.tool_calls = Some(ToolDeltaProbe::scan_all(s)?),
                _ => out.reasoning_content = present_value(s)?,
            }
        }
        Some(out)
    }
}

impl<'a> ToolDeltaProbe<'a> {
    /// A delta's `tool_calls` (the array, its `[` next), each an object.
    fn scan_all(s: &mut Scan<'a>) -> Option<Vec<Self>> {
        let mut out = Vec::new();
        s.open_array()?;
        let mut first = true;
        while s.element(&mut first)? {
            let mut call = ToolDeltaProbe { function: None };
            let mut fields = Fields::open(s, &["function"])?;
            while fields.next(s)?.is_some() {
                if !s.null()? {
                    call.function = Some(FunctionProbe::scan(s)?);
                }
            }
            out.push(call);
        }
        Some(out)
    }
}

impl<'a> FunctionProbe<'a> {
    fn scan(s: &mut Scan<'a>) -> Option<Self> {
        let mut out = FunctionProbe {
            name: None,
            arguments: None,
        };
        let mut fields = Fields::open(s, &["name", "arguments"])?;
        while let Some(n) = fields.next(s)? {
            match n {
                0 => out.name = optional_text(s)?,
                _ => out.arguments = optional_text(s)?,
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests;
