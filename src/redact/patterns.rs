//! What a secret can look like in text: the strings a piece of it may be
//! taken from ([`Source`]: the secret, and the stable runs of its base64
//! forms, at each of the three alignments and in both alphabets), and
//! which runs of them count as the secret.
//!
//! A run counts when it is at least [`WINDOW`] bytes long and holds a
//! window of 8 with [`MIN_OWN`] bytes of the key past a well-known vendor
//! prefix (`sk-proj-`, `sk-ant-`, …): windows of the prefix alone say
//! nothing about this key and appear in innocent text. A key that is
//! nearly all prefix counts only whole; one shorter than [`WINDOW`] only
//! whole and outside words ([`Patterns::short`]).

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};

/// The shortest run of a secret that is treated as the secret.
pub const WINDOW: usize = 8;

/// Bytes of its own (past a well-known prefix) a window must hold.
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

/// Every source of every secret, and the secrets too short for one.
#[derive(Default)]
pub struct Patterns {
    pub sources: Vec<Source>,
    /// Secrets shorter than [`WINDOW`], ASCII lower-cased.
    pub short: Vec<Vec<u8>>,
}

impl Patterns {
    pub fn add_secret(&mut self, secret: &[u8]) {
        if secret.is_empty() {
            return;
        }
        if secret.len() < WINDOW {
            self.short.push(secret.to_ascii_lowercase());
            return;
        }
        let prefix = generic_prefix(secret);
        let n = secret.len();
        let (min_len, min_end) = if n >= prefix + MIN_OWN {
            (WINDOW, WINDOW.max(prefix + MIN_OWN))
        } else {
            // Mostly prefix: only the whole key is the key.
            (n, n)
        };
        self.sources.push(Source {
            bytes: secret.into(),
            base64: false,
            min_len,
            min_end,
        });
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
                // The first end of a window whose last character depends
                // on enough of the key's own bytes.
                let need = prefix + MIN_OWN - 1;
                let first = (WINDOW..=text.len()).find(|&end| skip + (end * 6 - 1) / 8 >= need);
                let Some(min_end) = first else { continue };
                self.sources.push(Source {
                    bytes: text.into(),
                    base64: true,
                    min_len: WINDOW,
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

/// A character that continues a word (a short secret must not touch one).
pub fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_')
}
