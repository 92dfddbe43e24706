//! Self-consistency votes (`strategy = "vote"`): an in-process gateway on
//! paused time in front of a `kind = "mock"` upstream, so every `ttft` is
//! a tokio timer and the order samples finish in is exact. `conclave
//! check` runs as the binary (the command line is the point there).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use tokio::time::Instant;

/// Every simulated model answers with a fixed usage, so the sums are exact.
const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.seven]
reply = { text = "3 + 4 = 7. Answer: 7" }
ttft = "10ms"
usage = { prompt_tokens = 10, completion_tokens = 4 }

[upstreams.sim.models.eight]
reply = { text = "I get 8." }
ttft = "20ms"
usage = { prompt_tokens = 10, completion_tokens = 4 }

[upstreams.sim.models.seven-too]
reply = { text = "Counting again, it is 7 in all." }
ttft = "30ms"
usage = { prompt_tokens = 10, completion_tokens = 4 }

[upstreams.sim.models.roll]
usage = { prompt_tokens = 10, completion_tokens = 4 }
[[upstreams.sim.models.roll.rules]]
when_call = [1]
then = { reply = { text = "Answer: 4" }, ttft = "10ms" }
[[upstreams.sim.models.roll.rules]]
when_call = [2]
then = { reply = { text = "Answer: 5" }, ttft = "20ms" }
[[upstreams.sim.models.roll.rules]]
when_call = [3]
then = { reply = { text = "The answer is 4!" }, ttft = "30ms" }
[[upstreams.sim.models.roll.rules]]
when_call = [4]
then = { reply = { text = "5, I think" }, ttft = "40ms" }
[[upstreams.sim.models.roll.rules]]
when_call = [5]
then = { reply = { text = "answer: 4" }, ttft = "50ms" }

[upstreams.sim.models.steady]
reply = { text = "It is 4, so Answer: 4" }
usage = { prompt_tokens = 10, completion_tokens = 4 }
[[upstreams.sim.models.steady.rules]]
when_call = [1, 6]
then = { ttft = "10ms" }
[[upstreams.sim.models.steady.rules]]
when_call = [2, 7]
then = { ttft = "20ms" }
[[upstreams.sim.models.steady.rules]]
when_call = [3, 8]
then = { ttft = "30ms" }
[[upstreams.sim.models.steady.rules]]
when_call = [4, 5, 9, 10]
then = { ttft = "2s" }

[upstreams.sim.models.one]
reply = { text = "Answer: 1" }
ttft = "10ms"

[upstreams.sim.models.two]
reply = { text = "Answer: 2" }
ttft = "20ms"

[upstreams.sim.models.slow-two]
reply = { text = "Answer: 2" }
ttft = "1s"

[upstreams.sim.models.num-fast]
reply = { text = "Maybe 9?" }
ttft = "5ms"
[upstreams.sim.models.num-a]
reply = { text = "So 3 + 4 = 7" }
ttft = "10ms"
[upstreams.sim.models.num-b]
reply = { text = "The total is 7 apples." }
ttft = "20ms"

[upstreams.sim.models.json-fast]
reply = { text = "{\"answer\": \"Rome\"}" }
ttft = "5ms"
[upstreams.sim.models.json-a]
reply = { text = "Sure: {\"answer\": \"Paris\", \"why\": \"capital\"}" }
ttft = "10ms"
[upstreams.sim.models.json-b]
reply = { text = "```json\n{\"answer\": \"paris\"}\n```" }
ttft = "20ms"

[upstreams.sim.models.after-fast]
reply = { text = "Answer: Rome" }
ttft = "5ms"
[upstreams.sim.models.after-a]
reply = { text = "Rome? No.\nFinal ANSWER: **Paris**" }
ttft = "10ms"
[upstreams.sim.models.after-b]
reply = { text = "answer: paris." }
ttft = "20ms"

[upstreams.sim.models.re-fast]
reply = { text = "final: rome" }
ttft = "5ms"
[upstreams.sim.models.re-a]
reply = { text = "draft: rome\nFINAL: Paris!" }
ttft = "10ms"
[upstreams.sim.models.re-b]
reply = { text = "final: paris, surely" }
ttft = "20ms"

[upstreams.sim.models.text-fast]
reply = { text = "Rome" }
ttft = "5ms"
[upstreams.sim.models.text-a]
reply = { text = "  Paris. " }
ttft = "10ms"
[upstreams.sim.models.text-b]
reply = { text = "paris" }
ttft = "20ms"

[upstreams.sim.models.shrug-a]
reply = { text = "No idea." }
ttft = "10ms"
[upstreams.sim.models.shrug-b]
reply = { text = "no  idea" }
ttft = "20ms"

[upstreams.sim.models.down]
status = 503
error_message = "down for maintenance"

[upstreams.sim.models.fails-fast]
fail = "cut"
"#;

const MODELS: &[&str] = &[
    "seven",
    "eight",
    "seven-too",
    "roll",
    "steady",
    "one",
    "two",
    "slow-two",
    "num-fast",
    "num-a",
    "num-b",
    "json-fast",
    "json-a",
    "json-b",
    "after-fast",
    "after-a",
    "after-b",
    "re-fast",
    "re-a",
    "re-b",
    "text-fast",
    "text-a",
    "text-b",
    "shrug-a",
    "shrug-b",
    "down",
    "fails-fast",
];

/// A vote route over `members` (several), with `extra` keys.
fn vote(name: &str, members: &[&str], extra: &str) -> String {
    let m: Vec<String> = members.iter().map(|m| format!("\"{m}\"")).collect();
    format!(
        "[routes.{name}]\nstrategy = \"vote\"\nmembers = [{}]\n{extra}\n\n",
        m.join(", ")
    )
}

fn world(routes: &str) -> inproc::Gw {
    let models: String = MODELS
        .iter()
        .map(|m| format!("[models.{m}]\nupstream = \"sim\"\n\n"))
        .collect();
    inproc::Gw::start(&format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n{MOCK}\n{models}{routes}"
    ))
}

fn content(r: &Resp) -> String {
    r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no content: {}", r.text))
        .to_owned()
}

fn finished(ev: &[Value]) -> Vec<&Value> {
    ev.iter()
        .filter(|e| e["event"] == "vote_finished")
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_most_common_answer_wins_and_its_first_sample_is_returned_whole() {
    let gw = world(&vote(
        "maj",
        &["eight", "seven", "seven-too"],
        "extract = \"number\"",
    ));
    let t = Instant::now();
    let r = gw.chat(&chat("maj", "3 + 4?")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Every sample had to be in: 7 and 8 were tied until the last.
    assert_eq!(t.elapsed(), Duration::from_millis(30));
    assert_eq!(r.header("x-conclave-served-by"), Some("seven"));
    assert_eq!(r.header("x-conclave-strategy"), Some("vote"));
    assert_eq!(r.header("x-conclave-vote"), Some("2/3"));
    // The winner's text, as its model wrote it.
    assert_eq!(content(&r), "3 + 4 = 7. Answer: 7");
    // Usage counts every sample.
    let usage = &r.json()["usage"];
    assert_eq!(usage["prompt_tokens"], 30, "{usage}");
    assert_eq!(usage["completion_tokens"], 12, "{usage}");
    assert_eq!(usage["total_tokens"], 42, "{usage}");

    let m = gw.metrics();
    assert!(
        m.contains("conclave_vote_agreement_bucket{route=\"maj\",le=\"0.6\"} 0"),
        "{m}"
    );
    assert!(
        m.contains("conclave_vote_agreement_bucket{route=\"maj\",le=\"0.7\"} 1"),
        "{m}"
    );
    assert!(m.contains("# HELP conclave_vote_agreement "), "{m}");

    let ev = gw.events(&["vote_finished", "attempt"]).await;
    let f = finished(&ev);
    assert_eq!(f.len(), 1, "{ev:?}");
    let f = f[0];
    assert_eq!(f["answers"], json!(["8", "7", "7"]));
    // In the order the answers first came in.
    assert_eq!(f["counts"], json!({"7": 2, "8": 1}));
    assert_eq!(
        serde_json::to_string(&f["counts"]).unwrap(),
        r#"{"7":2,"8":1}"#
    );
    assert_eq!(f["winner"], "7");
    assert_eq!(f["winner_sample"], 1);
    assert!((f["agreement"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-9);
    assert_eq!(f["cancelled"], 0);
    assert_eq!(f["failed"], 0);
    assert_eq!(f["models"], json!(["eight", "seven", "seven-too"]));
    let verdict = |model: &str| {
        ev.iter()
            .find(|e| e["event"] == "attempt" && e["model"] == model)
            .map(|e| (e["verdict"].clone(), e["role"].clone()))
            .unwrap_or_else(|| panic!("no attempt of {model}: {ev:?}"))
    };
    assert_eq!(verdict("seven"), (json!("winner"), json!("candidate")));
    assert_eq!(verdict("seven-too").0, "ok");
    assert_eq!(verdict("eight").0, "loser");
}

/// One model sampled `samples` times, at the route's temperature unless the
/// request sets one; a request's `seed` moves on by sample.
#[tokio::test(start_paused = true)]
async fn one_model_is_sampled_at_the_route_temperature() {
    let gw = world(
        "[routes.sc]\nstrategy = \"vote\"\nmodel = \"roll\"\nsamples = 5\nextract = \"number\"\n\
         temperature = 0.7\nearly_stop = false\n",
    );
    let r = gw.chat(&chat("sc", "2 + 2?")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-vote"), Some("3/5"));
    // The first sample to say 4 finished first (10 ms).
    assert_eq!(content(&r), "Answer: 4");
    let asked = gw.asked("sim", "roll");
    assert_eq!(asked.len(), 5);
    for body in &asked {
        assert_eq!(body["temperature"], 0.7, "{body}");
    }

    let sim = gw.sim("sim");
    sim.clear_recorded();
    let mut body = chat("sc", "2 + 2?");
    body["temperature"] = json!(0.2);
    body["seed"] = json!(40);
    let r = gw.chat(&body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let asked = gw.asked("sim", "roll");
    let mut seeds: Vec<i64> = asked.iter().map(|b| b["seed"].as_i64().unwrap()).collect();
    seeds.sort_unstable();
    assert_eq!(seeds, [40, 41, 42, 43, 44]);
    assert!(asked.iter().all(|b| b["temperature"] == 0.2), "{asked:?}");

    // `n` other than 1 is the client's error.
    let mut body = chat("sc", "q");
    body["n"] = json!(3);
    let r = gw.chat(&body).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"]["param"], "n");
    // An unset (null) or 1 is the one choice a vote gives (`1.0` is the
    // ingress's 400 before any route sees it).
    for n in [json!(null), json!(1)] {
        sim.clear_recorded();
        let mut body = chat("sc", "2 + 2?");
        body["n"] = n.clone();
        let r = gw.chat(&body).await;
        assert_eq!(r.status, 200, "n = {n}: {}", r.text);
        let asked = gw.asked("sim", "roll");
        assert!(asked.iter().all(|b| b.get("n").is_none()), "{asked:?}");
    }
}

/// Each extractor, on three members whose texts differ: the fastest
/// disagrees, and the other two agree only once the answer is extracted.
#[tokio::test(start_paused = true)]
async fn each_extractor_reads_the_final_answer() {
    let routes = vote(
        "num",
        &["num-fast", "num-a", "num-b"],
        "extract = \"number\"",
    ) + &vote("num-text", &["num-fast", "num-a", "num-b"], "")
        + &vote(
            "json",
            &["json-fast", "json-a", "json-b"],
            "extract = \"json:answer\"",
        )
        + &vote(
            "after",
            &["after-fast", "after-a", "after-b"],
            "extract = \"after:answer:\"",
        )
        + &vote(
            "re",
            &["re-fast", "re-a", "re-b"],
            "extract = 'regex:(?i)final: (\\w+)'",
        )
        + &vote("text", &["text-fast", "text-a", "text-b"], "")
        + &vote(
            "fallback",
            &["num-fast", "shrug-a", "shrug-b"],
            "extract = \"number\"",
        );
    let gw = world(&routes);
    for (route, served, vote) in [
        ("num", "num-a", "2/3"),
        // Compared whole, all three differ: the first to finish.
        ("num-text", "num-fast", "1/3"),
        ("json", "json-a", "2/3"),
        ("after", "after-a", "2/3"),
        ("re", "re-a", "2/3"),
        ("text", "text-a", "2/3"),
        // No number in two answers: their normalised texts agree.
        ("fallback", "shrug-a", "2/3"),
    ] {
        let r = gw.chat(&chat(route, "q")).await;
        assert_eq!(r.status, 200, "{route}: {}", r.text);
        assert_eq!(r.header("x-conclave-served-by"), Some(served), "{route}");
        assert_eq!(r.header("x-conclave-vote"), Some(vote), "{route}");
    }
    let ev = gw.events(&["vote_finished"]).await;
    let winners: Vec<&Value> = ev.iter().map(|e| &e["winner"]).collect();
    assert_eq!(
        winners,
        [
            "7", "maybe 9", "paris", "paris", "paris", "paris", "no idea"
        ]
    );
    let fallback = ev.last().unwrap();
    assert_eq!(fallback["answers"], json!(["9", "no idea", "no idea"]));
    assert_eq!(fallback["not_extracted"], 2);
}

#[tokio::test(start_paused = true)]
async fn ties_go_to_the_first_answer_or_to_the_named_member() {
    let routes = vote("first", &["one", "two"], "early_stop = false")
        + &vote("named", &["one", "two"], "tie_break = \"two\"")
        + &vote("early", &["one", "two"], "");
    let gw = world(&routes);
    let r = gw.chat(&chat("first", "q")).await;
    assert_eq!(r.header("x-conclave-served-by"), Some("one"), "{}", r.text);
    assert_eq!(r.header("x-conclave-vote"), Some("1/2"));
    // A tie broken by a member waits for it (a lead of one is not strict).
    let t = Instant::now();
    let r = gw.chat(&chat("named", "q")).await;
    assert_eq!(r.header("x-conclave-served-by"), Some("two"), "{}", r.text);
    assert_eq!(content(&r), "Answer: 2");
    assert_eq!(t.elapsed(), Duration::from_millis(20));
    // Ties going to the first: with two samples the first answer is
    // already decided, and the second is cancelled.
    let t = Instant::now();
    let r = gw.chat(&chat("early", "q")).await;
    assert_eq!(r.header("x-conclave-served-by"), Some("one"), "{}", r.text);
    assert_eq!(t.elapsed(), Duration::from_millis(10));
    let ev = gw.events(&["vote_finished"]).await;
    assert_eq!(ev[2]["cancelled"], 1, "{ev:?}");
    assert_eq!(ev[2]["answers"], json!(["answer: 1", null]));
}

/// Three of five agreeing: the two samples still running are cancelled,
/// their attempts `cancelled`, their tokens never generated.
#[tokio::test(start_paused = true)]
async fn early_stop_cancels_the_samples_that_cannot_change_the_winner() {
    let route = |name: &str, early: bool| {
        format!(
            "[routes.{name}]\nstrategy = \"vote\"\nmodel = \"steady\"\nsamples = 5\n\
             extract = \"after:answer:\"\nearly_stop = {early}\n\n"
        )
    };
    let gw = world(&(route("stop", true) + &route("all", false)));
    let t = Instant::now();
    let r = gw.chat(&chat("stop", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(t.elapsed(), Duration::from_millis(30));
    assert_eq!(r.header("x-conclave-vote"), Some("3/3"));
    let stopped = r.json()["usage"]["completion_tokens"].as_u64().unwrap();
    // Every sample went out as a stream, so dropping one stopped its
    // server's generation.
    let asked = gw.asked("sim", "steady");
    assert_eq!(asked.len(), 5);
    assert!(asked.iter().all(|b| b["stream"] == true), "{asked:?}");

    let t = Instant::now();
    let r = gw.chat(&chat("all", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(t.elapsed(), Duration::from_secs(2));
    assert_eq!(r.header("x-conclave-vote"), Some("5/5"));
    let all = r.json()["usage"]["completion_tokens"].as_u64().unwrap();
    assert_eq!(all, 5 * 4);
    assert!(stopped < all, "{stopped} of {all}");

    let ev = gw.events(&["vote_finished", "attempt"]).await;
    let f = finished(&ev);
    assert_eq!(f[0]["cancelled"], 2, "{:?}", f[0]);
    assert_eq!(f[0]["answers"], json!(["4", "4", "4", null, null]));
    assert_eq!(f[0]["counts"], json!({"4": 3}));
    assert_eq!(f[0]["agreement"], 1.0);
    assert_eq!(f[1]["cancelled"], 0);
    let verdicts: Vec<&str> = ev
        .iter()
        .filter(|e| e["event"] == "attempt")
        .map(|e| e["verdict"].as_str().unwrap())
        .collect();
    let count = |v: &str| verdicts.iter().filter(|x| **x == v).count();
    assert_eq!(count("cancelled"), 2, "{verdicts:?}");
    assert_eq!(count("winner"), 2, "{verdicts:?}");
    assert_eq!(count("ok"), 2 + 4, "{verdicts:?}");
}

/// Streamed: keep-alives while the samples run, then the winner replayed,
/// its usage the whole vote's.
#[tokio::test(start_paused = true)]
async fn a_streamed_vote_keeps_alive_then_replays_the_winner() {
    let gw = world(&vote(
        "slow",
        &["one", "slow-two", "two"],
        "extract = \"after:answer:\"\nkeepalive = \"120ms\"",
    ));
    let mut body = chat_stream("slow", "q");
    body["stream_options"] = json!({"include_usage": true});
    let t = Instant::now();
    let r = gw.chat(&body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // slow-two's 1 s decides it; a keep-alive every 120 ms till then.
    assert_eq!(t.elapsed(), Duration::from_secs(1));
    assert!(r.text.starts_with(": keep-alive"), "{}", r.text);
    assert_eq!(r.text.matches(": keep-alive").count(), 8, "{}", r.text);
    let events = r.data_events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let text: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    // "2" twice beats "1": two's answer, the first to say it.
    assert_eq!(text, "Answer: 2");
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert!(
        usage["usage"]["prompt_tokens"].as_u64().unwrap() >= 3,
        "{usage}"
    );
    assert!(r.text.contains("x-conclave-served-by: two"), "{}", r.text);
}

/// Other dialects get the vote as they get any strategy.
#[tokio::test(start_paused = true)]
async fn the_messages_and_responses_dialects_get_the_winner() {
    let gw = world(&vote(
        "maj",
        &["eight", "seven", "seven-too"],
        "extract = \"number\"",
    ));
    let body = json!({
        "model": "maj", "max_tokens": 100,
        "messages": [{"role": "user", "content": "3 + 4?"}]
    });
    let r = gw.post_with("/v1/messages", &body, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["content"][0]["text"], "3 + 4 = 7. Answer: 7");
    assert_eq!(r.json()["usage"]["input_tokens"], 30, "{}", r.text);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = gw.post_with("/v1/messages", &streamed, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("event: message_stop"), "{}", r.text);
    assert!(r.text.contains("Answer: 7"), "{}", r.text);

    let body = json!({"model": "maj", "input": "3 + 4?", "store": false});
    let r = gw.post_with("/v1/responses", &body, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["output_text"],
        "3 + 4 = 7. Answer: 7",
        "{}",
        r.text
    );
    let body = json!({"model": "maj", "input": "3 + 4?", "store": false, "stream": true});
    let r = gw.post_with("/v1/responses", &body, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("event: response.completed"), "{}", r.text);
    assert!(r.text.contains("Answer: 7"), "{}", r.text);
}

#[tokio::test(start_paused = true)]
async fn every_sample_failing_is_a_502_that_lists_them() {
    let gw = world(&vote("doomed", &["down", "fails-fast"], ""));
    let r = gw.chat(&chat("doomed", "q")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    let err = &r.json()["error"];
    assert_eq!(err["code"], "vote_exhausted", "{err}");
    assert_eq!(err["attempts"].as_array().unwrap().len(), 2, "{err}");
    assert!(!r.text.contains("down for maintenance"), "{}", r.text);
    let ev = gw.events(&["vote_finished"]).await;
    assert_eq!(ev[0]["answers"], json!([null, null]));
    assert_eq!(ev[0]["winner"], Value::Null);
    assert_eq!(ev[0]["failed"], 2);
    assert!(
        !gw.metrics()
            .contains("conclave_vote_agreement_count{route=\"doomed\"}")
    );
}

/// A failed sample has no answer; the others still vote.
#[tokio::test(start_paused = true)]
async fn a_failed_sample_counts_as_no_answer() {
    // Without early stop: `down` fails after a random backoff, and failing
    // before eight answers it would leave seven's lead decided.
    let gw = world(&vote(
        "some",
        &["down", "seven", "eight"],
        "extract = \"number\"\nearly_stop = false",
    ));
    let r = gw.chat(&chat("some", "q")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("seven"));
    assert_eq!(r.header("x-conclave-vote"), Some("1/2"));
    let ev = gw.events(&["vote_finished"]).await;
    assert_eq!(ev[0]["answers"], json!([null, "7", "8"]));
    assert_eq!(ev[0]["agreement"], 0.5);
}

#[tokio::test(start_paused = true)]
async fn a_pin_calls_one_member_alone() {
    let gw = world(&vote("maj", &["eight", "seven", "seven-too"], ""));
    let r = gw
        .chat_with(&chat("maj", "q"), &[("x-conclave-pin", "eight")])
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(content(&r), "I get 8.");
    assert_eq!(gw.arrivals("sim"), ["eight"]);
    let r = gw
        .chat_with(&chat("maj", "q"), &[("x-conclave-pin", "nine")])
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("members: eight, seven, seven-too"),
        "{}",
        r.text
    );
}

#[test]
fn eval_baselines_put_a_vote_beside_its_strongest_member() {
    let config = r#"
[models.small]
upstream = "u"
price = { input_per_mtok = 0.1, output_per_mtok = 0.4 }
[models.large]
upstream = "u"
price = { input_per_mtok = 3, output_per_mtok = 15 }
[routes.sc]
strategy = "vote"
members = ["small", "large"]
[routes.one]
strategy = "vote"
model = "small"
samples = 7
"#;
    let routes = vec!["sc".to_string(), "one".to_string()];
    let (_, all, notes) = conclave::eval::baselines::add(config, &routes).unwrap();
    assert!(all.contains(&"large".to_string()), "{all:?}");
    assert!(all.contains(&"small".to_string()), "{all:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("`large`: the strongest member of `sc`")),
        "{notes:?}"
    );
}

fn check(text: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const CHECK_MODELS: &str = "[upstreams.sim]\nkind = \"mock\"\n\n[models.a]\nupstream = \"sim\"\n\n\
                            [models.b]\nupstream = \"sim\"\n\n";

#[test]
fn check_shows_a_vote_and_names_every_bad_key() {
    let good = format!(
        "{CHECK_MODELS}[routes.sc]\nstrategy = \"vote\"\nmodel = \"a\"\ntemperature = 0.0\n\n\
         [routes.mix]\nstrategy = \"vote\"\nmembers = [\"a\", \"b\"]\nsamples = 4\n\
         extract = \"json:/answer\"\ntie_break = \"b\"\n"
    );
    let (code, out, err) = check(&good);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("vote of 5 sample(s) over [a] extract text ; ties to the first answer ; early_stop on ; temperature 0"),
        "{out}"
    );
    assert!(
        out.contains("vote of 4 sample(s) over [a, b] extract json:/answer ; ties to b"),
        "{out}"
    );
    assert!(
        (out.clone() + &err).contains("routes.sc.temperature: one model sampled at temperature 0"),
        "{out}\n{err}"
    );

    let bad = format!(
        "{CHECK_MODELS}[routes.both]\nstrategy = \"vote\"\nmodel = \"a\"\nmembers = [\"a\"]\n\n\
         [routes.none]\nstrategy = \"vote\"\n\n\
         [routes.many]\nstrategy = \"vote\"\nmembers = [\"a\", \"b\", \"a\"]\nsamples = 33\n\
         extract = \"regex:(\"\ntie_break = \"c\"\ntemperature = 3\n\n\
         [routes.few]\nstrategy = \"vote\"\nmembers = [\"a\", \"b\"]\nsamples = 1\n\
         extract = \"last_number\"\n\n\
         [routes.ghost]\nstrategy = \"vote\"\nmembers = [\"a\", \"zed\"]\nkeepalive = \"0s\"\n"
    );
    let (code, out, err) = check(&bad);
    assert_eq!(code, 2, "{out}\n{err}");
    for line in [
        "routes.both.model: set `model` (one model sampled `samples` times) or `members`, not both",
        "routes.none.members: a vote needs `members` (or one `model` to sample)",
        "routes.many.members[2]: \"a\" is already a member",
        "routes.many.samples: must be from 1 to 32",
        "routes.many.extract: the pattern does not compile",
        "routes.many.tie_break: \"c\" is not a member (expected \"first\" or one of: a, b, a)",
        "routes.many.temperature: must be a number from 0 to 2",
        "routes.few.samples: is 1 but there are 2 members: members[1..] would never be asked",
        "routes.few.extract: unknown extractor \"last_number\"",
        "routes.ghost.members[1]: unknown model \"zed\"",
        "routes.ghost.keepalive: must be greater than 0",
    ] {
        assert!(err.contains(line), "missing {line:?} in:\n{err}");
    }
}

/// The README's example: the demo's `sc` route.
#[tokio::test(start_paused = true)]
async fn the_demo_vote_agrees_on_42() {
    let gw = inproc::Gw::demo();
    let r = gw.chat(&chat("sc", "What is 6 times 7?")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-vote"), Some("3/5"));
    assert_eq!(r.header("x-conclave-served-by"), Some("sampler"));
    assert_eq!(content(&r), "Step by step: 6 times 7 is 42. Answer: 42");
    // Calls 6 to 10: one 48 first, then four 42s at once. The third 42
    // decides the vote; the fourth, already in, is counted, not cancelled.
    let r = gw.chat(&chat("sc", "What is 6 times 7?")).await;
    assert_eq!(r.header("x-conclave-vote"), Some("4/5"), "{}", r.text);
    let ev = gw.events(&["vote_finished"]).await;
    assert_eq!(ev[1]["cancelled"], 0, "{ev:?}");
}

/// The vote's metric is recorded on its gateway's own recorder, never the
/// global one (where it would be lost).
#[tokio::test(start_paused = true)]
async fn the_agreement_is_recorded_on_the_instance() {
    conclave::sink::Strays::install();
    let gw = world(&vote("maj", &["eight", "seven", "seven-too"], ""));
    for body in [chat("maj", "q"), chat_stream("maj", "q")] {
        assert_eq!(gw.chat(&body).await.status, 200);
    }
    assert!(
        gw.metrics()
            .contains("conclave_vote_agreement_count{route=\"maj\"} 2"),
        "{}",
        gw.metrics()
    );
    assert_eq!(conclave::sink::strays(), 0);
}
