//! Mid-stream failover (`midstream_failover = true` on a chain): a stream
//! cut after text reached the client goes on at the next tier, spliced so
//! the client's text is the canonical answer exactly (no word repeated or
//! lost at the seam), with one usage chunk counting both attempts and both
//! attempts in the event log. A cut inside a tool call ends with a clean
//! error event; without the option, the old error event stays.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::world::streamed_text;
use common::*;
use serde_json::{Value, json};

const TEXT: &str =
    "The quick brown fox jumps over the lazy dog. Then it naps, dreaming of rabbits.";
/// An answer the continuing models below start over (as a small real
/// model did): `restarter` word for word, `paraphraser` in other words.
const ROME: &str = "Rome, Italy's capital city, has a rich and storied history that dates back more than two and a half thousand years.";
const PARAPHRASE: &str = "Rome, Italy's capital city, has a storied history that dates back more than two and a half thousand years.";

/// The HTTP mock behind the `far` upstream (an OpenAI-compatible server:
/// no prefill, so its continuations are asked with an instruction).
fn far_mock() -> Srv {
    Srv::mock(&format!(
        r#"
[upstreams.far]
kind = "mock"

[upstreams.far.models.writer]
reply = {{ text = "{TEXT}" }}
{rules}

[upstreams.far.models.scribe]
reply = {{ text = "{TEXT}" }}
continue_repeats = 1

[upstreams.far.models.broken]
reply = {{ text = "{TEXT}" }}
continue_repeats = 1
fail_after_chars = 8

[upstreams.far.models.roman]
reply = {{ text = "{ROME}" }}

[[upstreams.far.models.roman.rules]]
when_contains = "[rome 63]"
then = {{ fail_after_chars = 63 }}

[[upstreams.far.models.roman.rules]]
when_contains = "[rome 55]"
then = {{ fail_after_chars = 55 }}

[upstreams.far.models.down]
status = 503

[upstreams.far.models.tooler]
reply = {{ tool_call = {{ name = "get_weather", arguments = {{ city = "Paris", unit = "celsius", days = 3 }} }} }}
fail_after_chars = 12
"#,
        rules = [3, 10, 13, 44, 45, 60]
            .iter()
            .map(|n| format!(
                "[[upstreams.far.models.writer.rules]]\nwhen_contains = \"[cut {n}]\"\nthen = {{ fail_after_chars = {n} }}\n\
                 [[upstreams.far.models.writer.rules]]\nwhen_contains = \"[stall {n}]\"\nthen = {{ fail_after_chars = {n}, fail = \"hang\" }}\n\
                 [[upstreams.far.models.writer.rules]]\nwhen_contains = \"[error {n}]\"\nthen = {{ fail_after_chars = {n}, fail = \"error_event\" }}\n"
            ))
            .collect::<String>(),
    ))
}

fn gateway(far: &Srv) -> Srv {
    Srv::gateway(&format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"

[upstreams.far]
kind = "openai"
base_url = "{far}"
timeout = "20s"
stream_idle_timeout = "1s"
# Its streams are cut on purpose, more often than `eject.after`.
eject = false

[upstreams.near]
kind = "mock"

[upstreams.near.models.heir]
reply = {{ text = "{TEXT}" }}
continue_repeats = 2

# No `continue_repeats`: asked to continue, they answer from the top.
[upstreams.near.models.restarter]
reply = {{ text = "{ROME}" }}

[upstreams.near.models.paraphraser]
reply = {{ text = "{PARAPHRASE}" }}

[upstreams.claude]
kind = "mock"
api = "anthropic"

[upstreams.claude.models.bard]
reply = {{ text = "{TEXT}" }}
continue_repeats = 0

[models.heir]
upstream = "near"
[models.bard]
upstream = "claude"
[models.writer]
upstream = "far"
[models.roman]
upstream = "far"
[models.restarter]
upstream = "near"
[models.paraphraser]
upstream = "near"
[models.scribe]
upstream = "far"
[models.broken]
upstream = "far"
[models.down]
upstream = "far"
[models.tooler]
upstream = "far"

# Every request here is cut on purpose: the budget lets each continue.
[routes.story]
strategy = "chain"
retry_budget = {{ ratio = 1.0, min = 20 }}
tiers = ["writer", "heir"]
midstream_failover = true

[routes.sung]
strategy = "chain"
retry_budget = {{ ratio = 1.0, min = 20 }}
tiers = ["writer", "bard"]
midstream_failover = true

[routes.told]
strategy = "chain"
retry_budget = {{ ratio = 1.0, min = 20 }}
tiers = ["writer", "scribe"]
midstream_failover = true

[routes.twice]
strategy = "chain"
retry_budget = {{ ratio = 1.0, min = 20 }}
tiers = ["writer", "down", "broken", "heir"]
midstream_failover = true

[routes.doomed]
strategy = "chain"
retry_budget = {{ ratio = 1.0, min = 20 }}
tiers = ["writer", "down", "broken"]
midstream_failover = true

[routes.tools]
strategy = "chain"
tiers = ["tooler", "heir"]
midstream_failover = true

[routes.restarted]
strategy = "chain"
retry_budget = {{ ratio = 1.0, min = 20 }}
tiers = ["roman", "restarter"]
midstream_failover = true

[routes.paraphrased]
strategy = "chain"
retry_budget = {{ ratio = 1.0, min = 20 }}
tiers = ["roman", "paraphraser"]
midstream_failover = true

[routes.plain]
strategy = "chain"
tiers = ["writer", "heir"]
"#,
        far = far.v1()
    ))
}

fn ask(route: &str, marker: &str) -> Value {
    let mut body = chat_stream(route, &format!("Tell me about the fox. {marker}"));
    body["stream_options"] = json!({"include_usage": true});
    body
}

fn parsed(resp: &Resp) -> Vec<Value> {
    resp.data_events()
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

/// The client saw one stream: one id, one model, one role delta, choice
/// 0 only, and one usage chunk (returned).
fn one_stream(resp: &Resp) -> Value {
    let events = parsed(resp);
    let id = &events[0]["id"];
    let model = &events[0]["model"];
    let mut usage = Vec::new();
    let mut roles = 0;
    for e in &events {
        assert!(e.get("error").is_none(), "an error event: {}", resp.text);
        assert_eq!(&e["id"], id, "{}", resp.text);
        assert_eq!(&e["model"], model, "{}", resp.text);
        for c in e["choices"].as_array().unwrap() {
            assert_eq!(c["index"], 0);
            roles += usize::from(c.pointer("/delta/role").is_some());
        }
        if e["usage"].is_object() {
            usage.push(e["usage"].clone());
        }
    }
    assert_eq!(roles, 1, "{}", resp.text);
    assert_eq!(usage.len(), 1, "{}", resp.text);
    assert!(resp.text.trim_end().ends_with("data: [DONE]"));
    usage.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_is_continued_without_repeated_or_lost_words() {
    let far = far_mock();
    let gw = gateway(&far);
    let mut requests = 0;
    // Mid-word, at a space, after one token, after punctuation, after
    // punctuation and a space, deep in the second sentence.
    for (n, route) in [
        (13, "story"),
        (10, "story"),
        (3, "story"),
        (44, "story"),
        (45, "story"),
        (60, "story"),
        (13, "told"),
        (44, "told"),
        // An Anthropic upstream continues a prefill (its trailing
        // whitespace dropped, as Anthropic requires).
        (10, "sung"),
        (13, "sung"),
    ] {
        let resp = post(&gw.base, &ask(route, &format!("[cut {n}]"))).await;
        requests += 1;
        assert_eq!(resp.status, 200, "{}", resp.text);
        let usage = one_stream(&resp);
        assert_eq!(
            streamed_text(&resp.data_events()),
            TEXT,
            "cut after {n} on {route}"
        );
        // Usage counts both attempts: it is the request's totals.
        let ended = gw.events_of(&["request"], requests).await;
        let last = ended.last().unwrap();
        assert_eq!(usage["prompt_tokens"], last["input_tokens"], "{last}");
        assert_eq!(usage["completion_tokens"], last["output_tokens"], "{last}");
        assert_eq!(last["attempts"], 2, "{last}");
    }
    // Two attempt records per request, the continuation's accepted with
    // why; one event per failover saying who continued whom.
    let attempts = gw.events_of(&["attempt"], 2 * requests).await;
    let heirs: Vec<&Value> = attempts.iter().filter(|a| a["model"] == "heir").collect();
    assert_eq!(heirs.len(), 6);
    assert_eq!(heirs[0]["verdict"], "accept");
    assert!(
        heirs[0]["feedback"]
            .as_str()
            .unwrap()
            .contains("continues the stream of writer, cut after 13 characters"),
        "{}",
        heirs[0]
    );
    assert_eq!(
        attempts.iter().filter(|a| a["model"] == "writer").count(),
        10
    );
    let events = gw.events_of(&["midstream_failover"], requests).await;
    let first = &events[0];
    assert_eq!(first["failover_route"], "story");
    assert_eq!(first["from"], "writer");
    assert_eq!(first["to"], "heir");
    assert_eq!(first["chars_before"], 13);
    // heir repeats from two words before the cut word: "The quick bro".
    assert_eq!(first["overlap_trimmed"], 13, "{first}");
    // scribe, asked with an instruction, repeats one word before the cut
    // word ("quick bro"); bard continues the prefill "The quick" with
    // " brown", whose space the text already had.
    assert_eq!(events[6]["to"], "scribe");
    assert_eq!(events[6]["overlap_trimmed"], 9, "{}", events[6]);
    assert_eq!(events[8]["to"], "bard");
    assert_eq!(events[8]["chars_before"], 10);
    assert_eq!(events[8]["overlap_trimmed"], 1, "{}", events[8]);
    // Without prefill the member was asked with an instruction after the
    // partial answer.
    let asked = far.asked("scribe").await;
    let msgs = asked[0]["messages"].as_array().unwrap();
    assert_eq!(msgs[msgs.len() - 2]["role"], "assistant");
    assert_eq!(msgs[msgs.len() - 2]["content"], &TEXT[..13]);
    assert_eq!(msgs[msgs.len() - 1]["role"], "user");
    assert!(
        msgs[msgs.len() - 1]["content"]
            .as_str()
            .unwrap()
            .contains("Continue it exactly where it stopped")
    );
}

/// A continuation that starts the answer over, word for word or in other
/// words, is cut after the repeated answer: the client reads the answer
/// once, and the event says how the seam was found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_that_starts_over_is_cut_after_the_repeated_answer() {
    let far = far_mock();
    let gw = gateway(&far);
    // (route, cut after, the seam, characters dropped)
    let cases = [
        // The tail "…storied history that" found in the restart.
        ("restarted", 63, "tail", 63),
        // Cut inside "hist": its start is found in the restart too.
        ("restarted", 55, "tail", 55),
        // "rich and" is not in the paraphrase: a restart, cut after
        // "storied history that".
        ("paraphrased", 63, "restart", 54),
        ("paraphrased", 55, "restart", 46),
    ];
    for (i, (route, n, seam, dropped)) in cases.into_iter().enumerate() {
        let resp = post(&gw.base, &ask(route, &format!("[rome {n}]"))).await;
        assert_eq!(resp.status, 200, "{}", resp.text);
        one_stream(&resp);
        assert_eq!(
            streamed_text(&resp.data_events()),
            ROME,
            "{route} cut at {n}"
        );
        let events = gw.events_of(&["midstream_failover"], i + 1).await;
        let ev = &events[i];
        assert_eq!(ev["chars_before"], n, "{ev}");
        assert_eq!(ev["seam"], seam, "{ev}");
        assert_eq!(ev["overlap_trimmed"], dropped, "{ev}");
        // The stream's headers went out before: it says so at its end.
        assert!(
            resp.text
                .contains(&format!(": x-conclave-midstream-failover: {seam}\n")),
            "{}",
            resp.text
        );
        assert!(resp.header("x-conclave-midstream-failover").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_or_an_error_event_fails_over_too() {
    let far = far_mock();
    let gw = gateway(&far);
    for marker in ["[stall 13]", "[error 44]"] {
        let resp = post(&gw.base, &ask("story", marker)).await;
        assert_eq!(resp.status, 200, "{}", resp.text);
        one_stream(&resp);
        assert_eq!(streamed_text(&resp.data_events()), TEXT, "{marker}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_continuation_moves_on_and_the_last_one_ends_cleanly() {
    let far = far_mock();
    let gw = gateway(&far);
    // down answers 503, broken cuts its own continuation: heir finishes.
    let resp = post(&gw.base, &ask("twice", "[cut 13]")).await;
    one_stream(&resp);
    assert_eq!(streamed_text(&resp.data_events()), TEXT);
    // One value per continuation: broken's broke before its seam was
    // known.
    assert!(
        resp.text
            .contains(": x-conclave-midstream-failover: unknown, restart\n"),
        "{}",
        resp.text
    );
    let events = gw.events_of(&["midstream_failover"], 2).await;
    assert_eq!(events[0]["to"], "broken");
    assert_eq!(events[1]["from"], "broken");
    assert_eq!(events[1]["to"], "heir");

    // With no member left, the stream ends with an error event after the
    // text that went out, nothing spliced.
    let resp = post(&gw.base, &ask("doomed", "[cut 13]")).await;
    assert_eq!(resp.status, 200);
    let events = parsed(&resp);
    let last = events.last().unwrap();
    assert_eq!(
        last["error"]["code"], "upstream_stream_cut",
        "{}",
        resp.text
    );
    assert_eq!(streamed_text(&resp.data_events()), &TEXT[..13]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_inside_a_tool_call_ends_with_a_clean_error() {
    let far = far_mock();
    let gw = gateway(&far);
    let resp = post(&gw.base, &ask("tools", "")).await;
    assert_eq!(resp.status, 200);
    let events = parsed(&resp);
    let last = events.last().unwrap();
    assert_eq!(
        last["error"]["code"], "midstream_failover_unavailable",
        "{}",
        resp.text
    );
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tool call"),
        "{last}"
    );
    // Nothing of another member reached the client, and none was asked.
    assert!(!resp.text.contains("quick"), "{}", resp.text);
    let ended = gw.events_of(&["request"], 1).await;
    assert_eq!(ended[0]["attempts"], 1, "{}", ended[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_option_a_cut_stream_still_ends_with_an_error_event() {
    let far = far_mock();
    let gw = gateway(&far);
    let resp = post(&gw.base, &ask("plain", "[cut 13]")).await;
    assert_eq!(resp.status, 200);
    let events = parsed(&resp);
    assert_eq!(
        events.last().unwrap()["error"]["code"],
        "upstream_stream_cut",
        "{}",
        resp.text
    );
    assert_eq!(streamed_text(&resp.data_events()), &TEXT[..13]);
    let ended = gw.events_of(&["request"], 1).await;
    assert_eq!(ended[0]["attempts"], 1);
}
