//! API keys: `Authorization: Bearer KEY` (or `x-api-key`) against the
//! `[[keys]]` table. No keys configured means no auth (local use).

use std::collections::HashSet;
use std::sync::Arc;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;

use super::error::ApiError;
use crate::config::Key;

pub struct Keys(Vec<KeyEntry>);

struct KeyEntry {
    secret: Vec<u8>,
    caller: Caller,
}

/// Who is calling: a key's name and what it may use.
#[derive(Clone)]
pub struct Caller {
    pub name: Arc<str>,
    /// `None`: every model.
    models: Option<Arc<HashSet<String>>>,
}

impl Caller {
    fn anonymous() -> Self {
        Caller {
            name: "anonymous".into(),
            models: None,
        }
    }

    pub fn may_use(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|m| m.contains(model))
    }
}

impl Keys {
    pub fn new(keys: &[Key]) -> Self {
        Keys(
            keys.iter()
                .map(|k| KeyEntry {
                    secret: k.secret.0.as_bytes().to_vec(),
                    caller: Caller {
                        name: k.name.as_str().into(),
                        models: k
                            .models
                            .as_ref()
                            .map(|m| Arc::new(m.iter().cloned().collect())),
                    },
                })
                .collect(),
        )
    }

    /// The caller behind a request's credentials.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        if self.0.is_empty() {
            return Ok(Caller::anonymous());
        }
        let presented = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
            .ok_or(ApiError::Unauthorized)?;
        // Compare against every key in constant time per key.
        let mut found = None;
        for k in &self.0 {
            if constant_eq(&k.secret, presented.as_bytes()) {
                found = Some(k.caller.clone());
            }
        }
        found.ok_or(ApiError::Unauthorized)
    }
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
