//! What a secret can look like in text: the strings a piece of it may be
//! taken from ([`Source`]: the secret, and the stable runs of its base64
//! forms, at each of the three alignments and in both alphabets), which
//! runs of them count as the secret, and which secrets are too plain to
//! look for at all ([`plain`]).
//!
//! A run counts when it is long enough to be the secret rather than text:
//! [`min_run`] characters, two-thirds of the secret and never fewer than
//! [`MIN_RUN`] (for a base64 form, the length that encodes as many), and
//! it holds [`MIN_OWN`] bytes of the key past a well-known vendor prefix
//! (`sk-proj-`, `sk-ant-`, …): the prefix says nothing about this key.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};

/// The shortest run of a secret that may count as the secret; also the
/// fewest characters a secret must have past its vendor prefix to be
/// looked for at all.
pub const MIN_RUN: usize = 12;

/// Bytes of its own (past a well-known prefix) a counting run must hold.
pub const MIN_OWN: usize = 4;

/// Prefixes that vendors put in front of every key: shared by all keys of
/// a kind, so not secret. The longest that a secret starts with (ASCII
/// case-insensitively) counts.
const GENERIC_PREFIXES: &[&str] = &[
    "sk-proj-",
    "sk-svcacct-",
    "sk-admin-",
    "sk-ant-api03-",
    "sk-ant-admin01-",
    "sk-ant-",
    "sk-or-v1-",
    "sk-",
    "gsk_",
    "xai-",
    "hf_",
    "pplx-",
    "nvapi-",
    "r8_",
    "ghp_",
    "github_pat_",
    "glpat-",
    "AIza",
];

/// Why a secret is not looked for in answers: any text could hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Plain {
    #[error("it has fewer than {MIN_RUN} characters past its vendor prefix")]
    Short,
    #[error(
        "it has only one kind of character (lower-case letters, upper-case letters or digits) \
         besides punctuation, as words and numbers do"
    )]
    OneKind,
}

/// Whether `secret` is too short or too plain to be told apart from text
/// (`EMPTY`, `ollama`, `lm-studio`, `sk-no-key-required`): such a secret
/// is never looked for, so no answer is altered for it. A secret is
/// looked for when, past its vendor prefix, it has at least [`MIN_RUN`]
/// characters and mixes at least two of lower-case letters, upper-case
/// letters and digits (as every generated key does).
pub fn plain(secret: &str) -> Option<Plain> {
    let bytes = secret.as_bytes();
    let own = &bytes[generic_prefix(bytes)..];
    if own.len() < MIN_RUN {
        return Some(Plain::Short);
    }
    let kinds = [
        own.iter().any(u8::is_ascii_lowercase),
        own.iter().any(u8::is_ascii_uppercase),
        own.iter().any(u8::is_ascii_digit),
    ];
    (kinds.iter().filter(|k| **k).count() < 2).then_some(Plain::OneKind)
}

/// The shortest run of a secret of `n` bytes that counts as the secret:
/// two-thirds of it, never fewer than [`MIN_RUN`], at most all of it.
pub fn min_run(n: usize) -> usize {
    MIN_RUN.max((2 * n).div_ceil(3)).min(n)
}

/// A string pieces of a secret are taken from.
pub struct Source {
    pub bytes: Box<[u8]>,
    /// A base64 run: the partial groups around it (which also depend on
    /// what was encoded beside the secret) are removed with it.
    pub base64: bool,
    /// The shortest run of it that counts.
    pub min_len: usize,
    /// A run that counts ends at or after this offset of the source.
    pub min_end: usize,
}

/// Every source of every secret looked for.
#[derive(Default)]
pub struct Patterns {
    pub sources: Vec<Source>,
}

impl Patterns {
    /// Adds the sources of `secret`, unless it is [`plain`].
    pub fn add_secret(&mut self, secret: &str) {
        if plain(secret).is_some() {
            return;
        }
        let secret = secret.as_bytes();
        let prefix = generic_prefix(secret);
        let n = secret.len();
        let run = min_run(n);
        self.sources.push(Source {
            bytes: secret.into(),
            base64: false,
            min_len: run,
            min_end: run.max(prefix + MIN_OWN),
        });
        // A base64 run counts when it encodes as many bytes as a plain one.
        let run64 = (run * 4).div_ceil(3);
        for skip in 0..3 {
            let rest = &secret[skip..];
            let whole = &rest[..rest.len() / 3 * 3];
            let standard = STANDARD_NO_PAD.encode(whole).into_bytes();
            let url = URL_SAFE_NO_PAD.encode(whole).into_bytes();
            let both = if url == standard {
                vec![standard]
            } else {
                vec![standard, url]
            };
            for text in both {
                let min_len = run64.min(text.len());
                // The first end of a run whose last character depends on
                // enough of the key's own bytes.
                let need = prefix + MIN_OWN - 1;
                let first = (min_len..=text.len()).find(|&end| skip + (end * 6 - 1) / 8 >= need);
                let Some(min_end) = first else { continue };
                self.sources.push(Source {
                    bytes: text.into(),
                    base64: true,
                    min_len,
                    min_end,
                });
            }
        }
    }
}

/// Length of the well-known prefix `secret` starts with (0: none).
pub fn generic_prefix(secret: &[u8]) -> usize {
    GENERIC_PREFIXES
        .iter()
        .map(|p| p.as_bytes())
        .filter(|p| secret.len() >= p.len() && secret[..p.len()].eq_ignore_ascii_case(p))
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0)
}

/// A base64 character of either alphabet.
pub fn is_base64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_')
}
