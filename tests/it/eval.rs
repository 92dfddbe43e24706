//! `conclave eval` as a user runs it: the binary on the demo eval config
//! and the shipped task set. The report agrees with the gateway's own
//! event log and metrics of the same run; a killed run resumes; a bad
//! task file is refused with its line number; a running gateway with
//! keys is evaluated over HTTP and grades as the same config in-process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::Served;

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
    // The shipped tasks' `meta.group`: one row per family, 3 tasks each.
    for group in [
        "arithmetic",
        "unit conversion",
        "JSON extraction",
        "multiple choice",
    ] {
        assert!(
            report.contains(&format!("| {group} | ")),
            "{group}: {report}"
        );
    }
    assert!(
        std::fs::read_to_string(out.path().join("pareto.svg"))
            .unwrap()
            .contains("<svg")
    );
    // The chain says what it did.
    assert!(report.contains("**cascade**: answered by"), "{report}");
    // report.html: each route's accuracy cell as report.md states it, a
    // focusable chart point per route, every task with every answer.
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    for route in ["small", "large", "cascade"] {
        let line = report
            .lines()
            .find(|l| l.starts_with(&format!("| {route} | ")))
            .unwrap();
        let accuracy = line.split(" | ").nth(2).unwrap();
        assert!(accuracy.ends_with(')'), "{line}");
        assert!(
            html.contains(&format!("<td class=\"n\">{accuracy}</td>")),
            "{route}: {accuracy} not in report.html"
        );
        assert!(html.contains(&format!("data-route=\"{route}\" data-accuracy=")));
    }
    assert_eq!(html.matches("<details class=\"task\"").count(), 12);
    for r in &results {
        let id = r["id"].as_str().unwrap();
        assert!(html.contains(&format!("<code>{id}</code>")), "{id}");
        let answer = r["answer"].as_str().unwrap();
        let shown = conclave::eval::html::escape::escape(answer);
        assert!(html.contains(&format!("<pre>{shown}</pre>")), "{answer}");
    }
    assert!(!html.contains("https:") && !html.contains("<link"));

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

/// `conclave eval` with these arguments only (no `--config`), and env.
fn eval_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conclave"))
        .current_dir(root())
        .arg("eval")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn a_running_gateway_with_keys_grades_as_in_process() {
    const SECRET: &str = "sk-eval-test-secret-1234";
    let demo = std::fs::read_to_string(root().join("config/eval-demo.toml")).unwrap();
    let tasks = root().join("eval/tasks.jsonl").display().to_string();
    let toml = demo
        .replace(
            "event_log = \"eval-demo-events.jsonl\"",
            "event_log = \"{dir}/events.jsonl\"",
        )
        .replace("../eval/tasks.jsonl", &tasks)
        + "\n[[keys]]\nname = \"evaluator\"\nkey_env = \"EVAL_TEST_KEY\"\n";
    let gw = common::Proc::gateway_env(&toml, &[("EVAL_TEST_KEY", SECRET)]);
    let routes = "small,cascade,best-of-3";
    let remote = tempfile::tempdir().unwrap();
    let url_args = |out: &Path| -> Vec<String> {
        [
            "--url",
            &gw.v1(),
            "--tasks",
            "eval/smoke.jsonl",
            "--routes",
            routes,
            "--out",
            out.to_str().unwrap(),
        ]
        .map(str::to_string)
        .to_vec()
    };
    let args = url_args(remote.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // Without the key the gateway lists nothing: a clear error, exit 1.
    let o = eval_with(&args, &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("did not list its models: HTTP 401"), "{err}");

    // With the key and the gateway's event log: every answer, its cost.
    let events = gw.path("events.jsonl");
    let mut with = args.clone();
    with.extend(["--events", events.to_str().unwrap()]);
    let o = eval_with(&with, &[("CONCLAVE_EVAL_KEY", SECRET)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let over_http = lines(&remote.path().join("results.jsonl"));
    assert_eq!(over_http.len(), 36);
    let logged = lines(&events);
    let requests: HashMap<&str, &Value> = logged
        .iter()
        .filter(|e| e["event"] == "request")
        .map(|e| (e["request_id"].as_str().unwrap(), e))
        .collect();
    for r in &over_http {
        let e = requests[r["request_id"].as_str().unwrap()];
        assert_eq!(r["cost_usd"].as_f64(), e["cost_usd"].as_f64(), "{r}");
        assert_eq!(e["key"], "evaluator");
        assert_eq!(r["recorded"], true);
        assert_eq!(r["failed"], false, "{r}");
        // A streamed chain's or race's model is read from the event log.
        assert!(r["served_by"].is_string(), "{r}");
    }
    // The gateway's metrics of the run, read with the key.
    let prom = std::fs::read_to_string(remote.path().join("metrics.prom")).unwrap();
    assert!(prom.contains("conclave_cost_usd_total{"), "{prom}");

    // The same config in-process, with the key as a flag: the same grades
    // (the simulated models draw from the task's run, not the process).
    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("conclave.toml");
    std::fs::write(
        &file,
        toml.replace("{dir}", config.path().to_str().unwrap()),
    )
    .unwrap();
    let local = tempfile::tempdir().unwrap();
    let o = eval_with(
        &[
            "--config",
            file.to_str().unwrap(),
            "--tasks",
            "eval/smoke.jsonl",
        ]
        .into_iter()
        .chain(["--routes", routes, "--out", local.path().to_str().unwrap()])
        .collect::<Vec<_>>(),
        &[("EVAL_TEST_KEY", SECRET)],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("name one with --key"));
    let o = eval_with(
        &[
            "--config",
            file.to_str().unwrap(),
            "--key",
            SECRET,
            "--tasks",
            "eval/smoke.jsonl",
            "--routes",
            routes,
            "--out",
            local.path().to_str().unwrap(),
        ],
        &[("EVAL_TEST_KEY", SECRET)],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let in_process = lines(&local.path().join("results.jsonl"));
    let graded = |rs: &[Value]| -> HashMap<(String, String), (bool, String, String)> {
        rs.iter()
            .map(|r| {
                let key = (r["id"].to_string(), r["route"].to_string());
                let v = (
                    r["correct"] == true,
                    r["answer"].to_string(),
                    // The request's cost sums its calls in the order they
                    // end: equal to the last few bits.
                    format!("{:.12}", r["cost_usd"].as_f64().unwrap()),
                );
                (key, v)
            })
            .collect()
    };
    let (http, here) = (graded(&over_http), graded(&in_process));
    let differ: Vec<_> = http
        .iter()
        .filter(|(k, v)| here.get(*k) != Some(*v))
        .map(|(k, v)| (k, v, here.get(k)))
        .collect();
    assert!(differ.is_empty(), "over HTTP vs in-process: {differ:#?}");

    // Without --events the cost is unknown, said so, not shown as zero.
    let bare = tempfile::tempdir().unwrap();
    let args = url_args(bare.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = eval_with(&args, &[("CONCLAVE_EVAL_KEY", SECRET)]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no --events"));
    let report = std::fs::read_to_string(bare.path().join("report.md")).unwrap();
    assert!(report.contains("| small | 12 | "), "{report}");
    assert!(report.contains("| – |"), "{report}");
    // Tokens are the streams' usage.
    for r in lines(&bare.path().join("results.jsonl")) {
        assert!(r["output_tokens"].as_u64().unwrap() > 0, "{r}");
    }

    // The key is in no file the eval wrote.
    for dir in [remote.path(), local.path(), bare.path()] {
        for f in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
            assert!(!text.contains(SECRET));
        }
    }
}

/// One task per check kind, answered right, wrong and malformed by
/// simulated models, graded through the binary; a judge route grades the
/// judge task.
#[test]
fn every_check_kind_grades_right_wrong_and_malformed_answers() {
    // (tag, check, right, wrong, malformed)
    let kinds: [(&str, &str, &str, &str, &str); 8] = [
        (
            "T-exact",
            r#"{"kind": "exact", "expected": "blue"}"#,
            "blue",
            "red",
            "",
        ),
        (
            "T-normalized",
            r#"{"kind": "normalized", "expected": "New York"}"#,
            "  new york. ",
            "Boston",
            "!!!",
        ),
        (
            "T-regex",
            r#"{"kind": "regex", "pattern": "^[0-9]{4}-[0-9]{2}$"}"#,
            "2024-05",
            "May 2024",
            "2024-5-",
        ),
        (
            "T-number",
            r#"{"kind": "number", "expected": 42, "tolerance": 0.01}"#,
            "The answer is 42.",
            "41",
            "about forty-two",
        ),
        (
            "T-choice",
            r#"{"kind": "choice", "expected": "B"}"#,
            "B",
            "C",
            "I cannot decide",
        ),
        (
            "T-contains",
            r#"{"kind": "contains", "expected": ["alpha", "beta"]}"#,
            "Beta and ALPHA",
            "alpha only",
            "",
        ),
        (
            "T-json",
            r#"{"kind": "json_schema", "schema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}, "expected": {"n": 3}}"#,
            r#"{"n": 3}"#,
            r#"{"n": 4}"#,
            r#"{"n": 3"#,
        ),
        (
            "T-judge",
            r#"{"kind": "judge", "route": "grader", "rubric": "Names the right city."}"#,
            "It is Paris.",
            "It is Lyon.",
            "",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut tasks = String::new();
    let mut toml = String::from("[upstreams.sim]\nkind = \"mock\"\n");
    for (i, (tag, check, ..)) in kinds.iter().enumerate() {
        tasks.push_str(&format!(
            "{{\"id\": \"k{i}\", \"input\": \"{tag}: answer.\", \"check\": {check}}}\n"
        ));
    }
    for (col, model) in [(2, "right"), (3, "wrong"), (4, "malformed")] {
        toml.push_str(&format!(
            "[upstreams.sim.models.{model}]\nreply = {{ text = \"?\" }}\n"
        ));
        for k in &kinds {
            let answer = [k.2, k.3, k.4][col - 2];
            toml.push_str(&format!(
                "[[upstreams.sim.models.{model}.rules]]\nwhen_contains = \"{}\"\nthen = {{ reply = {{ text = {} }} }}\n",
                k.0,
                serde_json::to_string(answer).unwrap()
            ));
        }
        toml.push_str(&format!("[models.{model}]\nupstream = \"sim\"\n"));
    }
    // The judge accepts an answer that names Paris (its prompt holds the
    // answer; the task has no reference answer to give it away).
    toml.push_str(
        "[upstreams.sim.models.grader]\nreply = { json = { accept = false, feedback = \"wrong city\" } }\n\
         [[upstreams.sim.models.grader.rules]]\nwhen_contains = \"Paris\"\n\
         then = { reply = { json = { accept = true, feedback = \"names Paris\" } } }\n\
         [models.grader]\nupstream = \"sim\"\n",
    );
    let config = dir.path().join("conclave.toml");
    std::fs::write(&config, toml).unwrap();
    let file = dir.path().join("tasks.jsonl");
    std::fs::write(&file, tasks).unwrap();
    let out = dir.path().join("out");
    let o = eval_with(
        &[
            "--config",
            config.to_str().unwrap(),
            "--tasks",
            file.to_str().unwrap(),
            "--routes",
            "right,wrong,malformed",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let results = lines(&out.join("results.jsonl"));
    assert_eq!(results.len(), 24);
    for r in &results {
        let want = r["route"] == "right";
        assert_eq!(r["correct"], want, "{r}");
        // An empty answer is no answer: it fails (and counts as wrong);
        // any other malformed one is graded wrong.
        let empty = r["answer"] == "";
        assert_eq!(r["failed"], empty, "{r}");
        if empty {
            assert!(
                r["detail"].as_str().unwrap().contains("empty answer"),
                "{r}"
            );
        }
        assert!(!r["detail"].as_str().unwrap().is_empty(), "{r}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("| right | 8 | 100.0 % ("), "{report}");
    assert!(report.contains("| wrong | 8 | 0.0 % ("), "{report}");
    // The three empty answers (exact, contains, judge) are its errors.
    assert!(
        report.contains("- **malformed**: answered by malformed 100 %; 3 of 8 answers failed"),
        "{report}"
    );
    // Without `meta.group`, each check kind is its own group.
    assert!(report.contains("## Accuracy by group"), "{report}");
    assert!(
        report.contains("| json_schema | 1/1 (100 %) | 0/1 (0 %) | 0/1 (0 %) |"),
        "{report}"
    );
    // Only the right route is right: the pair's test counts 8 to 0.
    assert!(
        report.contains("| right | wrong | 8 | 8 | 0 | 0.0078 | **right** beats wrong |"),
        "{report}"
    );
}

/// Issue 40: the demo config run from another folder by its absolute path
/// finds its task file (relative to the config's folder, not the working
/// directory), so its routes score as they do from the repository root.
#[test]
fn a_config_named_from_another_folder_reads_its_own_files() {
    let elsewhere = tempfile::tempdir().unwrap();
    let config = root().join("config/eval-demo.toml");
    let tasks = root().join("eval/smoke.jsonl");
    let out = elsewhere.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_conclave"))
        .current_dir(elsewhere.path())
        .arg("eval")
        .args(["--config", config.to_str().unwrap()])
        .args(["--tasks", tasks.to_str().unwrap(), "--routes", "large"])
        .args(["--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let results = lines(&out.join("results.jsonl"));
    assert_eq!(results.len(), 12);
    let right = results.iter().filter(|r| r["correct"] == true).count();
    assert!(right >= 6, "{right} of 12 right: {results:?}");
    assert!(
        results.iter().all(|r| !r["answer"]
            .to_string()
            .contains("cannot read the task file")),
        "{results:?}"
    );
}

/// What a route answered, as `conclave mock` plays it over HTTP, for the
/// answers that are not answers (issue 41).
const BROKEN_MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.good]
reply = { text = "42" }

[upstreams.sim.models.empty]
reply = { text = "" }

[upstreams.sim.models.broken]
reply = { text = "forty-two, and then some" }
fail = "error_event"
fail_after_chars = 5

[upstreams.sim.models.cut]
reply = { text = "forty-two, and then some" }
fail = "cut"
fail_after_chars = 5

[upstreams.sim.models.capped]
reply = { text = "42" }
finish_reason = "length"

[upstreams.sim.models.best]
reply = { text = "42" }

[upstreams.sim.models.best-sample-2]
reply = { text = "42" }

[upstreams.sim.models.best-sample-3]
status = 500
error_message = "the third sample's server is down"

[upstreams.sim.models.scorer]
reply = { json = { score = 8, reason = "fine" } }

[upstreams.sim.models.grader]
reply = { json = { accept = true, feedback = "it says 42" } }
"#;

/// The eval's config in front of that mock: every model on one OpenAI
/// upstream that does not retry, a race whose strongest member is `best`.
fn broken_config(mock_v1: &str) -> String {
    let mut t = format!(
        "[upstreams.up]\nkind = \"openai\"\nbase_url = \"{mock_v1}\"\ntimeout = \"5s\"\nretries = {{ max = 0 }}\n\n"
    );
    for m in [
        "good", "empty", "broken", "cut", "capped", "scorer", "grader",
    ] {
        t.push_str(&format!(
            "[models.{m}]\nupstream = \"up\"\nprice = {{ input_per_mtok = 1, output_per_mtok = 1 }}\n\n"
        ));
    }
    t.push_str(
        "[models.best]\nupstream = \"up\"\nprice = { input_per_mtok = 5, output_per_mtok = 20 }\n\n\
         [routes.duo]\nstrategy = \"race\"\ncandidates = [\"good\", \"best\"]\njudge = \"scorer\"\n\
         rubric = { judge = 0.8, finish = 0.2 }\nbaseline_tokens_per_run = 200\n",
    );
    t
}

/// Issue 41: empty, cut and broken answers are errors (not wrong answers
/// nobody noticed), such a route is off the Pareto front, a Self-MoA
/// baseline whose third sample failed is degraded, an answer capped at
/// `max_tokens` is graded and noted, and every request the eval made
/// (the judge's too) carried its temperature, seed and max_tokens, as the
/// upstream's recorded bodies show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_are_not_answers_are_errors_and_sampling_is_sent() {
    let mock = common::Srv::mock(BROKEN_MOCK);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("conclave.toml");
    std::fs::write(&config, broken_config(&mock.v1())).unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    let mut text = String::new();
    for i in 0..4 {
        text.push_str(&format!(
            "{{\"id\": \"n{i}\", \"input\": \"Task {i}: what is 6 times 7?\", \"check\": {{\"kind\": \"number\", \"expected\": 42}}}}\n"
        ));
    }
    text.push_str(
        "{\"id\": \"j\", \"input\": \"Say what 6 times 7 is.\", \"check\": {\"kind\": \"judge\", \"route\": \"grader\", \"rubric\": \"Says 42.\"}}\n",
    );
    std::fs::write(&tasks, text).unwrap();
    let out = dir.path().join("out");
    let args = |routes: &str, extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "--config",
            config.to_str().unwrap(),
            "--tasks",
            tasks.to_str().unwrap(),
            "--routes",
            routes,
            "--seed",
            "7",
            "--max-tokens",
            "64",
            "--concurrency",
            "4",
            "--out",
            out.to_str().unwrap(),
        ]
        .map(str::to_string)
        .to_vec();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let all = "good,empty,broken,cut,capped,duo";
    let run = |routes: &str, extra: &[&str]| {
        let a = args(routes, extra);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        eval_with(&a, &[])
    };
    let o = tokio::task::block_in_place(|| run(all, &["--baselines"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let results = lines(&out.join("results.jsonl"));
    // 6 routes and the 2 baselines (`best`, `self-moa-best`), 5 tasks.
    assert_eq!(results.len(), 40);
    for r in &results {
        assert_eq!(
            r["sampling"],
            serde_json::json!({"temperature": 0.0, "seed": 7, "max_tokens": 64}),
            "{r}"
        );
        let route = r["route"].as_str().unwrap();
        let failed = r["failed"] == true;
        match route {
            "empty" | "broken" | "cut" => {
                assert!(failed && r["correct"] == false, "{r}");
            }
            _ => assert!(!failed, "{r}"),
        }
        if route == "empty" {
            assert!(
                r["detail"].as_str().unwrap().contains("empty answer"),
                "{r}"
            );
        }
        if route == "capped" {
            assert_eq!(r["finish_reason"], "length", "{r}");
            assert_eq!(r["correct"], true, "{r}");
        }
        if route == "self-moa-best" {
            assert_eq!(
                (r["samples"].as_u64(), r["failed_samples"].as_u64()),
                (Some(3), Some(1)),
                "{r}"
            );
        }
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    let row = |route: &str| {
        report
            .lines()
            .find(|l| {
                l.starts_with(&format!("| {route} |")) || l.starts_with(&format!("| {route} ("))
            })
            .unwrap_or_else(|| panic!("no row for {route}: {report}"))
            .to_string()
    };
    for route in ["empty", "broken", "cut"] {
        let r = row(route);
        assert!(r.contains("| 0.0 % (") && r.contains("| 5 | "), "{r}");
        assert!(
            r.contains("excluded (100 % failed or degraded)") && !r.contains('★'),
            "{r}"
        );
    }
    assert!(
        row("good").ends_with("| 0 | 0 of 5 | ★ |"),
        "{}",
        row("good")
    );
    assert!(
        report.contains("Sampling: temperature 0, seed 7, max_tokens 64"),
        "{report}"
    );
    assert!(
        report.contains("5 answers capped at max_tokens"),
        "{report}"
    );
    let moa = row("self-moa-best");
    assert!(moa.starts_with("| self-moa-best (degraded) | 5 |"), "{moa}");
    assert!(moa.contains("excluded (100 % failed or degraded)"), "{moa}");
    assert!(
        report.contains(
            "5 of 15 samples failed; **degraded**: 5 of 5 answers made of fewer samples than asked"
        ),
        "{report}"
    );
    // The failed sample is a failed call of the gateway's.
    assert!(moa.contains("| 5 of "), "{moa}");

    // Every request the upstream got from the eval (the judge's too)
    // carried the run's sampling settings.
    let got = mock.received().await;
    for model in ["good", "empty", "broken", "cut", "capped", "grader", "best"] {
        let bodies: Vec<&Value> = got
            .iter()
            .filter(|q| q["model"] == model)
            .map(|q| &q["body"])
            .collect();
        assert!(!bodies.is_empty(), "{model} was not asked");
        for b in bodies {
            assert_eq!(b["temperature"], 0.0, "{model}: {b}");
            assert_eq!(b["seed"], 7, "{model}: {b}");
            assert_eq!(b["max_tokens"], 64, "{model}: {b}");
        }
    }

    // The picture: the failed routes hollow, ticks, a legend.
    let svg = std::fs::read_to_string(out.join("pareto.svg")).unwrap();
    assert!(
        svg.contains("excluded: over 5 % failed or degraded"),
        "{svg}"
    );
    assert!(svg.contains("cost per task (USD)"), "{svg}");
    assert!(svg.contains(r##"fill="white" stroke="#999""##), "{svg}");

    // The same settings again: every result is taken from the first run.
    let o = tokio::task::block_in_place(|| run(all, &["--baselines"]));
    assert!(o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("(40 results taken from the earlier run)"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // Another temperature is another plan: all of it runs again, the
    // first run's results stay in the file, the report is of this one.
    let o = tokio::task::block_in_place(|| run("good", &["--temperature", "0.5"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("taken from the earlier run"));
    let all = lines(&out.join("results.jsonl"));
    assert_eq!(all.len(), 45);
    assert_eq!(
        all.iter()
            .filter(|r| r["sampling"]["temperature"] == 0.5)
            .count(),
        5
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("Sampling: temperature 0.5, seed 7"),
        "{report}"
    );
    assert!(!report.contains("| empty |"), "{report}");
}

/// `--cost latency` weighs the median latency, known without prices.
#[test]
fn the_latency_axis_needs_no_price() {
    let out = tempfile::tempdir().unwrap();
    let o = eval(&[
        "--tasks",
        "eval/smoke.jsonl",
        "--routes",
        "small,large",
        "--cost",
        "latency",
        "--temperature",
        "server",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(report.contains("| Pareto (latency) |"), "{report}");
    assert!(
        report.contains("temperature not sent (the server's default)"),
        "{report}"
    );
    let svg = std::fs::read_to_string(out.path().join("pareto.svg")).unwrap();
    assert!(svg.contains("median latency per task (ms)"), "{svg}");
    for r in lines(&out.path().join("results.jsonl")) {
        assert!(r["sampling"]["temperature"].is_null(), "{r}");
    }
    // A temperature out of range is refused.
    let o = eval(&[
        "--tasks",
        "eval/smoke.jsonl",
        "--routes",
        "small",
        "--temperature",
        "3",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("from 0 to 2"));
}
