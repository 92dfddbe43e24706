//! Token usage as upstreams report it ([`Usage`]), read from either
//! dialect's field names, leniently where servers differ, and the one rule
//! for estimating it when they report none.

use serde::{Deserialize, Serialize};

use super::scan::{Fields, Scan};

/// Token usage as upstreams report it, in either dialect: Chat
/// Completions' `prompt_tokens`/`completion_tokens` (with
/// `prompt_tokens_details.cached_tokens` and
/// `completion_tokens_details.reasoning_tokens`) or the Responses API's
/// `input_tokens`/`output_tokens` (with `input_tokens_details` and
/// `output_tokens_details`). Missing counts read as zero; a detail that is
/// not a count is ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(from = "UsageWire")]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Input tokens read from the provider's prompt cache (part of
    /// `prompt_tokens`).
    #[serde(skip_serializing_if = "is_zero")]
    pub cached_tokens: u64,
    /// Output tokens spent reasoning (part of `completion_tokens`).
    #[serde(skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// Input tokens written to the provider's prompt cache (part of
    /// `prompt_tokens`): Anthropic's `cache_creation_input_tokens`, kept
    /// at the top of a translated chat `usage`.
    #[serde(skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// conclave estimated it: the upstream reported none.
    #[serde(skip)]
    pub estimated: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// [`Usage`] as either dialect writes it.
#[derive(Default, Deserialize)]
struct UsageWire {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<Details>,
    #[serde(default)]
    completion_tokens_details: Option<Details>,
    #[serde(default)]
    input_tokens_details: Option<Details>,
    #[serde(default)]
    output_tokens_details: Option<Details>,
    #[serde(default)]
    cache_creation_input_tokens: Option<Count>,
}

/// A `*_tokens_details` object: only the two counts conclave keeps, read
/// leniently (servers put other things there).
#[derive(Default, Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<Count>,
    #[serde(default)]
    reasoning_tokens: Option<Count>,
}

/// A count; anything else there (a negative or fractional number, a
/// string, an object) reads as none. Not serde's `untagged`, which would
/// buffer every value first: OpenAI's usage carries half a dozen of these
/// in every answer, and a number is read here without allocating.
struct Count(u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Count(
            serde_json::Value::deserialize(d)?.as_u64().unwrap_or(0),
        ))
    }
}

/// A `usage` object (its `{` next) read by the scanner as serde reads
/// it; `None` where serde_json would read it otherwise or refuse it (a
/// field twice, a count that is not a plain one).
pub(super) fn scan(s: &mut Scan<'_>) -> Option<Usage> {
    let detail = |s: &mut Scan<'_>| {
        if s.null()? {
            Some(None)
        } else {
            scan_details(s).map(Some)
        }
    };
    let mut w = UsageWire::default();
    let mut fields = Fields::open(
        s,
        &[
            "prompt_tokens",
            "completion_tokens",
            "input_tokens",
            "output_tokens",
            "prompt_tokens_details",
            "completion_tokens_details",
            "input_tokens_details",
            "output_tokens_details",
            "cache_creation_input_tokens",
        ],
    )?;
    while let Some(n) = fields.next(s)? {
        match n {
            0 => w.prompt_tokens = scan_count(s)?,
            1 => w.completion_tokens = scan_count(s)?,
            2 => w.input_tokens = scan_count(s)?,
            3 => w.output_tokens = scan_count(s)?,
            4 => w.prompt_tokens_details = detail(s)?,
            5 => w.completion_tokens_details = detail(s)?,
            6 => w.input_tokens_details = detail(s)?,
            7 => w.output_tokens_details = detail(s)?,
            _ => w.cache_creation_input_tokens = scan_count(s)?.map(Count),
        }
    }
    Some(w.into())
}

/// A `*_tokens_details` object read by the scanner ([`scan`]).
fn scan_details(s: &mut Scan<'_>) -> Option<Details> {
    let mut d = Details::default();
    let mut fields = Fields::open(s, &["cached_tokens", "reasoning_tokens"])?;
    while let Some(n) = fields.next(s)? {
        let count = scan_count(s)?.map(Count);
        if n == 0 {
            d.cached_tokens = count;
        } else {
            d.reasoning_tokens = count;
        }
    }
    Some(d)
}

/// A count or `null`, read by the scanner: `None` for anything else,
/// which serde reads otherwise (a strict count refuses it, a lenient one
/// reads it as none).
fn scan_count(s: &mut Scan<'_>) -> Option<Option<u64>> {
    if s.null()? {
        return Some(None);
    }
    s.count().map(Some)
}

fn count(c: &Option<Count>) -> u64 {
    c.as_ref().map_or(0, |c| c.0)
}

impl From<UsageWire> for Usage {
    fn from(w: UsageWire) -> Self {
        let detail = |a: &Option<Details>, b: &Option<Details>, f: fn(&Details) -> u64| {
            a.as_ref().or(b.as_ref()).map_or(0, f)
        };
        Usage {
            prompt_tokens: w.prompt_tokens.or(w.input_tokens).unwrap_or(0),
            completion_tokens: w.completion_tokens.or(w.output_tokens).unwrap_or(0),
            cached_tokens: detail(&w.prompt_tokens_details, &w.input_tokens_details, |d| {
                count(&d.cached_tokens)
            }),
            reasoning_tokens: detail(
                &w.completion_tokens_details,
                &w.output_tokens_details,
                |d| count(&d.reasoning_tokens),
            ),
            cache_write_tokens: count(&w.cache_creation_input_tokens),
            estimated: false,
        }
    }
}

/// The one rule for estimating tokens when an upstream reports no usage:
/// UTF-8 bytes of text divided by 4, rounded up.
pub fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

impl Usage {
    /// An estimate from the request's estimated input tokens (as budgets
    /// count them: text, fields that reach the prompt, the chat template)
    /// and the answer's text.
    pub fn estimate(input_tokens: u64, output_bytes: usize) -> Self {
        Usage {
            prompt_tokens: input_tokens,
            completion_tokens: estimate_tokens(output_bytes),
            estimated: true,
            ..Usage::default()
        }
    }
}

/// What a stream chunk's `usage` field held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageField {
    Absent,
    Null,
    Present(Usage),
}

#[cfg(test)]
mod tests;
