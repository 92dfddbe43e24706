//! Which endpoints a transport serves: every endpoint of its API
//! [`Family`] with its URL, built once ([`Served`]), and what it answers,
//! without a call, for one its kind does not have ([`unsupported`]).

use bytes::Bytes;
use serde_json::json;

use super::{BodyStream, RawResponse};
use crate::wire::{Endpoint, Family};

/// Each endpoint of one family with its URL (or URI), parsed once: a
/// transport looks its endpoint up instead of parsing a URL per call.
pub struct Served<U>(Vec<(Endpoint, U)>);

impl<U> Served<U> {
    /// The URLs of `family`'s endpoints, `url` making each from its path.
    pub fn build<E>(
        family: Family,
        mut url: impl FnMut(&'static str) -> Result<U, E>,
    ) -> Result<Self, E> {
        let mut all = Vec::new();
        for e in Endpoint::ALL.into_iter().filter(|e| e.family() == family) {
            all.push((e, url(e.path())?));
        }
        Ok(Served(all))
    }

    /// The URL of `endpoint`; `None` when it is not of this family.
    pub fn get(&self, endpoint: Endpoint) -> Option<&U> {
        self.0.iter().find(|(e, _)| *e == endpoint).map(|(_, u)| u)
    }
}

/// What an upstream answers, without a call, for an endpoint its kind
/// does not have (an Anthropic one: Completions, Embeddings, Responses;
/// an OpenAI one: the Messages API): a 400 in OpenAI's shape.
pub fn unsupported(endpoint: Endpoint) -> RawResponse {
    let what = match endpoint.family() {
        Family::OpenAi => format!(
            "an Anthropic upstream does not serve {} (/v1{})",
            endpoint.title(),
            endpoint.path()
        ),
        Family::Anthropic => format!(
            "an OpenAI-compatible upstream is not sent {} natively",
            endpoint.title()
        ),
    };
    let body = json!({"error": {"message": what, "type": "invalid_request_error", "param": null, "code": "invalid_request"}});
    RawResponse {
        status: 400,
        retry_after: None,
        body: once(Bytes::from(body.to_string())),
    }
}

fn once(b: Bytes) -> BodyStream {
    Box::pin(futures::stream::once(async move { Ok(b) }))
}
