//! HTTP endpoints a strategy serves besides the chat APIs (the arena's
//! vote and leaderboard), declared in its strategy-table entry
//! ([`super::Strategy`]). The API mounts each under `/v1` and bare, as
//! every OpenAI path; it authenticates the caller and reads the body
//! (bounded), hands the handler an [`EndpointCall`] and turns its error
//! into HTTP in the one error mapping. So a strategy serves HTTP without
//! knowing the API's own types.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use futures::future::BoxFuture;

use crate::clock::Clock;
use crate::config::RouteSpec;
use crate::error::ModelError;
use crate::store::records::Records;
use crate::telemetry::Telemetry;

/// One endpoint: its method, its path (without the `/v1` prefix; `{id}`
/// is a path parameter) and its handler.
pub struct HttpEndpoint {
    pub method: Method,
    pub path: &'static str,
    pub handler: Handler,
}

/// The HTTP methods an endpoint may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Reads no body.
    Get,
    /// Reads the body, within the server's `max_body_bytes`.
    Post,
}

/// Answers one call of an endpoint.
pub type Handler = fn(EndpointCall) -> BoxFuture<'static, Result<Response, ModelError>>;

/// What an endpoint's handler is given.
pub struct EndpointCall {
    /// The request's id (the client's `x-request-id`, or a new one).
    pub request_id: Arc<str>,
    /// The path's parameters, by name.
    pub params: HashMap<String, String>,
    /// The query string's parameters.
    pub query: HashMap<String, String>,
    /// The body (empty for [`Method::Get`]).
    pub body: Bytes,
    pub caller: Caller,
    /// The routes of this endpoint's strategy in the running config, in
    /// config order.
    pub routes: Vec<(String, Arc<dyn RouteSpec>)>,
    pub records: Records,
    pub telemetry: Arc<Telemetry>,
    pub clock: Clock,
}

/// Who called, as the API authenticated them.
#[derive(Clone)]
pub struct Caller {
    /// The key's name (`anonymous` on a gateway without keys).
    pub name: Arc<str>,
    /// The gateway has keys (so a caller is a key, not anyone).
    pub keyed: bool,
    /// The names the key may use; `None`: every name.
    pub models: Option<Arc<HashSet<String>>>,
}

impl Caller {
    /// May the caller use route or model `name`?
    pub fn may_use(&self, name: &str) -> bool {
        self.models.as_ref().is_none_or(|m| m.contains(name))
    }
}
