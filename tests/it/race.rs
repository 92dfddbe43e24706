//! Best-of-N races and first-of-N hedges: a gateway in front of `conclave
//! mock`, race routes over simulated candidates and judges. The tests of
//! timing (a perfect answer cancelling the rest, hedges, keepalives) run
//! in-process on paused time against the same simulator, so their figures
//! are exact.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::evil;
use common::world::closed_port;
use common::*;
use serde_json::{Value, json};
use tokio::time::Instant;

const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.fast-json]
reply = { text = "{\"n\": 4}" }
ttft = "50ms"

[upstreams.sim.models.bad-json]
reply = { text = "{\"n\": \"four\"}" }
ttft = "10ms"

[upstreams.sim.models.slow-json]
reply = { text = "{\"n\": 4, \"note\": \"slowly\"}" }
ttft = "1500ms"

[upstreams.sim.models.long-json]
reply = { text = "{\"n\": 4, \"why\": \"two and two make four, as anyone who counts on the fingers of one hand can see for themselves\"}" }
ttft = "50ms"

[upstreams.sim.models.dawdler]
reply = { text = "{\"n\": 4, \"why\": \"well, let me think about it for a long while before I say anything at all about sums\"}" }
ttft = "10ms"
tokens_per_second = 100

[upstreams.sim.models.cut]
reply = { text = "The answer is" }
finish_reason = "length"
ttft = "10ms"

[upstreams.sim.models.wordy]
reply = { text = "The answer, after careful thought and some consideration, is four." }
ttft = "10ms"

[upstreams.sim.models.terse]
reply = { text = "Four." }
ttft = "10ms"

[upstreams.sim.models.terse-too]
reply = { text = "Four!" }
ttft = "10ms"

[upstreams.sim.models.good-tool]
reply = { tool_call = { name = "calc", arguments = { n = 4 } } }

[upstreams.sim.models.bad-tool]
reply = { tool_call = { name = "calc", arguments = { n = "x" } } }

[upstreams.sim.models.down]
status = 503
error_message = "down for maintenance"

[upstreams.sim.models.fails-fast]
fail = "cut"

[upstreams.sim.models.scorer]
reply = { json = { score = 9, reason = "fine" } }

[[upstreams.sim.models.scorer.rules]]
when_contains = "careful thought"
then = { reply = { json = { score = 2, reason = "wordy" } } }

[upstreams.sim.models.garbage-scorer]
reply = { text = "I like it a lot" }
"#;

const MODELS: &[&str] = &[
    "fast-json",
    "long-json",
    "dawdler",
    "bad-json",
    "slow-json",
    "cut",
    "wordy",
    "terse",
    "terse-too",
    "good-tool",
    "bad-tool",
    "down",
    "fails-fast",
    "scorer",
    "garbage-scorer",
];

fn race(name: &str, candidates: &[&str], extra: &str) -> String {
    let c: Vec<String> = candidates.iter().map(|m| format!("\"{m}\"")).collect();
    format!(
        "[routes.{name}]\nstrategy = \"race\"\ncandidates = [{}]\nmax_candidates = 5\nbaseline_tokens_per_run = 100\n{extra}\n\n",
        c.join(", ")
    )
}

fn world(routes: &str) -> (Srv, Srv) {
    let mock = Srv::mock(MOCK);
    let gw = Srv::gateway(&front_of(&mock.v1(), MODELS, routes));
    (mock, gw)
}

/// The same world in-process: the mock is a `kind = "mock"` upstream of
/// the gateway, so under paused time every `ttft`, hedge and keepalive is
/// a tokio timer and the figures are exact.
fn world_in(routes: &str) -> inproc::Gw {
    let models: String = MODELS
        .iter()
        .map(|m| format!("[models.{m}]\nupstream = \"sim\"\n\n"))
        .collect();
    inproc::Gw::start(&format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n{MOCK}\n{models}{routes}"
    ))
}

fn candidate<'a>(ev: &'a [Value], model: &str) -> &'a Value {
    ev.iter()
        .find(|e| e["event"] == "race_candidate" && e["model"] == model)
        .unwrap_or_else(|| panic!("no race_candidate for {model}: {ev:?}"))
}

fn json_request(route: &str) -> Value {
    let schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let mut b = chat(route, "2+2 as JSON");
    b["response_format"] =
        json!({"type": "json_schema", "json_schema": {"name": "n", "schema": schema}});
    b
}

#[tokio::test]
async fn format_finish_and_length_pick_the_winner() {
    let routes = race(
        "json",
        &["bad-json", "fast-json"],
        "rubric = { format = 1 }\ncancel_on_perfect = false",
    ) + &race(
        "finish",
        &["cut", "wordy"],
        "rubric = { finish = 1 }\ncancel_on_perfect = false",
    ) + &race(
        "length",
        &["wordy", "terse"],
        "rubric = { length = 1 }\nlength_cap_tokens = 40",
    );
    let (_mock, gw) = world(&routes);
    let r = post(&gw.base, &json_request("json")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("fast-json"));
    assert!(
        r.header("x-conclave-race-score")
            .unwrap()
            .starts_with("1.000; format=1"),
        "{:?}",
        r.header("x-conclave-race-score")
    );
    let r = post(&gw.base, &chat("finish", "q")).await;
    assert_eq!(r.header("x-conclave-served-by"), Some("wordy"));
    let r = post(&gw.base, &chat("length", "q")).await;
    assert_eq!(r.header("x-conclave-served-by"), Some("terse"));
    let ev = gw.events_of(&["race_candidate"], 6).await;
    assert_eq!(
        candidate(&ev, "bad-json")["signals"]["format"],
        0.0,
        "{ev:?}"
    );
    assert_eq!(candidate(&ev, "bad-json")["verdict"], "loser");
    assert_eq!(candidate(&ev, "cut")["signals"]["finish"], 0.0);
    let m = gw.metrics().await;
    assert!(
        m.contains("conclave_race_score_count{route=\"json\",model=\"fast-json\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn tool_calls_are_checked_against_the_offered_tools() {
    let (_mock, gw) = world(&race(
        "tools",
        &["bad-tool", "good-tool"],
        "rubric = { format = 1 }",
    ));
    let mut b = chat("tools", "add");
    b["tools"] = json!([{"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}}]);
    let r = post(&gw.base, &b).await;
    assert_eq!(
        r.header("x-conclave-served-by"),
        Some("good-tool"),
        "{}",
        r.text
    );
    assert_eq!(
        r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "calc"
    );
}

#[tokio::test]
async fn a_judge_scores_blind_and_a_broken_scorer_only_zeroes_its_signal() {
    let routes = race(
        "judged",
        &["wordy", "terse"],
        "rubric = { judge = 1 }\njudge = \"scorer\"",
    ) + &race(
        "garbage",
        &["wordy", "terse"],
        "rubric = { judge = 0.5, length = 0.5 }\njudge = \"garbage-scorer\"",
    ) + &race(
        "hook",
        &["wordy", "terse"],
        &format!(
            "rubric = {{ webhook = 0.5, finish = 0.5 }}\nwebhook = {{ url = \"http://127.0.0.1:{}/score\", timeout = \"1s\" }}",
            closed_port()
        ),
    );
    let (mock, gw) = world(&routes);
    let r = post(&gw.base, &chat("judged", "q")).await;
    assert_eq!(
        r.header("x-conclave-served-by"),
        Some("terse"),
        "{}",
        r.text
    );
    let asked = mock.received().await;
    let judge_calls: Vec<&Value> = asked.iter().filter(|r| r["model"] == "scorer").collect();
    assert_eq!(judge_calls.len(), 2);
    for c in &judge_calls {
        let body = c["body"].to_string();
        assert!(
            !body.contains("wordy\"") && !body.contains("terse\""),
            "a model name reached the judge: {body}"
        );
    }
    let r = post(&gw.base, &chat("garbage", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = post(&gw.base, &chat("hook", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ev = gw.events_of(&["race_candidate"], 6).await;
    let garbage: Vec<&Value> = ev.iter().filter(|e| e["route"] == "garbage").collect();
    assert_eq!(garbage[0]["signals"]["judge"], 0.0);
    assert!(
        garbage[0]["scorer_errors"][0]
            .as_str()
            .unwrap()
            .contains("could not be read"),
        "{}",
        garbage[0]
    );
    let hook: Vec<&Value> = ev.iter().filter(|e| e["route"] == "hook").collect();
    assert!(
        hook[0]["scorer_errors"][0]
            .as_str()
            .unwrap()
            .starts_with("webhook:"),
        "{}",
        hook[0]
    );
}

#[tokio::test]
async fn ties_break_on_tokens_then_name_and_all_failing_is_a_502() {
    let routes = race(
        "tie",
        &["terse-too", "terse"],
        "rubric = { finish = 1 }\ncancel_on_perfect = false",
    ) + &race("doomed", &["down", "fails-fast"], "");
    let (_mock, gw) = world(&routes);
    for _ in 0..3 {
        let r = post(&gw.base, &chat("tie", "q")).await;
        assert_eq!(
            r.header("x-conclave-served-by"),
            Some("terse"),
            "{}",
            r.text
        );
    }
    let r = post(&gw.base, &chat("doomed", "q")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    let err = &r.json()["error"];
    assert_eq!(err["code"], "race_exhausted");
    assert_eq!(err["attempts"].as_array().unwrap().len(), 2, "{err}");
    // An upstream's 5xx text stays in the event log (issue 23, item 6).
    assert!(r.text.contains("failed (HTTP 503)"), "{}", r.text);
    assert!(!r.text.contains("down for maintenance"), "{}", r.text);
}

#[tokio::test]
async fn the_gates_downgrade_and_the_confirm_header_lets_a_race_run() {
    let routes = race(
        "gated",
        &["wordy", "terse"],
        "confirm_threshold_tokens = 100\nbudget_tokens = 100000",
    ) + &race("capped", &["wordy", "terse"], "budget_tokens = 100");
    let (_mock, gw) = world(&routes);
    let r = post(&gw.base, &chat("gated", "q")).await;
    assert_eq!(r.status, 200);
    let race_header = r.header("x-conclave-race").unwrap();
    assert!(
        race_header.starts_with("downgraded; reason=needs_confirmation; estimate="),
        "{race_header}"
    );
    assert_eq!(r.header("x-conclave-attempts"), Some("1"));
    let r = post_with(
        &gw.base,
        &chat("gated", "q"),
        &[("x-conclave-confirm", "yes")],
    )
    .await;
    assert_eq!(r.header("x-conclave-race"), None);
    assert_eq!(r.header("x-conclave-attempts"), Some("2"));
    let r = post_with(
        &gw.base,
        &chat("capped", "q"),
        &[("x-conclave-confirm", "yes")],
    )
    .await;
    assert!(
        r.header("x-conclave-race")
            .unwrap()
            .contains("reason=over_budget")
    );
    let ev = gw
        .events_of(&["race_downgraded", "race_confirm_requested"], 3)
        .await;
    assert_eq!(ev[0]["event"], "race_confirm_requested");
    assert_eq!(ev[1]["reason"], "needs_confirmation");
    assert_eq!(ev[2]["reason"], "over_budget");
    assert_eq!(ev[2]["budget_tokens"], 100);
    let m = gw.metrics().await;
    assert!(
        m.contains(
            "conclave_race_downgrades_total{route=\"gated\",reason=\"needs_confirmation\"} 1"
        ),
        "{m}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_perfect_candidate_cancels_the_slower_ones() {
    let gw = world_in(&race(
        "perfect",
        &["fast-json", "slow-json"],
        "rubric = { format = 1 }",
    ));
    let t = Instant::now();
    let r = gw.chat(&json_request("perfect")).await;
    assert_eq!(
        r.header("x-conclave-served-by"),
        Some("fast-json"),
        "{}",
        r.text
    );
    // fast-json's 50 ms, not slow-json's 1.5 s.
    assert_eq!(t.elapsed(), Duration::from_millis(50));
    // The slow candidate's upstream request was sent, then abandoned (its
    // server stopped generating), not finished.
    assert_eq!(gw.arrivals("sim"), ["fast-json", "slow-json"]);
    let ev = gw
        .events(&["race_finished", "race_candidate", "attempt"])
        .await;
    let finished = ev.iter().find(|e| e["event"] == "race_finished").unwrap();
    assert_eq!(finished["cancelled"], json!(["slow-json"]));
    let of = |kind: &str| {
        ev.iter()
            .find(|e| e["event"] == kind && e["model"] == "slow-json")
            .unwrap_or_else(|| panic!("no {kind} of slow-json: {ev:?}"))
    };
    assert_eq!(of("attempt")["verdict"], "cancelled");
    assert_eq!(of("race_candidate")["verdict"], "cancelled");
    assert_eq!(of("race_candidate")["generation_stopped"], true);
}

/// A cancelled candidate is credited only what it would still have
/// generated: the median finished answer's length, within its cap (the
/// request's, else its model's `max_tokens`), less what it had made.
#[tokio::test(start_paused = true)]
async fn tokens_saved_count_only_what_a_cancelled_candidate_had_left() {
    for cap in [None, Some(6)] {
        let gw = world_in(&race(
            "saving",
            &["long-json", "dawdler"],
            "rubric = { format = 1 }",
        ));
        let mut body = json_request("saving");
        if let Some(cap) = cap {
            body["max_tokens"] = json!(cap);
        }
        let r = gw.chat(&body).await;
        assert_eq!(
            r.header("x-conclave-served-by"),
            Some("long-json"),
            "{}",
            r.text
        );
        let ev = gw.events(&["race_finished", "race_candidate"]).await;
        let of = |model: &str| {
            ev.iter()
                .rev()
                .find(|e| e["event"] == "race_candidate" && e["model"] == model)
                .unwrap()
        };
        let (winner, loser) = (of("long-json"), of("dawdler"));
        assert_eq!(loser["verdict"], "cancelled");
        assert_eq!(loser["generation_stopped"], true);
        let median = winner["output_tokens"].as_u64().unwrap();
        // 40 ms of streaming at 100 tokens a second.
        let made = loser["output_tokens"].as_u64().unwrap();
        assert!(made > 0 && made < median, "{loser}");
        let fin = ev
            .iter()
            .rev()
            .find(|e| e["event"] == "race_finished")
            .unwrap();
        let saved = fin["tokens_saved_estimate"].as_u64().unwrap();
        let want =
            median.min(cap.unwrap_or(u64::MAX)) - made.min(median.min(cap.unwrap_or(u64::MAX)));
        assert_eq!(saved, want, "cap {cap:?}: {fin} {loser}");
        assert!(saved < median, "never the whole median: {fin}");
    }
}

#[tokio::test(start_paused = true)]
async fn first_of_n_takes_the_first_usable_answer() {
    let routes = race(
        "first",
        &["slow-json", "fails-fast", "fast-json"],
        "mode = \"first\"",
    ) + &race(
        "hedged",
        &["fast-json", "slow-json"],
        "mode = \"first\"\nhedge_delay = \"300ms\"",
    ) + &race(
        "late",
        &["slow-json", "fast-json"],
        "mode = \"first\"\nhedge_delay = \"200ms\"",
    );
    let gw = world_in(&routes);
    for stream in [false, true] {
        let body = if stream {
            chat_stream("first", "q")
        } else {
            chat("first", "q")
        };
        let t = Instant::now();
        let r = gw.chat(&body).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.header("x-conclave-served-by"),
            Some("fast-json"),
            "{}",
            r.text
        );
        assert_eq!(t.elapsed(), Duration::from_millis(50), "fast-json's 50 ms");
    }
    // A fast first candidate: the hedge never starts the second, even
    // once its delay is long past.
    let sim = gw.sim("sim");
    sim.clear_recorded();
    let r = gw.chat(&chat_stream("hedged", "q")).await;
    assert_eq!(r.header("x-conclave-served-by"), Some("fast-json"));
    tokio::time::advance(Duration::from_millis(400)).await;
    assert_eq!(gw.arrivals("sim"), ["fast-json"]);
    // A slow first candidate: the second starts after 200 ms and wins
    // 50 ms later.
    let t = Instant::now();
    let r = gw.chat(&chat_stream("late", "q")).await;
    assert_eq!(r.header("x-conclave-served-by"), Some("fast-json"));
    assert_eq!(t.elapsed(), Duration::from_millis(250));
    assert_eq!(gw.arrivals("sim"), ["fast-json", "slow-json", "fast-json"]);
}

/// A hedge whose first candidate fails at once starts the next one then,
/// not after `hedge_delay`.
#[tokio::test(start_paused = true)]
async fn a_hedge_moves_on_at_once_when_the_first_candidate_fails() {
    let gw = world_in(&race(
        "hedged",
        &["down", "fast-json"],
        "mode = \"first\"\nhedge_delay = \"3s\"",
    ));
    let t = Instant::now();
    let r = gw.chat(&chat_stream("hedged", "q")).await;
    assert_eq!(
        r.header("x-conclave-served-by"),
        Some("fast-json"),
        "{}",
        r.text
    );
    // `down` fails twice (its upstream retries it once, after a backoff
    // of at most 200 ms), then fast-json's 50 ms: never the 3 s hedge.
    let took = t.elapsed();
    assert!(
        (Duration::from_millis(50)..=Duration::from_millis(250)).contains(&took),
        "{took:?}"
    );
}

/// A streamed best-of race keeps the client alive, then replays the winner.
#[tokio::test(start_paused = true)]
async fn a_streamed_race_sends_keepalives_then_the_winner() {
    let gw = world_in(&race(
        "slow",
        &["wordy", "slow-json"],
        "rubric = { length = 1 }\ncancel_on_perfect = false\nkeepalive = \"120ms\"",
    ));
    let mut body = chat_stream("slow", "q");
    body["stream_options"] = json!({"include_usage": true});
    let t = Instant::now();
    let r = gw.chat(&body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // slow-json's 1.5 s, a keepalive every 120 ms while it ran (a
    // period that never ends with it, so no two timers tie).
    assert_eq!(t.elapsed(), Duration::from_millis(1500));
    assert!(r.text.starts_with(": keep-alive"), "{}", r.text);
    assert_eq!(r.text.matches(": keep-alive").count(), 12, "{}", r.text);
    let events = r.data_events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert!(
        r.text.contains("slowly"),
        "the shorter answer wins: {}",
        r.text
    );
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert!(
        usage["usage"]["prompt_tokens"].as_u64().unwrap() >= 2,
        "{usage}"
    );
}

/// Every candidate failing is a 502 that lists them, and an upstream that
/// echoes the gateway's key never gets it into the answer.
#[tokio::test]
async fn an_all_failing_race_never_leaks_the_upstream_key() {
    const KEY: &str = "sk-conclave-RACE-SECRET-0123456789";
    let evil_v1 = evil::start().await;
    let gw = Srv::gateway_env(
        &format!(
            "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n[upstreams.evil]\nkind = \"openai\"\nbase_url = \"{evil_v1}\"\napi_key_env = \"EVIL_KEY\"\ntimeout = \"2s\"\n\n[models.echo-500]\nupstream = \"evil\"\n\n[models.echo-error-body]\nupstream = \"evil\"\n\n{}",
            race("doomed", &["echo-500", "echo-error-body"], "")
        ),
        &[("EVIL_KEY", KEY)],
    );
    let r = post(&gw.base, &chat("doomed", "q")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "race_exhausted");
    assert!(!evil::leaks(&r.text, KEY), "{}", r.text);
    let log = std::fs::read_to_string(gw.path("events.jsonl")).unwrap_or_default();
    assert!(!evil::leaks(&log, KEY));
}

/// A webhook scorer sees the request and the candidate and its score
/// decides the race.
#[tokio::test]
async fn a_webhook_scores_the_candidates() {
    use axum::Json;
    use axum::routing::post as route_post;
    let app = axum::Router::new().route(
        "/score",
        route_post(|Json(v): Json<Value>| async move {
            let text = v["candidate"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let asked = v["request"]["messages"][0]["content"] == "q";
            Json(json!({"score": if asked && text.contains("careful") { 0.9 } else { 0.1 }}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/score", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (_mock, gw) = world(&race(
        "hook",
        &["terse", "wordy"],
        &format!("rubric = {{ webhook = 1 }}\nwebhook = {{ url = \"{url}\" }}"),
    ));
    let r = post(&gw.base, &chat("hook", "q")).await;
    assert_eq!(
        r.header("x-conclave-served-by"),
        Some("wordy"),
        "{}",
        r.text
    );
    assert_eq!(
        r.header("x-conclave-race-score"),
        Some("0.900; webhook=0.9")
    );
}

#[test]
fn check_refuses_a_bad_rubric_and_a_missing_judge() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let toml = "[upstreams.sim]\nkind = \"mock\"\n\n[models.a]\nupstream = \"sim\"\n\n".to_owned()
        + &race("neg", &["a"], "rubric = { judge = -1, finish = 1 }")
        + &race("unknown", &["a"], "rubric = { vibes = 1 }")
        + &race("zero", &["a"], "rubric = { finish = 0 }")
        + &race("nojudge", &["a"], "rubric = { judge = 1 }")
        + &race("hedgebest", &["a"], "hedge_delay = \"1s\"");
    std::fs::write(&path, toml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(["check", "--config", &path.display().to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for want in [
        "routes.neg.rubric.judge: a weight must be a number ≥ 0",
        "routes.unknown.rubric.vibes: unknown signal",
        "routes.zero.rubric: every weight is 0",
        "routes.nojudge.judge: the rubric weighs `judge`",
        "routes.hedgebest.hedge_delay: applies to mode = \"first\" only",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
}
