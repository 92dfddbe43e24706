//! API keys: `Authorization: Bearer KEY` (or `x-api-key`) against the
//! `[[keys]]` table. A presented key is hashed (SHA-256) and compared with
//! every key's digest in constant time, so neither the comparison nor the
//! config needs the secret. No keys configured means no auth (local use).
//! `/metrics` and `/readyz` take the metrics key (`server.metrics_key_env`)
//! or an admin key once a metrics key is set, and are open until then.

use std::collections::HashSet;
use std::sync::Arc;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;

use super::error::ApiError;
use crate::config::Key;
use crate::governor::{Governor, KeyGov};

pub struct Keys(Vec<KeyEntry>);

struct KeyEntry {
    digest: [u8; 32],
    caller: Caller,
}

/// Who is calling: a key's name, what it may use, and its governor.
#[derive(Clone)]
pub struct Caller {
    pub name: Arc<str>,
    /// `None`: every model.
    models: Option<Arc<HashSet<String>>>,
    /// May read `/v1/keys/usage`.
    pub admin: bool,
    /// `None` for the anonymous caller of a gateway without keys.
    pub gov: Option<Arc<KeyGov>>,
}

impl Caller {
    fn anonymous() -> Self {
        Caller {
            name: "anonymous".into(),
            models: None,
            admin: true,
            gov: None,
        }
    }

    pub fn may_use(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|m| m.contains(model))
    }

    /// The names the key may use; `None`: every name.
    pub fn models(&self) -> Option<Arc<HashSet<String>>> {
        self.models.clone()
    }
}

impl Keys {
    /// The config's keys, each with its governor from `governor`.
    pub fn new(keys: &[Key], governor: &Governor) -> Self {
        let limits: Vec<(String, _)> = keys.iter().map(|k| (k.name.clone(), k.limits)).collect();
        let govs = governor.keys(&limits);
        Keys(
            keys.iter()
                .map(|k| KeyEntry {
                    digest: k.digest,
                    caller: Caller {
                        name: k.name.as_str().into(),
                        models: k
                            .models
                            .as_ref()
                            .map(|m| Arc::new(m.iter().cloned().collect())),
                        admin: k.admin,
                        gov: govs.get(&k.name).cloned(),
                    },
                })
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every key's caller, in config order.
    pub fn callers(&self) -> impl Iterator<Item = &Caller> {
        self.0.iter().map(|k| &k.caller)
    }

    /// The caller behind a request's credentials.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        if self.0.is_empty() {
            return Ok(Caller::anonymous());
        }
        let presented = presented(headers)?;
        let digest = crate::config::digest(presented);
        // Every key is compared, each in constant time.
        let mut found = None;
        for k in &self.0 {
            if constant_eq(&k.digest, &digest) {
                found = Some(k.caller.clone());
            }
        }
        found.ok_or(ApiError::Unauthorized {
            reason: "Incorrect API key provided.",
        })
    }

    /// The caller behind a request's credentials when it is an admin (a
    /// gateway without keys: anyone); else `AdminOnly` for endpoint `what`.
    pub fn authenticate_admin(
        &self,
        headers: &HeaderMap,
        what: &'static str,
    ) -> Result<Caller, ApiError> {
        let caller = self.authenticate(headers)?;
        if !caller.admin {
            return Err(ApiError::AdminOnly { what });
        }
        Ok(caller)
    }

    /// Whether a request may read `/metrics` or `/readyz` (`what`): any
    /// request while no metrics key is set (`metrics_key`, its digest),
    /// else one presenting that key or an admin key.
    pub fn operator(
        &self,
        metrics_key: Option<&[u8; 32]>,
        headers: &HeaderMap,
        what: &'static str,
    ) -> Result<(), ApiError> {
        let Some(metrics_key) = metrics_key else {
            return Ok(());
        };
        let digest = crate::config::digest(presented(headers)?);
        if constant_eq(metrics_key, &digest) {
            return Ok(());
        }
        match self.0.iter().find(|k| constant_eq(&k.digest, &digest)) {
            Some(k) if k.caller.admin => Ok(()),
            Some(_) => Err(ApiError::OperatorOnly { what }),
            None => Err(ApiError::Unauthorized {
                reason: "Incorrect API key provided.",
            }),
        }
    }
}

/// The key a request presents, or why there is none to check.
fn presented(headers: &HeaderMap) -> Result<&str, ApiError> {
    let malformed = || ApiError::Unauthorized {
        reason: "Malformed Authorization header: send `Authorization: Bearer <key>`.",
    };
    if let Some(v) = headers.get(AUTHORIZATION) {
        let v = v.to_str().map_err(|_| malformed())?;
        let (scheme, token) = v.trim().split_once(' ').ok_or_else(malformed)?;
        let token = token.trim();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return Err(malformed());
        }
        return Ok(token);
    }
    match headers.get("x-api-key").map(|v| v.to_str()) {
        Some(Ok(k)) if !k.trim().is_empty() => Ok(k.trim()),
        Some(_) => Err(malformed()),
        None => Err(ApiError::Unauthorized {
            reason: "You didn't provide an API key. Send `Authorization: Bearer <key>`.",
        }),
    }
}

fn constant_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
