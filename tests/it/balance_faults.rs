//! Every hostile-upstream fault × each balance policy: a balance over
//! `[fault, ok]` (ok a standby, so the fault member is always tried
//! first) gives the client what a fallback chain does: failures a chain
//! moves on from are served by `ok`, a 400/413/422 comes back, a stream
//! that began keeps its error. Whole and streamed; the fault member is
//! called once (its attempt record), the key appears nowhere, and
//! nothing is left in flight. And `max_concurrency` across a reload.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::evil::{self, FAULTS, Want, chained, leaks, unmet};
use common::*;
use futures::StreamExt;
use serde_json::Value;

const CONCURRENT: usize = 6;
const KEY: &str = "sk-T3st-SECRET-q7Zr9XwP2mVt4LbN8cJd";
const POLICIES: &[&str] = &["weighted", "least_busy", "latency"];

fn config(evil_v1: &str) -> String {
    let mut t = format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"
request_timeout = "10s"

[upstreams.evil]
kind = "openai"
base_url = "{evil_v1}"
api_key_env = "EVIL_KEY"
timeout = "1s"
stream_idle_timeout = "300ms"
# It fails on purpose, far more often than `eject.after`.
eject = false

[upstreams.evil-big]
kind = "openai"
base_url = "{evil_v1}"
api_key_env = "EVIL_KEY"
timeout = "10s"
stream_idle_timeout = "300ms"
eject = false

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
        t.push_str(&format!("\n[models.{f}]\nupstream = \"{up}\"\n"));
        for p in POLICIES {
            t.push_str(&format!(
                "\n[routes.b-{p}-{f}]\nstrategy = \"balance\"\npolicy = \"{p}\"\nmembers = [\"{f}\", \"ok\"]\nweights = {{ ok = 0 }}\n"
            ));
        }
    }
    t
}

struct Case {
    fault: &'static str,
    policy: &'static str,
    stream: bool,
}

impl Case {
    fn route(&self) -> String {
        format!("b-{}-{}", self.policy, self.fault)
    }
    fn tag(&self) -> String {
        let how = if self.stream { "streamed" } else { "whole" };
        format!("{} {how}", self.route())
    }
}

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
    if leaks(&r.text, KEY) || leaks(&format!("{:?}", r.headers), KEY) {
        fail("the upstream's key reached the client".into());
    }
    let want = chained(c.fault, c.stream);
    if let Some(m) = unmet(&r, want, c.stream) {
        fail(m);
    } else if want == Want::Answer {
        let by = r.header("x-conclave-served-by").unwrap_or_default();
        let want_by = if c.fault == "huge-tool-index" {
            c.fault
        } else {
            "ok"
        };
        if by != want_by {
            fail(format!("want an answer served by {want_by} (got {by:?})"));
        }
    }
    let id = r.header("x-request-id").unwrap_or_default().to_owned();
    (id, errs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_under_every_policy_is_what_a_fallback_chain_gives() {
    let evil_v1 = evil::start().await;
    let gw = Proc::gateway_env(&config(&evil_v1), &[("EVIL_KEY", KEY)]);
    let http = client();
    for _ in 0..4 {
        post_via(&http, &gw.base, chat("ok", "hi").to_string(), &[]).await;
    }
    let fds_before = gw.open_fds();

    let mut cases = Vec::new();
    for &fault in FAULTS {
        for &policy in POLICIES {
            for stream in [false, true] {
                cases.push(Case {
                    fault,
                    policy,
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

    // The fault member is called once; `ok` once when it answers.
    let events = gw.events(cases.len()).await;
    for (id, c) in &ids {
        let of = |model: &str| -> Vec<&Value> {
            events
                .iter()
                .filter(|e| {
                    e["request_id"] == id.as_str() && e["event"] == "attempt" && e["model"] == model
                })
                .collect()
        };
        let answered = chained(c.fault, c.stream) == Want::Answer;
        let (fault_verdict, ok_calls) = if c.fault == "huge-tool-index" {
            ("accept", 0)
        } else {
            ("error", usize::from(answered))
        };
        let fault = of(c.fault);
        if fault.len() != 1 || fault[0]["verdict"] != fault_verdict {
            errs.push(format!(
                "{}: want one attempt of {} with verdict {fault_verdict}, got {fault:?}",
                c.tag(),
                c.fault
            ));
        }
        let ok = of("ok");
        if ok.len() != ok_calls || ok.iter().any(|a| a["verdict"] != "accept") {
            errs.push(format!(
                "{}: want {ok_calls} accepted attempt(s) of ok, got {ok:?}",
                c.tag()
            ));
        }
    }

    drop(http);
    errs.extend(evil::left_behind(&gw, fds_before + CONCURRENT, KEY).await);
    assert!(
        errs.is_empty(),
        "{} problems:\n{}",
        errs.len(),
        errs.join("\n")
    );
}

/// A member's calls in flight outlive a reload: `max_concurrency` counts
/// the calls still running on the old config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrency_holds_across_a_reload() {
    let config = |retries: u32| {
        format!(
            "[upstreams.sim]\nkind = \"mock\"\n\n[upstreams.sim.models.a]\nttft = \"10s\"\n\n\
             [upstreams.sim.models.b]\nttft = \"10s\"\n\n[models.a]\nupstream = \"sim\"\n\n\
             [models.b]\nupstream = \"sim\"\n\n[routes.r]\nstrategy = \"balance\"\n\
             members = [\"a\", \"b\"]\nmax_concurrency = {{ a = 1, b = 1 }}\nretries = {retries}\n"
        )
    };
    let gw = Proc::gateway(&config(2));
    let http = client();
    let ask = || {
        let (http, base) = (http.clone(), gw.base.clone());
        tokio::spawn(async move { post_via(&http, &base, chat("r", "hi").to_string(), &[]).await })
    };
    let running: Vec<_> = (0..2).map(|_| ask()).collect();
    // Both calls are running (each takes 10 s, far longer than the reload
    // below, even on a busy machine) before the reload.
    gw.wait_in_flight(2.0).await;
    std::fs::write(gw.path("conclave.toml"), config(1)).unwrap();
    gw.signal("HUP");
    let reloaded = eventually(5, || async { gw.stderr().contains("reloaded") }).await;
    assert!(reloaded, "{}", gw.stderr());
    let r = ask().await.unwrap();
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "members_busy");
    for h in running {
        assert_eq!(h.await.unwrap().status, 200);
    }
}
