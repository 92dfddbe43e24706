//! `strategy = "chain"`, table-driven: escalation chains of one to three
//! tiers with every mix of accept, escalate and error, verifiers that fail
//! or answer loosely, fallback chains, pins, aliases and nesting. Each case
//! runs whole and streamed (see `common::world`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::world::*;

// ---------------------------------------------------------------------------
// Tables.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn escalation_chains_of_one_tier() {
    let v = Some("v");
    run_table(vec![
        case(
            "1: local accepted",
            r(&["l-good"], v, ""),
            &["l-good", "v"],
            served("l-good", 2),
        ),
        case(
            "1: local rejected",
            r(&["l-bad"], v, ""),
            &["l-bad", "v"],
            exhausted(&[("l-bad", ESC, NEEDS)]),
        ),
        case(
            "1: local rejected, on_exhausted = error",
            r(&["l-bad"], v, "on_exhausted = \"error\""),
            &["l-bad", "v"],
            exhausted(&[("l-bad", ESC, NEEDS)]),
        ),
        case(
            "1: local rejected, best_attempt",
            r(&["l-bad"], v, BEST),
            &["l-bad", "v"],
            best("l-bad", 2),
        ),
        case(
            "1: local error",
            r(&["l-down"], v, ""),
            &["l-down"],
            exhausted(&[("l-down", ERR, "503")]),
        ),
        case(
            "1: local error, best_attempt has nothing to return",
            r(&["l-down"], v, BEST),
            &["l-down"],
            exhausted(&[("l-down", ERR, "HTTP 503")]),
        ),
        case(
            "1: cloud self-certifies",
            r(&["c-bad"], v, ""),
            &["c-bad"],
            served("c-bad", 1),
        ),
        case(
            "1: cloud error",
            r(&["c-down"], v, ""),
            &["c-down"],
            exhausted(&[("c-down", ERR, "503")]),
        ),
        case(
            "1: self_certify overrides a local tier",
            r(&["l-bad"], v, "self_certify = [\"l-bad\"]"),
            &["l-bad"],
            served("l-bad", 1),
        ),
        case(
            "1: verify overrides a cloud tier",
            r(&["c-bad"], v, "verify = [\"c-bad\"]"),
            &["c-bad", "v"],
            exhausted(&[("c-bad", ESC, NEEDS)]),
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn escalation_chains_of_two_tiers() {
    let v = Some("v");
    run_table(vec![
        case(
            "2: accepted at once",
            r(&["l-good", "c-good"], v, ""),
            &["l-good", "v"],
            served("l-good", 2),
        ),
        case(
            "2: escalate, then cloud self-certifies",
            r(&["l-bad", "c-good"], v, ""),
            &["l-bad", "v", "c-good"],
            served("c-good", 3),
        ),
        case(
            "2: escalate, then accepted",
            r(&["l-bad", "l-good"], v, ""),
            &["l-bad", "v", "l-good", "v"],
            served("l-good", 4),
        ),
        case(
            "2: error, then accepted",
            r(&["l-down", "l-good"], v, ""),
            &["l-down", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: error, then cloud",
            r(&["l-down", "c-good"], v, ""),
            &["l-down", "c-good"],
            served("c-good", 2),
        ),
        case(
            "2: cloud first answers",
            r(&["c-good", "l-good"], v, ""),
            &["c-good"],
            served("c-good", 1),
        ),
        case(
            "2: escalate, escalate",
            r(&["l-bad", "l-meh"], v, ""),
            &["l-bad", "v", "l-meh", "v"],
            exhausted(&[("l-bad", ESC, NEEDS), ("l-meh", ESC, VAGUE)]),
        ),
        case(
            "2: escalate, escalate, best_attempt is the last",
            r(&["l-bad", "l-meh"], v, BEST),
            &["l-bad", "v", "l-meh", "v"],
            best("l-meh", 4),
        ),
        case(
            "2: escalate, error",
            r(&["l-bad", "l-down"], v, ""),
            &["l-bad", "v", "l-down"],
            exhausted(&[("l-bad", ESC, NEEDS), ("l-down", ERR, "503")]),
        ),
        case(
            "2: escalate, error, best_attempt is the rejected one",
            r(&["l-bad", "l-down"], v, BEST),
            &["l-bad", "v", "l-down"],
            best("l-bad", 3),
        ),
        case(
            "2: error, escalate, best_attempt",
            r(&["l-down", "l-bad"], v, BEST),
            &["l-down", "l-bad", "v"],
            best("l-bad", 3),
        ),
        case(
            "2: error, error",
            r(&["l-down", "c-down"], v, ""),
            &["l-down", "c-down"],
            exhausted(&[("l-down", ERR, "503"), ("c-down", ERR, "503")]),
        ),
        case(
            "2: escalate, then verified cloud tier rejected",
            r(&["l-bad", "c-bad"], v, "verify = [\"c-bad\"]"),
            &["l-bad", "v", "c-bad", "v"],
            exhausted(&[("l-bad", ESC, NEEDS), ("c-bad", ESC, NEEDS)]),
        ),
    ])
    .await;
}

/// Every kind of tier failure escalates at once, without a verifier call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tier_errors_escalate_without_asking_the_verifier() {
    let v = Some("v");
    run_table(vec![
        case(
            "2: refused connection, then accepted",
            r(&["l-refused", "l-good"], v, ""),
            &["l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: HTTP 500, then accepted",
            r(&["l-err500", "l-good"], v, ""),
            &["l-err500", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: HTTP 429 (the next tier is its retry), then accepted",
            r(&["l-limited", "l-good"], v, ""),
            &["l-limited", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: timeout, then accepted",
            r(&["l-hang", "l-good"], v, ""),
            &["l-hang", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: garbage, then accepted",
            r(&["l-garbage", "l-good"], v, ""),
            &["l-garbage", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: error event / 500, then accepted",
            r(&["l-errevent", "l-good"], v, ""),
            &["l-errevent", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: verified tier cut off, then cloud",
            r(&["l-cut", "c-good"], v, ""),
            &["l-cut", "c-good"],
            served("c-good", 2),
        ),
        case(
            "2: timeout trail",
            r(&["l-hang", "c-refused"], v, ""),
            &["l-hang"],
            exhausted(&[
                ("l-hang", ERR, "timed out"),
                ("c-refused", ERR, "unreachable"),
            ]),
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn escalation_chains_of_three_tiers() {
    let v = Some("v");
    run_table(vec![
        case(
            "3: escalate, accepted (the demo's review route)",
            r(&["l-bad", "l-good", "c-good"], v, ""),
            &["l-bad", "v", "l-good", "v"],
            served("l-good", 4),
        ),
        case(
            "3: escalate, escalate, cloud",
            r(&["l-bad", "l-meh", "c-good"], v, ""),
            &["l-bad", "v", "l-meh", "v", "c-good"],
            served("c-good", 5),
        ),
        case(
            "3: escalate, error, cloud",
            r(&["l-bad", "l-down", "c-good"], v, ""),
            &["l-bad", "v", "l-down", "c-good"],
            served("c-good", 4),
        ),
        case(
            "3: error, escalate, accepted",
            r(&["l-down", "l-bad", "l-good"], v, ""),
            &["l-down", "l-bad", "v", "l-good", "v"],
            served("l-good", 5),
        ),
        case(
            "3: accepted first, the rest untouched",
            r(&["l-good", "l-down", "c-good"], v, ""),
            &["l-good", "v"],
            served("l-good", 2),
        ),
        case(
            "3: error, cloud self-certifies before a local tier",
            r(&["c-down", "c-bad", "l-good"], v, ""),
            &["c-down", "c-bad"],
            served("c-bad", 2),
        ),
        case(
            "3: all rejected",
            r(&["l-bad", "l-meh", "c-bad"], v, "verify = [\"c-bad\"]"),
            &["l-bad", "v", "l-meh", "v", "c-bad", "v"],
            exhausted(&[
                ("l-bad", ESC, NEEDS),
                ("l-meh", ESC, VAGUE),
                ("c-bad", ESC, NEEDS),
            ]),
        ),
        case(
            "3: all rejected, best_attempt",
            r(
                &["l-bad", "l-meh", "c-bad"],
                v,
                "verify = [\"c-bad\"]\non_exhausted = \"best_attempt\"",
            ),
            &["l-bad", "v", "l-meh", "v", "c-bad", "v"],
            best("c-bad", 6),
        ),
        case(
            "3: all errors",
            r(&["l-down", "c-down", "c-refused"], v, ""),
            &["l-down", "c-down"],
            exhausted(&[
                ("l-down", ERR, "503"),
                ("c-down", ERR, "503"),
                ("c-refused", ERR, "refused"),
            ]),
        ),
        case(
            "3: escalate, error, escalate, best_attempt",
            r(&["l-bad", "c-down", "l-meh"], v, BEST),
            &["l-bad", "v", "c-down", "l-meh", "v"],
            best("l-meh", 5),
        ),
        case(
            "3: escalate, escalate, error, best_attempt",
            r(&["l-bad", "l-meh", "l-down"], v, BEST),
            &["l-bad", "v", "l-meh", "v", "l-down"],
            best("l-meh", 5),
        ),
        case(
            "3: escalate, escalate, error",
            r(&["l-bad", "l-meh", "l-down"], v, ""),
            &["l-bad", "v", "l-meh", "v", "l-down"],
            exhausted(&[
                ("l-bad", ESC, NEEDS),
                ("l-meh", ESC, VAGUE),
                ("l-down", ERR, "503"),
            ]),
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verifier_garbage_down_and_lenient_verdicts() {
    run_table(vec![
        case(
            "garbage verdict escalates",
            r(&["l-good", "c-good"], Some("v-garbage"), ""),
            &["l-good", "v-garbage", "c-good"],
            served("c-good", 3),
        ),
        case(
            "garbage verdict, exhausted",
            r(&["l-good"], Some("v-garbage"), ""),
            &["l-good", "v-garbage"],
            exhausted(&[("l-good", ESC, "could not be read")]),
        ),
        case(
            "garbage verdict, best_attempt",
            r(&["l-good"], Some("v-garbage"), BEST),
            &["l-good", "v-garbage"],
            best("l-good", 2),
        ),
        case(
            "verifier 503 escalates",
            r(&["l-good", "c-good"], Some("v-down"), ""),
            &["l-good", "v-down", "c-good"],
            served("c-good", 3),
        ),
        case(
            "verifier 503, exhausted",
            r(&["l-good"], Some("v-down"), ""),
            &["l-good", "v-down"],
            exhausted(&[("l-good", ESC, "verifier")]),
        ),
        case(
            "verifier refused escalates",
            r(&["l-good", "c-good"], Some("v-refused"), ""),
            &["l-good", "c-good"],
            served("c-good", 3),
        ),
        case(
            "verifier refused, two verified tiers",
            r(&["l-good", "l-bad"], Some("v-refused"), ""),
            &["l-good", "l-bad"],
            exhausted(&[("l-good", ESC, "verifier"), ("l-bad", ESC, "verifier")]),
        ),
        case(
            "fenced verdict in prose accepts",
            r(&["l-good", "c-good"], Some("v-prose"), ""),
            &["l-good", "v-prose"],
            served("l-good", 2),
        ),
        case(
            "string verdict \"no\" in prose rejects with its feedback",
            r(&["l-bad"], Some("v-prose"), ""),
            &["l-bad", "v-prose"],
            exhausted(&[("l-bad", ESC, "too vague")]),
        ),
        case(
            "string verdict \"no\", then cloud",
            r(&["l-bad", "c-good"], Some("v-prose"), ""),
            &["l-bad", "v-prose", "c-good"],
            served("c-good", 3),
        ),
        case(
            "verifier without json_mode still judges",
            r(&["l-bad", "l-good"], Some("v-nojson"), ""),
            &["l-bad", "v", "l-good", "v"],
            served("l-good", 4),
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fallback_chains_fail_over_on_provider_errors_only() {
    run_table(vec![
        case(
            "503 falls over",
            r(&["c-down", "c-good"], None, ""),
            &["c-down", "c-good"],
            served("c-good", 2),
        ),
        case(
            "500 falls over",
            r(&["c-err500", "c-good"], None, ""),
            &["c-err500", "c-good"],
            served("c-good", 2),
        ),
        case(
            "429 falls over (the next tier is its retry)",
            r(&["c-limited", "c-good"], None, ""),
            &["c-limited", "c-good"],
            served("c-good", 2),
        ),
        case(
            "refused connection falls over",
            r(&["c-refused", "c-good"], None, ""),
            &["c-good"],
            served("c-good", 2),
        ),
        case(
            "timeout falls over",
            r(&["c-hang", "c-good"], None, ""),
            &["c-hang", "c-good"],
            served("c-good", 2),
        ),
        case(
            "context-length 400 falls over",
            r(&["c-ctxlen", "c-good"], None, ""),
            &["c-ctxlen", "c-good"],
            served("c-good", 2),
        ),
        case(
            "garbage falls over",
            r(&["c-garbage", "c-good"], None, ""),
            &["c-garbage", "c-good"],
            served("c-good", 2),
        ),
        case(
            "error event first (500 whole) falls over",
            r(&["c-errevent", "c-good"], None, ""),
            &["c-errevent", "c-good"],
            served("c-good", 2),
        ),
        case(
            "plain 400 is the client's",
            r(&["c-plain400", "c-good"], None, ""),
            &["c-plain400"],
            Want::Error {
                status: 400,
                code: "upstream_rejected_request",
            },
        ),
        case(
            "plain 400 after a 503 is the client's",
            r(&["c-down", "c-plain400", "c-good"], None, ""),
            &["c-down", "c-plain400"],
            Want::Error {
                status: 400,
                code: "upstream_rejected_request",
            },
        ),
        case(
            "1 tier, plain 400",
            r(&["c-plain400"], None, ""),
            &["c-plain400"],
            Want::Error {
                status: 400,
                code: "upstream_rejected_request",
            },
        ),
        case(
            "any answer is accepted",
            r(&["c-bad", "c-good"], None, ""),
            &["c-bad"],
            served("c-bad", 1),
        ),
        case(
            "local tiers are not verified without a verifier",
            r(&["l-bad", "c-good"], None, ""),
            &["l-bad"],
            served("l-bad", 1),
        ),
        case(
            "1 tier",
            r(&["c-good"], None, ""),
            &["c-good"],
            served("c-good", 1),
        ),
        case(
            "three errors",
            r(&["c-down", "c-limited", "c-refused"], None, ""),
            &["c-down", "c-limited"],
            exhausted(&[
                ("c-down", ERR, "503"),
                ("c-limited", ERR, "429"),
                ("c-refused", ERR, "refused"),
            ]),
        ),
        case(
            "three errors, best_attempt has nothing to return",
            r(&["c-err500", "c-hang", "c-ctxlen"], None, BEST),
            &["c-err500", "c-hang", "c-ctxlen"],
            exhausted(&[
                ("c-err500", ERR, "500"),
                ("c-hang", ERR, "timed out"),
                ("c-ctxlen", ERR, "context length"),
            ]),
        ),
    ])
    .await;
}

/// Streaming: a tier is committed only by its first chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streamed_fallback_commits_on_the_first_chunk() {
    let ttft = "ttft_timeout = \"150ms\"";
    run_table(vec![
        case(
            "stream: ttft_timeout falls over",
            r(&["c-slow", "c-good"], None, ttft),
            &["c-slow", "c-good"],
            served("c-good", 2),
        )
        .only(Mode::Stream),
        case(
            "stream: error event first, then ttft_timeout, fall over",
            r(&["c-errevent", "c-slow", "c-good"], None, ttft),
            &["c-errevent", "c-slow", "c-good"],
            served("c-good", 3),
        )
        .only(Mode::Stream),
        case(
            "stream: ttft_timeout of a self-certifying tier in a verified chain",
            r(&["c-slow", "c-good"], Some("v"), ttft),
            &["c-slow", "c-good"],
            served("c-good", 2),
        )
        .only(Mode::Stream),
        case(
            "stream: ttft_timeout on every tier",
            r(&["c-slow", "l-slow"], None, ttft),
            &["c-slow", "l-slow"],
            exhausted(&[("c-slow", ERR, "timed out"), ("l-slow", ERR, "timed out")]),
        )
        .only(Mode::Stream),
        case(
            "stream: cut after the first chunk is not undone",
            r(&["c-cut", "c-good"], None, ""),
            &["c-cut"],
            Want::Broke {
                code: "upstream_stream_cut",
            },
        )
        .only(Mode::Stream),
        case(
            "stream: cut of a self-certifying tier in a verified chain",
            r(&["c-cut", "c-good"], Some("v"), ""),
            &["c-cut"],
            Want::Broke {
                code: "upstream_stream_cut",
            },
        )
        .only(Mode::Stream),
        case(
            "whole: a cut-off body falls over",
            r(&["c-cut", "c-good"], None, ""),
            &["c-cut", "c-good"],
            served("c-good", 2),
        )
        .only(Mode::Whole),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pins_choose_one_tier_or_are_refused() {
    let v = Some("v");
    run_table(vec![
        case(
            "pin a rejected local tier: no verifier",
            r(&["l-bad", "c-good"], v, ""),
            &["l-bad"],
            served("l-bad", 1),
        )
        .pin("l-bad"),
        case(
            "pin the cloud tier",
            r(&["l-bad", "c-good"], v, ""),
            &["c-good"],
            served("c-good", 1),
        )
        .pin("c-good"),
        case(
            "pin the second local tier",
            r(&["l-bad", "l-good"], v, ""),
            &["l-good"],
            served("l-good", 1),
        )
        .pin("l-good"),
        case(
            "pin a failing tier: no escalation",
            r(&["l-down", "c-good"], v, ""),
            &["l-down"],
            Want::Error {
                status: 502,
                code: "upstream_error",
            },
        )
        .pin("l-down"),
        case(
            "pin a failing tier of a fallback chain",
            r(&["c-down", "c-good"], None, ""),
            &["c-down"],
            Want::Error {
                status: 502,
                code: "upstream_error",
            },
        )
        .pin("c-down"),
        case(
            "pin an unknown name",
            r(&["l-bad", "c-good"], v, ""),
            &[],
            Want::Error {
                status: 400,
                code: "invalid_request",
            },
        )
        .pin("nope"),
        case(
            "pin a model that is not a tier (the verifier)",
            r(&["l-bad", "c-good"], v, ""),
            &[],
            Want::Error {
                status: 400,
                code: "invalid_request",
            },
        )
        .pin("v"),
        case(
            "pin a tier of a nested chain, not of the route",
            r(&["inner", "c-good"], None, "") + &route("inner", &["l-bad", "l-good"], v, ""),
            &[],
            Want::Error {
                status: 400,
                code: "invalid_request",
            },
        )
        .pin("l-good"),
        case(
            "pin through a passthrough alias of the chain",
            "[routes.r]\nstrategy = \"passthrough\"\nmodel = \"inner\"\n\n".to_owned()
                + &route("inner", &["l-bad", "l-good"], v, ""),
            &["l-good"],
            served("l-good", 1),
        )
        .pin("l-good"),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tier_that_aliases_a_local_model_is_verified() {
    run_table(vec![case(
        "alias of a local draft: verified, rejected, escalated",
        r(&["alias"], Some("v"), BEST)
            + "[routes.alias]\nstrategy = \"passthrough\"\nmodel = \"l-bad\"\n\n",
        &["l-bad", "v"],
        best("l-bad", 2),
    )])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nested_chains_work_as_tiers() {
    let v = Some("v");
    run_table(vec![
        case(
            "inner escalation chain accepts",
            r(&["inner", "c-good"], None, "") + &route("inner", &["l-bad", "l-good"], v, ""),
            &["l-bad", "v", "l-good", "v"],
            served("l-good", 4),
        ),
        case(
            "inner chain exhausted: the outer chain falls over",
            r(&["inner", "c-good"], None, "") + &route("inner", &["l-bad"], v, ""),
            &["l-bad", "v", "c-good"],
            served("c-good", 3),
        ),
        case(
            "inner fallback chain exhausted: the outer chain falls over",
            r(&["inner", "c-good"], None, "") + &route("inner", &["l-down", "c-down"], None, ""),
            &["l-down", "c-down", "c-good"],
            served("c-good", 3),
        ),
        case(
            "outer verifier checks a nested chain listed in verify",
            r(&["inner", "c-good"], v, "verify = [\"inner\"]")
                + &route("inner", &["c-bad"], None, ""),
            &["c-bad", "v", "c-good"],
            served("c-good", 3),
        ),
        case(
            "a nested chain self-certifies in the outer chain",
            r(&["inner", "c-good"], v, "") + &route("inner", &["c-down", "l-bad"], None, ""),
            &["c-down", "l-bad"],
            served("l-bad", 2),
        ),
        case(
            "nested in nested",
            r(&["mid", "c-good"], None, "")
                + &route("mid", &["inner", "l-good"], v, "")
                + &route("inner", &["l-down"], None, ""),
            &["l-down", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "everything exhausted",
            r(&["inner", "c-down"], None, "") + &route("inner", &["l-bad"], v, ""),
            &["l-bad", "v", "c-down"],
            exhausted(&[("inner", ERR, "inner"), ("c-down", ERR, "503")]),
        ),
    ])
    .await;
}
