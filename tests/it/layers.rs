//! The crate's layering, read from its source: the config is data, so
//! nothing under `src/config/` reaches up into a runtime module (models,
//! the store, upstreams, strategies, telemetry, the graph, …). Building a
//! config into nodes is the graph's business (`src/graph/`). And the
//! request context and telemetry meet only through the sink traits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

/// The modules the config may use: leaves (`redact` for which secrets it
/// can look for, warned about when the config is checked), and the
/// simulator's own config data (`mock::{Behavior, Quirk, Quirks, SwapSim}`,
/// the language of `kind = "mock"` upstreams, checked when the config is).
const CONFIG_MAY_USE: &[&str] = &["config", "wire", "labels", "clock", "mock", "redact"];

/// Every `crate::NAME` a line of code names (comments skipped).
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push((i + 1, name));
        }
    }
    out
}

#[test]
fn the_config_imports_no_runtime_module() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config");
    let mut bad = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // Unit tests may use anything (they parse with the real strategies).
        if path.extension().is_none_or(|e| e != "rs") || name == "tests.rs" {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, module) in crate_paths(&text) {
            if !CONFIG_MAY_USE.contains(&module.as_str()) {
                bad.push(format!("src/config/{name}:{line}: crate::{module}"));
            }
        }
    }
    assert!(files > 5, "read only {files} files in {}", dir.display());
    assert!(
        bad.is_empty(),
        "the config reaches into runtime modules:\n{}",
        bad.join("\n")
    );
}

/// The `crate::` modules the source files under `src/{rel}` (a folder or
/// one file) name, with where.
fn uses_of(rel: &str) -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(rel);
    let files: Vec<std::path::PathBuf> = if path.is_dir() {
        std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .collect()
    } else {
        vec![path]
    };
    assert!(!files.is_empty(), "nothing to read at src/{rel}");
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        for (line, module) in crate_paths(&text) {
            out.push((format!("{name}:{line}"), module));
        }
    }
    out
}

/// Telemetry implements the request's sinks without knowing the request
/// context or the attempt, and the sinks, spans and clock below the
/// context are leaves: no cycle runs through context and telemetry.
#[test]
fn the_request_context_and_telemetry_do_not_import_each_other() {
    let rules: [(&str, &[&str]); 5] = [
        (
            "telemetry",
            &["telemetry", "sink", "span", "clock", "config"],
        ),
        ("context.rs", &["clock", "sink", "span"]),
        ("sink.rs", &["clock", "labels", "redact", "span", "wire"]),
        ("span.rs", &[]),
        ("clock.rs", &[]),
    ];
    let mut bad = Vec::new();
    for (rel, allowed) in rules {
        for (at, module) in uses_of(rel) {
            if !allowed.contains(&module.as_str()) {
                bad.push(format!("src/{rel} ({at}): crate::{module}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "imports against the layering:\n{}",
        bad.join("\n")
    );
}

/// The store (SQLite, Redis, and the limits, records and answers kept in
/// them) sits below everything that uses it: the governor, strategies,
/// upstreams and the API call the store, never the other way round.
#[test]
fn the_store_imports_only_leaves() {
    let allowed = [
        "store",
        "clock",
        "config",
        "model",
        "sink",
        "telemetry",
        "log_line",
    ];
    let mut bad = Vec::new();
    // `log_line` (the log's writer and line throttle) is a leaf.
    for (at, module) in uses_of("log_line.rs") {
        bad.push(format!("src/log_line.rs ({at}): crate::{module}"));
    }
    for rel in ["store", "store/limits", "store/responses"] {
        for (at, module) in uses_of(rel) {
            if !allowed.contains(&module.as_str()) {
                bad.push(format!("src/{rel} ({at}): crate::{module}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "the store reaches up into:\n{}",
        bad.join("\n")
    );
}
