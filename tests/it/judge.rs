//! Model-judge panels: a gateway in front of the mock server, judge routes
//! over simulated panellists, syntheses and defaults. The tests of the
//! panel's timing (parallel panellists, `panel_timeout`) run in-process
//! on paused time against the same simulator, so their waits are exact.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use tokio::time::Instant;

const RANK_AB: &str = r#"{ name = "rank_responses", arguments = { rankings = [
  { label = "A", rank = 1, score = 9, reason = "complete" },
  { label = "B", rank = 2, score = 4, reason = "vague" },
] } }"#;

fn mock_toml() -> String {
    format!(
        r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.alpha-panel]
reply = {{ text = "The answer is four." }}
ttft = "200ms"
usage = {{ prompt_tokens = 11, completion_tokens = 3 }}

[upstreams.sim.models.beta-panel]
reply = {{ text = "Probably 4, give or take." }}
ttft = "200ms"
usage = {{ prompt_tokens = 12, completion_tokens = 4 }}

[upstreams.sim.models.gamma-panel]
reply = {{ text = "2 and 2 make 4 because addition." }}
ttft = "200ms"
usage = {{ prompt_tokens = 13, completion_tokens = 5 }}

[upstreams.sim.models.tool-panel]
reply = {{ tool_call = {{ name = "calc", arguments = {{ expr = "2+2" }} }} }}

[upstreams.sim.models.broken-panel]
status = 500
error_message = "panellist exploded"

[upstreams.sim.models.hung-panel]
fail = "hang"

[upstreams.sim.models.syn]
reply = {{ tool_call = {RANK_AB} }}
usage = {{ prompt_tokens = 100, completion_tokens = 7 }}

[[upstreams.sim.models.syn.rules]]
when_contains = "Ranking recorded"
then = {{ reply = {{ text = "GUIDANCE-7Q: say four plainly." }} }}

[upstreams.sim.models.syn-text]
reply = {{ text = "GUIDANCE-TEXT: prefer the plain answer." }}

[upstreams.sim.models.syn-garbage]
reply = {{ tool_call = {{ name = "rank_responses", arguments = "{{not json at all" }} }}

[[upstreams.sim.models.syn-garbage.rules]]
when_contains = "Ranking recorded"
then = {{ reply = {{ text = "GUIDANCE-G: still, say four." }} }}

[upstreams.sim.models.syn-down]
status = 503
error_message = "judge is out"

[upstreams.sim.models.def]
reply = {{ text = "Final: four." }}
usage = {{ prompt_tokens = 50, completion_tokens = 2 }}

[upstreams.sim.models.def-tool]
reply = {{ tool_call = {{ name = "lookup", arguments = {{ q = "four" }} }} }}
"#
    )
}

const MODELS: &[&str] = &[
    "alpha-panel",
    "beta-panel",
    "gamma-panel",
    "tool-panel",
    "broken-panel",
    "hung-panel",
    "syn",
    "syn-text",
    "syn-garbage",
    "syn-down",
    "def",
    "def-tool",
];

/// `[routes.NAME]`, a judge with `extra` keys.
fn judge(name: &str, panel: &[&str], synthesis: &str, default: &str, extra: &str) -> String {
    let panel: Vec<String> = panel.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        "[routes.{name}]\nstrategy = \"judge\"\npanel = [{}]\nsynthesis = \"{synthesis}\"\ndefault = \"{default}\"\n{extra}\n\n",
        panel.join(", ")
    )
}

struct World {
    mock: Srv,
    gw: Srv,
}

fn world(routes: &str) -> World {
    let mock = Srv::mock(&mock_toml());
    let gw = Srv::gateway(&front_of(&mock.v1(), MODELS, routes));
    World { mock, gw }
}

impl World {
    /// The bodies the mock received for `model`.
    async fn asked(&self, model: &str) -> Vec<Value> {
        self.mock.asked(model).await
    }
}

/// The same world in-process: the mock is a `kind = "mock"` upstream of
/// the gateway, so under paused time panellists' `ttft`s and the
/// `panel_timeout` are tokio timers and the figures are exact.
fn world_in(routes: &str) -> inproc::Gw {
    let models: String = MODELS
        .iter()
        .map(|m| format!("[models.{m}]\nupstream = \"sim\"\n\n"))
        .collect();
    inproc::Gw::start(&format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n{}\n{models}{routes}",
        mock_toml()
    ))
}

fn attempt<'a>(events: &'a [Value], model: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["event"] == "attempt" && e["model"] == model)
        .unwrap_or_else(|| panic!("no attempt of {model}: {events:?}"))
}

const THREE: &[&str] = &["alpha-panel", "beta-panel", "gamma-panel"];

/// In-process, on paused time: the panel's wait is exactly one
/// panellist's.
#[tokio::test(start_paused = true)]
async fn the_panel_runs_at_once_the_synthesis_judges_blind_and_the_default_answers() {
    let gw = world_in(&judge("council", THREE, "syn", "def", ""));
    let t = Instant::now();
    let r = gw.chat(&chat("council", "what is 2+2?")).await;
    let took = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("def"));
    assert_eq!(r.header("x-conclave-strategy"), Some("judge"));
    assert_eq!(r.json()["choices"][0]["message"]["content"], "Final: four.");
    // Three 200 ms panellists in parallel, not one after another (the
    // synthesis and the default answer at once).
    assert_eq!(took, Duration::from_millis(200));
    assert!(!r.text.contains("GUIDANCE"), "{}", r.text);

    // The synthesis saw every label and the tool, and no panellist's name.
    let syn = gw.asked("sim", "syn");
    assert_eq!(syn.len(), 2, "ranked, then wrote guidance: {syn:?}");
    let first = syn[0].to_string();
    for label in ["Response A:", "Response B:", "Response C:"] {
        assert!(first.contains(label), "{first}");
    }
    for name in THREE {
        assert!(
            !first.contains(name) && !syn[1].to_string().contains(name),
            "{name} in {first}"
        );
    }
    assert_eq!(syn[0]["tools"][0]["function"]["name"], "rank_responses");
    assert_eq!(
        syn[0]["tools"][0]["function"]["parameters"]["properties"]["rankings"]["items"]["properties"]
            ["label"]["enum"],
        json!(["A", "B", "C"])
    );
    assert_eq!(syn[0]["max_tokens"], 1024);
    assert!(syn[0].to_string().contains("what is 2+2?"));

    // The default got the conversation and the guidance after it.
    let def = gw.asked("sim", "def");
    let messages = def[0]["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "system");
    assert!(
        last["content"].as_str().unwrap().contains("GUIDANCE-7Q"),
        "{last}"
    );
    assert_eq!(messages[0]["content"], "what is 2+2?");

    // The ranking, labels mapped back to names, and verdicts by rank.
    let ev = gw.events(&["attempt", "judge_ranking"]).await;
    assert_eq!(ev.len(), 7, "{ev:?}");
    let ranking = ev.iter().find(|e| e["event"] == "judge_ranking").unwrap();
    let a = ranking["labels"]["A"].as_str().unwrap();
    let b = ranking["labels"]["B"].as_str().unwrap();
    let c = ranking["labels"]["C"].as_str().unwrap();
    assert_eq!(ranking["ranking"][0]["model"], a);
    assert_eq!(attempt(&ev, a)["verdict"], "winner");
    assert_eq!(attempt(&ev, b)["verdict"], "loser");
    assert_eq!(attempt(&ev, b)["feedback"], "vague");
    assert_eq!(attempt(&ev, c)["verdict"], "ok", "unranked");
    assert_eq!(attempt(&ev, a)["role"], "panel");
    assert_eq!(attempt(&ev, "syn")["role"], "synthesis");
    assert_eq!(attempt(&ev, "def")["role"], "default");

    // The response's usage is every call's.
    let attempts: Vec<&Value> = ev.iter().filter(|e| e["event"] == "attempt").collect();
    let sum = |k: &str| attempts.iter().map(|e| e[k].as_u64().unwrap()).sum::<u64>();
    let usage = &r.json()["usage"];
    assert_eq!(usage["prompt_tokens"], sum("input_tokens"), "{usage}");
    assert_eq!(usage["completion_tokens"], sum("output_tokens"));
    assert_eq!(usage["prompt_tokens"], 11 + 12 + 13 + 100 + 100 + 50);
    assert_eq!(r.header("x-conclave-attempts"), Some("6"));
}

#[tokio::test]
async fn a_streamed_judge_keeps_the_client_alive_and_streams_the_default() {
    let w = world(&judge(
        "council",
        THREE,
        "syn",
        "def",
        "keepalive = \"50ms\"",
    ));
    let mut body = chat_stream("council", "what is 2+2?");
    body["stream_options"] = json!({"include_usage": true});
    let r = post(&w.gw.base, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.starts_with(": keep-alive"), "{}", r.text);
    assert!(!r.text.contains("GUIDANCE"), "{}", r.text);
    let events = r.data_events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let text: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "Final: four.");
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(
        usage["usage"]["prompt_tokens"],
        11 + 12 + 13 + 100 + 100 + 50,
        "{usage}"
    );
}

#[tokio::test]
async fn the_default_s_tool_calls_reach_the_client_and_a_panellist_s_are_judged() {
    let w = world(&judge(
        "tools",
        &["alpha-panel", "tool-panel"],
        "syn",
        "def-tool",
        "",
    ));
    let r = post(&w.gw.base, &chat("tools", "look it up")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let call = &r.json()["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "lookup", "{}", r.text);
    let syn = w.asked("syn").await[0].to_string();
    assert!(syn.contains("tool call: calc("), "{syn}");
}

/// In-process, on paused time: a hung panellist is given up on at
/// `panel_timeout` exactly.
#[tokio::test(start_paused = true)]
async fn failing_and_slow_panellists_are_left_out() {
    let panel = ["alpha-panel", "broken-panel", "hung-panel"];
    let gw = world_in(&judge(
        "council",
        &panel,
        "syn",
        "def",
        "panel_timeout = \"400ms\"",
    ));
    let t = Instant::now();
    let r = gw.chat(&chat("council", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(t.elapsed(), Duration::from_millis(400));
    let syn = gw.asked("sim", "syn")[0].to_string();
    assert!(
        syn.contains("Response A:") && !syn.contains("Response B:"),
        "{syn}"
    );
    let ev = gw.events(&["attempt", "judge_ranking"]).await;
    assert_eq!(attempt(&ev, "broken-panel")["verdict"], "error");
    let hung = attempt(&ev, "hung-panel");
    assert_eq!(hung["verdict"], "cancelled");
    assert_eq!(hung["duration_ms"].as_f64(), Some(400.0), "{hung}");
    // The mock's ranking names a B that this judgement did not have: the
    // whole ranking is refused, not half-read.
    assert_eq!(attempt(&ev, "alpha-panel")["verdict"], "ok");
    let ranking = ev.iter().find(|e| e["event"] == "judge_ranking").unwrap();
    assert!(
        ranking["error"]
            .as_str()
            .unwrap()
            .contains("unknown label \"B\""),
        "{ranking}"
    );
}

/// In-process, on paused time: the default answers alone once the
/// `panel_timeout` has passed with nothing usable.
#[tokio::test(start_paused = true)]
async fn no_usable_panel_falls_back_to_the_default_alone() {
    let panel = ["broken-panel", "hung-panel"];
    let gw = world_in(&judge(
        "council",
        &panel,
        "syn",
        "def",
        "panel_timeout = \"300ms\"",
    ));
    let t = Instant::now();
    let r = gw.chat(&chat("council", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(t.elapsed(), Duration::from_millis(300));
    assert_eq!(r.json()["choices"][0]["message"]["content"], "Final: four.");
    assert!(gw.asked("sim", "syn").is_empty());
    let def = gw.asked("sim", "def");
    assert_eq!(
        def[0]["messages"].as_array().unwrap().len(),
        1,
        "the original request alone"
    );
    let ev = gw.events(&["judge_fallback"]).await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    let why = ev[0]["reason"].as_str().unwrap();
    assert!(
        why.contains("0 usable panel answer(s), fewer than min_panel = 1"),
        "{why}"
    );
    assert!(
        why.contains("panellist exploded") || why.contains("broken-panel"),
        "{why}"
    );
}

#[tokio::test]
async fn min_panel_counts_usable_answers() {
    let panel = ["alpha-panel", "broken-panel"];
    let w = world(&judge("council", &panel, "syn", "def", "min_panel = 2"));
    let r = post(&w.gw.base, &chat("council", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ev = w.gw.events_of(&["judge_fallback"], 1).await;
    assert!(
        ev[0]["reason"].as_str().unwrap().contains("1 usable"),
        "{}",
        ev[0]
    );
}

#[tokio::test]
async fn a_failed_synthesis_falls_back_to_the_default_alone() {
    let w = world(&judge("council", THREE, "syn-down", "def", ""));
    let r = post(&w.gw.base, &chat("council", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "Final: four.");
    let ev = w.gw.events_of(&["judge_fallback"], 1).await;
    let why = ev[0]["reason"].as_str().unwrap();
    assert!(
        why.contains("the synthesis failed") && why.contains("judge is out"),
        "{why}"
    );
    assert_eq!(
        w.asked("def").await[0]["messages"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn guidance_without_a_ranking_is_used_and_a_malformed_ranking_is_recorded() {
    let routes = judge("text", THREE, "syn-text", "def", "")
        + &judge(
            "garbage",
            THREE,
            "syn-garbage",
            "def",
            "guidance_role = \"user\"",
        );
    let w = world(&routes);
    let r = post(&w.gw.base, &chat("text", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let def = w.asked("def").await;
    assert!(def[0].to_string().contains("GUIDANCE-TEXT"), "{}", def[0]);
    let ev = w.gw.events_of(&["judge_ranking"], 1).await;
    assert_eq!(ev[0]["ranking"], Value::Null);
    assert!(
        ev[0]["error"].as_str().unwrap().contains("did not call"),
        "{}",
        ev[0]
    );

    let r = post(&w.gw.base, &chat("garbage", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let def = w.asked("def").await;
    // Folded into the last user message.
    let messages = def[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    let text = messages[0]["content"].as_str().unwrap();
    assert!(
        text.starts_with("q\n\n") && text.contains("GUIDANCE-G"),
        "{text}"
    );
    let ev = w.gw.events_of(&["judge_ranking"], 2).await;
    assert!(
        ev[1]["error"].as_str().unwrap().contains("malformed"),
        "{}",
        ev[1]
    );
    let attempts = w.gw.events_of(&["attempt"], 10).await;
    let alpha: Vec<&Value> = attempts
        .iter()
        .filter(|e| e["model"] == "alpha-panel")
        .collect();
    assert_eq!(alpha[1]["verdict"], "ok", "no ranking, no verdict");
}

/// A chain on the panel keeps its own verdicts: the judge's ranking of it
/// is in `judge_ranking`, not written over its tier's attempt.
#[tokio::test]
async fn a_nested_strategy_on_the_panel_keeps_its_verdicts() {
    let routes = judge("council", &["inner", "beta-panel"], "syn", "def", "")
        + "[routes.inner]\nstrategy = \"chain\"\ntiers = [\"alpha-panel\"]\n\n";
    let w = world(&routes);
    let r = post(&w.gw.base, &chat("council", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ev = w.gw.events_of(&["attempt", "judge_ranking"], 6).await;
    let ranking = ev.iter().find(|e| e["event"] == "judge_ranking").unwrap();
    let names: Vec<&Value> = ranking["labels"].as_object().unwrap().values().collect();
    assert!(names.contains(&&json!("inner")), "{ranking}");
    let alpha = attempt(&ev, "alpha-panel");
    assert_eq!(alpha["role"], "tier");
    assert_eq!(alpha["verdict"], "accept");
    let beta = &attempt(&ev, "beta-panel")["verdict"];
    assert!(beta == "winner" || beta == "loser", "{beta}");
}

#[tokio::test]
async fn a_pin_runs_one_member_alone() {
    let w = world(&judge("council", THREE, "syn", "def", ""));
    let r = post_with(
        &w.gw.base,
        &chat("council", "q"),
        &[("x-conclave-pin", "beta-panel")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("beta-panel"));
    assert!(w.asked("syn").await.is_empty());
    let r = post_with(
        &w.gw.base,
        &chat("council", "q"),
        &[("x-conclave-pin", "nope")],
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("alpha-panel, beta-panel, gamma-panel, def"),
        "{}",
        r.text
    );
}

#[test]
fn check_warns_when_the_synthesis_is_on_the_panel() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let toml = "[upstreams.sim]\nkind = \"mock\"\n\n[models.a]\nupstream = \"sim\"\n\n[models.b]\nupstream = \"sim\"\n\n"
        .to_owned()
        + &judge("council", &["a", "b"], "a", "b", "")
        + &judge("broken", &[], "a", "b", "min_panel = 0");
    std::fs::write(&path, &toml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(["check", "--config", &path.display().to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("routes.broken.panel: a judge needs at least one panellist"),
        "{err}"
    );
    assert!(
        err.contains("routes.broken.min_panel: must be at least 1"),
        "{err}"
    );
    let fixed = toml
        .replace("panel = []", "panel = [\"b\"]")
        .replace("min_panel = 0", "");
    std::fs::write(&path, fixed).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(["check", "--config", &path.display().to_string()])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("routes.council.synthesis: \"a\" is also on the panel"),
        "{text}"
    );
}

/// A real OpenAI client reads a judge's answer, whole and streamed.
#[tokio::test]
async fn async_openai_reads_a_judge_whole_and_streamed() {
    use async_openai::Client;
    use async_openai::config::OpenAIConfig;
    use async_openai::types::chat::{
        ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
    };
    use futures::StreamExt;

    let w = world(&judge("council", THREE, "syn", "def", ""));
    let client = Client::with_config(
        OpenAIConfig::new()
            .with_api_base(w.gw.v1())
            .with_api_key("unused"),
    );
    let request = |stream: bool| {
        CreateChatCompletionRequestArgs::default()
            .model("council")
            .stream(stream)
            .messages([ChatCompletionRequestUserMessageArgs::default()
                .content("what is 2+2?")
                .build()
                .unwrap()
                .into()])
            .build()
            .unwrap()
    };
    let whole = client.chat().create(request(false)).await.unwrap();
    assert_eq!(
        whole.choices[0].message.content.as_deref(),
        Some("Final: four.")
    );
    let usage = whole.usage.unwrap();
    assert_eq!(usage.prompt_tokens, 11 + 12 + 13 + 100 + 100 + 50);
    let mut stream = client.chat().create_stream(request(true)).await.unwrap();
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        if let Some(c) = chunk.choices.first().and_then(|c| c.delta.content.clone()) {
            text.push_str(&c);
        }
    }
    assert_eq!(text, "Final: four.");
}
