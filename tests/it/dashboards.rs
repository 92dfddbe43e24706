//! The metric contract and the dashboards, against the demo: two gateways
//! (`config/demo.toml`, every strategy with its failures and swaps; and
//! `config/governed.toml`, keys with their limits) serve one round of
//! `dashboards/traffic.py`. Then:
//! - every metric of the contract is on `/metrics` with its type, help
//!   text and exactly its labels, whose values come from the config;
//! - every `jq` line of the README's event-log section answers something;
//! - a real Prometheus (Debian's `prometheus`) scrapes both gateways, and
//!   every query of every dashboard panel is valid PromQL that returns at
//!   least one series.
//!
//! Without `prometheus` or `jq` on the PATH those parts are skipped with a
//! message, except under CI (`CI` set), where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;
use serde_json::Value;

/// The contract: name, type and labels of every metric.
const CONTRACT: &[(&str, &str, &[&str])] = &[
    (
        "conclave_requests_total",
        "counter",
        &["route", "strategy", "status"],
    ),
    (
        "conclave_request_duration_seconds",
        "histogram",
        &["route", "strategy"],
    ),
    (
        "conclave_overhead_seconds",
        "histogram",
        &["route", "strategy"],
    ),
    (
        "conclave_request_ttft_seconds",
        "histogram",
        &["route", "strategy"],
    ),
    (
        "conclave_attempts_total",
        "counter",
        &[
            "route", "strategy", "model", "upstream", "role", "verdict", "warm",
        ],
    ),
    (
        "conclave_attempt_duration_seconds",
        "histogram",
        &["route", "strategy", "model", "role"],
    ),
    (
        "conclave_attempt_ttft_seconds",
        "histogram",
        &["route", "model"],
    ),
    ("conclave_tokens_total", "counter", &["model", "kind"]),
    ("conclave_cost_usd_total", "counter", &["model", "key"]),
    (
        "conclave_upstream_errors_total",
        "counter",
        &["upstream", "kind"],
    ),
    (
        "conclave_governor_rejections_total",
        "counter",
        &["key", "scope"],
    ),
    ("conclave_budget_remaining_tokens", "gauge", &["key"]),
    ("conclave_llama_swap_warm", "gauge", &["upstream", "model"]),
    ("conclave_lane_queue_depth", "gauge", &["upstream"]),
    ("conclave_lane_wait_seconds", "histogram", &["upstream"]),
    ("conclave_llama_swap_swaps_total", "counter", &["upstream"]),
    ("conclave_upstream_healthy", "gauge", &["upstream", "model"]),
    (
        "conclave_generation_tokens_per_second",
        "histogram",
        &["upstream", "model"],
    ),
    ("conclave_events_dropped_total", "counter", &[]),
    ("conclave_race_score", "histogram", &["route", "model"]),
    (
        "conclave_race_downgrades_total",
        "counter",
        &["route", "reason"],
    ),
    ("conclave_race_tokens_saved_total", "counter", &["route"]),
    (
        "conclave_arena_votes_total",
        "counter",
        &["route", "model", "outcome"],
    ),
    ("conclave_inflight_requests", "gauge", &["route"]),
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap()
}

/// A config file of the repo with its log and store in the test's folder.
fn local(rel: &str) -> String {
    read(rel)
        .replace("\"conclave-events.jsonl\"", "\"{dir}/events.jsonl\"")
        .replace("\"conclave-state.db\"", "\"{dir}/state.db\"")
}

/// A tool on the PATH; `None` (after saying why) when it is missing and
/// this is not CI.
fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is not installed (.ci/run installs it)"
        );
        eprintln!("SKIPPED: {name} is not on the PATH (apt-get install {name})");
    }
    found
}

/// The label names of one exposition line (`name{a="x",b="y"} 1`).
fn label_pairs(line: &str) -> Vec<(String, String)> {
    let Some(open) = line.find('{') else {
        return Vec::new();
    };
    let close = line.rfind('}').unwrap();
    let body = &line[open + 1..close];
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].trim_start_matches(',').to_owned();
        let after = &rest[eq + 2..];
        let mut end = 0;
        let bytes = after.as_bytes();
        while end < bytes.len() && !(bytes[end] == b'"' && (end == 0 || bytes[end - 1] != b'\\')) {
            end += 1;
        }
        out.push((name, after[..end].to_owned()));
        rest = &after[(end + 1).min(after.len())..];
    }
    out
}

/// Checks the exposition against the contract; the label values seen.
fn check_contract(text: &str, names: &BTreeSet<String>) {
    let mut problems = Vec::new();
    for (name, kind, labels) in CONTRACT {
        if !text.contains(&format!("# TYPE {name} {kind}\n")) {
            problems.push(format!("{name}: no `# TYPE {name} {kind}`"));
        }
        if !text
            .lines()
            .any(|l| l.starts_with(&format!("# HELP {name} ")))
        {
            problems.push(format!("{name}: no help text"));
        }
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                let metric = l.split(['{', ' ']).next().unwrap_or_default();
                metric == *name
                    || (*kind == "histogram"
                        && ["_bucket", "_sum", "_count"]
                            .iter()
                            .any(|s| metric == format!("{name}{s}")))
            })
            .collect();
        if samples.is_empty() {
            problems.push(format!("{name}: no series after the demo traffic"));
        }
        let want: BTreeSet<&str> = labels.iter().copied().collect();
        for line in samples {
            let pairs = label_pairs(line);
            let got: BTreeSet<&str> = pairs
                .iter()
                .map(|(k, _)| k.as_str())
                .filter(|k| *k != "le")
                .collect();
            if got != want {
                problems.push(format!("{name}: labels {got:?}, not {want:?}: {line}"));
            }
            for (k, v) in &pairs {
                let bounded = match k.as_str() {
                    "route" => names.contains(v) || v == "unknown",
                    // Health's model "" is the whole upstream.
                    "model" if v.is_empty() => {
                        ["conclave_upstream_healthy", "conclave_ejections_total"].contains(name)
                    }
                    "model" | "upstream" => names.contains(v),
                    "key" => names.contains(v) || v == "anonymous",
                    _ => true,
                };
                if !bounded {
                    problems.push(format!("{name}: {k}=\"{v}\" is not a config name"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every table name under `[upstreams]`, `[models]`, `[routes]` and every
/// key name of the two configs.
fn config_names() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for file in ["config/demo.toml", "config/governed.toml"] {
        let doc: toml::Table = read(file).parse().unwrap();
        for table in ["upstreams", "models", "routes"] {
            if let Some(t) = doc.get(table).and_then(|t| t.as_table()) {
                out.extend(t.keys().cloned());
            }
        }
        for key in doc
            .get("keys")
            .and_then(|k| k.as_array())
            .into_iter()
            .flatten()
        {
            out.insert(key["name"].as_str().unwrap().to_owned());
        }
    }
    out
}

/// A child process killed when the test ends.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn host(base: &str) -> &str {
    base.trim_start_matches("http://")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_traffic_fills_every_metric_and_every_dashboard_panel() {
    let demo = Srv::gateway(&local("config/demo.toml"));
    let governed = Srv::gateway(&local("config/governed.toml"));
    // The gateways run on this test's runtime: the script is waited for
    // off it.
    let out = tokio::task::block_in_place(|| {
        Command::new("python3")
            .arg(repo().join("dashboards/traffic.py"))
            .args([
                "--demo",
                &demo.base,
                "--governed",
                &governed.base,
                "--rounds",
                "1",
            ])
            .output()
    })
    .unwrap();
    assert!(
        out.status.success(),
        "traffic.py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let text = format!("{}{}", demo.metrics().await, governed.metrics().await);
    check_contract(&text, &config_names());

    let log = demo.dir.path().join("all-events.jsonl");
    let events = format!(
        "{}{}",
        std::fs::read_to_string(demo.path("events.jsonl")).unwrap(),
        std::fs::read_to_string(governed.path("events.jsonl")).unwrap()
    );
    std::fs::write(&log, events).unwrap();
    if let Some(jq) = tool("jq") {
        readme_jq_lines_answer(&jq, &log);
    }
    if let Some(prometheus) = tool("prometheus") {
        every_panel_has_data(&prometheus, &[&demo.base, &governed.base]).await;
    }
}

/// Runs each `jq` line of the README's event-log questions on `log`.
fn readme_jq_lines_answer(jq: &Path, log: &Path) {
    let readme = read("README.md");
    let section = readme
        .split("### Questions the event log answers")
        .nth(1)
        .expect("the README's event-log questions");
    let block = section
        .split("```sh")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let lines: Vec<&str> = block.lines().filter(|l| l.starts_with("jq ")).collect();
    assert!(lines.len() >= 6, "{lines:?}");
    for line in lines {
        let cmd = line.replace("config/conclave-events.jsonl", &log.display().to_string());
        let out = Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && !stdout.trim().is_empty(),
            "{line}\nanswered nothing ({}):\n{}",
            jq.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The exprs of every panel (rows' panels included) of a dashboard.
fn exprs(panels: &[Value], out: &mut Vec<(String, String)>) {
    for p in panels {
        let title = p["title"].as_str().unwrap_or_default().to_owned();
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push((title.clone(), e.to_owned()));
            }
        }
        if let Some(inner) = p["panels"].as_array() {
            exprs(inner, out);
        }
    }
}

/// What the test puts in for Grafana's variables.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__range", "5m")
        .replace("${route}", ".*")
        .replace("${model}", ".*")
        .replace("${key}", ".*")
        .replace("$route", ".*")
        .replace("$model", ".*")
        .replace("$key", ".*")
}

async fn query(http: &reqwest::Client, prom: &str, q: &str) -> Result<usize, String> {
    let r = http
        .get(format!("{prom}/api/v1/query"))
        .query(&[("query", q)])
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let v: Value = r.json().await.map_err(|e| e.to_string())?;
    if v["status"] != "success" {
        return Err(format!("{}: {}", v["errorType"], v["error"]));
    }
    Ok(v["data"]["result"].as_array().map_or(0, Vec::len))
}

async fn every_panel_has_data(prometheus: &Path, gateways: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let targets: Vec<String> = gateways.iter().map(|g| format!("'{}'", host(g))).collect();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: conclave\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .unwrap();
    let port = free_port();
    let prom = format!("http://127.0.0.1:{port}");
    let _prometheus = Guard(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let http = client();
    // Three scrapes of both gateways, so that rates have two points.
    let scraped = eventually(60, || async {
        matches!(
            query(&http, &prom, "count_over_time(up{job=\"conclave\"}[1m]) >= 3").await,
            Ok(n) if n == gateways.len()
        )
    })
    .await;
    let log = std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    assert!(scraped, "Prometheus did not scrape both gateways:\n{log}");
    assert_eq!(query(&http, &prom, "up == 1").await, Ok(gateways.len()));

    let mut failures = Vec::new();
    let mut checked = 0;
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("dashboards"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    for file in files {
        let dash: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let mut found = Vec::new();
        exprs(dash["panels"].as_array().unwrap(), &mut found);
        assert!(!found.is_empty(), "{name} has no queries");
        // Template variables: `label_values(metric, label)` must list values.
        let mut vars: BTreeMap<String, String> = BTreeMap::new();
        for v in dash["templating"]["list"].as_array().into_iter().flatten() {
            let q = v["query"]["query"].as_str().or(v["query"].as_str());
            if let Some(q) = q.filter(|q| q.starts_with("label_values(")) {
                let inner = &q["label_values(".len()..q.len() - 1];
                let (metric, label) = inner.rsplit_once(',').unwrap();
                let promql = format!("count by ({}) ({})", label.trim(), metric.trim());
                vars.insert(v["name"].as_str().unwrap().to_owned(), promql);
            }
        }
        for (var, promql) in vars {
            found.push((format!("variable ${var}"), promql));
        }
        for (title, expr) in found {
            checked += 1;
            let q = substitute(&expr);
            match query(&http, &prom, &q).await {
                Ok(0) => failures.push(format!("{name} / {title}: no series: {q}")),
                Ok(_) => {}
                Err(e) => failures.push(format!("{name} / {title}: {e}: {q}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} dashboard queries failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{checked} dashboard queries returned data");
}

#[test]
fn label_pairs_read_escaped_values() {
    let line = r#"m{a="x",b="y \"q\"",le="0.5"} 1"#;
    assert_eq!(
        label_pairs(line),
        vec![
            ("a".into(), "x".into()),
            ("b".into(), r#"y \"q\""#.into()),
            ("le".into(), "0.5".into())
        ]
    );
}
