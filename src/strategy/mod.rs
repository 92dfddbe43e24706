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

pub mod arena;
pub mod chain;
pub mod judge;
pub mod oracle;
pub mod passthrough;
pub mod race;

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::config::{Errors, Resolve, Strategies, Unresolved};
use crate::context::RequestCtx;
use crate::error::ModelError;
use crate::labels::{Role, Verdict};
use crate::model::{Call, ChatModel, Reply};
use crate::wire::ChatRequest;

/// Every strategy of this build, by name, for [`crate::config::load`].
pub const ALL: Strategies = Strategies {
    known: &[
        ("chain", chain::config::parse),
        ("judge", judge::config::parse),
        ("race", race::config::parse),
        ("arena", arena::config::parse),
        ("oracle", oracle::config::parse),
    ],
    later: &[],
};

/// A model a strategy route calls (a panellist, a candidate, a
/// contestant), by its config name.
pub struct Member {
    pub name: Arc<str>,
    pub model: Arc<dyn ChatModel>,
}

impl Member {
    /// The member `name`, from the graph being built.
    pub(crate) fn of(name: &str, nodes: &mut dyn Resolve) -> Result<Member, Unresolved> {
        Ok(Member {
            name: name.into(),
            model: nodes.model(name)?,
        })
    }

    /// Every member of a list, in order.
    pub(crate) fn all(
        names: &[String],
        nodes: &mut dyn Resolve,
    ) -> Result<Vec<Member>, Unresolved> {
        names.iter().map(|n| Member::of(n, nodes)).collect()
    }

    /// A list of members as pin targets.
    pub fn targets(members: &[Member]) -> Vec<PinTarget<'_>> {
        members.iter().map(|m| (&*m.name, &m.model)).collect()
    }
}

/// One model a strategy route may be pinned to, by its config name.
pub type PinTarget<'a> = (&'a str, &'a Arc<dyn ChatModel>);

/// `x-conclave-pin` on a strategy route: the named member (a `noun` of the
/// `strategy` route `route`: a chain's tier, a judge's model) answers
/// alone, in `role`; any other name is a 400 that lists the members.
pub async fn pinned(
    (strategy, route): (&str, &str),
    noun: &str,
    members: &[PinTarget<'_>],
    role: Role,
    (call, req, pin): (Call, Arc<ChatRequest>, &str),
) -> Result<Reply, ModelError> {
    let Some((_, model)) = members.iter().find(|(name, _)| *name == pin) else {
        let names: Vec<&str> = members.iter().map(|(name, _)| *name).collect();
        return Err(ModelError::BadRequest {
            message: format!(
                "x-conclave-pin: \"{pin}\" is not a {noun} of {strategy} \"{route}\" ({noun}s: {})",
                names.join(", ")
            ),
            param: None,
        });
    };
    let reply = model.chat(call.with_role(role), req).await?;
    reply.attempt.set_verdict(Verdict::Ok, None);
    Ok(reply)
}

/// Writes a strategy's own event (`judge_ranking`, `race_finished`, …) to
/// the event log, when there is one.
pub fn event(ctx: &RequestCtx, name: &'static str, fields: Map<String, Value>) {
    if ctx.events_enabled() {
        ctx.emit(name, fields);
    }
}

/// Checks a route's list of members (`tiers`, `panel`, `candidates`) at
/// `path.key`: at least one (else `empty`), none twice (`"x" {twice}`).
pub(crate) fn members(
    list: &[String],
    path: &str,
    key: &str,
    empty: &str,
    twice: &str,
    errs: &mut Errors,
) {
    if list.is_empty() {
        errs.push(format!("{path}.{key}"), empty);
    }
    for (i, m) in list.iter().enumerate() {
        if list[..i].contains(m) {
            errs.push(format!("{path}.{key}[{i}]"), format!("\"{m}\" {twice}"));
        }
    }
}

/// The references of a member list, named `key[i]`, for `RouteSpec::references`.
pub(crate) fn member_refs(key: &str, list: &[String]) -> Vec<(String, String)> {
    list.iter()
        .enumerate()
        .map(|(i, m)| (format!("{key}[{i}]"), m.clone()))
        .collect()
}
