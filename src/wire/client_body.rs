//! [`ClientBody`]: a client's chat request body kept beside the request
//! read from it, so that a call which would send the request unchanged
//! sends the client's own bytes instead of writing them again.

use std::sync::Arc;

use bytes::Bytes;

use super::ChatRequest;

/// A client's body and the request read from it, made only when the body
/// named each key once ([`super::ReadRequest::keys_once`]): its bytes then
/// say exactly what the request holds.
#[derive(Debug, Clone)]
pub struct ClientBody {
    /// Held here, so the request can never change in place: a call that
    /// changes it (`Arc::make_mut` included) works on a copy.
    request: Arc<ChatRequest>,
    bytes: Bytes,
}

impl ClientBody {
    pub fn new(request: Arc<ChatRequest>, bytes: Bytes) -> Self {
        ClientBody { request, bytes }
    }

    /// The body to send `req` to an upstream that calls its model
    /// `upstream_model`, when it is the client's own: `req` is the request
    /// read from these bytes (the same one, not a copy, which may have
    /// changed), under the same model name, and not streamed (a stream
    /// always asks for usage, which the client may not have).
    pub fn for_call(&self, req: &Arc<ChatRequest>, upstream_model: &str) -> Option<Bytes> {
        (Arc::ptr_eq(req, &self.request) && req.model == upstream_model && !req.is_stream())
            .then(|| self.bytes.clone())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::wire::ReadRequest;

    fn read(body: &str) -> (Arc<ChatRequest>, Option<ClientBody>) {
        let r: ReadRequest = serde_json::from_str(body).unwrap();
        let req = Arc::new(r.request);
        let kept = r
            .keys_once
            .then(|| ClientBody::new(req.clone(), Bytes::from(body.to_owned())));
        (req, kept)
    }

    #[test]
    fn the_clients_bytes_go_when_nothing_changes() {
        let body = r#"{ "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1.50 }"#;
        let (req, kept) = read(body);
        let kept = kept.unwrap();
        assert_eq!(kept.for_call(&req, "m").unwrap(), body.as_bytes());
        // Another model name, a copy, a stream: written again.
        assert!(kept.for_call(&req, "other").is_none());
        let copy = Arc::new(ChatRequest::clone(&req));
        assert!(kept.for_call(&copy, "m").is_none());
        let mut shared = req.clone();
        Arc::make_mut(&mut shared).extra.remove("max_tokens");
        assert!(kept.for_call(&shared, "m").is_none());
        let (req, kept) =
            read(r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#);
        assert!(kept.unwrap().for_call(&req, "m").is_none());
    }

    #[test]
    fn a_key_named_twice_keeps_no_bytes() {
        for body in [
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":9,"max_tokens":1}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","name":"a","content":"b","name":"c"}]}"#,
        ] {
            assert!(read(body).1.is_none(), "{body}");
        }
        let (_, kept) = read(
            r#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}"#,
        );
        assert!(kept.is_some());
    }
}
