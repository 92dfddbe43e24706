//! Strategies: models made of other models. Each one implements
//! [`crate::model::ChatModel`] over the nodes it names, so strategies nest
//! (a chain tier may itself be a chain). Attempts are recorded by the
//! concrete models underneath; a strategy only sets verdicts.
//!
//! `passthrough` needs no code of its own: the route is an alias of its
//! model's node (see `graph`).

pub mod chain;
pub mod passthrough;
