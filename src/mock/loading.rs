//! llama-swap's `sendLoadingState`: a cold streamed chat request gets the
//! loading banner (as `reasoning_content` chunks) while its model loads,
//! then its answer.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::{Finish, MockResponse, Resolved, Simulator, answer};

impl Simulator {
    /// A cold streamed answer with llama-swap's `sendLoadingState`: the
    /// 200 and the loading banner at once (a dot a second while loading,
    /// as llama-swap does), then the answer once the model is loaded.
    pub(super) fn loading(
        self: &Arc<Self>,
        b: Resolved,
        req: Value,
        model: String,
        n: u64,
        include_usage: bool,
        guard: Finish,
    ) -> MockResponse {
        let this = self.clone();
        let body = async_stream::stream! {
            let started = tokio::time::Instant::now();
            yield Ok(loading_chunk("━━━━━\n"));
            yield Ok(loading_chunk(&format!("llama-swap loading model: {model}\n")));
            let swap = this.swap_to(&model);
            tokio::pin!(swap);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tokio::select! {
                    () = &mut swap => break,
                    _ = tick.tick() => yield Ok(loading_chunk(".")),
                }
            }
            let took = started.elapsed().as_secs_f64();
            yield Ok(loading_chunk(&format!("\nDone! ({took:.2}s)\n")));
            yield Ok(loading_chunk("━━━━━\n"));
            yield Ok(loading_chunk(" \n"));
            let answer = answer::respond(
                b,
                &req,
                &model,
                n,
                answer::How {
                    legacy: false,
                    stream: true,
                    include_usage,
                    interrupt: None,
                },
                guard,
            )
            .await;
            let mut answer = answer.body;
            while let Some(part) = futures::StreamExt::next(&mut answer).await {
                yield part;
            }
        };
        answer::event_stream(Box::pin(body))
    }
}

/// One chunk of llama-swap's loading banner: only `reasoning_content`, no
/// `id` or `object` (llama-swap writes it, not the model).
fn loading_chunk(text: &str) -> Bytes {
    let chunk = json!({"choices": [{"delta": {"reasoning_content": text}}]});
    Bytes::from(format!("data: {chunk}\n\n"))
}
