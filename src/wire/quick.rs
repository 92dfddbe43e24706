//! A quick read of a whole chat or legacy completions body, the reply to
//! almost every call that is not streamed: the [`WholeBody`] that
//! [`super::inspect_completion`] reads with serde_json, in one pass of the
//! scanner (`scan`), in about a quarter of serde's instructions on a
//! typical answer. Each shape's own module reads its part (`usage`,
//! `finish`), beside its serde reader.
//!
//! It answers only for a body that is an answer and that it reads exactly
//! as serde_json would. For anything else (an `error` object, no choices,
//! a field twice, a number where text is read, an escape serde_json would
//! refuse as text) it answers `None` and serde_json reads the body, as
//! before; a differential test holds the two to the same answer.

use super::finish::WholeChoices;
use super::inspect::{MAX_CHOICES, WholeBody};
use super::scan::Scan;
use super::usage;

/// `text` (a JSON object, its UTF-8 checked) read as an answer, when it
/// plainly is one.
pub fn completion(text: &str) -> Option<WholeBody> {
    const FIELDS: [&str; 4] = ["usage", "choices", "data", "error"];
    let (mut usage, mut choices) = (None, None);
    let mut seen = [false; FIELDS.len()];
    let mut s = Scan::new(text);
    s.open_object()?;
    let mut first = true;
    while let Some(key) = s.member(&mut first)? {
        let key = key.text()?;
        let Some(n) = FIELDS.iter().position(|f| *f == key) else {
            s.skip()?;
            continue;
        };
        if std::mem::replace(&mut seen[n], true) {
            return None;
        }
        let null = s.null()?;
        match n {
            _ if null => {}
            0 => usage = Some(usage::scan(&mut s)?),
            1 => choices = Some(WholeChoices::scan(&mut s)?),
            // Embeddings' `data`, which must be an array.
            2 if s.peek()? == b'[' => s.skip()?,
            // An error object, or `data` that is not an array: serde's
            // to read.
            _ => return None,
        }
    }
    s.end()?;
    let c = choices.filter(|c| (1..=MAX_CHOICES).contains(&c.count))?;
    Some(WholeBody::Answer {
        usage,
        finish_reason: c.finish_reason,
        finished: c.finished,
        plain_text: c.plain_text,
    })
}

#[cfg(test)]
mod tests;
