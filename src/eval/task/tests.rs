use super::*;

fn err(text: &str) -> String {
    match parse_tasks(text) {
        Ok(tasks) => panic!("parsed {} tasks from {text:?}", tasks.len()),
        Err(e) => e.to_string(),
    }
}

fn one(check: &str) -> Task {
    let line = format!(r#"{{"id": "t", "input": "q", "check": {check}}}"#);
    let mut tasks = parse_tasks(&line).unwrap();
    assert_eq!(tasks.len(), 1);
    tasks.remove(0)
}

/// A task line with `check`, for error tests.
fn with(check: &str) -> String {
    format!(r#"{{"id": "t", "input": "q", "check": {check}}}"#)
}

const OK: &str = r#"{"id": "ok", "input": "q", "check": {"kind": "exact", "expected": "a"}}"#;

#[test]
fn parses_the_contract_example() {
    let text = r#"{"id": "t1", "messages": [{"role":"user","content":"What is 6*7?"}], "check": {"kind": "number", "expected": 42, "tolerance": 0.01}, "answer": "42"}"#;
    let tasks = parse_tasks(text).unwrap();
    let t = &tasks[0];
    assert_eq!(t.id, "t1");
    assert_eq!(t.line, 1);
    assert_eq!(t.answer.as_deref(), Some("42"));
    assert_eq!(t.messages[0]["content"], "What is 6*7?");
    assert!(
        matches!(t.check, Check::Number { expected, tolerance } if expected == 42.0 && tolerance == 0.01)
    );
    assert_eq!(t.check.kind(), "number");
}

#[test]
fn input_becomes_one_user_message() {
    let t = one(r#"{"kind": "exact", "expected": "x"}"#);
    assert_eq!(t.messages, vec![json!({"role": "user", "content": "q"})]);
    assert_eq!(t.answer, None);
}

#[test]
fn comments_and_blank_lines_are_skipped_and_lines_counted() {
    let text = format!(
        "// a comment\n\n# another\n   \n{OK}\r\n  // indented comment\n{}\n",
        OK.replace("\"ok\"", "\"ok2\"")
    );
    let tasks = parse_tasks(&text).unwrap();
    assert_eq!(tasks.len(), 2);
    assert_eq!((tasks[0].line, tasks[1].line), (5, 7));
    // A byte-order mark on the first line is not part of the task.
    assert_eq!(parse_tasks(&format!("\u{feff}{OK}")).unwrap().len(), 1);
}

#[test]
fn every_kind_parses() {
    let cases = [
        (r#"{"kind": "exact", "expected": "42"}"#, "exact"),
        (
            r#"{"kind": "normalized", "expected": "Paris"}"#,
            "normalized",
        ),
        (r#"{"kind": "regex", "pattern": "\\bkg\\b"}"#, "regex"),
        (r#"{"kind": "number", "expected": 1.5}"#, "number"),
        (r#"{"kind": "choice", "expected": "c"}"#, "choice"),
        (
            r#"{"kind": "contains", "expected": ["a", "b"]}"#,
            "contains",
        ),
        (r#"{"kind": "contains", "expected": "a"}"#, "contains"),
        (
            r#"{"kind": "json_schema", "schema": {"type": "object"}}"#,
            "json_schema",
        ),
        (
            r#"{"kind": "judge", "route": "big", "rubric": "is it kind?"}"#,
            "judge",
        ),
    ];
    for (check, kind) in cases {
        assert_eq!(one(check).check.kind(), kind, "{check}");
    }
    assert!(matches!(
        one(cases[4].0).check,
        Check::Choice { expected: 'C' }
    ));
    assert!(matches!(one(cases[3].0).check, Check::Number { tolerance, .. } if tolerance == 1e-6));
    let t = one(r#"{"kind": "json_schema", "schema": {"type": "object"}, "expected": {"a": 1}}"#);
    let Check::JsonSchema { expected, .. } = t.check else {
        panic!("not json_schema")
    };
    assert_eq!(expected.unwrap()["a"], 1);
}

#[test]
fn answer_may_be_any_json() {
    let line = r#"{"id": "t", "input": "q", "check": {"kind": "exact", "expected": "x"}, "answer": {"a": 1}}"#;
    assert_eq!(
        parse_tasks(line).unwrap()[0].answer.as_deref(),
        Some(r#"{"a":1}"#)
    );
}

#[test]
fn unknown_kind_names_the_kinds() {
    let text = format!("{OK}\n\n{}", with(r#"{"kind": "fuzzy"}"#));
    assert_eq!(
        err(&text),
        "line 3: unknown check kind \"fuzzy\" (expected one of exact, normalized, regex, number, choice, contains, json_schema, judge)"
    );
}

#[test]
fn not_json_and_not_an_object() {
    let e = err(&format!(
        "{OK}\n{OK_2}\n{{\"id\": ",
        OK_2 = OK.replace("ok", "k")
    ));
    assert!(e.starts_with("line 3: not JSON: "), "{e}");
    assert_eq!(err("[1, 2]"), "line 1: not a JSON object");
}

#[test]
fn messages_or_input() {
    assert_eq!(
        err(r#"{"id": "t", "check": {"kind": "exact", "expected": "a"}}"#),
        "line 1: no \"messages\" or \"input\""
    );
    let both =
        r#"{"id": "t", "input": "q", "messages": [], "check": {"kind": "exact", "expected": "a"}}"#;
    assert!(err(both).starts_with("line 1: both \"messages\" and \"input\""));
    let empty = r#"{"id": "t", "messages": [], "check": {"kind": "exact", "expected": "a"}}"#;
    assert_eq!(err(empty), "line 1: \"messages\" is empty");
    let roleless = r#"{"id": "t", "messages": [{"content": "x"}], "check": {"kind": "exact", "expected": "a"}}"#;
    assert_eq!(err(roleless), "line 1: message 1 has no string \"role\"");
    let number = r#"{"id": "t", "input": 5, "check": {"kind": "exact", "expected": "a"}}"#;
    assert_eq!(err(number), "line 1: \"input\" must be a string");
}

#[test]
fn id_and_check_are_required() {
    assert_eq!(
        err(r#"{"input": "q", "check": {"kind": "exact", "expected": "a"}}"#),
        "line 1: no \"id\""
    );
    assert_eq!(
        err(r#"{"id": 7, "input": "q", "check": {"kind": "exact", "expected": "a"}}"#),
        "line 1: \"id\" must be a string"
    );
    assert_eq!(err(r#"{"id": "t", "input": "q"}"#), "line 1: no \"check\"");
    assert_eq!(
        err(r#"{"id": "t", "input": "q", "check": {"expected": "a"}}"#),
        "line 1: check has no \"kind\""
    );
}

#[test]
fn duplicate_id_names_the_first_line() {
    let text = format!("# header\n{OK}\n{OK}");
    assert_eq!(err(&text), "line 3: duplicate id \"ok\" (first on line 2)");
}

#[test]
fn number_needs_a_numeric_expected() {
    let e = err(&with(r#"{"kind": "number", "expected": "42"}"#));
    assert_eq!(e, "line 1: check \"number\" needs a numeric \"expected\"");
    let e = err(&with(
        r#"{"kind": "number", "expected": 1, "tolerance": -1}"#,
    ));
    assert!(e.contains("\"tolerance\" must be a number >= 0"), "{e}");
}

#[test]
fn bad_regex_and_bad_schema() {
    let e = err(&with(r#"{"kind": "regex", "pattern": "(unclosed"}"#));
    assert!(e.starts_with("line 1: bad regex \"(unclosed\": "), "{e}");
    assert!(!e.contains('\n'), "{e}");
    let e = err(&with(
        r#"{"kind": "json_schema", "schema": {"type": "integr"}}"#,
    ));
    assert!(e.starts_with("line 1: bad schema: "), "{e}");
    let e = err(&with(r#"{"kind": "json_schema"}"#));
    assert_eq!(
        e,
        "line 1: check \"json_schema\" needs a \"schema\" (a JSON Schema)"
    );
}

#[test]
fn choice_must_be_one_letter() {
    for bad in [r#""AB""#, r#""1""#, r#""""#, "3"] {
        let e = err(&with(&format!(
            r#"{{"kind": "choice", "expected": {bad}}}"#
        )));
        assert_eq!(
            e,
            "line 1: check \"choice\" needs \"expected\" to be a single letter A-Z"
        );
    }
}

#[test]
fn contains_and_judge_fields() {
    let e = err(&with(r#"{"kind": "contains", "expected": []}"#));
    assert!(
        e.starts_with("line 1: check \"contains\" needs \"expected\""),
        "{e}"
    );
    let e = err(&with(r#"{"kind": "contains", "expected": ["a", 1]}"#));
    assert!(e.starts_with("line 1: check \"contains\" needs"), "{e}");
    let e = err(&with(r#"{"kind": "judge", "rubric": "x"}"#));
    assert!(
        e.starts_with("line 1: check \"judge\" needs a string \"route\""),
        "{e}"
    );
}

#[test]
fn unknown_fields_are_denied() {
    let e = err(&with(r#"{"kind": "number", "expected": 1, "tol": 0.1}"#));
    assert_eq!(
        e,
        "line 1: check \"number\" has an unknown field \"tol\" (expected kind, expected, tolerance)"
    );
    let e = err(&with(
        r#"{"kind": "exact", "expected": "a", "pattern": "b"}"#,
    ));
    assert!(e.contains("unknown field \"pattern\""), "{e}");
    let e = err(
        r#"{"id": "t", "input": "q", "anwser": "4", "check": {"kind": "exact", "expected": "a"}}"#,
    );
    assert_eq!(
        e,
        "line 1: unknown field \"anwser\" (expected id, messages, input, check, answer, meta)"
    );
}

#[test]
fn empty_files_have_no_tasks() {
    assert_eq!(err(""), "no tasks");
    assert_eq!(err("\n// only comments\n# here\n\n"), "no tasks");
}

#[test]
fn a_line_over_one_mib_is_refused() {
    let long = format!("{OK}\n{{\"id\": \"{}\"}}", "x".repeat(MAX_LINE));
    let e = err(&long);
    assert!(
        e.starts_with("line 2: longer than 1048576 bytes (1 MiB"),
        "{e}"
    );
}

#[test]
fn at_most_max_tasks() {
    let mut text = String::new();
    for i in 0..=MAX_TASKS {
        text.push_str(&format!(
            "{{\"id\":\"{i}\",\"input\":\"q\",\"check\":{{\"kind\":\"exact\",\"expected\":\"a\"}}}}\n"
        ));
    }
    let e = err(&text);
    assert_eq!(
        e,
        format!("line {}: more than 100000 tasks (the limit)", MAX_TASKS + 1)
    );
}

#[test]
fn read_tasks_names_the_file() {
    let dir = std::env::temp_dir().join(format!("conclave-eval-task-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.jsonl");
    std::fs::write(&good, format!("# tasks\n{OK}\n")).unwrap();
    assert_eq!(read_tasks(&good).unwrap()[0].line, 2);
    let bad = dir.join("tasks.jsonl");
    std::fs::write(&bad, format!("{OK}\n{}\n", with(r#"{"kind": "fuzzy"}"#))).unwrap();
    let e = read_tasks(&bad).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{} line 2: unknown check kind", bad.display())),
        "{e}"
    );
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "\n").unwrap();
    let e = read_tasks(&empty).unwrap_err().to_string();
    assert_eq!(e, format!("{}: no tasks", empty.display()));
    let long = dir.join("long.jsonl");
    std::fs::write(&long, "y".repeat(MAX_LINE + 10)).unwrap();
    let e = read_tasks(&long).unwrap_err().to_string();
    assert!(
        e.ends_with("line 1: longer than 1048576 bytes (1 MiB, the limit per task)"),
        "{e}"
    );
    let binary = dir.join("binary.jsonl");
    std::fs::write(&binary, b"\xff\xfe\n").unwrap();
    let e = read_tasks(&binary).unwrap_err().to_string();
    assert!(e.ends_with("line 1: not UTF-8"), "{e}");
    let missing = dir.join("missing.jsonl");
    let e = read_tasks(&missing).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("cannot read {}", missing.display())),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn meta_group_names_the_report_group() {
    let with = r#"{"id": "g", "input": "q", "check": {"kind": "exact", "expected": "a"}, "meta": {"group": " units ", "source": 3}}"#;
    let t = parse_tasks(with).unwrap().remove(0);
    assert_eq!(t.group(), "units");
    // Without one, the check's kind is the group.
    assert_eq!(
        one(r#"{"kind": "number", "expected": 1}"#).group(),
        "number"
    );
    let bad = format!("{OK}\n{}", with.replace(r#"" units ""#, "7"));
    let e = err(&bad);
    assert!(e.contains("line 2") && e.contains("meta.group"), "{e}");
}
