//! The integration tests, one binary: each suite is a module (run one with
//! `cargo test --test it NAME::`). Most suites talk HTTP to gateways and
//! mock upstreams served in-process on 127.0.0.1:0 (`common::Srv`); the
//! binary runs as a process only where the process is the point (the CLI,
//! signals and reloads, the real SDK clients, docker, the memory cap).

mod common;
mod sdk_setup;

mod admission;
mod anthropic_sdk;
mod anthropic_upstream;
mod arena;
mod balance;
mod balance_faults;
mod budgets;
mod chain_feedback;
mod chain_streaming;
mod chain_tables;
mod chain_telemetry;
mod claude_code;
mod cli;
mod clients;
mod context_window;
mod cut_streams;
mod dashboards;
mod demo_answers;
mod disconnect;
mod docker;
mod docs;
mod ejection_keys;
mod endpoints;
mod errors;
mod eval;
mod faults;
mod fuzz;
mod governor;
mod health;
mod http2;
mod instances;
mod judge;
mod layers;
mod llama_swap;
mod local_servers;
mod local_servers_turns;
mod messages;
mod midstream_failover;
mod mock_server;
mod native_events;
mod native_responses;
mod observability;
mod oracle;
mod passthrough;
mod pins;
mod probes;
mod race;
mod redaction;
mod reload_lanes;
mod requests;
mod responses;
mod retries;
mod sdk;
mod server_figures;
mod shared_lane;
mod shared_limits;
mod shared_records;
mod shared_state;
mod signals;
mod stored_bounds;
mod stored_responses;
mod timing;
mod token_counts;
mod traces;
mod usage;
mod usage_forms;
mod validation_errors;
mod verdicts;
mod vote;
