//! `x-conclave-pin` on a strategy route, in one place: the graph wraps
//! every strategy node in [`Pinned`], fed by the pin targets its builder
//! returns ([`Pins`]). With a pin, the named target (a chain's tier, a
//! race's candidate, a judge's panellist or default, …) answers alone, in
//! the strategy's member role; any other name is a 400 that lists the
//! targets. Without one, the strategy runs. Either way the pin goes no
//! further down: it names a target of the outermost strategy of the route
//! the client asked for, and nested routes never see it.

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::ModelError;
use crate::labels::{Role, Verdict, Warm};
use crate::model::{Availability, Call, CallSize, ChatModel, Reply, Spend};
use crate::wire::ChatRequest;

/// What a pin may name on one strategy route.
pub struct Pins {
    /// What a target is called in errors (`tier`, `candidate`, `model`, …).
    pub noun: &'static str,
    /// The role the pinned target answers in.
    pub role: Role,
    /// The targets by config name, in config order.
    pub targets: Vec<(Arc<str>, Arc<dyn ChatModel>)>,
}

/// A strategy node that honours `x-conclave-pin` (see the module doc).
pub struct Pinned {
    /// The strategy's name (`chain`, `race`, …), for errors.
    pub strategy: &'static str,
    /// The route's name, for errors.
    pub route: Arc<str>,
    pub pins: Pins,
    /// The strategy node itself.
    pub inner: Arc<dyn ChatModel>,
}

#[async_trait]
impl ChatModel for Pinned {
    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        let Some(pin) = call.pin.clone() else {
            return self.inner.chat(call.without_pin(), req).await;
        };
        let Pins {
            noun,
            role,
            targets,
        } = &self.pins;
        let Some((_, model)) = targets.iter().find(|(name, _)| **name == *pin) else {
            let names: Vec<&str> = targets.iter().map(|(name, _)| &**name).collect();
            return Err(ModelError::BadRequest {
                message: format!(
                    "x-conclave-pin: \"{pin}\" is not a {noun} of {} \"{}\" ({noun}s: {})",
                    self.strategy,
                    self.route,
                    names.join(", ")
                ),
                param: None,
            });
        };
        let reply = model.chat(call.without_pin().with_role(*role), req).await?;
        reply.attempt.set_verdict(Verdict::Ok, None);
        Ok(reply)
    }

    fn estimate(&self, size: CallSize) -> Spend {
        self.inner.estimate(size)
    }

    fn estimate_request(&self, req: &ChatRequest, size: CallSize) -> Spend {
        self.inner.estimate_request(req, size)
    }

    fn availability(&self) -> Availability {
        self.inner.availability()
    }

    async fn warm(&self) -> Warm {
        self.inner.warm().await
    }

    fn continues_prefill(&self) -> bool {
        self.inner.continues_prefill()
    }
}
