//! `kind = "mock"`: the simulator in-process, behind the same [`Transport`]
//! interface as a real server, so its answers go through the same decoding.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use indexmap::IndexMap;

use super::{BoxError, RawResponse, Transport, TransportError};
use crate::labels::Warm;
use crate::mock::{Behavior, Simulator};
use crate::wire::Endpoint;

pub struct MockTransport {
    sim: Arc<Simulator>,
    /// Warm state is only meaningful when swaps are emulated.
    swaps: bool,
}

impl MockTransport {
    pub fn new(models: IndexMap<String, Behavior>, swap_delay: Option<Duration>) -> Self {
        MockTransport {
            sim: Arc::new(Simulator::new(models, swap_delay, true)),
            swaps: swap_delay.is_some(),
        }
    }
}

#[async_trait]
impl Transport for MockTransport {
    async fn send(
        &self,
        endpoint: Endpoint,
        body: Bytes,
        request_id: &str,
    ) -> Result<RawResponse, TransportError> {
        let r = self
            .sim
            .respond(endpoint, &body, None, Some(request_id.to_owned()))
            .await;
        Ok(RawResponse {
            status: r.status,
            retry_after: r.retry_after.map(|s| s.to_string()),
            body: Box::pin(r.body.map_err(|e| Box::new(e) as BoxError)),
        })
    }

    async fn warm(&self, model: &str) -> Warm {
        match (self.swaps, self.sim.running()) {
            (false, _) => Warm::Unknown,
            (true, Some(m)) if m == model => Warm::Yes,
            (true, _) => Warm::No,
        }
    }

    async fn ready(&self) -> Result<(), String> {
        Ok(())
    }
}
