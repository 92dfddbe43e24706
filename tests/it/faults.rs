//! The fault matrix: every hostile-upstream fault, through a passthrough
//! route and a fallback chain, whole and streamed. For each case it checks
//! what the client sees, the attempt record, that the upstream's key
//! appears nowhere (responses, event log, stderr), and at the end that no
//! request or connection was left behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::evil::{self, FAULTS, Want, chained, direct, leaks, unmet};
use common::*;
use futures::StreamExt;
use serde_json::Value;

/// Cases in flight at once; the gateway may keep as many pooled upstream
/// connections afterwards.
const CONCURRENT: usize = 6;

/// Random past its prefix, as real keys are (a word in it, like the
/// product's name, would also be found in innocent text).
const KEY: &str = "sk-T3st-SECRET-q7Zr9XwP2mVt4LbN8cJd";

/// Why a passthrough call of `fault` is sent again (the upstream's
/// default `retries = { max = 1 }`): a 5xx, a 429, or no answer in time
/// before anything reached the client. A chain's first tier is never
/// retried on its upstream: the next tier is its retry.
fn retried(fault: &str, stream: bool, chain: bool) -> Option<&'static str> {
    if chain {
        return None;
    }
    match fault {
        "echo-500" => Some("5xx"),
        "echo-429" => Some("429"),
        "hang" => Some("timeout"),
        "trickle-forever" | "stall-after-first" if !stream => Some("timeout"),
        // `[DONE]` before any answer: a cut, retried as a lost connection.
        "done-first" if stream => Some("connect"),
        _ => None,
    }
}

fn config(evil_v1: &str) -> String {
    let mut t = format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"
request_timeout = "10s"

[upstreams.evil]
kind = "openai"
eject = false
base_url = "{evil_v1}"
api_key_env = "EVIL_KEY"
timeout = "1s"
stream_idle_timeout = "300ms"

# 64 MB to read before "too large" takes more than 1 s on a loaded box.
[upstreams.evil-big]
kind = "openai"
eject = false
base_url = "{evil_v1}"
api_key_env = "EVIL_KEY"
timeout = "10s"
stream_idle_timeout = "300ms"

[models.ok]
upstream = "evil"
"#
    );
    for f in FAULTS {
        let up = if *f == "no-newline" {
            "evil-big"
        } else {
            "evil"
        };
        t.push_str(&format!(
            "\n[models.{f}]\nupstream = \"{up}\"\n\n[routes.p-{f}]\nstrategy = \"passthrough\"\nmodel = \"{f}\"\n\n[routes.c-{f}]\nstrategy = \"chain\"\ntiers = [\"{f}\", \"ok\"]\n"
        ));
    }
    t.push_str(
        "\n[routes.impatient]\nstrategy = \"passthrough\"\nmodel = \"stall-after-first\"\nstream_idle_timeout = \"100ms\"\n",
    );
    t
}

struct Case {
    fault: &'static str,
    chain: bool,
    stream: bool,
}

impl Case {
    fn route(&self) -> String {
        format!("{}-{}", if self.chain { "c" } else { "p" }, self.fault)
    }
    fn want(&self) -> Want {
        if self.chain {
            chained(self.fault, self.stream)
        } else {
            direct(self.fault, self.stream)
        }
    }
    fn tag(&self) -> String {
        format!(
            "{} {}",
            self.route(),
            if self.stream { "streamed" } else { "whole" }
        )
    }
}

/// Runs one case; returns its request id and what went wrong.
async fn run(gw: &Proc, http: &reqwest::Client, c: &Case) -> (String, Vec<String>) {
    let body = if c.stream {
        chat_stream(&c.route(), "hello")
    } else {
        chat(&c.route(), "hello")
    };
    let r = post_via(http, &gw.base, body.to_string(), &[]).await;
    let mut errs = Vec::new();
    let mut fail = |m: String| {
        errs.push(format!(
            "{}: {m}\n    got {} {}",
            c.tag(),
            r.status,
            r.text.chars().take(300).collect::<String>()
        ))
    };
    let headers = format!("{:?}", r.headers);
    if leaks(&r.text, KEY) || leaks(&headers, KEY) {
        fail("the upstream's key reached the client".into());
    }
    if let Some(m) = unmet(&r, c.want(), c.stream) {
        fail(m);
    }
    let id = r.header("x-request-id").unwrap_or_default().to_owned();
    (id, errs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstream_fault_is_contained() {
    let evil_v1 = evil::start().await;
    let gw = Proc::gateway_env(&config(&evil_v1), &[("EVIL_KEY", KEY)]);
    let http = client();
    // Warm up: the process's baseline of open files and pooled connections.
    for _ in 0..4 {
        post_via(&http, &gw.base, chat("ok", "hi").to_string(), &[]).await;
    }
    let fds_before = gw.open_fds();

    let mut cases = Vec::new();
    for &fault in FAULTS {
        for chain in [false, true] {
            for stream in [false, true] {
                cases.push(Case {
                    fault,
                    chain,
                    stream,
                });
            }
        }
    }
    let results: Vec<(&Case, (String, Vec<String>))> = futures::stream::iter(cases.iter())
        .map(|c| {
            let (gw, http) = (&gw, &http);
            async move { (c, run(gw, http, c).await) }
        })
        .buffer_unordered(CONCURRENT)
        .collect()
        .await;
    let mut errs: Vec<String> = Vec::new();
    let mut ids = Vec::new();
    for (c, (id, e)) in results {
        errs.extend(e);
        ids.push((id, c));
    }

    // The attempt record: the fault model's one attempt per request (two
    // when it was retried, the second saying why), with verdict `error`
    // unless the fault still made an answer.
    let n_events = cases.len(); // at least one attempt line per request
    let events = gw.events(n_events).await;
    for (id, c) in &ids {
        let attempts: Vec<&Value> = events
            .iter()
            .filter(|e| {
                e["request_id"] == id.as_str() && e["event"] == "attempt" && e["model"] == c.fault
            })
            .collect();
        let want_verdict = match c.want() {
            Want::Answer if c.fault == "huge-tool-index" => {
                if c.chain {
                    "accept"
                } else {
                    "ok"
                }
            }
            _ => "error",
        };
        let retry = retried(c.fault, c.stream, c.chain);
        let want_n = 1 + usize::from(retry.is_some());
        let reasons: Vec<Option<&str>> = attempts.iter().map(|a| a["retry"].as_str()).collect();
        let want_reasons: Vec<Option<&str>> = [None].into_iter().chain(retry.map(Some)).collect();
        if attempts.len() != want_n
            || attempts.iter().any(|a| a["verdict"] != want_verdict)
            || reasons != want_reasons
        {
            errs.push(format!(
                "{}: want {want_n} attempts of {} with verdict {want_verdict} (retry {retry:?}), got {attempts:?}",
                c.tag(),
                c.fault
            ));
        }
    }

    // Nothing left behind: no request in flight, no extra descriptors.
    // The test's own keep-alive connections go; what may stay is the
    // gateway's pool of idle upstream connections, one per case in flight.
    // A descriptor left behind per hanging, stalling or trickling case
    // would show. The key is nowhere: not in the event log, not on stderr.
    drop(http);
    errs.extend(evil::left_behind(&gw, fds_before + CONCURRENT, KEY).await);
    assert!(
        errs.is_empty(),
        "{} problems:\n{}",
        errs.len(),
        errs.join("\n")
    );
}

/// A route's `stream_idle_timeout` overrides its upstream's (300 ms here).
#[tokio::test]
async fn a_route_sets_its_own_stream_idle_timeout() {
    let evil_v1 = evil::start().await;
    let gw = Proc::gateway_env(&config(&evil_v1), &[("EVIL_KEY", KEY)]);
    let r = post(&gw.base, &chat_stream("impatient", "hi")).await;
    let events = r.data_events();
    let last = events.last().cloned().unwrap_or_default();
    assert!(last.contains("no event for 100ms"), "{}", r.text);
    let r = post(&gw.base, &chat_stream("p-stall-after-first", "hi")).await;
    assert!(r.text.contains("no event for 300ms"), "{}", r.text);
}
