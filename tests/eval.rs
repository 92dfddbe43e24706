//! `conclave eval` as a user runs it: the binary on the demo eval config
//! and the shipped task set. The report agrees with the gateway's own
//! event log and metrics of the same run; a killed run resumes; a bad
//! task file is refused with its line number.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn eval(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conclave"))
        .current_dir(root())
        .arg("eval")
        .args(["--config", "config/eval-demo.toml"])
        .args(args)
        .output()
        .unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_report_is_what_the_gateway_recorded() {
    let out = tempfile::tempdir().unwrap();
    let o = eval(&[
        "--tasks",
        "eval/smoke.jsonl",
        "--routes",
        "small,large,cascade",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let results = lines(&out.path().join("results.jsonl"));
    assert_eq!(results.len(), 36);
    let events = lines(&out.path().join("events.jsonl"));
    let requests: HashMap<&str, &Value> = events
        .iter()
        .filter(|e| e["event"] == "request")
        .map(|e| (e["request_id"].as_str().unwrap(), e))
        .collect();
    let mut total = 0.0;
    for r in &results {
        let e = requests[r["request_id"].as_str().unwrap()];
        assert_eq!(r["cost_usd"].as_f64(), e["cost_usd"].as_f64(), "{r}");
        assert_eq!(r["input_tokens"], e["input_tokens"]);
        assert_eq!(r["output_tokens"], e["output_tokens"]);
        assert_eq!(r["route"], e["route"]);
        total += r["cost_usd"].as_f64().unwrap();
    }
    assert!(total > 0.0);
    // Every dollar the metrics counted is a dollar of the report.
    let prom = std::fs::read_to_string(out.path().join("metrics.prom")).unwrap();
    let metered: f64 = prom
        .lines()
        .filter(|l| l.starts_with("conclave_cost_usd_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!((metered - total).abs() < 1e-9, "{metered} vs {total}");
    // The report's accuracy for each route is its results' share correct.
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    for route in ["small", "large", "cascade"] {
        let n = results.iter().filter(|r| r["route"] == route).count();
        let k = results
            .iter()
            .filter(|r| r["route"] == route && r["correct"] == true)
            .count();
        let row = format!("| {route} | {n} | {:.1} % (", 100.0 * k as f64 / n as f64);
        assert!(report.contains(&row), "{row} not in\n{report}");
    }
    assert!(report.contains("McNemar"));
    assert!(
        std::fs::read_to_string(out.path().join("pareto.svg"))
            .unwrap()
            .contains("<svg")
    );
    // The chain says what it did.
    assert!(report.contains("**cascade**: answered by"), "{report}");

    // The same run again grades every answer the same (seeded models).
    let again = tempfile::tempdir().unwrap();
    let o = eval(&[
        "--tasks",
        "eval/smoke.jsonl",
        "--routes",
        "small,large,cascade",
        "--out",
        again.path().to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let graded = |rs: &[Value]| -> HashMap<(String, String), (bool, String)> {
        rs.iter()
            .map(|r| {
                let key = (r["id"].to_string(), r["route"].to_string());
                (key, (r["correct"] == true, r["answer"].to_string()))
            })
            .collect()
    };
    let second = lines(&again.path().join("results.jsonl"));
    assert_eq!(graded(&results), graded(&second));

    // Another route into the same folder: the earlier results stay, the
    // report is of this run's route.
    let o = eval(&[
        "--tasks",
        "eval/smoke.jsonl",
        "--routes",
        "medium",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    assert!(o.status.success());
    assert_eq!(lines(&out.path().join("results.jsonl")).len(), 48);
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(
        report.contains("| medium | 12 |") && !report.contains("| small |"),
        "{report}"
    );
}

#[test]
fn baselines_are_the_strongest_member_and_its_samples() {
    let out = tempfile::tempdir().unwrap();
    let o = eval(&[
        "--tasks",
        "eval/smoke.jsonl",
        "--routes",
        "cascade,best-of-3",
        "--baselines",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let routes: HashSet<String> = lines(&out.path().join("results.jsonl"))
        .iter()
        .map(|r| r["route"].as_str().unwrap().to_string())
        .collect();
    let want = [
        "cascade",
        "best-of-3",
        "large",
        "self-moa-large",
        "self-moa-large-synth",
    ];
    assert_eq!(routes, want.iter().map(|s| s.to_string()).collect());
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(
        report.contains(
            "`self-moa-large`: `large` three times, the best picked by `best-of-3`'s judge"
        ),
        "{report}"
    );
    // The race of samples is a race: it has winners among the samples.
    assert!(
        report.contains("**self-moa-large**: answered by"),
        "{report}"
    );
}

#[test]
fn a_killed_run_resumes_where_it_stopped() {
    let out = tempfile::tempdir().unwrap();
    let results = out.path().join("results.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_conclave"))
        .current_dir(root())
        .args([
            "eval",
            "--config",
            "config/eval-demo.toml",
            "--tasks",
            "eval/tasks.jsonl",
        ])
        .args(["--routes", "large", "--concurrency", "1", "--out"])
        .arg(out.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait (bounded) until a few results are written, then kill it.
    let mut written = 0;
    for _ in 0..600 {
        written = std::fs::read_to_string(&results).map_or(0, |t| t.lines().count());
        if written >= 5 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(written >= 5, "no results after 30 s");
    let before = std::fs::read_to_string(&results).unwrap().lines().count();
    assert!(before < 320, "the run finished before the kill");

    let o = eval(&[
        "--tasks",
        "eval/tasks.jsonl",
        "--routes",
        "large",
        "--concurrency",
        "16",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("results taken from the earlier run"),
        "{stdout}"
    );
    let all = lines(&results);
    assert_eq!(all.len(), 320);
    let ids: HashSet<&str> = all.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 320);
}

#[test]
fn a_malformed_task_file_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(
        &tasks,
        "{\"id\": \"a\", \"input\": \"2+2?\", \"check\": {\"kind\": \"number\", \"expected\": 4}}\n\
         \n\
         {\"id\": \"b\", \"input\": \"hi\", \"check\": {\"kind\": \"fuzzy\"}}\n",
    )
    .unwrap();
    let o = eval(&[
        "--tasks",
        tasks.to_str().unwrap(),
        "--routes",
        "small",
        "--out",
        dir.path().join("out").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("line 3"), "{err}");
    assert!(err.contains("fuzzy"), "{err}");

    let o = eval(&["--tasks", "eval/smoke.jsonl", "--routes", "small,nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown route \"nope\""));
}
