//! Strategies: models made of models. Each lives in a folder of its own
//! (`chain/`) that owns its config keys, their validation, the names it
//! refers to, how `check` shows it, its warnings and its graph build (a
//! [`crate::config::RouteSpec`]); adding one means adding a folder and one
//! line in [`ALL`]. Each implements [`crate::model::ChatModel`] over the
//! nodes it names, so strategies nest. Attempts are recorded by the
//! concrete models underneath; a strategy only sets verdicts.
//!
//! `passthrough` is the one built into the config: an alias of its model's
//! node, or a thin node when it sets options (see `graph`).

pub mod chain;
pub mod judge;
pub mod passthrough;

use crate::config::Strategies;

/// Every strategy of this build, by name, for [`crate::config::load`].
pub const ALL: Strategies = Strategies {
    known: &[
        ("chain", chain::config::parse),
        ("judge", judge::config::parse),
    ],
    later: &["race", "arena", "oracle"],
};
