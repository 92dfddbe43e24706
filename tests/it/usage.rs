//! Usage from upstreams that do not report it: a stream without usage is
//! estimated (the request as budgets count it, chat template included;
//! the streamed text at bytes / 4), marked
//! `usage_estimated` on the attempt, counted in `conclave_tokens_total`,
//! and given to an `include_usage` client as the final usage chunk. The
//! access log line carries the request's totals.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use serde_json::{Value, json};

const GATEWAY: &str = r#"
[server]
event_log = "{dir}/events.jsonl"
access_log = true

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.quiet]
reply = { text = "twelve bytes" }
omit_usage = true

[upstreams.sim.models.chatty]
reply = { text = "twelve bytes" }
usage = { prompt_tokens = 7, completion_tokens = 3 }

[models.quiet]
upstream = "sim"

[models.chatty]
upstream = "sim"
"#;

fn usage_chunk(r: &Resp) -> Value {
    r.data_events()
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .find(|v| v["usage"].is_object())
        .unwrap_or_else(|| panic!("no usage chunk in {}", r.text))
}

#[tokio::test]
async fn a_stream_without_usage_is_estimated_and_marked() {
    let gw = Srv::gateway(GATEWAY);
    // 16 bytes of prompt: 4 tokens, plus the chat template (32 per request,
    // 7 per message): 43; "twelve bytes" streamed: 3 tokens.
    let mut body = chat_stream("quiet", "sixteen bytes!!!");
    body["stream_options"] = json!({"include_usage": true});
    let r = post(&gw.base, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.ends_with("data: [DONE]\n\n"), "{}", r.text);
    let u = usage_chunk(&r);
    assert_eq!(u["usage"]["prompt_tokens"], 43, "{u}");
    assert_eq!(u["usage"]["completion_tokens"], 3, "{u}");
    assert_eq!(u["usage"]["estimated"], true, "{u}");
    assert_eq!(u["choices"], json!([]));
    assert!(
        u["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("chatcmpl-mock")),
        "{u}"
    );

    // An upstream that reports usage is passed on as it said.
    let mut body = chat_stream("chatty", "hi");
    body["stream_options"] = json!({"include_usage": true});
    let u = usage_chunk(&post(&gw.base, &body).await);
    assert_eq!(u["usage"]["prompt_tokens"], 7);
    assert!(u["usage"].get("estimated").is_none(), "{u}");

    // A client that did not ask gets no usage chunk at all.
    let r = post(&gw.base, &chat_stream("quiet", "sixteen bytes!!!")).await;
    assert!(!r.text.contains("\"usage\""), "{}", r.text);

    let events = gw.events(3).await;
    let quiet: Vec<&Value> = events.iter().filter(|e| e["model"] == "quiet").collect();
    assert_eq!(quiet.len(), 2);
    for e in quiet {
        assert_eq!(e["usage_estimated"], true, "{e}");
        assert_eq!(e["input_tokens"], 43, "{e}");
        assert_eq!(e["output_tokens"], 3, "{e}");
    }
    let m = gw.metrics().await;
    let out = samples(
        &m,
        "conclave_tokens_total",
        &[("model", "quiet"), ("kind", "output")],
    );
    assert_eq!(out, vec![6.0], "{m}");

    // One access line per request, with its totals.
    let log = gw.stderr();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("conclave::access"))
        .collect();
    assert_eq!(lines.len(), 3, "{log}");
    assert!(
        lines.iter().any(|l| l.contains("route=quiet")
            && l.contains("status=\"200\"")
            && l.contains("output_tokens=3")
            && l.contains("tokens_estimated=true")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn logs_are_plain_text_off_a_terminal_and_json_on_request() {
    let gw = Proc::gateway(GATEWAY);
    post(&gw.base, &chat("chatty", "hi")).await;
    let text = gw.stderr();
    assert!(!text.contains('\u{1b}'), "ANSI codes in a log file: {text}");
    assert!(
        text.contains("listening on") && text.contains("2 models") && text.contains("auth off"),
        "no start-up summary: {text}"
    );
    let gw = Proc::start(
        &["--log-format", "json", "serve", "--listen", "127.0.0.1:0"],
        GATEWAY,
        &[],
    );
    post(&gw.base, &chat("chatty", "hi")).await;
    let ok = eventually(5, || async { gw.stderr().contains("conclave::access") }).await;
    assert!(ok, "{}", gw.stderr());
    for line in gw.stderr().lines() {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["level"].is_string(), "{line}");
    }
}
