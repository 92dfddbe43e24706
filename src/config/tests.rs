use super::*;
use crate::strategy::chain::config::as_chain;

fn env(name: &str) -> Option<String> {
    match name {
        "TEAM_A" => Some("sk-team-a".into()),
        "OPENAI_KEY" => Some("sk-openai".into()),
        _ => None,
    }
}

fn errors(text: &str) -> Vec<String> {
    match parse(text, "t.toml", &env, &crate::strategy::ALL) {
        Ok(_) => Vec::new(),
        Err(e) => e
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect(),
    }
}

const GOOD: &str = r#"
[server]
listen = "127.0.0.1:0"
request_timeout = "30s"

[[keys]]
name = "team-a"
key_env = "TEAM_A"
models = ["review"]

[upstreams.local]
kind = "openai"
base_url = "http://127.0.0.1:8080/v1/"
llama_swap = "http://127.0.0.1:8080"

[upstreams.cloud]
kind = "openai"
base_url = "https://api.example.com/v1"
api_key_env = "OPENAI_KEY"

[upstreams.sim]
kind = "mock"
[upstreams.sim.models.judge]
reply = { text = '{"accept": true}' }

[models.small]
upstream = "local"
model = "qwen3"

[models.big]
upstream = "cloud"
price = { input_per_mtok = 3.0, output_per_mtok = 15.0 }

[models.judge]
upstream = "sim"

[routes.fast]
strategy = "passthrough"
model = "small"

[routes.review]
strategy = "chain"
tiers = ["fast", "big"]
verifier = "judge"
verify = ["fast"]
"#;

#[test]
fn a_good_config_resolves() {
    let c = parse(GOOD, "t.toml", &env, &crate::strategy::ALL).unwrap();
    assert_eq!(c.server.request_timeout, Duration::from_secs(30));
    assert_eq!(c.keys[0].secret, Some(Secret("sk-team-a".into())));
    assert_eq!(c.upstreams["local"].lane, Lane::Local);
    assert_eq!(c.upstreams["cloud"].lane, Lane::Cloud);
    match &c.upstreams["local"].kind {
        UpstreamKind::OpenAi { base_url, .. } => assert_eq!(base_url, "http://127.0.0.1:8080/v1"),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.models["small"].upstream_model, "qwen3");
    assert_eq!(c.models["big"].upstream_model, "big");
    let chain = as_chain(&c.routes["review"]).expect("a chain");
    assert!(chain.tier_is_verified(&c, "fast"));
    assert!(!chain.tier_is_verified(&c, "big"));
    let d = c.describe();
    assert!(
        d.contains("review: chain fast (verified) -> big (self-certifies)"),
        "{d}"
    );
    assert!(
        !format!("{c:?}").contains("sk-team-a"),
        "secrets must not be printed"
    );
}

#[test]
fn every_error_is_reported_with_its_path() {
    let text = r#"
[server]
listen = "nowhere"
colour = "blue"

[upstreams.a]
kind = "openai"
base_url = "ftp://x"
api_key_env = "MISSING_VAR"

[upstreams.b]
kind = "anthropic"
responses = true

[upstreams.c]
kind = "mock"
bogus = 1

[models.m]
upstream = "nope"

[routes.review]
strategy = "chain"
tiers = ["m", "gemma5", "m"]
verifier = "ghost"
self_certify = ["other"]

[routes.x]
strategy = "tournament"

[routes.loop1]
strategy = "passthrough"
model = "loop2"

[routes.loop2]
strategy = "chain"
tiers = ["loop1"]

[extra]
"#;
    let errs = errors(text);
    let expect = [
        "server.colour: unknown field `colour`",
        "upstreams.a.base_url: \"ftp://x\" is not an http(s) URL",
        "upstreams.a.api_key_env: environment variable MISSING_VAR is not set",
        "upstreams.b.responses: an Anthropic upstream does not speak the Responses API",
        "upstreams.c.bogus: unknown field `bogus`",
        "models.m.upstream: unknown upstream \"nope\"",
        "routes.review.tiers[1]: unknown model \"gemma5\"",
        "routes.review.tiers[2]: \"m\" is already a tier",
        "routes.review.verifier: unknown model \"ghost\"",
        "routes.review.self_certify[0]: \"other\" is not a tier",
        "routes.x.strategy: unknown strategy \"tournament\"",
        "routes.loop1: routes refer to each other in a cycle: loop1 -> loop2 -> loop1",
        "extra: unknown top-level key",
    ];
    for e in expect {
        assert!(
            errs.iter().any(|g| g.starts_with(e)),
            "missing {e:?} in {errs:#?}"
        );
    }
}

#[test]
fn bad_listen_is_reported_after_table_errors() {
    let errs = errors("[server]\nlisten = \"nowhere\"\n");
    assert_eq!(errs.len(), 1);
    assert!(errs[0].starts_with("server.listen:"), "{errs:?}");
}

#[test]
fn wrong_types_name_the_field() {
    let errs = errors("[server]\nmax_body_bytes = \"big\"\nrequest_timeout = \"soon\"\n");
    assert!(
        errs[0].starts_with("server.max_body_bytes:")
            || errs[0].starts_with("server.request_timeout:"),
        "{errs:?}"
    );
}

#[test]
fn invalid_toml_is_one_error() {
    let errs = errors("[server\nlisten=");
    assert_eq!(errs.len(), 1);
    assert!(errs[0].contains("invalid TOML"), "{errs:?}");
}

#[test]
fn mock_behaviour_errors_have_paths() {
    let errs = errors(
        "[upstreams.s]\nkind = \"mock\"\n[upstreams.s.models.v]\nstatus = 42\n[[upstreams.s.models.v.rules]]\nthen = {}\n",
    );
    assert!(
        errs.iter()
            .any(|e| e.starts_with("upstreams.s.models.v.status:")),
        "{errs:?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.starts_with("upstreams.s.models.v.rules[0]:")),
        "{errs:?}"
    );
}

#[test]
fn telemetry_is_off_by_default_and_checked_when_set() {
    let cfg = parse(GOOD, "t.toml", &env, &crate::strategy::ALL).unwrap();
    assert_eq!(cfg.telemetry.otlp_endpoint, None);
    assert_eq!(cfg.telemetry.sample_ratio, 1.0);
    assert_eq!(cfg.server.event_log_buffer, 16_384);
    let bad = format!(
        "{GOOD}\n[telemetry]\notlp_endpoint = \"collector:4318\"\nsample_ratio = 1.5\n\
         service_name = \" \"\notlp_timeout = \"0s\"\nexporter = \"jaeger\"\n"
    );
    let errs = errors(&bad);
    assert!(
        errs.iter().any(|e| e.starts_with("telemetry.exporter")),
        "{errs:?}"
    );
    let bad = format!(
        "{GOOD}\n[telemetry]\notlp_endpoint = \"collector:4318\"\nsample_ratio = 1.5\n\
         service_name = \" \"\notlp_timeout = \"0s\"\n"
    )
    .replace("[server]\n", "[server]\nevent_log_buffer = 0\n");
    let errs = errors(&bad);
    for key in [
        "telemetry.otlp_endpoint",
        "telemetry.sample_ratio",
        "telemetry.service_name",
        "telemetry.otlp_timeout",
        "server.event_log_buffer",
    ] {
        assert!(errs.iter().any(|e| e.starts_with(key)), "{key}: {errs:?}");
    }
    let good = format!("{GOOD}\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n");
    let cfg = parse(&good, "t.toml", &env, &crate::strategy::ALL).unwrap();
    assert_eq!(
        cfg.telemetry.otlp_endpoint.as_deref(),
        Some("http://127.0.0.1:4318")
    );
}

#[test]
fn http2_streams_and_header_bytes_are_bounded() {
    let cfg = parse(GOOD, "t.toml", &env, &crate::strategy::ALL).unwrap();
    assert_eq!(cfg.server.limits.http2_max_streams, 16);
    assert_eq!(cfg.server.limits.max_header_bytes, 32 * 1024);
    for (setting, key) in [
        ("http2_max_streams = 0", "server.http2_max_streams"),
        ("http2_max_streams = 5000", "server.http2_max_streams"),
        ("max_header_bytes = 4096", "server.max_header_bytes"),
        ("max_header_bytes = 2000000", "server.max_header_bytes"),
    ] {
        let errs = errors(&GOOD.replace("[server]\n", &format!("[server]\n{setting}\n")));
        assert!(
            errs.iter().any(|e| e.starts_with(key)),
            "{setting}: {errs:?}"
        );
    }
}

#[test]
fn stored_response_bounds_default_and_are_checked() {
    let cfg = parse(GOOD, "t.toml", &env, &crate::strategy::ALL).unwrap();
    assert_eq!(
        cfg.server.responses_bounds,
        ResponseBounds {
            max_per_key: 10_000,
            max_bytes_per_key: 268_435_456,
            max_bytes: 1_073_741_824,
        }
    );
    let set = "responses_max_per_key = 5\nresponses_max_bytes_per_key = 1000\nresponses_max_bytes = 4000\n";
    let cfg = parse(
        &GOOD.replace("[server]\n", &format!("[server]\n{set}")),
        "t.toml",
        &env,
        &crate::strategy::ALL,
    )
    .unwrap();
    assert_eq!(
        cfg.server.responses_bounds,
        ResponseBounds {
            max_per_key: 5,
            max_bytes_per_key: 1000,
            max_bytes: 4000,
        }
    );
    for (setting, key, says) in [
        (
            "responses_max_per_key = 0",
            "server.responses_max_per_key",
            "greater than 0",
        ),
        (
            "responses_max_bytes_per_key = 0",
            "server.responses_max_bytes_per_key",
            "between 1 and",
        ),
        (
            "responses_max_bytes = 0",
            "server.responses_max_bytes",
            "between 1 and",
        ),
        (
            "responses_max_bytes = 2000000000000",
            "server.responses_max_bytes",
            "between 1 and",
        ),
        (
            "responses_max_bytes = 1000\nresponses_max_bytes_per_key = 2000",
            "server.responses_max_bytes_per_key",
            "must not exceed server.responses_max_bytes",
        ),
        ("responses_max_per_key = -1", "server", "invalid value"),
        ("responses_max_bytes = \"1GB\"", "server", "invalid type"),
    ] {
        let errs = errors(&GOOD.replace("[server]\n", &format!("[server]\n{setting}\n")));
        assert!(
            errs.iter().any(|e| e.starts_with(key) && e.contains(says)),
            "{setting}: {errs:?}"
        );
    }
}

/// A table with an error reports that error only: its name still counts as
/// defined wherever another table refers to it.
#[test]
fn a_broken_table_causes_no_follow_on_errors() {
    let cases = [
        // An upstream with an unknown key, referred to by a model.
        (
            "[upstreams.m]\nkind = \"mock\"\nbogus = 1\n[models.a]\nupstream = \"m\"\n",
            "upstreams.m.bogus: unknown field `bogus`",
        ),
        // An upstream of an unknown kind, and one without a kind.
        (
            "[upstreams.m]\nkind = \"grpc\"\n[models.a]\nupstream = \"m\"\n",
            "upstreams.m.kind: unknown upstream kind",
        ),
        (
            "[upstreams.m]\nbase_url = \"http://127.0.0.1:9/v1\"\n[models.a]\nupstream = \"m\"\n",
            "upstreams.m.kind: missing",
        ),
        // A model with an unknown key, referred to by routes and a key.
        (
            "[upstreams.m]\nkind = \"mock\"\n[models.x]\nupstream = \"m\"\nwhat = 2\n\
             [routes.r]\nstrategy = \"chain\"\ntiers = [\"x\"]\n\
             [routes.p]\nstrategy = \"passthrough\"\nmodel = \"x\"\n",
            "models.x.what: unknown field `what`",
        ),
        // A broken route, referred to by another route.
        (
            "[upstreams.m]\nkind = \"mock\"\n[models.a]\nupstream = \"m\"\n\
             [routes.s]\nstrategy = \"chain\"\ntiers = [\"a\"]\nbad = 3\n\
             [routes.t]\nstrategy = \"passthrough\"\nmodel = \"s\"\n",
            "routes.s.bad: unknown field `bad`",
        ),
    ];
    for (text, want) in cases {
        let errs = errors(text);
        assert_eq!(errs.len(), 1, "{text}\n{errs:#?}");
        assert!(errs[0].starts_with(want), "{text}\n{errs:#?}");
    }
}

#[test]
fn an_eject_key_that_needs_error_rate_is_named_itself() {
    let errs = errors(
        "[upstreams.s]\nkind = \"mock\"\neject = { after = 3, min_requests = 5 }\n[upstreams.s.models.v]\n",
    );
    assert_eq!(
        errs,
        ["upstreams.s.eject.min_requests: applies only with error_rate"]
    );
    let errs = errors(
        "[upstreams.s]\nkind = \"mock\"\neject = { error_rate = 0.5, window = \"30s\" }\n[upstreams.s.models.v]\n",
    );
    assert!(errs.is_empty(), "{errs:?}");
}

#[test]
fn no_key_may_be_named_anonymous() {
    let text = GOOD.replace("name = \"team-a\"", "name = \"anonymous\"");
    let errs = errors(&text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("keys[0].name: \"anonymous\" is reserved"),
        "{errs:?}"
    );
}
