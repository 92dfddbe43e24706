//! Learning a model's context window from its server, for models whose
//! config does not give one (`context_window`). An `openai` upstream asks:
//!
//! 1. `GET {base_url}/models`, once for all its models: vLLM's
//!    `max_model_len` and the other metadata [`parse::models`] reads;
//! 2. for a model that list says nothing about, llama.cpp's `GET /props`
//!    at the server's root (`base_url` without its `/v1`), as
//!    `/props?model=NAME` so a llama-server in router mode answers for that
//!    model; behind llama-swap (`llama_swap = URL`), `URL/upstream/NAME/props`
//!    instead, and only while the model is loaded: asking a cold one would
//!    load it;
//! 3. for a model neither says anything about, Ollama's `POST /api/show`
//!    (`{"model": NAME}`) at the same root (not behind llama-swap): the
//!    `num_ctx` its `parameters` set, else its `model_info`'s
//!    `<arch>.context_length` ([`parse::ollama_show`]).
//!
//! 4. A window a server states in its own context-length error ("This
//!    model's maximum context length is 512 tokens", as llama-cpp-python,
//!    vLLM and OpenAI word it; llama-server's "exceeds the available
//!    context size (512 tokens)") is kept too ([`Stated`]): llama-cpp-python
//!    reports its window nowhere else, so after one too-long whole request
//!    the next one is checked before it is sent, streamed ones included.
//!
//! Every fetch goes through the upstream's lane, as a call of the model
//! it is for (llama-cpp-python answers `/v1/models` under the lock it
//! generates under: a fetch beside a stream would cut it).
//!
//! Lazy and bounded: asked on a model's first call, one fetch at a time
//! per list or model (calls that need it meanwhile wait for that one), each
//! fetch over within [`FETCH_TIMEOUT`] and reading at most [`MAX_BODY`]
//! bytes. An answer, or a server that answered without one, holds for
//! [`KEEP`]; a failure (no connection, timeout, 5xx) for [`RETRY`]. Only
//! the first answer is waited for: after it, an old one is used while a
//! fetch in the background refreshes it. The caller ([`super::fit`])
//! waits at most [`WAIT`]; a fetch it stops waiting for still finishes
//! and is kept.
//!
//! A model's answer, once there is one, is also kept where a call reads
//! it without a lock, an allocation or a second clock read ([`Known`]):
//! this runs before every call of a model whose config gives no window.
//!
//! Exact token counts, asked near a window, are [`count`]'s.

pub mod count;
pub mod parse;
mod slot;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde_json::Value;
use tokio::time::Instant;

use super::lane::Gate;
use crate::labels::Warm;
use slot::Slot;

/// Longest a fetch may take, body included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest a call waits for its model's window before it goes ahead
/// without one.
pub const WAIT: Duration = FETCH_TIMEOUT;

/// Largest body read.
pub const MAX_BODY: usize = 512 * 1024;

/// How long an answer (or a server's silence) is kept.
pub const KEEP: Duration = Duration::from_secs(600);

/// How long a failed fetch is kept before it is tried again.
pub const RETRY: Duration = Duration::from_secs(60);

/// Where a model's `/props` is.
enum Props {
    /// llama.cpp's server root.
    Root(reqwest::Url),
    /// llama-swap's root: `/upstream/<model>/props`, warm models only.
    Swap(String),
}

/// The most models [`Known`] keeps answers for: the models of one
/// upstream in a config. Past it, the others are asked as before.
const KNOWN_MODELS: usize = 256;

/// A model's answer as last learned: its window (or none), until when it
/// holds, and whether the models list gave it (then it holds whether
/// the model is loaded or not).
#[derive(Clone, Copy)]
struct Known {
    window: Option<u64>,
    until: Instant,
    listed: bool,
}

/// What one upstream's server has said about its models' windows.
pub struct Learner {
    client: reqwest::Client,
    auth: Option<HeaderValue>,
    models_url: reqwest::Url,
    props: Props,
    listing: Arc<Slot<Arc<HashMap<String, u64>>>>,
    per_model: Mutex<HashMap<String, Arc<Slot<Option<u64>>>>>,
    /// Each model's answer while it holds, read on every call; replaced
    /// whole when an answer is learned (once per model per [`KEEP`]).
    known: ArcSwap<HashMap<String, Known>>,
}

impl Learner {
    /// A learner for the server at `base_url` (the OpenAI base, `…/v1`),
    /// or behind the llama-swap at `llama_swap`.
    pub fn new(
        client: reqwest::Client,
        auth: Option<HeaderValue>,
        base_url: &str,
        llama_swap: Option<&str>,
    ) -> Option<Self> {
        let models_url = reqwest::Url::parse(&format!("{base_url}/models")).ok()?;
        let props = match llama_swap {
            Some(ls) => Props::Swap(ls.trim_end_matches('/').to_owned()),
            None => {
                let root = base_url.strip_suffix("/v1").unwrap_or(base_url);
                Props::Root(reqwest::Url::parse(&format!("{root}/props")).ok()?)
            }
        };
        Some(Learner {
            client,
            auth,
            models_url,
            props,
            listing: Arc::new(Slot::default()),
            per_model: Mutex::new(HashMap::new()),
            known: ArcSwap::default(),
        })
    }

    /// `model`'s window as its server reports it (`warm`: whether
    /// llama-swap has it loaded). Nothing is built for a fetch unless one
    /// is made: this runs before every call of a model without a window.
    pub async fn window(&self, model: &str, warm: Warm, lane: &Arc<Gate>) -> Option<u64> {
        if let Some(window) = self.known(model, warm) {
            return window;
        }
        let (window, known) = self.ask(model, warm, lane).await;
        // An old answer, given while it is fetched again, is not kept:
        // the next call asks again, until the new one is in.
        if let Some(k) = known.filter(|k| k.until > Instant::now()) {
            self.keep(model, k);
        }
        window
    }

    /// [`Self::window`]'s answer while the one kept for `model` holds:
    /// `None` once it has to be asked again.
    pub fn known(&self, model: &str, warm: Warm) -> Option<Option<u64>> {
        let all = self.known.load();
        let k = all.get(model).filter(|k| k.until > Instant::now())?;
        // Only a loaded model: asking a cold one would load it.
        let cold = !k.listed && matches!(self.props, Props::Swap(_)) && warm != Warm::Yes;
        Some(if cold { None } else { k.window })
    }

    /// Keeps `model`'s answer `k` for the calls after this one.
    fn keep(&self, model: &str, k: Known) {
        self.known.rcu(|all| {
            let mut all = HashMap::clone(all);
            if all.len() < KNOWN_MODELS || all.contains_key(model) {
                all.insert(model.to_owned(), k);
            }
            all
        });
    }

    /// [`Self::window`] asked of the kept answers and their fetches; with
    /// the answer, what calls may take from it until it must be asked
    /// again (nothing when it was not asked: a cold model's).
    async fn ask(&self, model: &str, warm: Warm, lane: &Arc<Gate>) -> (Option<u64>, Option<Known>) {
        let (listing, listed_until) = self
            .listing
            .get(|| {
                let get = laned(lane, model, self.get_json(self.models_url.clone()));
                async move {
                    get.await
                        .map(|v| Arc::new(v.map(|v| parse::models(&v)).unwrap_or_default()))
                }
            })
            .await;
        if let Some(w) = listing.get(model) {
            let k = Known {
                window: Some(*w),
                until: listed_until,
                listed: true,
            };
            return (k.window, Some(k));
        }
        // Only a loaded model: asking a cold one would load it.
        if matches!(self.props, Props::Swap(_)) && warm != Warm::Yes {
            return (None, None);
        }
        let slot = self
            .per_model
            .lock()
            .entry(model.to_owned())
            .or_default()
            .clone();
        let (window, until) = slot
            .get(|| {
                let get = self
                    .props_url(model)
                    .map(|url| laned(lane, model, self.get_json(url)));
                let show = self.show(model).map(|show| laned(lane, model, show));
                async move {
                    let props = match get {
                        Some(get) => get.await?.as_ref().and_then(parse::props),
                        None => None,
                    };
                    match (props, show) {
                        (Some(w), _) => Ok(Some(w)),
                        (None, Some(show)) => {
                            show.await.map(|v| v.as_ref().and_then(parse::ollama_show))
                        }
                        (None, None) => Ok(None),
                    }
                }
            })
            .await;
        // Until the list may name it, too.
        let k = Known {
            window,
            until: until.min(listed_until),
            listed: false,
        };
        (window, Some(k))
    }

    /// Ollama's `POST /api/show` for `model` (a server of its own only,
    /// not behind llama-swap), bounded as [`Self::get_json`].
    fn show(
        &self,
        model: &str,
    ) -> Option<impl Future<Output = Result<Option<Value>, ()>> + Send + 'static> {
        let Props::Root(props) = &self.props else {
            return None;
        };
        let url = props.join("api/show").ok()?;
        let mut req = self
            .client
            .post(url)
            .timeout(FETCH_TIMEOUT)
            .json(&serde_json::json!({ "model": model }));
        if let Some(a) = &self.auth {
            req = req.header(AUTHORIZATION, a.clone());
        }
        let fetch = async move { read_json(req.send().await.map_err(drop)?, MAX_BODY).await };
        Some(async move {
            tokio::time::timeout(FETCH_TIMEOUT, fetch)
                .await
                .unwrap_or(Err(()))
        })
    }

    /// Where `model`'s `/props` is.
    fn props_url(&self, model: &str) -> Option<reqwest::Url> {
        match &self.props {
            Props::Root(root) => {
                let mut url = root.clone();
                url.query_pairs_mut().append_pair("model", model);
                Some(url)
            }
            Props::Swap(ls) => {
                let mut url = reqwest::Url::parse(&format!("{ls}/upstream/")).ok()?;
                url.path_segments_mut()
                    .ok()?
                    .pop_if_empty()
                    .push(model)
                    .push("props");
                Some(url)
            }
        }
    }

    /// `GET url` as JSON, as a future that owns what it needs. `Ok(None)`:
    /// the server answered, but not with a JSON body of at most
    /// [`MAX_BODY`] bytes (a 404 from a server without the endpoint);
    /// `Err`: no answer worth keeping (no connection, timeout, 5xx, 429).
    fn get_json(
        &self,
        url: reqwest::Url,
    ) -> impl Future<Output = Result<Option<Value>, ()>> + Send + 'static {
        let mut req = self.client.get(url).timeout(FETCH_TIMEOUT);
        if let Some(a) = &self.auth {
            req = req.header(AUTHORIZATION, a.clone());
        }
        let fetch = async move { read_json(req.send().await.map_err(drop)?, MAX_BODY).await };
        async move {
            tokio::time::timeout(FETCH_TIMEOUT, fetch)
                .await
                .unwrap_or(Err(()))
        }
    }
}

/// `fetch`, once `lane` lets a call of `model` through (waited for at
/// most [`FETCH_TIMEOUT`]; its permit held until the fetch ends), as any
/// other call to the server.
fn laned<T>(
    lane: &Arc<Gate>,
    model: &str,
    fetch: impl Future<Output = Result<T, ()>> + Send + 'static,
) -> impl Future<Output = Result<T, ()>> + Send + 'static {
    let (lane, model) = (lane.clone(), model.to_owned());
    async move {
        let by = Instant::now() + FETCH_TIMEOUT;
        let _admitted = lane.admit(&model, by).await.map_err(drop)?;
        fetch.await
    }
}

/// A server's answer as JSON: `Ok(None)` when it answered, but not with
/// a 2xx JSON body of at most `max` bytes (a 404 from a server without
/// the endpoint); `Err` when its answer is worth nothing to keep (5xx,
/// 429, a body cut off). The caller bounds the time.
pub(super) async fn read_json(resp: reqwest::Response, max: usize) -> Result<Option<Value>, ()> {
    let status = resp.status();
    if status.is_server_error() || status.as_u16() == 429 {
        return Err(());
    }
    if !status.is_success() {
        return Ok(None);
    }
    let body = super::http::read_capped(resp, max).await.map_err(drop)?;
    Ok(body.and_then(|b| serde_json::from_slice(&b).ok()))
}

/// Windows servers stated in their context-length errors, by model (the
/// name sent upstream), each kept for [`KEEP`].
#[derive(Default)]
pub struct Stated(Mutex<HashMap<String, (Instant, u64)>>);

impl Stated {
    pub fn get(&self, model: &str) -> Option<u64> {
        let s = self.0.lock();
        s.get(model)
            .filter(|(until, _)| *until > Instant::now())
            .map(|(_, w)| *w)
    }

    /// Keeps the window `message` states for `model`, if it states one.
    pub fn hear(&self, model: &str, message: &str) {
        if let Some(w) = parse::stated(message) {
            self.0
                .lock()
                .insert(model.to_owned(), (Instant::now() + KEEP, w));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A local lane of one call at a time.
    fn one_at_a_time() -> Arc<Gate> {
        let limits = crate::config::LaneLimits {
            max_concurrency: Some(1),
            max_models: 1,
            max_wait_swap: Duration::from_secs(30),
        };
        let metrics = crate::sink::Metrics::noop();
        Arc::new(Gate::new(true, &Arc::from("local"), limits, None, metrics))
    }

    #[tokio::test(start_paused = true)]
    async fn a_fetch_waits_for_the_lane_and_gives_up_at_its_timeout() {
        let lane = one_at_a_time();
        let held = lane.admit("m", Instant::now()).await.unwrap();
        let fetched = Arc::new(AtomicU32::new(0));
        let fetch = |n: Arc<AtomicU32>| async move {
            n.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(7)
        };
        let f = tokio::spawn(laned(&lane, "m", fetch(fetched.clone())));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(fetched.load(Ordering::SeqCst), 0, "not beside a call");
        drop(held);
        assert_eq!(f.await.unwrap(), Ok(7));
        assert_eq!(fetched.load(Ordering::SeqCst), 1);
        // A lane held past FETCH_TIMEOUT: no fetch at all.
        let _held = lane.admit("m", Instant::now()).await.unwrap();
        let r = laned(&lane, "m", fetch(fetched.clone())).await;
        assert_eq!(r, Err(()));
        assert_eq!(fetched.load(Ordering::SeqCst), 1);
    }

    /// A server whose `/v1/models` gives `listed` a window and whose
    /// `/props` has none; how often each was asked.
    async fn server() -> (String, Arc<[AtomicU32; 2]>) {
        use axum::routing::get;
        let asked: Arc<[AtomicU32; 2]> = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        let (a, b) = (asked.clone(), asked.clone());
        let app = axum::Router::new()
            .route(
                "/v1/models",
                get(move || async move {
                    a[0].fetch_add(1, Ordering::SeqCst);
                    axum::Json(serde_json::json!({"object": "list", "data": [
                        {"id": "listed", "object": "model", "max_model_len": 1024}]}))
                }),
            )
            .route(
                "/props",
                get(move || async move {
                    b[1].fetch_add(1, Ordering::SeqCst);
                    axum::http::StatusCode::NOT_FOUND
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}/v1"), asked)
    }

    #[tokio::test]
    async fn an_answer_is_kept_for_the_calls_after_it_until_it_must_be_asked_again() {
        let (base, asked) = server().await;
        let learner = Learner::new(reqwest::Client::new(), None, &base, None).unwrap();
        let lane = one_at_a_time();
        for _ in 0..20 {
            assert_eq!(
                learner.window("listed", Warm::Unknown, &lane).await,
                Some(1024)
            );
            assert_eq!(learner.window("unlisted", Warm::Unknown, &lane).await, None);
        }
        let count = |i: usize| asked[i].load(Ordering::SeqCst);
        assert_eq!((count(0), count(1)), (1, 1), "asked once each");
        let known = learner.known.load();
        let (listed, unlisted) = (known["listed"], known["unlisted"]);
        assert!(listed.listed && !unlisted.listed);
        assert_eq!((listed.window, unlisted.window), (Some(1024), None));
        // Each holds as long as what it came from: the list, and for one
        // it does not name, the list and the model's own answer.
        let until = learner.listing.until();
        assert_eq!(Some(listed.until), until);
        assert!(unlisted.until <= listed.until);
        // One past its time is asked again (of the answers kept: nothing
        // is fetched before they are old) and kept anew.
        learner.keep(
            "listed",
            Known {
                until: Instant::now(),
                ..listed
            },
        );
        assert_eq!(
            learner.window("listed", Warm::Unknown, &lane).await,
            Some(1024)
        );
        assert_eq!(learner.known.load()["listed"].until, listed.until);
        assert_eq!((count(0), count(1)), (1, 1));
    }

    /// Behind llama-swap, an answer `/props` gave is not given for the
    /// model while it is cold, as it would not be asked then.
    #[tokio::test]
    async fn a_kept_props_answer_is_for_a_warm_model_only_behind_llama_swap() {
        let learner = Learner::new(
            reqwest::Client::new(),
            None,
            "http://127.0.0.1:9/v1",
            Some("http://127.0.0.1:9"),
        )
        .unwrap();
        let lane = one_at_a_time();
        let until = Instant::now() + KEEP;
        let k = |listed| Known {
            window: Some(512),
            until,
            listed,
        };
        learner.keep("props", k(false));
        learner.keep("list", k(true));
        assert_eq!(learner.window("props", Warm::Yes, &lane).await, Some(512));
        assert_eq!(learner.window("props", Warm::No, &lane).await, None);
        assert_eq!(learner.window("list", Warm::No, &lane).await, Some(512));
    }
}
