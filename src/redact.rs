//! [`Redactor`]: removes the config's secrets from text an upstream wrote.
//!
//! An upstream may echo the request's `Authorization` header in an error
//! message, an error event or a broken body. Every upstream-supplied string
//! passes through [`Redactor::redact`] where its error is created, so the
//! client's response, attempt trails, the event log and stderr are all safe
//! by construction. A secret is found by its first 8 bytes (all of it when
//! shorter) and the match runs as far as the text keeps following the
//! secret, so `Bearer <key>`, the key itself and any prefix of it of 8 or
//! more characters are all replaced.

use std::borrow::Cow;

use memchr::memmem::Finder;

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// The shortest prefix of a secret that is treated as the secret.
const MIN_PREFIX: usize = 8;

#[derive(Default)]
pub struct Redactor {
    /// Each secret with a searcher for its leading bytes.
    secrets: Vec<(Vec<u8>, Finder<'static>)>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut out: Vec<(Vec<u8>, Finder<'static>)> = Vec::new();
        for s in secrets {
            let bytes = s.as_bytes().to_vec();
            if bytes.is_empty() || out.iter().any(|(b, _)| *b == bytes) {
                continue;
            }
            let lead = bytes[..bytes.len().min(MIN_PREFIX)].to_vec();
            out.push((bytes, Finder::new(&lead).into_owned()));
        }
        Redactor { secrets: out }
    }

    /// `text` with every secret, and every prefix of one of 8 or more
    /// bytes, replaced by `[REDACTED]`.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut out: Cow<'t, str> = Cow::Borrowed(text);
        for (secret, finder) in &self.secrets {
            if finder.find(out.as_bytes()).is_none() {
                continue;
            }
            out = Cow::Owned(replace(out.as_bytes(), secret, finder));
        }
        out
    }

    /// [`Redactor::redact`] into an owned string.
    pub fn clean(&self, text: impl AsRef<str>) -> String {
        self.redact(text.as_ref()).into_owned()
    }
}

fn replace(text: &[u8], secret: &[u8], finder: &Finder<'_>) -> String {
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    while let Some(i) = finder.find(&text[at..]).map(|i| i + at) {
        let len = text[i..]
            .iter()
            .zip(secret)
            .take_while(|(a, b)| a == b)
            .count();
        out.extend_from_slice(&text[at..i]);
        out.extend_from_slice(REDACTED.as_bytes());
        at = i + len.max(1);
    }
    out.extend_from_slice(&text[at..]);
    // A secret with multi-byte characters may have been cut inside one.
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_their_prefixes_are_removed() {
        let r = Redactor::new(["sk-secret-123456", "other-key-abcdef"]);
        assert_eq!(
            r.redact("Authorization: Bearer sk-secret-123456 was wrong"),
            "Authorization: Bearer [REDACTED] was wrong"
        );
        assert_eq!(r.redact("key sk-secre… cut"), "key [REDACTED]… cut");
        assert_eq!(
            r.redact("sk-secret-123456sk-secret-12 and other-key-abcdef"),
            "[REDACTED][REDACTED] and [REDACTED]"
        );
        assert_eq!(r.redact("sk-secr is only 7"), "sk-secr is only 7");
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn short_secrets_are_matched_whole() {
        let r = Redactor::new(["abc"]);
        assert_eq!(r.redact("xabcx ab"), "x[REDACTED]x ab");
    }
}
