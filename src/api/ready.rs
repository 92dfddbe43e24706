//! `/readyz`: whether every upstream answers, what each llama-swap
//! upstream has loaded, each upstream's health and each of its models'
//! (serving, ejected or on trial; an ejected one does not make the
//! replica not ready), and whether the shared state answers (asked of
//! the state backend, [`Backend::health`](crate::store::Backend::health);
//! down, it makes the replica not ready only when governors fail
//! closed). The answer comes from a short cache (`server.readyz_cache`,
//! [`Cached`]): one probe round at a time, each upstream's probe bounded
//! by [`PROBE_TIMEOUT`], and callers that arrive during a round wait for
//! it and share its answer, so a burst of `/readyz` calls costs each
//! upstream one probe per period, whatever its size.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::{AppState, Gateway};
use crate::config::OnError;
use crate::upstream::Status;
use crate::upstream::health::Shown;
use crate::upstream::llama_swap::Loaded;

/// The longest one upstream's probe may take (its own timeouts are
/// shorter: 3 s to answer, llama-swap's `probe_timeout`).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A value computed at most once per period: the last one while it is
/// younger than `fresh_for`, else computed now by one caller while the
/// others wait for it. A caller that goes away mid-computation leaves
/// it to the next one.
pub struct Cached<T> {
    fresh_for: Duration,
    last: tokio::sync::Mutex<Option<(Instant, T)>>,
}

impl<T: Clone> Cached<T> {
    pub fn new(fresh_for: Duration) -> Self {
        Cached {
            fresh_for,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The cached value while fresh, else `compute()`'s (then cached).
    pub async fn get<F, Fut>(&self, compute: F) -> T
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let mut last = self.last.lock().await;
        if let Some((at, v)) = last.as_ref()
            && at.elapsed() < self.fresh_for
        {
            return v.clone();
        }
        let v = compute().await;
        *last = Some((Instant::now(), v.clone()));
        v
    }
}

/// What `/readyz` answers: ready or not, and the body.
pub type Answer = (bool, Arc<Value>);

pub async fn readyz(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let app = gw.state();
    if let Err(e) = app
        .keys
        .operator(app.metrics_key.as_ref(), &headers, "/readyz")
    {
        return e.into_response();
    }
    let (ready, body) = app.ready.get(|| probe(&app)).await;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body.as_ref().clone())).into_response()
}

/// One probe round: every upstream at once, each bounded.
async fn probe(app: &AppState) -> Answer {
    let checks = app.graph.upstreams.iter().map(|u| async move {
        let status = tokio::time::timeout(PROBE_TIMEOUT, u.status())
            .await
            .unwrap_or_else(|_| Status {
                ready: Err(format!("no answer within {PROBE_TIMEOUT:?}")),
                loaded: None,
            });
        (u.name.clone(), status)
    });
    let state = app.backend.health();
    let (results, state) = futures::future::join(futures::future::join_all(checks), state).await;
    let mut ready = results.iter().all(|(_, s)| s.ready.is_ok());
    let mut upstreams = Map::new();
    let mut swapping = Map::new();
    for (name, status) in results {
        let v = match status.ready {
            Ok(()) => json!("ok"),
            Err(e) => json!(format!("unreachable: {e}")),
        };
        upstreams.insert(name.to_string(), v);
        if let Some(l) = status.loaded {
            swapping.insert(name.to_string(), loaded_json(l));
        }
    }
    let mut body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "upstreams": upstreams,
        "health": health(app),
    });
    if !swapping.is_empty() {
        body["llama_swap"] = Value::Object(swapping);
    }
    if let Some(state) = state {
        // Fail-closed governors refuse requests while the state is down:
        // the replica is not ready. Fail-open ones still serve.
        let blocking = state.on_error == OnError::FailClosed;
        let status = match state.answer {
            Ok(()) => json!("ok"),
            Err(e) => {
                ready &= !blocking;
                json!(format!("unreachable: {e}"))
            }
        };
        body["state"] = json!({
            "backend": state.backend,
            "url": state.url,
            "on_error": state.on_error.label(),
            "status": status,
        });
        body["status"] = json!(if ready { "ready" } else { "not_ready" });
    }
    (ready, Arc::new(body))
}

/// Each upstream's health: `{"health": "serving" | "ejected" | "trial",
/// "models": {name: {"health": …}}}`: the whole upstream's (its
/// transport and active checks) and each of its models' (their answers,
/// by their config names), an ejected one with `retry_after_s`,
/// the seconds left in its cooldown. An ejected upstream or model does
/// not make the replica not ready: others may serve.
fn health(app: &AppState) -> Value {
    let shown = |s: Shown| {
        let mut v = json!({"health": s.label()});
        if let Shown::Ejected(left) = s {
            v["retry_after_s"] = json!(left.as_secs_f64().ceil() as u64);
        }
        v
    };
    let each = app.graph.upstreams.iter().map(|u| {
        let mut v = shown(u.health.whole.shown());
        let models = u.health.models_shown().into_iter();
        v["models"] = Value::Object(models.map(|(m, s)| (m, shown(s))).collect());
        (u.name.to_string(), v)
    });
    Value::Object(each.collect())
}

/// A llama-swap upstream's probe answer: `{"loaded": [...]}`, or
/// `{"loaded": null, "error": "..."}` when it could not be read.
fn loaded_json(l: Result<Loaded, String>) -> Value {
    match l {
        Ok(models) => json!({"loaded": *models}),
        Err(e) => json!({"loaded": null, "error": e}),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn callers_share_one_computation_per_period() {
        let cache = Arc::new(Cached::new(Duration::from_secs(5)));
        let runs = Arc::new(AtomicUsize::new(0));
        let ask = || {
            let (cache, runs) = (cache.clone(), runs.clone());
            async move {
                cache
                    .get(|| async move {
                        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        n
                    })
                    .await
            }
        };
        // Ten at once: one computation, all get its value, after its 2 s.
        let started = Instant::now();
        let got = futures::future::join_all((0..10).map(|_| tokio::spawn(ask()))).await;
        assert!(got.into_iter().all(|v| v.unwrap() == 1));
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        // Ten after one another, within the period: cached, at once.
        for _ in 0..10 {
            assert_eq!(ask().await, 1);
        }
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        // Once the period is over, computed again.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(ask().await, 2);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_goes_away_leaves_the_computation_to_the_next() {
        let cache = Cached::new(Duration::from_secs(5));
        let abandoned = tokio::time::timeout(
            Duration::from_secs(1),
            cache.get(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                1
            }),
        )
        .await;
        assert!(abandoned.is_err());
        assert_eq!(cache.get(|| async { 2 }).await, 2);
    }
}
