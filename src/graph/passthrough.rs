//! `strategy = "passthrough"`, the one strategy built into the config:
//! another name for one model. A route that sets no options of its own is
//! the very node it names (see [`super::Graph`]); one that does is this
//! thin node, which applies them to the call and delegates. Strategies
//! use it for a pinned member that answers under their own options.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::ModelError;
use crate::labels::Warm;
use crate::model::{Availability, Call, CallSize, ChatModel, Reply, Spend};
use crate::wire::ChatRequest;

pub struct Passthrough {
    pub model: Arc<dyn ChatModel>,
    pub stream_idle_timeout: Option<Duration>,
}

impl Passthrough {
    /// `model`, or a node that gives its calls `idle` as their
    /// `stream_idle_timeout` (a pinned member of a route that sets one).
    pub fn with_idle(model: &Arc<dyn ChatModel>, idle: Option<Duration>) -> Arc<dyn ChatModel> {
        match idle {
            None => model.clone(),
            Some(idle) => Arc::new(Passthrough {
                model: model.clone(),
                stream_idle_timeout: Some(idle),
            }),
        }
    }
}

#[async_trait]
impl ChatModel for Passthrough {
    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        let call = call.with_idle_timeout(self.stream_idle_timeout);
        self.model.chat(call, req).await
    }

    fn estimate(&self, size: CallSize) -> Spend {
        self.model.estimate(size)
    }

    fn estimate_request(&self, req: &ChatRequest, size: CallSize) -> Spend {
        self.model.estimate_request(req, size)
    }

    fn availability(&self) -> Availability {
        self.model.availability()
    }

    async fn warm(&self) -> Warm {
        self.model.warm().await
    }

    fn continues_prefill(&self) -> bool {
        self.model.continues_prefill()
    }
}
