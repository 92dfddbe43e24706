//! [`Routes`]: what the server hands each request to. Chat completions,
//! nearly every request a gateway serves, go straight to their handler;
//! everything else goes through the router. The router would run the
//! same handler for them, after its lookup, the map of URL parameters it
//! makes for every request and its boxed service layers: together some
//! 3 % of a proxied request's CPU.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::Response;
use futures::future::BoxFuture;
use tower::ServiceExt;

use super::Gateway;
use crate::boxed::boxed;

/// The paths of the chat completions endpoint. The router's route for
/// each is `post(chat::chat_completions)` and nothing else, so a `POST`
/// to one of them is answered as the router would.
pub(super) const CHAT_PATHS: [&str; 2] = ["/v1/chat/completions", "/chat/completions"];

/// The gateway's router, and the gateway, whose chat completions skip it.
#[derive(Clone)]
pub struct Routes {
    router: Router,
    gateway: Arc<Gateway>,
}

impl Routes {
    /// The gateway's routes: [`super::router`], chat completions ahead.
    pub fn gateway(gateway: Arc<Gateway>) -> Self {
        Routes {
            router: super::router(gateway.clone()),
            gateway,
        }
    }

    /// The answer to `req`, boxed (as the router boxes its handlers') and
    /// built in its box ([`boxed`]): the connection that awaits it holds
    /// a pointer, not room for the largest answer's future.
    pub fn answer(&self, req: Request) -> BoxFuture<'static, Response> {
        if is_chat(&req) {
            let gateway = State(self.gateway.clone());
            return boxed(move || super::chat::chat_completions(gateway, req));
        }
        let routed = self.router.clone().oneshot(req);
        boxed(move || async move {
            match routed.await {
                Ok(resp) => resp,
                Err(never) => match never {},
            }
        })
    }
}

/// A `POST` to the chat completions endpoint (any other method there is
/// the router's 405).
fn is_chat(req: &Request) -> bool {
    req.method() == Method::POST && CHAT_PATHS.contains(&req.uri().path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_post_to_a_chat_path_skips_the_router() {
        let req = |method: Method, uri: &str| {
            axum::http::Request::builder()
                .method(method)
                .uri(uri)
                .body(axum::body::Body::empty())
                .unwrap_or_default()
        };
        assert!(is_chat(&req(Method::POST, "/v1/chat/completions")));
        assert!(is_chat(&req(Method::POST, "/chat/completions?x=1")));
        assert!(!is_chat(&req(Method::GET, "/v1/chat/completions")));
        assert!(!is_chat(&req(Method::POST, "/v1/chat/completions/")));
        assert!(!is_chat(&req(Method::POST, "/v1/completions")));
    }
}
