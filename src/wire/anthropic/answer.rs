//! Whole Messages answer → chat completion.

use serde_json::Value;

use super::Translation;
use crate::wire::NotAnAnswer;

/// Translates a whole Messages answer (a `message` object) into a
/// `chat.completion` body. A body that is not a `message` with a `content`
/// array is not an answer.
pub fn to_completion(message: &[u8], t: &Translation, created: u64) -> Result<Value, NotAnAnswer> {
    let _ = (message, t, created);
    Err(NotAnAnswer::NotAMessage)
}
