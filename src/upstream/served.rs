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
    rejected(&what, None)
}

/// A 400 in OpenAI's shape, answered without a call: `untranslatable`
/// when it names the field (`param`) that cannot be sent, else
/// `invalid_request`.
pub fn rejected(message: &str, param: Option<&str>) -> RawResponse {
    let code = if param.is_some() {
        "untranslatable"
    } else {
        "invalid_request"
    };
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}});
    RawResponse {
        status: 400,
        retry_after: None,
        json: true,
        body: once(Bytes::from(body.to_string())),
    }
}

fn once(b: Bytes) -> BodyStream {
    Box::pin(futures::stream::once(async move { Ok(b) }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use futures::StreamExt;

    use super::*;

    #[test]
    fn a_family_s_endpoints_have_urls_and_no_others() {
        let urls: Served<String> =
            Served::build(Family::OpenAi, |p| Ok::<_, ()>(format!("http://x/v1{p}"))).unwrap();
        assert_eq!(
            urls.get(Endpoint::CHAT).map(String::as_str),
            Some("http://x/v1/chat/completions")
        );
        assert!(urls.get(Endpoint::RESPONSES).is_some());
        assert!(urls.get(Endpoint::MESSAGES).is_none());
        let urls: Served<&str> = Served::build(Family::Anthropic, Ok::<_, ()>).unwrap();
        assert_eq!(
            urls.get(Endpoint::COUNT_TOKENS),
            Some(&"/messages/count_tokens")
        );
        assert!(urls.get(Endpoint::EMBEDDINGS).is_none());
        assert!(Served::build(Family::OpenAi, |_| Err::<(), _>("bad")).is_err());
    }

    #[tokio::test]
    async fn an_endpoint_a_kind_lacks_is_a_400_that_names_it() {
        for (e, says) in [
            (
                Endpoint::EMBEDDINGS,
                "an Anthropic upstream does not serve Embeddings (/v1/embeddings)",
            ),
            (
                Endpoint::MESSAGES,
                "an OpenAI-compatible upstream is not sent the Messages API natively",
            ),
        ] {
            let r = unsupported(e);
            assert_eq!(r.status, 400);
            let body = r.body.into_future().await.0.unwrap().unwrap();
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["error"]["message"], says);
            assert_eq!(v["error"]["code"], "invalid_request");
        }
    }
}
