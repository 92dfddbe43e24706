//! Chat request → Messages request.

use serde_json::{Map, Value};

use super::{Translation, Untranslatable};

/// Translates a chat completions request body into a Messages request for
/// `upstream_model`; `default_max_tokens` when the request names none
/// (Messages requires one).
pub fn to_messages(
    chat: &Map<String, Value>,
    upstream_model: &str,
    default_max_tokens: u64,
) -> Result<(Value, Translation), Untranslatable> {
    let _ = (chat, upstream_model, default_max_tokens);
    Err(Untranslatable::new("messages", "not yet"))
}
