//! Whose calls failed: a [`Tenant`] is one API key, or everyone (a
//! gateway without `[[keys]]` serves one tenant; a transport failure or
//! an active check says nothing about whose request met it). [`Seen`]
//! is the bounded set of tenants behind a run of failures: a member is
//! ejected for everyone only once [`Seen::several`] says they are not one
//! key's alone.

use std::sync::Arc;

/// The most key names a [`Seen`] keeps (more than this are several
/// anyway).
const MAX_KEYS: usize = 16;

/// Who made a call, for its member's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tenant {
    /// Every caller at once: the anonymous caller of a gateway without
    /// keys, an active check, a failure before the request reached the
    /// server.
    All,
    /// One API key (its name).
    Key(Arc<str>),
}

impl Tenant {
    /// The tenant of a request made with key `name` (`anonymous`: the
    /// gateway has no keys, so all of its traffic is one tenant's).
    pub fn of(name: &Arc<str>) -> Tenant {
        if &**name == "anonymous" {
            Tenant::All
        } else {
            Tenant::Key(name.clone())
        }
    }

    pub fn key(&self) -> Option<&Arc<str>> {
        match self {
            Tenant::All => None,
            Tenant::Key(k) => Some(k),
        }
    }
}

/// The tenants behind some failures: at most [`MAX_KEYS`] names, and
/// whether everyone (or more keys than that) took part.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    keys: Vec<Arc<str>>,
    all: bool,
}

impl Seen {
    pub fn add(&mut self, t: &Tenant) {
        match t {
            Tenant::All => self.all = true,
            Tenant::Key(k) if self.keys.iter().any(|x| x == k) => {}
            Tenant::Key(_) if self.keys.len() >= MAX_KEYS => self.all = true,
            Tenant::Key(k) => self.keys.push(k.clone()),
        }
    }

    /// Whether the failures are more than one key's.
    pub fn several(&self) -> bool {
        self.all || self.keys.len() >= 2
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.all = false;
    }

    /// The key names seen.
    pub fn keys(&self) -> &[Arc<str>] {
        &self.keys
    }

    /// Adds what `other` saw.
    pub fn merge(&mut self, other: &Seen) {
        if other.all {
            self.all = true;
        }
        for k in &other.keys {
            self.add(&Tenant::Key(k.clone()));
        }
    }
}
