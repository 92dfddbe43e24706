//! The world of the Anthropic client tests (`tests/it/anthropic_sdk.rs`,
//! `tests/it/claude_code.rs`): two `conclave mock` processes, one speaking the
//! Messages API (`api = "anthropic"`, reached through `kind = "anthropic"`)
//! and one Chat Completions, and the gateway in front with a route per
//! strategy; running a `tests/sdk/*.py` script against one route.

use crate::common::{Proc, Served};

use super::{python_script, tail};

pub const ALICE: &str = "sk-anth-alice-0123456789";
pub const BOB: &str = "sk-anth-bob-0123456789";
/// The key conclave sends to the Anthropic upstream.
pub const UPSTREAM_KEY: &str = "sk-ant-upstream-secret-0123456789";

// The mock's answers; `tests/sdk/anth_common.py` has the same strings.
pub const CAPITAL: &str = "The capital of France is Paris.";
pub const WEATHER: &str = "It is 18C and sunny in Paris.";
pub const TOOL_RESULT: &str = "TOOL-RESULT: 18C, sunny";
/// What the mock says once Claude Code ran its `Bash` tool.
pub const CLAUDE_TOOL_OK: &str = "The command printed CLAUDE-TOOL-OK.";
/// What the chain's top tier says: seen only if the verifier's verdict on
/// the first tier was not read.
pub const TOP: &str = "TOP-TIER: Paris is the capital.";

/// One mock model that answers CAPITAL, asks for `get_weather` when asked
/// about the weather and uses the tool's result, and asks Claude Code to run
/// `echo CLAUDE-TOOL-OK` with its `Bash` tool when told to.
pub fn behaviour(name: &str, ttft: Option<&str>) -> String {
    let ttft = ttft
        .map(|t| format!("ttft = \"{t}\"\n"))
        .unwrap_or_default();
    format!(
        r#"[upstreams.sim.models.{name}]
reply = {{ text = "{CAPITAL}" }}
{ttft}
[[upstreams.sim.models.{name}.rules]]
when_contains = "{TOOL_RESULT}"
then = {{ reply = {{ text = "{WEATHER}" }} }}

[[upstreams.sim.models.{name}.rules]]
when_contains = "CLAUDE-TOOL-OK"
then = {{ reply = {{ text = "{CLAUDE_TOOL_OK}" }} }}

[[upstreams.sim.models.{name}.rules]]
when_contains = "Run the claude echo"
then = {{ reply = {{ tool_call = {{ name = "Bash", arguments = {{ command = "echo CLAUDE-TOOL-OK", description = "Print a marker" }} }} }} }}

[[upstreams.sim.models.{name}.rules]]
when_contains = "What is the weather in Paris?"
then = {{ reply = {{ tool_call = {{ name = "get_weather", arguments = {{ city = "Paris" }} }} }} }}

"#
    )
}

/// The Anthropic mock: answering models, a slow one (the hedge's first
/// candidate), slow panellists, a synthesis model, a verifier that accepts
/// and a top tier that must not be reached.
pub fn anthropic_mock_toml() -> String {
    let mut t = String::from("[upstreams.sim]\nkind = \"mock\"\napi = \"anthropic\"\n\n");
    t.push_str(&behaviour("a-good", None));
    t.push_str(&behaviour("a-twin", Some("3s")));
    t.push_str(&behaviour("a-pa", Some("400ms")));
    t.push_str(&format!(
        r#"[upstreams.sim.models.a-syn]
reply = {{ text = "Guidance: state the answer plainly." }}

[upstreams.sim.models.a-ver]
reply = {{ json = {{ accept = true, feedback = "" }} }}

[upstreams.sim.models.a-top]
reply = {{ text = "{TOP}" }}
"#
    ));
    t
}

pub fn openai_mock_toml() -> String {
    let mut t = String::from("[upstreams.sim]\nkind = \"mock\"\n\n");
    t.push_str(&behaviour("o-good", None));
    t.push_str(&behaviour("o-pb", Some("400ms")));
    t
}

pub const ROUTES: &str = r#"
[routes.pass-a]
strategy = "passthrough"
model = "a-good"

[routes.pass-o]
strategy = "passthrough"
model = "o-good"

[routes.chain]
strategy = "chain"
tiers = ["o-good", "a-top"]
verifier = "a-ver"
verify = ["o-good"]

[routes.chain-a]
strategy = "chain"
tiers = ["a-good", "a-top"]
verifier = "a-ver"
verify = ["a-good"]

[routes.panel]
strategy = "judge"
panel = ["a-pa", "o-pb"]
synthesis = "a-syn"
default = "a-good"
keepalive = "100ms"

[routes.hedge]
strategy = "race"
mode = "first"
candidates = ["a-twin", "a-good"]
hedge_delay = "100ms"

[routes.arena]
strategy = "arena"
contestants = ["a-good", "o-good"]
"#;

pub fn gateway_toml(anth_base: &str, oai_v1: &str) -> String {
    let mut t = format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n\
         [upstreams.claude]\nkind = \"anthropic\"\nbase_url = \"{anth_base}\"\n\
         api_key_env = \"ANTH_UPSTREAM_KEY\"\ntimeout = \"10s\"\n\n\
         [upstreams.up]\nkind = \"openai\"\nbase_url = \"{oai_v1}\"\ntimeout = \"10s\"\n\n"
    );
    for m in ["a-good", "a-twin", "a-pa", "a-syn", "a-ver", "a-top"] {
        t.push_str(&format!("[models.{m}]\nupstream = \"claude\"\n\n"));
    }
    for m in ["o-good", "o-pb"] {
        t.push_str(&format!("[models.{m}]\nupstream = \"up\"\n\n"));
    }
    t.push_str(
        "[[keys]]\nname = \"alice\"\nkey_env = \"SDK_ALICE\"\n\n[[keys]]\nname = \"bob\"\nkey_env = \"SDK_BOB\"\n",
    );
    t.push_str(ROUTES);
    t
}

pub struct World {
    pub anth: Proc,
    pub oai: Proc,
    pub gw: Proc,
}

pub fn world() -> World {
    let anth = Proc::mock(&anthropic_mock_toml());
    let oai = Proc::mock(&openai_mock_toml());
    let gw = Proc::gateway_env(
        &gateway_toml(&anth.base, &oai.v1()),
        &[
            ("SDK_ALICE", ALICE),
            ("SDK_BOB", BOB),
            ("ANTH_UPSTREAM_KEY", UPSTREAM_KEY),
        ],
    );
    World { anth, oai, gw }
}

impl World {
    /// Runs `tests/sdk/SCRIPT` against `route` (with `extra` env); its
    /// output, or why not.
    pub fn script(
        &self,
        script: &str,
        route: &str,
        extra: &[(&str, &str)],
    ) -> Result<String, String> {
        let mut env = vec![
            ("ANTHROPIC_BASE_URL", self.gw.base.clone()),
            ("OPENAI_BASE_URL", self.gw.v1()),
            ("OPENAI_API_KEY", ALICE.to_owned()),
            ("OTHER_API_KEY", BOB.to_owned()),
            ("MOCK_URL", self.oai.base.clone()),
            ("ANTH_MOCK_URL", self.anth.base.clone()),
        ];
        env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let out = python_script(script, route, &env).map_err(|e| {
            format!(
                "{e}\n--- gateway log (tail)\n{}",
                tail(&self.gw.stderr(), 30)
            )
        })?;
        // The upstream key never reaches a client or a log.
        let log = self.gw.stderr();
        if out.contains(UPSTREAM_KEY) || log.contains(UPSTREAM_KEY) {
            return Err(format!("{script} on {route}: the upstream key leaked"));
        }
        Ok(out)
    }
}
