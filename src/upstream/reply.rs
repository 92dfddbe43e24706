//! A chat call of a [`ConcreteModel`], as its `chat` makes it: the
//! request's context window checked once ([`super::fit`]), the call sent
//! as [`Wire::plan`] says, and asked again whole when the server refuses
//! the stream ([`delivery`]).

use std::sync::Arc;

use super::concrete::ConcreteModel;
use super::delivery::{self, Wire};
use crate::error::ModelError;
use crate::model::{Call, Reply};
use crate::wire::ChatRequest;

impl ConcreteModel {
    /// Sends the call as [`Wire::plan`] says; a server that refuses the
    /// stream is asked again whole (see [`delivery`]), and the answer
    /// replayed as a stream when the request asked for one.
    pub(super) async fn reply(
        &self,
        call: Call,
        req: Arc<ChatRequest>,
    ) -> Result<Reply, ModelError> {
        // Estimated once: the window check and every try's usage estimate.
        let input = req.billable().input;
        self.fits(&call, &req, input).await?;
        let tools = delivery::carries_tools(&req);
        let wire = Wire::plan(&req, &call, self.streams_tools.refused());
        let reply = match self.chat_as(&call, (&req, input), wire).await {
            Err(e) if wire.streamed() => {
                let Some(why) = delivery::refusal(&e, tools) else {
                    return Err(e);
                };
                tracing::debug!(request_id = %call.ctx.id, model = %self.info.name, refusal = ?why, "the server refused a stream; asking whole");
                let whole = match self.chat_as(&call, (&req, input), Wire::Whole).await {
                    // uvicorn ends its empty stream with keep-alive and
                    // then closes: the connection the retry went on may be
                    // gone. Once more, on a new one.
                    Err(e) if delivery::connection_lost(&e) => {
                        self.chat_as(&call, (&req, input), Wire::Whole).await?
                    }
                    whole => whole?,
                };
                // An empty stream may be a prompt too long for the model;
                // tools it answers whole were what it would not stream.
                if tools && self.streams_tools.learn_refused() {
                    tracing::info!(model = %self.info.name, "its server refuses tools on a stream: its calls with tools go out whole from now on");
                }
                whole
            }
            answered => answered?,
        };
        match req.is_stream() {
            true => delivery::as_stream(reply),
            false => Ok(reply),
        }
    }
}
