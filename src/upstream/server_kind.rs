//! Which kind of server a local lane calls, and so how many calls it may
//! send it at once when `max_concurrency` is not set.
//!
//! Recognised, in this order, from what the server says about itself:
//! - llama.cpp's server: `GET /props` answers with `total_slots` (its
//!   `--parallel`): that many calls at once; a build whose `/props` lacks
//!   it is asked `GET /slots` (one entry a slot), else one call.
//! - llama-cpp-python: no `/props`, and `/v1/models` lists models
//!   `owned_by` `"me"` or answers with `server: uvicorn`. It serves one
//!   request at a time and, with `interrupt_requests` on (its default),
//!   ends the stream in flight when another request arrives: one call.
//! - vLLM (`owned_by` `"vllm"`): it batches, [`DEFAULT_BATCHING`] calls.
//! - conclave's own mock (`owned_by` `"conclave-mock"`), which answers
//!   any number at once: [`DEFAULT_BATCHING`].
//! - Anything else (llama-swap, which hides its servers; a llama.cpp
//!   build without `total_slots`; no answer): one call, the default that
//!   is safe for the llama.cpp family.
//!
//! `/props` is asked first: llama-cpp-python answers it with a 404 that
//! takes no lock, while its `/v1/models` takes the generation lock (and
//! so is asked only when `/props` did not settle it, before the lane's
//! first call).

use std::time::Duration;

use serde_json::Value;

/// Calls at once to a server that batches them (vLLM, the mock).
pub const DEFAULT_BATCHING: usize = 4;
/// The most calls at once a server's own slot count may ask for.
pub const MAX_SLOTS: usize = 256;
/// How long the probe waits for each of its two answers.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest probe answer read.
pub const MAX_PROBE_BODY: usize = 256 * 1024;

/// What a local server turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// llama.cpp's `llama-server`, with its `total_slots` when it said.
    LlamaCpp {
        slots: Option<usize>,
    },
    LlamaCppPython,
    Vllm,
    Mock,
    Unknown,
}

impl ServerKind {
    /// Calls a local lane sends it at once by default.
    pub fn concurrency(self) -> usize {
        match self {
            ServerKind::LlamaCpp { slots: Some(n) } => n.clamp(1, MAX_SLOTS),
            ServerKind::Vllm | ServerKind::Mock => DEFAULT_BATCHING,
            ServerKind::LlamaCpp { slots: None }
            | ServerKind::LlamaCppPython
            | ServerKind::Unknown => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ServerKind::LlamaCpp { .. } => "llama.cpp",
            ServerKind::LlamaCppPython => "llama-cpp-python",
            ServerKind::Vllm => "vllm",
            ServerKind::Mock => "mock",
            ServerKind::Unknown => "unknown",
        }
    }
}

/// What `/props` says: llama.cpp's server when it is a JSON object with
/// `total_slots` (or its `default_generation_settings`); `None` when it
/// is not llama.cpp's answer (a 404, not JSON).
pub fn from_props(status: u16, body: &[u8]) -> Option<ServerKind> {
    if !(200..300).contains(&status) {
        return None;
    }
    let v: Value = serde_json::from_slice(body).ok()?;
    let o = v.as_object()?;
    let slots = o
        .get("total_slots")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n >= 1);
    (slots.is_some() || o.contains_key("default_generation_settings"))
        .then_some(ServerKind::LlamaCpp { slots })
}

/// How many slots llama.cpp's `GET /slots` lists (a JSON array, one
/// object a slot); `None` when it does not answer so (older builds, or
/// `--no-slots`).
pub fn from_slots(status: u16, body: &[u8]) -> Option<usize> {
    if !(200..300).contains(&status) {
        return None;
    }
    let v: Value = serde_json::from_slice(body).ok()?;
    let n = v.as_array()?.iter().filter(|s| s.is_object()).count();
    (n >= 1).then_some(n)
}

/// What `/v1/models` (its `server` header and body) says.
pub fn from_models(server: Option<&str>, body: &[u8]) -> ServerKind {
    let owners: Vec<String> = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| {
            let data = v.get("data")?.as_array()?.clone();
            Some(
                data.iter()
                    .filter_map(|m| m.get("owned_by")?.as_str().map(str::to_owned))
                    .collect(),
            )
        })
        .unwrap_or_default();
    let owned = |who: &str| owners.iter().any(|o| o == who);
    if owned("me") || server.is_some_and(|s| s.to_ascii_lowercase().contains("uvicorn")) {
        ServerKind::LlamaCppPython
    } else if owned("llamacpp") {
        ServerKind::LlamaCpp { slots: None }
    } else if owned("vllm") {
        ServerKind::Vllm
    } else if owned("conclave-mock") {
        ServerKind::Mock
    } else {
        ServerKind::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_says_its_slots() {
        let k = from_props(
            200,
            br#"{"total_slots": 3, "default_generation_settings": {}}"#,
        );
        assert_eq!(k, Some(ServerKind::LlamaCpp { slots: Some(3) }));
        assert_eq!(k.map(ServerKind::concurrency), Some(3));
        let old = from_props(200, br#"{"default_generation_settings": {"n_ctx": 512}}"#);
        assert_eq!(old.map(ServerKind::concurrency), Some(1));
        let huge = from_props(200, br#"{"total_slots": 100000}"#);
        assert_eq!(huge.map(ServerKind::concurrency), Some(MAX_SLOTS));
        // llama-cpp-python has no /props; anything else is not llama.cpp.
        assert_eq!(from_props(404, br#"{"detail": "Not Found"}"#), None);
        assert_eq!(from_props(200, b"<html>"), None);
        assert_eq!(from_props(200, br#"{"total_slots": 0}"#), None);
        assert_eq!(
            from_slots(200, br#"[{"id": 0}, {"id": 1}, {"id": 2}]"#),
            Some(3)
        );
        assert_eq!(from_slots(200, b"[]"), None);
        assert_eq!(from_slots(501, br#"{"error": "slots disabled"}"#), None);
    }

    #[test]
    fn models_lists_name_their_server() {
        let list = |owner: &str| format!(r#"{{"data": [{{"id": "m", "owned_by": "{owner}"}}]}}"#);
        let kind = |owner: &str| from_models(None, list(owner).as_bytes());
        assert_eq!(kind("me"), ServerKind::LlamaCppPython);
        assert_eq!(kind("vllm"), ServerKind::Vllm);
        assert_eq!(kind("llamacpp"), ServerKind::LlamaCpp { slots: None });
        assert_eq!(kind("conclave-mock"), ServerKind::Mock);
        assert_eq!(kind("llama-swap"), ServerKind::Unknown);
        let uvicorn = from_models(Some("uvicorn"), list("someone").as_bytes());
        assert_eq!(uvicorn, ServerKind::LlamaCppPython);
        assert_eq!(from_models(None, b"not json"), ServerKind::Unknown);
        assert_eq!(ServerKind::LlamaCppPython.concurrency(), 1);
        assert_eq!(ServerKind::Unknown.concurrency(), 1);
        assert_eq!(ServerKind::Vllm.concurrency(), DEFAULT_BATCHING);
    }
}
