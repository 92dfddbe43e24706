//! Exact token counts from the server, asked by [`super::super::fit`] when
//! a request's estimate is near its model's window. Each server kind's
//! endpoint, tried in this order until one answers (a 404 or 405 moves on
//! to the next; the one that answered is kept for [`super::KEEP`], and so
//! is a server that has none):
//!
//! 1. llama.cpp's server: `POST /apply-template` (the chat body) renders
//!    the prompt with the model's own template (`{"prompt": "…"}`), then
//!    `POST /tokenize` (`{"content": prompt, "add_special": true,
//!    "parse_special": true}`) counts it (`{"tokens": […]}`): the whole
//!    prompt, template included ([`Tokens::Prompt`]).
//! 2. vLLM: `POST /tokenize` with the chat body's `messages` (and
//!    `tools`) answers `{"count": N, "max_model_len": M, …}`, template
//!    included ([`Tokens::Prompt`]).
//! 3. llama-cpp-python: `POST /extras/tokenize/count` (`{"input": text,
//!    "model": …}` → `{"count": N}`) counts plain text, not a chat: the
//!    messages' text is counted exactly, the template's tokens and the
//!    other fields stay estimated ([`Tokens::Text`]).
//!
//! All at the server's root (`base_url` without its `/v1`), or behind
//! llama-swap at `URL/upstream/<model>/…`. Every answer is bounded in size
//! ([`max_answer`]) and every ask within [`super::FETCH_TIMEOUT`]; absurd
//! counts (beyond [`MAX_CONTEXT_WINDOW`]) are no count. The caller asks
//! through the upstream's lane (llama-cpp-python counts under the lock it
//! generates under) and keeps each answer in [`Counts`].

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use parking_lot::Mutex;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::{FETCH_TIMEOUT, KEEP, read_json};
use crate::model::MAX_CONTEXT_WINDOW;
use crate::wire::ChatRequest;

/// What a server counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tokens {
    /// The whole prompt, its chat template included.
    Prompt(u64),
    /// Only the messages' text ([`ChatRequest::prompt_text`]).
    Text(u64),
}

/// The server kinds that count, as [`count`](Counter::count) tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    LlamaCpp,
    Vllm,
    LlamaCppPython,
}

const FLAVORS: [Flavor; 3] = [Flavor::LlamaCpp, Flavor::Vllm, Flavor::LlamaCppPython];

/// Where a server's counting endpoints are.
enum Root {
    Server(String),
    Swap(String),
}

/// Asks one `openai` upstream's server for exact counts.
pub struct Counter {
    client: reqwest::Client,
    auth: Option<HeaderValue>,
    root: Root,
    /// The flavor that answered last (`None` inside: the server has none),
    /// and until when that holds.
    learned: Mutex<Option<(Instant, Option<Flavor>)>>,
}

/// How one ask went.
enum Asked {
    /// A count.
    Counted(Tokens),
    /// The server has no such endpoint (or answered something else).
    Absent,
    /// No answer (no connection, timeout, 5xx): try again another time.
    Failed,
}

impl Counter {
    /// A counter for the server at `base_url` (`…/v1`), or behind the
    /// llama-swap at `llama_swap`.
    pub fn new(
        client: reqwest::Client,
        auth: Option<HeaderValue>,
        base_url: &str,
        llama_swap: Option<&str>,
    ) -> Self {
        let root = match llama_swap {
            Some(ls) => Root::Swap(ls.trim_end_matches('/').to_owned()),
            None => {
                let base = base_url.trim_end_matches('/');
                Root::Server(base.strip_suffix("/v1").unwrap_or(base).to_owned())
            }
        };
        Counter {
            client,
            auth,
            root,
            learned: Mutex::new(None),
        }
    }

    /// `req`'s tokens for `model` (the name its server knows), if the
    /// server can count them.
    pub async fn count(&self, model: &str, req: &ChatRequest) -> Option<Tokens> {
        let learned = *self.learned.lock();
        let tried: Vec<Flavor> = match learned {
            Some((until, None)) if until > Instant::now() => return None,
            Some((until, Some(f))) if until > Instant::now() => vec![f],
            _ => FLAVORS.to_vec(),
        };
        for f in tried {
            match self.ask(f, model, req).await {
                Asked::Counted(t) => {
                    *self.learned.lock() = Some((Instant::now() + KEEP, Some(f)));
                    return Some(t);
                }
                Asked::Absent => {}
                Asked::Failed => return None,
            }
        }
        *self.learned.lock() = Some((Instant::now() + KEEP, None));
        None
    }

    async fn ask(&self, f: Flavor, model: &str, req: &ChatRequest) -> Asked {
        let chat = chat_body(model, req);
        let max = max_answer(req);
        match f {
            Flavor::LlamaCpp => {
                let prompt = match self.post(model, "apply-template", &chat, max).await {
                    Ok(Some(v)) => match parse::rendered(&v) {
                        Some(p) => p,
                        None => return Asked::Absent,
                    },
                    Ok(None) => return Asked::Absent,
                    Err(()) => return Asked::Failed,
                };
                let body = json!({"content": prompt, "add_special": true, "parse_special": true});
                match self.post(model, "tokenize", &body, max).await {
                    Ok(Some(v)) => parse::llama_cpp(&v)
                        .map_or(Asked::Absent, |n| Asked::Counted(Tokens::Prompt(n))),
                    Ok(None) => Asked::Absent,
                    Err(()) => Asked::Failed,
                }
            }
            Flavor::Vllm => match self.post(model, "tokenize", &chat, max).await {
                Ok(Some(v)) => {
                    parse::vllm(&v).map_or(Asked::Absent, |n| Asked::Counted(Tokens::Prompt(n)))
                }
                Ok(None) => Asked::Absent,
                Err(()) => Asked::Failed,
            },
            Flavor::LlamaCppPython => {
                let body = json!({"input": req.prompt_text(), "model": model});
                match self.post(model, "extras/tokenize/count", &body, max).await {
                    Ok(Some(v)) => parse::llama_cpp_python(&v)
                        .map_or(Asked::Absent, |n| Asked::Counted(Tokens::Text(n))),
                    Ok(None) => Asked::Absent,
                    Err(()) => Asked::Failed,
                }
            }
        }
    }

    /// Where `path` is for `model`.
    fn url(&self, model: &str, path: &str) -> Option<reqwest::Url> {
        match &self.root {
            Root::Server(root) => reqwest::Url::parse(&format!("{root}/{path}")).ok(),
            Root::Swap(ls) => {
                let mut u = reqwest::Url::parse(&format!("{ls}/upstream/")).ok()?;
                u.path_segments_mut()
                    .ok()?
                    .pop_if_empty()
                    .push(model)
                    .extend(path.split('/'));
                Some(u)
            }
        }
    }

    /// `POST {root}/{path}` with `body`, its JSON answer read within
    /// [`FETCH_TIMEOUT`] and `max` bytes (as [`read_json`] says).
    async fn post(
        &self,
        model: &str,
        path: &str,
        body: &Value,
        max: usize,
    ) -> Result<Option<Value>, ()> {
        let url = self.url(model, path).ok_or(())?;
        let mut req = self.client.post(url).timeout(FETCH_TIMEOUT).json(body);
        if let Some(a) = &self.auth {
            req = req.header(AUTHORIZATION, a.clone());
        }
        let fetch = async move { read_json(req.send().await.map_err(drop)?, max).await };
        tokio::time::timeout(FETCH_TIMEOUT, fetch)
            .await
            .unwrap_or(Err(()))
    }
}

/// The chat body a count is asked with: `model`, `messages` and `tools`
/// (what reaches the template), and `add_generation_prompt` (vLLM: the
/// assistant turn's opening, as a chat call renders it).
fn chat_body(model: &str, req: &ChatRequest) -> Value {
    let mut b = Map::new();
    b.insert("model".into(), Value::from(model));
    b.insert(
        "messages".into(),
        serde_json::to_value(&req.messages).unwrap_or(Value::Array(Vec::new())),
    );
    if let Some(t) = req.extra.get("tools") {
        b.insert("tools".into(), t.clone());
    }
    b.insert("add_generation_prompt".into(), Value::Bool(true));
    Value::Object(b)
}

/// The largest answer read for `req`: its rendered prompt (its text twice
/// over, plus the template) or its tokens as a JSON list (up to 12 bytes
/// a token, and a count near the window at most 2 tokens a byte), within
/// 64 KiB and 32 MiB.
fn max_answer(req: &ChatRequest) -> usize {
    let text = req.prompt_text().len();
    text.saturating_mul(24)
        .saturating_add(64 * 1024)
        .min(32 * 1024 * 1024)
}

/// Answers kept per upstream: a request's count by model and content, so
/// its retries and the tiers on the same server ask once; and the turn of
/// the one count asked at a time, so calls of one request that need the
/// same count at once (a race's candidates) wait for it instead of each
/// asking.
#[derive(Default)]
pub struct Counts {
    kept: Mutex<HashMap<(String, u64), (Instant, Tokens)>>,
    one: tokio::sync::Mutex<()>,
}

/// How long a count is kept: long enough for a request's retries and
/// tiers.
pub const COUNT_KEEP: Duration = Duration::from_secs(300);

/// Counts kept at most per upstream.
const COUNTS_KEPT: usize = 4096;

impl Counts {
    /// The key of `req` for `model`.
    pub fn key(model: &str, req: &ChatRequest) -> (String, u64) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        serde_json::to_vec(&chat_body(model, req))
            .unwrap_or_default()
            .hash(&mut h);
        (model.to_owned(), h.finish())
    }

    /// The turn to ask a count.
    pub async fn one(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.one.lock().await
    }

    pub fn get(&self, key: &(String, u64)) -> Option<Tokens> {
        let kept = self.kept.lock();
        kept.get(key)
            .filter(|(until, _)| *until > Instant::now())
            .map(|(_, t)| *t)
    }

    pub fn keep(&self, key: (String, u64), t: Tokens) {
        let now = Instant::now();
        let mut kept = self.kept.lock();
        if kept.len() >= COUNTS_KEPT {
            kept.retain(|_, (until, _)| *until > now);
            if kept.len() >= COUNTS_KEPT {
                kept.clear();
            }
        }
        kept.insert(key, (now + COUNT_KEEP, t));
    }
}

/// Reading each server's answer.
pub mod parse {
    use super::*;

    /// A count as a server wrote it: a non-negative integer no larger
    /// than [`MAX_CONTEXT_WINDOW`].
    fn count(v: &Value) -> Option<u64> {
        v.as_u64().filter(|n| *n <= MAX_CONTEXT_WINDOW)
    }

    /// The length of a `tokens` list (ids, or `{id, piece}` objects with
    /// `with_pieces`).
    fn tokens(v: &Value) -> Option<u64> {
        v.get("tokens")?
            .as_array()
            .and_then(|t| count(&Value::from(t.len())))
    }

    /// llama.cpp's `/apply-template`: `{"prompt": "…"}`.
    pub fn rendered(v: &Value) -> Option<String> {
        v.get("prompt")?.as_str().map(str::to_owned)
    }

    /// llama.cpp's `/tokenize`: `{"tokens": […]}`.
    pub fn llama_cpp(v: &Value) -> Option<u64> {
        tokens(v)
    }

    /// vLLM's `/tokenize`: `{"count": N, "max_model_len": M, "tokens":
    /// […]}`. A `tokens` list without `count` is llama.cpp's answer to a
    /// body without `content` (none), not a count of the chat.
    pub fn vllm(v: &Value) -> Option<u64> {
        v.get("count").and_then(count)
    }

    /// llama-cpp-python's `/extras/tokenize/count` (`{"count": N}`) or
    /// `/extras/tokenize` (`{"tokens": […]}`).
    pub fn llama_cpp_python(v: &Value) -> Option<u64> {
        v.get("count").and_then(count).or_else(|| tokens(v))
    }
}

#[cfg(test)]
mod tests {
    use super::parse::*;
    use super::*;

    #[test]
    fn each_servers_answer() {
        // llama.cpp's server.
        let t = json!({"prompt": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"});
        assert_eq!(
            rendered(&t).as_deref(),
            Some("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
        );
        assert_eq!(rendered(&json!({"prompt": 3})), None);
        assert_eq!(llama_cpp(&json!({"tokens": [1, 9906, 2]})), Some(3));
        assert_eq!(
            llama_cpp(&json!({"tokens": [{"id": 1, "piece": "<s>"}, {"id": 9906, "piece": "hi"}]})),
            Some(2)
        );
        assert_eq!(llama_cpp(&json!({"tokens": "many"})), None);
        // vLLM.
        let v = json!({"count": 726, "max_model_len": 2048, "tokens": [1, 2], "token_strs": null});
        assert_eq!(vllm(&v), Some(726));
        assert_eq!(vllm(&json!({"tokens": []})), None);
        assert_eq!(vllm(&json!({"count": -3})), None);
        assert_eq!(vllm(&json!({"count": "726"})), None);
        assert_eq!(vllm(&json!({"count": 1_000_000_000_000u64})), None);
        // llama-cpp-python.
        assert_eq!(llama_cpp_python(&json!({"count": 12})), Some(12));
        assert_eq!(llama_cpp_python(&json!({"tokens": [1, 2, 3]})), Some(3));
        assert_eq!(llama_cpp_python(&json!({"detail": "Not Found"})), None);
        assert_eq!(llama_cpp_python(&json!([])), None);
    }

    #[tokio::test(start_paused = true)]
    async fn counts_are_kept_bounded_and_expire() {
        let c = Counts::default();
        let req: ChatRequest = serde_json::from_value(
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .unwrap();
        let other: ChatRequest = serde_json::from_value(
            json!({"model": "m", "messages": [{"role": "user", "content": "ho"}]}),
        )
        .unwrap();
        let k = Counts::key("m", &req);
        assert_ne!(k, Counts::key("m", &other));
        assert_ne!(k, Counts::key("n", &req));
        c.keep(k.clone(), Tokens::Prompt(9));
        assert_eq!(c.get(&k), Some(Tokens::Prompt(9)));
        tokio::time::advance(COUNT_KEEP + Duration::from_secs(1)).await;
        assert_eq!(c.get(&k), None);
        for i in 0..(COUNTS_KEPT as u64 + 10) {
            c.keep(("m".into(), i), Tokens::Text(i));
        }
        assert!(c.kept.lock().len() <= COUNTS_KEPT);
    }
}
