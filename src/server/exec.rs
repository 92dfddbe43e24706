//! The executor hyper runs each HTTP/2 stream on: every stream gets a
//! deadline (the request's whole time limit, see `Serving::request_limit`),
//! after which it is dropped and h2 resets it (`RST_STREAM`). hyper polls a
//! response body only while the stream has send window, so a client that
//! never opens its window would otherwise keep the request, its slot and
//! its upstream call for as long as it keeps the connection.

use std::future::Future;
use std::sync::Arc;

use tokio::time::timeout;

use super::Serving;

#[derive(Clone)]
pub(super) struct Deadline(pub(super) Arc<Serving>);

impl<F> hyper::rt::Executor<F> for Deadline
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        let limit = self.0.request_limit();
        tokio::spawn(async move {
            if timeout(limit, fut).await.is_err() {
                tracing::debug!(
                    limit_ms = limit.as_millis(),
                    "an HTTP/2 stream outlived its request's time limit: reset"
                );
            }
        });
    }
}
