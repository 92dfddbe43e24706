//! [`Redactor`]: removes the config's secrets (upstream API keys and the
//! gateway's own keys) from everything an upstream sends.
//!
//! An upstream may echo the request's `Authorization` header: in an error
//! message, an error event, a broken body, or a 200 answer that quotes the
//! headers it received. So every byte an upstream sends is redacted where
//! it enters conclave (`upstream::decode`): error text before it becomes a
//! [`ModelError`](crate::error::ModelError), a whole answer's body before
//! it is read, each stream event as it is relayed ([`Redactor::event`]).
//! The client's response, attempt trails and summaries, the event log,
//! traces and stderr are then safe by construction.
//!
//! A gateway must not change what a model wrote, except to remove a
//! real secret. So a run of a secret's characters counts as the secret
//! only when it is long enough to be the secret rather than text: at
//! least two-thirds of the secret and never fewer than 12 characters
//! ([`patterns::min_run`]). What counts, in any letter case:
//! - the secret, or such a run of it (a prefix, a suffix or a middle
//!   part); the run is replaced as far as the text keeps following the
//!   key, so `Bearer <key>` becomes `Bearer [REDACTED]`;
//! - the same in its base64 forms (standard or URL-safe, padded or not, at
//!   any of the three alignments, so the base64 of `Bearer <key>` or of
//!   `user:<key>` is caught), with the partial groups at the ends;
//! - any of them escaped: JSON's `\uXXXX` and `\/`, URL encoding's `%XX`
//!   (ASCII characters only), or wrapped over lines: `\n`, `\r\n` or
//!   their JSON escapes, with the next line's indentation, may interrupt
//!   a run anywhere ([`view`]).
//!
//! A run must also hold 4 characters past a well-known vendor prefix
//! (`sk-`, `sk-proj-`, `sk-ant-api03-`, …): the prefix is no one's secret.
//! A secret too short or too plain to tell apart from text (fewer than 12
//! characters past its prefix, or only one kind of character: `EMPTY`,
//! `ollama`, `lm-studio`, `sk-no-key-required`; see [`plain`]) is never
//! looked for; `conclave check` warns about it. Of a run that an upstream
//! spreads over several stream events, what went out before the run
//! counted (less than two-thirds of the secret) is not taken back: the
//! rest never goes out (see [`stream`]).
//!
//! Looking costs about one bit test per 4 bytes of text (`grams`): any run
//! that counts holds a 4-byte piece at an offset that is a multiple of 4,
//! so only those are looked up, and only a hit is followed up.

mod grams;
mod patterns;
mod scan;
pub mod stream;
#[cfg(test)]
mod tests;
mod view;

use std::borrow::Cow;

use bytes::Bytes;

use patterns::Patterns;
pub use patterns::{Plain, plain};
use scan::{Matcher, replace};
pub use stream::Carry;

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

#[derive(Default)]
pub struct Redactor {
    /// `None`: no secrets to look for, nothing to do.
    matcher: Option<Matcher>,
    /// Secrets looked for (those not [`plain`]).
    secrets: usize,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets)
    }
}

impl Redactor {
    /// A redactor for `secrets`; those that are [`plain`] are left out.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut p = Patterns::default();
        let mut seen: Vec<&str> = Vec::new();
        for s in secrets {
            if plain(s).is_none() && !seen.contains(&s) {
                seen.push(s);
                p.add_secret(s);
            }
        }
        Redactor {
            matcher: Matcher::new(p),
            secrets: seen.len(),
        }
    }

    /// There are secrets to look for.
    pub fn is_active(&self) -> bool {
        self.matcher.is_some()
    }

    /// `text` with every run of secret replaced by `[REDACTED]`.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let Some(m) = &self.matcher else {
            return Cow::Borrowed(text);
        };
        let runs = m.runs(text.as_bytes());
        if runs.is_empty() {
            return Cow::Borrowed(text);
        }
        let out = replace(text.as_bytes(), &runs, REDACTED.as_bytes());
        // Runs are whole characters; lossy only in theory.
        Cow::Owned(String::from_utf8_lossy(&out).into_owned())
    }

    /// [`Redactor::redact`] into an owned string.
    pub fn clean(&self, text: impl AsRef<str>) -> String {
        self.redact(text.as_ref()).into_owned()
    }

    /// [`Redactor::clean`] of a string given up: itself when it held no
    /// secret.
    pub fn clean_owned(&self, text: String) -> String {
        let cleaned = match self.redact(&text) {
            Cow::Owned(o) => Some(o),
            Cow::Borrowed(_) => None,
        };
        cleaned.unwrap_or(text)
    }

    /// A body (any bytes) without secrets; the same bytes when it had none.
    /// A run inside a JSON string leaves it a valid JSON string.
    pub fn redact_bytes(&self, data: Bytes) -> Bytes {
        let Some(m) = &self.matcher else {
            return data;
        };
        let runs = m.runs(&data);
        if runs.is_empty() {
            return data;
        }
        Bytes::from(replace(&data, &runs, REDACTED.as_bytes()))
    }
}
