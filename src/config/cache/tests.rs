use std::time::Duration;

use super::*;
use crate::config::{Config, parse};

const BASE: &str = r#"
[upstreams.sim]
kind = "mock"
[upstreams.sim.models.a]
reply = { text = "A" }
[upstreams.sim.models.b]
reply = { text = "B" }

[models.a]
upstream = "sim"

[models.b]
upstream = "sim"
"#;

fn load(extra: &str) -> Result<Config, Vec<String>> {
    let text = format!("{BASE}\n{extra}");
    parse(&text, "t.toml", &|_| None, &crate::strategy::ALL).map_err(|e| {
        e.errors
            .iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    })
}

fn errors(extra: &str) -> Vec<String> {
    load(extra).err().unwrap_or_default()
}

#[test]
fn rules_default_to_key_scope_and_temperature_zero() {
    let c = load(
        "[models.a.cache]\nttl = \"1h\"\n\n\
         [routes.fast]\nstrategy = \"passthrough\"\nmodel = \"a\"\n\
         cache = { ttl = \"10m\", scope = \"shared\", max_temperature = 2 }\n\n\
         [routes.plain]\nstrategy = \"passthrough\"\nmodel = \"b\"\n",
    )
    .expect("valid");
    assert_eq!(
        c.cache_rules.get("a"),
        Some(&CacheRule {
            ttl: Duration::from_secs(3600),
            scope: CacheScope::Key,
            max_temperature: 0.0,
        })
    );
    assert_eq!(
        c.cache_rules.get("fast"),
        Some(&CacheRule {
            ttl: Duration::from_secs(600),
            scope: CacheScope::Shared,
            max_temperature: 2.0,
        })
    );
    assert!(!c.cache_rules.contains_key("plain"));
    assert!(!c.cache_rules.contains_key("b"));
    assert_eq!(c.cache, CacheConfig::default());
    assert_eq!(c.cache.max_bytes, 256 * 1024 * 1024);
    assert_eq!(c.cache.max_entries, 100_000);
    let shown = c.describe();
    assert!(
        shown.contains("  a -> sim/a; cached 1h, per key, temperature at most 0\n"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "  fast: passthrough -> a; cached 10m, shared by keys, temperature at most 2\n"
        ),
        "{shown}"
    );
    assert!(shown.contains("  plain: passthrough -> b\n"), "{shown}");
    assert!(
        shown.contains("cache: at most 100000 entries and 268435456 bytes"),
        "{shown}"
    );
}

#[test]
fn every_strategy_takes_a_cache_rule() {
    let c = load(
        "[routes.best]\nstrategy = \"chain\"\ntiers = [\"a\", \"b\"]\n\
         cache = { ttl = \"1d\" }\n",
    )
    .expect("valid");
    assert_eq!(
        c.cache_rules.get("best").map(|r| r.ttl),
        Some(Duration::from_secs(86_400))
    );
}

#[test]
fn a_bad_rule_names_its_key() {
    let got = errors(
        "[routes.r]\nstrategy = \"passthrough\"\nmodel = \"a\"\n\
         cache = { ttl = \"1h\", scope = \"team\", max_temperature = -0.5, colour = 1 }\n",
    );
    assert_eq!(
        got,
        [
            "routes.r.cache.colour: unknown field `colour`, expected one of `ttl`, `scope`, `max_temperature`",
        ],
        "serde reports the unknown key first, and the rule is not read further"
    );
    let got = errors(
        "[routes.r]\nstrategy = \"passthrough\"\nmodel = \"a\"\n\
         cache = { ttl = \"1h\", scope = \"team\", max_temperature = 2.5 }\n",
    );
    assert_eq!(
        got,
        [
            "routes.r.cache.scope: unknown scope \"team\" (expected \"key\" or \"shared\")",
            "routes.r.cache.max_temperature: must be between 0 and 2 (2 caches every request)",
        ]
    );
    assert_eq!(
        errors("[models.c]\nupstream = \"sim\"\ncache = \"1h\"\n"),
        [
            "models.c.cache: must be a table like { ttl = \"1h\", scope = \"key\", max_temperature = 0.0 }"
        ]
    );
    let got = errors("[models.b.cache]\nmax_temperature = -1.0\nttl = \"1h\"\n");
    assert_eq!(
        got,
        ["models.b.cache.max_temperature: must be between 0 and 2 (2 caches every request)"]
    );
}

#[test]
fn ttl_is_required_positive_and_at_most_thirty_days() {
    assert_eq!(
        errors("[models.a.cache]\nscope = \"key\"\n"),
        ["models.a.cache: missing field `ttl`"]
    );
    for ttl in ["0s", "31d"] {
        assert_eq!(
            errors(&format!("[models.a.cache]\nttl = \"{ttl}\"\n")),
            ["models.a.cache.ttl: must be greater than 0 and at most 30 days"],
            "{ttl}"
        );
    }
    let got = errors("[models.a.cache]\nttl = \"soon\"\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("models.a.cache.ttl: "), "{got:?}");
    assert!(got[0].contains("a duration is a string like"), "{got:?}");
    assert!(load("[models.a.cache]\nttl = \"30d\"\n").is_ok());
}

#[test]
fn an_arena_route_may_not_be_cached() {
    assert_eq!(
        errors(
            "[routes.ab]\nstrategy = \"arena\"\ncontestants = [\"a\", \"b\"]\n\
             cache = { ttl = \"1h\" }\n"
        ),
        ["routes.ab.cache: not allowed on an arena route: a blind comparison needs fresh answers"]
    );
}

#[test]
fn the_bounds_are_checked() {
    let c = load("[cache]\nmax_bytes = 1048576\nmax_entries = 3\n").expect("valid");
    assert_eq!(
        c.cache,
        CacheConfig {
            max_bytes: 1 << 20,
            max_entries: 3
        }
    );
    assert_eq!(
        errors("[cache]\nmax_bytes = 10\nmax_entries = 0\n"),
        [
            "cache.max_bytes: must be between 1024 and 1099511627776 (bytes)",
            "cache.max_entries: must be between 1 and 100000000",
        ]
    );
    assert_eq!(
        errors("[cache]\nmax_items = 5\n"),
        ["cache.max_items: unknown field `max_items`, expected `max_bytes` or `max_entries`"]
    );
    let got = errors("[cache]\nmax_bytes = -5\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("cache.max_bytes: "), "{got:?}");
    assert_eq!(
        errors("[caches]\n"),
        [
            "caches: unknown top-level key (expected server, state, telemetry, console, keys, upstreams, models, routes, cache)"
        ]
    );
}
