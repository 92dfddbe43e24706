//! A quick read of a whole chat or legacy completions body, the reply to
//! almost every call that is not streamed: what
//! [`super::inspect_completion`] reads with serde_json, in one pass of the
//! scanner (`scan`), without serde's machinery for each field and value
//! (on the bench's answer, 5.4k instructions where serde_json takes 7.0k,
//! counted under callgrind). Each shape's own module reads its part
//! (`usage`, `finish`), beside its serde reader.
//!
//! It answers only for a body with `choices` and no `error` that it reads
//! exactly as serde_json would. For anything else (an error object, a
//! field twice, a number where text is read, an escape serde_json would
//! refuse as text) it answers `None` and serde_json reads the body, as
//! before; a differential test (`inspect`'s `quick_tests`) holds the two
//! to the same answer.

use super::finish::WholeChoices;
use super::scan::{Fields, Scan};
use super::usage::{self, Usage};

/// What the quick read takes from an answer: its usage and its choices.
pub struct Quick {
    pub usage: Option<Usage>,
    pub choices: WholeChoices,
}

/// `text` (a JSON object, its UTF-8 checked) read quickly, when it has
/// `choices` and no `error` and is read exactly as serde_json reads it.
pub fn completion(text: &str) -> Option<Quick> {
    let (mut usage, mut choices) = (None, None);
    let mut s = Scan::new(text);
    let mut fields = Fields::open(&mut s, &["usage", "choices", "data", "error"])?;
    while let Some(n) = fields.next(&mut s)? {
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
    Some(Quick {
        usage,
        choices: choices?,
    })
}
