//! The chain's verifier against the verdicts small local models really
//! write (issue 23, item 4): keys other than `accept` (`acceptance`), a
//! verdict cut at `verifier_max_tokens` before its object closed, and
//! feedback that only copies the verifier's own instructions back, or
//! its example feedback with small edits (issue 41), which must never
//! reach the next tier. And the prompt itself: no placeholder a
//! model could copy as its answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use serde_json::{Value, json};

/// The verifier prompt's example feedback with its end swapped for the
/// question's subject, as a small verifier wrote it back in 11 of 51
/// verdicts (issue 41); too changed to count as repeating the prompt.
const COPIED_EXAMPLE: &str = "The reply gives the tower's year of opening, 1889, but the \
question asked when it was built: in 1887.";

/// Text of the verifier prompt, as a small model copies it back.
const COPIED: &str = "Decide whether the candidate correctly and completely answers the last \
request, following the original system prompt.";

fn mock() -> String {
    format!(
        r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.draft]
reply = {{ text = "DRAFT answer from {{model}}" }}

[upstreams.sim.models.good]
reply = {{ text = "GOOD answer from {{model}}" }}

[upstreams.sim.models.final]
reply = {{ text = "FINAL answer from {{model}}" }}

# `acceptance` instead of `accept`, as SmolLM2 wrote 3 times in 27.
[upstreams.sim.models.v-acceptance]
reply = {{ json = {{ acceptance = true, feedback = "" }} }}
[[upstreams.sim.models.v-acceptance.rules]]
when_contains = "DRAFT answer"
then = {{ reply = {{ json = {{ acceptance = false, feedback = "Name the year as well." }} }} }}

# Cut at max_tokens before the object closed.
[upstreams.sim.models.v-cut]
reply = {{ text = "{{\"accept\": true, \"feedback\": \"Fine, though the wor" }}
finish_reason = "length"
[[upstreams.sim.models.v-cut.rules]]
when_contains = "DRAFT answer"
then = {{ reply = {{ text = "```json\n{{\"accept\": false, \"feedback\": \"The answer forgets the dat" }}, finish_reason = "length" }}

# Rejects with its own instructions as the feedback.
[upstreams.sim.models.v-echo]
reply = {{ json = {{ accept = true, feedback = "" }} }}
[[upstreams.sim.models.v-echo.rules]]
when_contains = "DRAFT answer"
then = {{ reply = {{ json = {{ accept = false, feedback = "{COPIED}" }} }} }}

# Rejects with the prompt's example feedback, edited.
[upstreams.sim.models.v-example]
reply = {{ json = {{ accept = true, feedback = "" }} }}
[[upstreams.sim.models.v-example.rules]]
when_contains = "DRAFT answer"
then = {{ reply = {{ json = {{ accept = false, feedback = "{COPIED_EXAMPLE}" }} }} }}
"#
    )
}

fn chain(name: &str, first: &str, verifier: &str) -> String {
    format!(
        "[routes.{name}]\nstrategy = \"chain\"\ntiers = [\"{first}\", \"final\"]\n\
         verifier = \"{verifier}\"\nverify = [\"{first}\"]\n\n"
    )
}

/// The user text of a request the mock received.
fn user_text(req: &Value) -> String {
    req["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verdicts_small_models_write_are_read_and_echoes_are_dropped() {
    let mock = Srv::mock(&mock());
    let mut routes = String::new();
    for (v, short) in [
        ("v-acceptance", "acc"),
        ("v-cut", "cut"),
        ("v-echo", "echo"),
        ("v-example", "ex"),
    ] {
        routes.push_str(&chain(&format!("{short}-draft"), "draft", v));
        routes.push_str(&chain(&format!("{short}-good"), "good", v));
    }
    let names = [
        "draft",
        "good",
        "final",
        "v-acceptance",
        "v-cut",
        "v-echo",
        "v-example",
    ];
    let gw = Srv::gateway(&front_of(&mock.v1(), &names, &routes));
    let http = client();

    // (route, who serves it, the feedback the next tier must get)
    let cases = [
        ("acc-good", "good", None),
        ("acc-draft", "final", Some("Name the year as well.")),
        ("cut-good", "good", None),
        ("cut-draft", "final", Some("The answer forgets the…")),
        ("echo-good", "good", None),
        ("echo-draft", "final", None),
        ("ex-good", "good", None),
        ("ex-draft", "final", None),
    ];
    for stream in [false, true] {
        for (route, by, feedback) in cases {
            let tag = format!("{route} stream={stream}");
            http.delete(mock.url("/mock/requests"))
                .send()
                .await
                .unwrap();
            let mut body = chat(route, "When was the Eiffel Tower built?");
            body["stream"] = json!(stream);
            let r = post_via(&http, &gw.base, body.to_string(), &[]).await;
            assert_eq!(r.status, 200, "{tag}: {}", r.text);
            assert_eq!(
                r.header("x-conclave-served-by"),
                Some(by),
                "{tag}: {}",
                r.text
            );
            let got = mock.received().await;
            let models: Vec<&str> = got.iter().map(|g| g["model"].as_str().unwrap()).collect();
            let verifier = &got[1];
            // The verifier's prompt has no template to copy.
            let prompt = verifier["body"]["messages"].to_string();
            for template in [
                "what is wrong",
                "what must change",
                "true|false",
                "true or false",
            ] {
                assert!(!prompt.contains(template), "{tag}: {template} in {prompt}");
            }
            if by == "final" {
                assert_eq!(models.len(), 3, "{tag}: {models:?}");
                let next = user_text(&got[2]);
                match feedback {
                    Some(f) => assert!(
                        next.contains(&format!("A previous attempt was rejected: {f}")),
                        "{tag}: {next}"
                    ),
                    // Neither a note nor the copied instructions.
                    None => {
                        assert!(!next.contains("previous attempt"), "{tag}: {next}");
                        assert!(!next.contains("Decide whether"), "{tag}: {next}");
                        assert!(!next.contains("metres"), "{tag}: {next}");
                        assert_eq!(next, "When was the Eiffel Tower built?", "{tag}");
                    }
                }
            } else {
                assert_eq!(models.len(), 2, "{tag}: {models:?}");
            }
        }
    }

    // The event log: each verifier call's verdict, and why an echo has no
    // feedback.
    let events = gw.events_of(&["attempt"], 40).await;
    let verifier_attempts: Vec<&Value> =
        events.iter().filter(|e| e["role"] == "verifier").collect();
    assert_eq!(verifier_attempts.len(), 16, "{verifier_attempts:#?}");
    for e in &verifier_attempts {
        let (model, verdict) = (e["model"].as_str().unwrap(), e["verdict"].as_str().unwrap());
        assert!(verdict == "accept" || verdict == "escalate", "{e}");
        if model == "v-echo" && verdict == "escalate" {
            assert_eq!(
                e["feedback"], "(feedback dropped: it only repeats the verifier's instructions)",
                "{e}"
            );
        }
        if model == "v-example" && verdict == "escalate" {
            assert_eq!(
                e["feedback"], "(feedback dropped: it copies the verifier prompt's example)",
                "{e}"
            );
        }
    }
}
