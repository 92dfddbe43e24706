//! `[[keys]]`: each API key's name, secret (from `key_env`, or only its
//! SHA-256 in `key_sha256` so the file can be shared), model list and
//! limits, validated with every problem reported.

use sha2::{Digest, Sha256};

use super::fields::secret;
use super::{Errors, Key, KeyLimits, raw};

/// The SHA-256 of a secret, as keys are compared.
pub fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// 64 hex digits as 32 bytes.
fn parse_hex(s: &str) -> Option<[u8; 32]> {
    let s = s.trim();
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

pub(super) fn keys(
    v: Option<toml::Value>,
    env: &dyn Fn(&str) -> Option<String>,
    errs: &mut Errors,
) -> Vec<Key> {
    let list = match v {
        None => return Vec::new(),
        Some(toml::Value::Array(a)) => a,
        Some(_) => {
            errs.push("keys", "must be an array of tables ([[keys]])");
            return Vec::new();
        }
    };
    let mut out: Vec<Key> = Vec::new();
    for (i, item) in list.into_iter().enumerate() {
        let path = format!("keys[{i}]");
        let Some(k) = errs.parse::<raw::Key>(&path, item) else {
            continue;
        };
        if out.iter().any(|o| o.name == k.name) {
            errs.push(
                format!("{path}.name"),
                format!("duplicate key name \"{}\"", k.name),
            );
        }
        // The caller of a gateway without keys: every tenant at once (its
        // usage, its failures), so no key may take its name.
        if k.name == "anonymous" {
            errs.push(
                format!("{path}.name"),
                "\"anonymous\" is reserved for the caller of a gateway without [[keys]]",
            );
        }
        let limits = limits(&k, &path, errs);
        let (digest, secret) = match (&k.key_env, &k.key_sha256) {
            (Some(var), None) => match secret(env, var, &format!("{path}.key_env"), errs) {
                Some(s) => (digest(&s.0), Some(s)),
                None => continue,
            },
            (None, Some(hex)) => match parse_hex(hex) {
                Some(d) => (d, None),
                None => {
                    errs.push(
                        format!("{path}.key_sha256"),
                        "must be 64 hex digits (the SHA-256 of the key, e.g. from \
                         `printf %s \"$KEY\" | sha256sum`)",
                    );
                    continue;
                }
            },
            (Some(_), Some(_)) => {
                errs.push(
                    format!("{path}.key_sha256"),
                    "set key_env or key_sha256, not both",
                );
                continue;
            }
            (None, None) => {
                errs.push(
                    format!("{path}.key_env"),
                    "missing: set key_env (an environment variable holding the key) or key_sha256",
                );
                continue;
            }
        };
        if out.iter().any(|o| o.digest == digest) {
            errs.push(path.clone(), "two keys have the same secret");
        }
        let models = match k.models {
            None => None,
            Some(m) if m.iter().any(|n| n == "*") => None,
            Some(m) => Some(m),
        };
        out.push(Key {
            name: k.name,
            digest,
            secret,
            models,
            admin: k.admin,
            limits,
        });
    }
    out
}

fn limits(k: &raw::Key, path: &str, errs: &mut Errors) -> KeyLimits {
    let mut zero = |key: &str, is_zero: bool| {
        if is_zero {
            errs.push(
                format!("{path}.{key}"),
                "must be greater than 0 (omit it for no limit)",
            );
        }
    };
    zero("rpm", k.rpm == Some(0));
    zero("tpm", k.tpm == Some(0));
    zero("daily_tokens", k.daily_tokens == Some(0));
    let tpm = k.tpm.and_then(|t| {
        let fits = u32::try_from(t).ok();
        if fits.is_none() {
            errs.push(
                format!("{path}.tpm"),
                format!("must be at most {}", u32::MAX),
            );
        }
        fits
    });
    if let Some(c) = k.daily_cost_usd
        && !(c.is_finite() && c > 0.0)
    {
        errs.push(
            format!("{path}.daily_cost_usd"),
            "must be a number greater than 0 (omit it for no limit)",
        );
    }
    KeyLimits {
        rpm: k.rpm,
        tpm,
        daily_tokens: k.daily_tokens,
        daily_cost_usd: k.daily_cost_usd,
        on_state_error: k.on_state_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_digests_parse_and_match_the_secret() {
        let d = digest("sk-team-a");
        let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(parse_hex(&hex), Some(d));
        assert_eq!(parse_hex(&hex.to_uppercase()), Some(d));
        assert_eq!(parse_hex(&hex[..62]), None);
        assert_eq!(parse_hex(&format!("{}zz", &hex[..62])), None);
        assert_eq!(parse_hex(&"é".repeat(32)), None);
    }
}
