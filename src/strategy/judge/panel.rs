//! The panel: the client's request goes to every panellist at once (each
//! through its upstream's lane), as a whole answer. Panellists still
//! running at `panel_timeout` are cancelled (their futures dropped, so
//! their attempts record `cancelled` and queued ones never reach their
//! upstream). Tool calls in an answer are kept as part of it; nothing is
//! executed. A panellist whose context window the request does not fit
//! is skipped before it is called, and listed among the failures.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::{Instant, timeout_at};

use super::Member;
use crate::attempt::Attempt;
use crate::error::ModelError;
use crate::labels::{Role, Verdict};
use crate::model::{Call, Reply};
use crate::wire::{AssistantOutput, ChatRequest};

/// One panellist's usable answer.
pub struct Answer {
    /// The panellist's position in `panel`.
    pub member: usize,
    /// Its attempt, for the verdict the ranking gives it.
    pub attempt: Attempt,
    pub output: AssistantOutput,
}

/// What the panel produced.
pub struct Outcome {
    /// Usable answers, in panel order.
    pub answers: Vec<Answer>,
    /// Why the other panellists gave none (for `judge_fallback`).
    pub failures: Vec<String>,
}

/// The request a panellist sees: the client's, as a whole answer.
pub fn request(req: &ChatRequest) -> Arc<ChatRequest> {
    let mut r = req.clone();
    r.stream = None;
    r.stream_options = None;
    Arc::new(r)
}

/// Asks every panellist at once and collects the usable answers.
pub async fn run(
    panel: &[Member],
    call: &Call,
    req: &Arc<ChatRequest>,
    timeout: Option<Duration>,
) -> Outcome {
    let mut pending: FuturesUnordered<_> = panel
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (call, _) = call.with_role(Role::Panel).cancellable();
            let req = req.clone();
            async move { (i, ask(m, call, req).await) }
        })
        .collect();
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut out = Outcome {
        answers: Vec::new(),
        failures: Vec::new(),
    };
    loop {
        let next = match deadline {
            Some(at) => match timeout_at(at, pending.next()).await {
                Ok(n) => n,
                Err(_) => {
                    let late = pending.len();
                    out.failures.push(format!(
                        "{late} panellist(s) slower than panel_timeout ({}) cancelled",
                        humantime::format_duration(timeout.unwrap_or_default())
                    ));
                    break;
                }
            },
            None => pending.next().await,
        };
        let Some((i, result)) = next else { break };
        let name = &panel[i].name;
        match result {
            Ok((reply, output)) if usable(&output) => out.answers.push(Answer {
                member: i,
                attempt: reply.attempt,
                output,
            }),
            Ok((reply, _)) => {
                reply
                    .attempt
                    .set_verdict(Verdict::Error, Some("an empty answer".into()));
                out.failures.push(format!("{name}: an empty answer"));
            }
            Err(e) => out.failures.push(match e.skipped() {
                Some(why) => format!("{name}: skipped, {why}"),
                None => format!("{name}: {e}"),
            }),
        }
    }
    // Dropping what is still pending cancels it.
    drop(pending);
    out.answers.sort_by_key(|a| a.member);
    out
}

async fn ask(
    m: &Member,
    call: Call,
    req: Arc<ChatRequest>,
) -> Result<(Reply, AssistantOutput), ModelError> {
    m.model.chat(call, req).await?.buffer().await
}

/// An answer the synthesis can judge: some text or a tool call.
fn usable(o: &AssistantOutput) -> bool {
    !o.text.trim().is_empty() || !o.tool_calls.is_empty()
}
