//! The OpenAI Responses API (`POST /v1/responses`) as a dialect of
//! conclave's internal chat form: translators at the edge, nothing else.
//!
//! - [`from_object`] reads a Responses body (a JSON object) into a
//!   [`ResponsesRequest`] (every field checked, a 400 naming the one that
//!   is wrong), which gives its
//!   own input as items ([`ResponsesRequest::input_items`], for the store)
//!   and the chat request conclave's strategies answer
//!   ([`ResponsesRequest::to_chat`]: `request` for the top-level fields,
//!   `items` for the input, `tools` for the tools it keeps and drops).
//! - [`Responses`] renders the chat answer back ([`crate::api::render::Render`]):
//!   a whole chat completion becomes the `response` object (`whole`), a
//!   stream of chat chunks becomes the Responses event stream (`events`),
//!   both built from the same output items (`output`). `on_done` hands
//!   the final response object to the caller (to store it).
//!
//! Every id is a prefix and 32 lowercase hex digits. A response's item ids
//! (`msg_`, `fc_`, `rs_`, and the `call_` of a call the model gave none)
//! are derived from the response id and the item's place in `output`, so
//! the streamed and the whole rendering of one answer agree to the byte.
//! docs/responses.md describes the field mapping for users.

pub mod dialect;
mod events;
mod items;
mod output;
mod request;
pub mod stored;
#[cfg(test)]
mod tests;
mod tools;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use events::{OnDone, Responses};
#[cfg(test)]
pub use request::parse;
pub use request::{ResponsesRequest, from_object};

/// A new random id: `prefix` and 32 lowercase hex digits.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// The id of the `n`th item of a response (or of anything else the
/// response owns), the same every time it is asked for.
fn derived_id(prefix: &str, response_id: &str, n: usize) -> String {
    let digest = Sha256::digest(format!("{prefix}{response_id}/{n}").as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}

/// The request fields a `response` object repeats back (`instructions`,
/// `tools`, `temperature`, …), as the client set them or at the API's
/// defaults. Tools conclave dropped are not among them.
#[derive(Debug, Clone, PartialEq)]
pub struct Echo {
    fields: Map<String, Value>,
}

impl Echo {
    /// The echoed fields, by name.
    #[cfg(test)]
    pub fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }

    fn get(&self, key: &str) -> Value {
        self.fields.get(key).cloned().unwrap_or(Value::Null)
    }
}

impl Default for Echo {
    fn default() -> Self {
        Echo {
            fields: request::default_echo(),
        }
    }
}

/// What every rendering of one response starts from.
#[derive(Debug, Clone)]
pub struct Head {
    /// `resp_` and 32 hex digits.
    pub id: String,
    /// Unix seconds.
    pub created_at: u64,
    /// The model the client asked for: the `model` of the response until
    /// the answer names its own.
    pub model: String,
    pub echo: Echo,
}

impl Head {
    /// A response to a request for `model`, with a new id.
    pub fn new(model: &str, echo: Echo, created_at: u64) -> Self {
        Head {
            id: new_id("resp_"),
            created_at,
            model: model.to_owned(),
            echo,
        }
    }
}
