//! The judge's own config: the `[routes.NAME]` keys of `strategy = "judge"`
//! (raw and validated), the names it refers to, how `check` shows it, the
//! warnings it deserves, and how it is built into a [`Judge`] node.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::synthesis::Synthesis;
use super::{GuidanceRole, Judge, Member};
use crate::config::{Config, Errors, RouteSpec, positive};
use crate::graph::{self, BuildError, Built, Pins, Resolve};
use crate::labels::Role;
use crate::strategy::{member_refs, members};

/// Default gap between SSE keep-alive comments while panel and synthesis run.
const JUDGE_KEEPALIVE: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[allow(dead_code)]
    strategy: String,
    panel: Vec<String>,
    synthesis: String,
    default: String,
    /// Panellists slower than this are cancelled.
    #[serde(default, with = "humantime_serde")]
    panel_timeout: Option<Duration>,
    /// Fewer usable panel answers than this: the default answers alone.
    #[serde(default = "one")]
    min_panel: usize,
    /// Replaces the built-in synthesis instruction.
    synthesis_prompt: Option<String>,
    /// Output cap of each synthesis call (`max_tokens`).
    #[serde(default = "default_synthesis_max_tokens")]
    synthesis_max_tokens: u32,
    /// Time limit of the synthesis (both of its turns).
    #[serde(default = "default_synthesis_timeout", with = "humantime_serde")]
    synthesis_timeout: Duration,
    /// How the default receives the guidance.
    guidance_role: Option<GuidanceRole>,
    #[serde(default, with = "humantime_serde")]
    keepalive: Option<Duration>,
}

fn one() -> usize {
    1
}
fn default_synthesis_max_tokens() -> u32 {
    1024
}
fn default_synthesis_timeout() -> Duration {
    Duration::from_secs(60)
}

/// A validated judge route.
#[derive(Debug)]
pub struct JudgeSpec {
    panel: Vec<String>,
    synthesis: String,
    default: String,
    panel_timeout: Option<Duration>,
    min_panel: usize,
    synthesis_prompt: Option<String>,
    synthesis_max_tokens: u32,
    synthesis_timeout: Duration,
    guidance_role: Option<GuidanceRole>,
    keepalive: Duration,
}

/// Reads and validates one judge route table at `path`.
pub(crate) fn parse(
    item: toml::Value,
    path: &str,
    errs: &mut Errors,
) -> Option<Box<dyn RouteSpec>> {
    let c = errs.parse::<Raw>(path, item)?;
    members(
        &c.panel,
        path,
        "panel",
        "a judge needs at least one panellist",
        "is already on this panel",
        errs,
    );
    if c.min_panel == 0 {
        errs.push(format!("{path}.min_panel"), "must be at least 1");
    } else if !c.panel.is_empty() && c.min_panel > c.panel.len() {
        errs.push(
            format!("{path}.min_panel"),
            format!(
                "is {} but the panel has {} member(s): the judge would always fall back",
                c.min_panel,
                c.panel.len()
            ),
        );
    }
    positive(c.panel_timeout, &format!("{path}.panel_timeout"), errs);
    positive(c.keepalive, &format!("{path}.keepalive"), errs);
    positive(
        Some(c.synthesis_timeout),
        &format!("{path}.synthesis_timeout"),
        errs,
    );
    if c.synthesis_max_tokens == 0 {
        errs.push(
            format!("{path}.synthesis_max_tokens"),
            "must be greater than 0",
        );
    }
    if c.synthesis_prompt
        .as_deref()
        .is_some_and(|p| p.trim().is_empty())
    {
        errs.push(format!("{path}.synthesis_prompt"), "is empty");
    }
    Some(Box::new(JudgeSpec {
        panel: c.panel,
        synthesis: c.synthesis,
        default: c.default,
        panel_timeout: c.panel_timeout,
        min_panel: c.min_panel,
        synthesis_prompt: c.synthesis_prompt,
        synthesis_max_tokens: c.synthesis_max_tokens,
        synthesis_timeout: c.synthesis_timeout,
        guidance_role: c.guidance_role,
        keepalive: c.keepalive.unwrap_or(JUDGE_KEEPALIVE),
    }))
}

impl JudgeSpec {
    /// The guidance's role: as configured, else a user note for a default
    /// on a local lane (local chat templates often reject a system message
    /// after the conversation), else a system message.
    fn guidance_role(&self, config: &Config) -> GuidanceRole {
        if let Some(r) = self.guidance_role {
            return r;
        }
        if config.is_local(&self.default) {
            GuidanceRole::User
        } else {
            GuidanceRole::System
        }
    }
}

impl RouteSpec for JudgeSpec {
    fn strategy(&self) -> &'static str {
        "judge"
    }

    fn references(&self) -> Vec<(String, String)> {
        let mut refs = member_refs("panel", &self.panel);
        refs.push(("synthesis".into(), self.synthesis.clone()));
        refs.push(("default".into(), self.default.clone()));
        refs
    }

    fn describe(&self, config: &Config) -> String {
        let timeout = self
            .panel_timeout
            .map_or("none".to_owned(), crate::config::duration_text);
        format!(
            "judge panel [{}] (min {}, panel_timeout {timeout}) -> synthesis {} -> default {} (guidance as a {} message)",
            self.panel.join(", "),
            self.min_panel,
            self.synthesis,
            self.default,
            self.guidance_role(config).as_str(),
        )
    }

    fn warnings(&self, name: &str, config: &Config) -> Vec<String> {
        // A judge ranking its own answer: anonymised labels hide the name,
        // not the style.
        let judge = config.resolve_alias(&self.synthesis);
        self.panel
            .iter()
            .enumerate()
            .filter(|(_, p)| config.resolve_alias(p) == judge)
            .map(|(i, p)| {
                format!(
                    "routes.{name}.synthesis: \"{}\" is also on the panel (panel[{i}] = \"{p}\"), so it \
                     ranks its own answer; labels are anonymised but its style is not. Prefer a \
                     synthesis model that is not on the panel",
                    self.synthesis
                )
            })
            .collect()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Builds a `strategy = "judge"` route (the `build` of its [`super::STRATEGY`]).
pub fn build(
    spec: &dyn RouteSpec,
    name: &str,
    config: &Config,
    nodes: &mut dyn Resolve,
) -> Result<Built, BuildError> {
    let spec: &JudgeSpec = graph::spec(spec, name)?;
    let panel = Member::all(&spec.panel, nodes)?;
    let synthesis = Synthesis {
        member: Member::of(&spec.synthesis, nodes)?,
        prompt: spec.synthesis_prompt.clone(),
        max_tokens: spec.synthesis_max_tokens,
        timeout: spec.synthesis_timeout,
    };
    let default = Member::of(&spec.default, nodes)?;
    // A pin names a panellist or the default, which answers alone.
    let pins = Pins {
        noun: "model",
        role: Role::Default,
        targets: Member::targets(&panel)
            .into_iter()
            .chain(Member::targets(std::slice::from_ref(&default)))
            .collect(),
    };
    // The judge holds the answer back while the panel and the synthesis
    // run; the default (and anything nested in it) may hold it longer.
    let keepalive = nodes
        .keepalive(&spec.default)
        .into_iter()
        .chain(Some(spec.keepalive))
        .min();
    Ok(Built {
        model: Arc::new(Judge {
            name: name.into(),
            panel,
            synthesis,
            default,
            panel_timeout: spec.panel_timeout,
            min_panel: spec.min_panel,
            guidance_role: spec.guidance_role(config),
        }),
        keepalive,
        pins,
    })
}
