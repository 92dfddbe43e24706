//! The strategy table against the graph: every entry builds its routes
//! (the demo shows one of each), and a builder handed another strategy's
//! route fails cleanly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use super::balance::state::MemberState;
use super::{ALL, STRATEGIES, Strategy};
use crate::graph::{BuildError, Graph, Kept};
use crate::sink::Metrics;
use crate::store::records::Records;
use crate::upstream::registry::Registry;

const MODELS: &str = "[upstreams.sim]\nkind = \"mock\"\n\n[models.a]\nupstream = \"sim\"\n\n\
    [models.b]\nupstream = \"sim\"\n\n";

fn build(routes: &str, kept: &Kept, table: &[Strategy]) -> Result<Graph, BuildError> {
    let config = crate::config::parse(&format!("{MODELS}{routes}"), "t.toml", &|_| None, &ALL)
        .unwrap_or_else(|e| panic!("{e}"));
    let store = Arc::new(crate::store::Store::in_memory(crate::clock::Clock::system()).unwrap());
    Graph::build(
        &config,
        &Records::sqlite(&store),
        &Registry::new(),
        kept,
        &Metrics::noop(),
        table,
    )
}

/// The demo config, which shows a route of every strategy.
const DEMO: &str = include_str!("../../config/demo.toml");

#[test]
fn the_demo_builds_a_route_of_every_strategy_of_the_table() {
    let config =
        crate::config::parse(DEMO, "demo.toml", &|_| None, &ALL).unwrap_or_else(|e| panic!("{e}"));
    let store = Arc::new(crate::store::Store::in_memory(crate::clock::Clock::system()).unwrap());
    let g = Graph::build(
        &config,
        &Records::sqlite(&store),
        &Registry::new(),
        &Kept::default(),
        &Metrics::noop(),
        STRATEGIES,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for s in STRATEGIES {
        let built = g.names.iter().any(|n| {
            g.get(n)
                .is_some_and(|(_, node)| node.is_route && node.strategy == s.name)
        });
        assert!(
            built,
            "config/demo.toml has no route of strategy `{}`",
            s.name
        );
    }
}

#[test]
fn a_strategy_missing_from_the_table_is_an_error_not_a_panic() {
    let route = "[routes.c]\nstrategy = \"chain\"\ntiers = [\"a\", \"b\"]\n";
    let err = build(route, &Kept::default(), &[]).err().unwrap();
    assert!(
        matches!(&err, BuildError::NoBuilder { route, strategy: "chain" } if route == "c"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "route `c`: strategy \"chain\" has no builder in this build"
    );
    // A table whose entry builds with another strategy's builder.
    let wrong = [Strategy {
        build: super::judge::STRATEGY.build,
        ..super::chain::STRATEGY
    }];
    let err = build(route, &Kept::default(), &wrong).err().unwrap();
    assert!(matches!(&err, BuildError::NoBuilder { .. }), "{err}");
}

#[test]
fn a_balance_keeps_its_members_state_across_a_rebuild() {
    let route = "[routes.r]\nstrategy = \"balance\"\nmembers = [\"a\", \"b\"]\n";
    let kept = Kept::default();
    let first = build(route, &kept, STRATEGIES).unwrap();
    let state = kept.get::<MemberState>("r", "a");
    // The kept map, the first graph's balance and this test.
    assert_eq!(Arc::strong_count(&state), 3);
    let _slot = state.try_acquire(None).unwrap();
    // A reload: the new graph's balance shares the running state.
    let second = build(route, &kept, STRATEGIES).unwrap();
    assert_eq!(Arc::strong_count(&state), 5, "with the slot's");
    drop(first);
    assert_eq!(kept.get::<MemberState>("r", "a").in_flight(), 1);
    // Another gateway's state is its own.
    let other = Kept::default();
    let _third = build(route, &other, STRATEGIES).unwrap();
    assert_eq!(other.get::<MemberState>("r", "a").in_flight(), 0);
    drop(second);
}
