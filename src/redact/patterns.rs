//! What a secret can look like in text: the strings a piece of it may be
//! taken from ([`Source`]: the secret, and the stable runs of its base64
//! forms) and the 8-byte windows of them that the matcher searches for.
//!
//! A run of 8 or more characters of a source contains at least one of its
//! windows, so searching for every window finds every such run. Windows
//! that lie (almost) wholly inside a well-known key prefix (`sk-proj-`,
//! `sk-ant-`, …) are left out: they say nothing about this key and appear
//! in innocent text. A window must hold [`MIN_OWN`] bytes past the prefix.

use std::collections::HashMap;

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
    /// Matched only whole and between word boundaries (a secret shorter
    /// than [`WINDOW`]): a short secret is a common word part.
    pub whole: bool,
}

/// Where a pattern occurs: in which source, at which offset.
#[derive(Clone, Copy)]
pub struct Place {
    pub source: u32,
    pub offset: u32,
}

/// Every source of every secret, and the distinct patterns (ASCII
/// lower-cased) with the places each occurs at.
#[derive(Default)]
pub struct Patterns {
    pub sources: Vec<Source>,
    pub patterns: Vec<Vec<u8>>,
    pub places: Vec<Vec<Place>>,
    index: HashMap<Vec<u8>, usize>,
}

impl Patterns {
    pub fn add_secret(&mut self, secret: &[u8]) {
        if secret.is_empty() {
            return;
        }
        if secret.len() < WINDOW {
            let s = self.source(secret, false, true);
            self.add(
                secret,
                Place {
                    source: s,
                    offset: 0,
                },
            );
            return;
        }
        let prefix = generic_prefix(secret);
        let s = self.source(secret, false, false);
        let mut any = false;
        for i in 0..=secret.len() - WINDOW {
            if i + WINDOW >= prefix + MIN_OWN {
                self.add(&secret[i..i + WINDOW], place(s, i));
                any = true;
            }
        }
        if !any {
            // Mostly prefix: only the whole key is the key.
            self.add(secret, place(s, 0));
        }
        for skip in 0..3 {
            let Some(rest) = secret.get(skip..) else {
                continue;
            };
            let whole = &rest[..rest.len() / 3 * 3];
            for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
                let text = engine.encode(whole).into_bytes();
                if text.len() < WINDOW {
                    continue;
                }
                let s = self.source(&text, true, false);
                for j in 0..=text.len() - WINDOW {
                    // The last byte of the secret the window's last
                    // character depends on.
                    let last = skip + ((j + WINDOW) * 6 - 1) / 8;
                    if last + 1 >= prefix + MIN_OWN {
                        self.add(&text[j..j + WINDOW], place(s, j));
                    }
                }
            }
        }
    }

    fn source(&mut self, bytes: &[u8], base64: bool, whole: bool) -> u32 {
        let id = u32::try_from(self.sources.len()).unwrap_or(u32::MAX);
        self.sources.push(Source {
            bytes: bytes.into(),
            base64,
            whole,
        });
        id
    }

    fn add(&mut self, pattern: &[u8], at: Place) {
        let key = pattern.to_ascii_lowercase();
        match self.index.get(&key) {
            Some(&i) => self.places[i].push(at),
            None => {
                self.index.insert(key.clone(), self.patterns.len());
                self.patterns.push(key);
                self.places.push(vec![at]);
            }
        }
    }
}

fn place(source: u32, offset: usize) -> Place {
    Place {
        source,
        offset: u32::try_from(offset).unwrap_or(u32::MAX),
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
