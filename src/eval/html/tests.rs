//! `report.html`: what a model wrote stays inert text, the page is
//! bounded, the chart's points are the report's figures, and the tables
//! say what `report.md` says.

use serde_json::json;

use super::*;
use crate::eval::Sampling;
use crate::eval::report::{groups, markdown, pairs, routes};
use crate::eval::task::parse_tasks;

const PAYLOADS: &[&str] = &[
    "<script>alert('x')</script>",
    "<img src=x onerror=alert(1)>",
    "<a href=\"javascript:alert(1)\">click</a>",
    "<svg onload=alert(1)><script>alert(2)</script></svg>",
    "</pre></details></div><script>alert(3)</script>",
];

/// Every element the page itself writes.
const OWN_TAGS: &[&str] = &[
    "!DOCTYPE",
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "h1",
    "h2",
    "h4",
    "p",
    "ul",
    "ol",
    "li",
    "strong",
    "code",
    "span",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "figure",
    "figcaption",
    "svg",
    "line",
    "text",
    "polyline",
    "g",
    "circle",
    "output",
    "label",
    "input",
    "div",
    "details",
    "summary",
    "section",
    "pre",
    "script",
];

/// The name of every tag opened or closed in `page`.
fn tags(page: &str) -> Vec<String> {
    page.split('<')
        .skip(1)
        .map(|rest| {
            let rest = rest.strip_prefix('/').unwrap_or(rest);
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '!')
                .collect::<String>()
        })
        .collect()
}

fn outcome(route: &str, id: &str, correct: bool, answer: &str, cost: f64) -> Outcome {
    serde_json::from_value(json!({
        "id": id, "route": route, "repeat": 0, "correct": correct,
        "detail": format!("expected 42, got {answer}"), "answer": answer, "status": 200,
        "request_id": format!("{route}-{id}"), "latency_ms": 100.0, "recorded": true,
        "cost_usd": cost, "attempts": 1, "finish_reason": "stop",
    }))
    .unwrap()
}

fn tasks(n: usize, prompt: &str) -> Vec<Task> {
    let text: String = (0..n)
        .map(|i| {
            json!({"id": format!("t{i}"), "input": prompt,
                   "check": {"kind": "number", "expected": 42}})
            .to_string()
                + "\n"
        })
        .collect();
    parse_tasks(&text).unwrap()
}

fn head() -> Head {
    Head {
        title: "tasks.jsonl".into(),
        notes: vec!["baseline <b>".into()],
        sampling: Sampling::default(),
        cost: CostAxis::Usd,
        partial: false,
    }
}

/// The page of `os` on `ts` for `names`, and the markdown of the same.
fn render(ts: &[Task], os: &[Outcome], names: &[String]) -> (String, String) {
    let rows = routes(os, names, CostAxis::Usd);
    let ps = pairs(os, names);
    let gs = groups(os, names, ts);
    let h = head();
    let md = markdown(&h, &rows, &gs, &ps);
    let page = page(&Input {
        head: &h,
        rows: &rows,
        groups: &gs,
        pairs: &ps,
        routes: names,
        tasks: ts,
        outcomes: os,
    });
    (page, md)
}

fn names(rs: &[&str]) -> Vec<String> {
    rs.iter().map(|s| s.to_string()).collect()
}

#[test]
fn every_payload_in_an_answer_a_prompt_or_a_name_stays_text() {
    for payload in PAYLOADS {
        let ts = tasks(2, payload);
        let rs = names(&["a", payload]);
        let os = vec![
            outcome("a", "t0", true, payload, 0.001),
            outcome(payload, "t0", false, payload, 0.002),
            outcome("a", "t1", false, "42", 0.001),
            outcome(payload, "t1", true, "42", 0.002),
        ];
        let (page, _) = render(&ts, &os, &rs);
        assert!(!page.contains(payload), "{payload} raw in the page");
        assert!(
            page.contains(&escape(payload)),
            "{payload} not shown escaped"
        );
        // The page's only markup is its own: one script, one SVG, and
        // every tag one the page writes (no image, no link).
        assert_eq!(page.matches("<script").count(), 1, "{payload}");
        assert_eq!(page.matches("<svg").count(), 1, "{payload}");
        for tag in tags(&page) {
            assert!(OWN_TAGS.contains(&tag.as_str()), "<{tag} from {payload}");
        }
        // A link's target is there only as text.
        assert!(!page.contains("\"javascript:"), "{payload}");
        assert_eq!(page.matches("</pre>").count(), page.matches("<pre").count());
    }
}

#[test]
fn the_page_loads_nothing_from_anywhere() {
    let ts = tasks(3, "What is 6 × 7?");
    let os: Vec<Outcome> = (0..3)
        .flat_map(|i| {
            let id = format!("t{i}");
            [
                outcome("small", &id, i == 0, "41", 0.0001),
                outcome("large", &id, true, "42", 0.01),
            ]
        })
        .collect();
    let (page, _) = render(&ts, &os, &names(&["small", "large"]));
    assert!(page.starts_with("<!DOCTYPE html>"));
    for external in ["http:", "https:", "src=", "@import", "url(", "<link"] {
        // The SVG namespace is the one URL, and it is a name, not a load.
        let hits = page.matches(external).count();
        let allowed = usize::from(external == "http:");
        assert_eq!(hits, allowed, "{external} in the page");
    }
}

#[test]
fn long_answers_are_cut_and_many_tasks_summarised() {
    let n = tasks::MAX_TASKS + 50;
    let long = "x".repeat(tasks::MAX_TEXT + 123);
    let ts = tasks(n, "q");
    let os: Vec<Outcome> = (0..n)
        .flat_map(|i| {
            let id = format!("t{i}");
            [
                outcome("a", &id, i % 2 == 0, &long, 0.001),
                outcome("b", &id, true, "42", 0.002),
            ]
        })
        .collect();
    let (page, _) = render(&ts, &os, &names(&["a", "b"]));
    assert!(!page.contains(&long));
    assert!(page.contains(&"x".repeat(tasks::MAX_TEXT)));
    assert!(page.contains("[123 more characters not shown]"));
    assert_eq!(
        page.matches("<details class=\"task\"").count(),
        tasks::MAX_TASKS
    );
    assert!(
        page.contains("50 more tasks not shown in full (25 of them with the routes disagreeing)"),
        "summary missing"
    );
    assert!(page.contains(" a 25 of 50; b 50 of 50;"));
    // 250 tasks of 2 answers each at the cap: bounded well under what a
    // browser opens.
    assert!(page.len() < 2 * tasks::MAX_TASKS * (tasks::MAX_TEXT + 2000));
}

#[test]
fn disagreement_is_marked_for_the_filter() {
    let ts = tasks(2, "q");
    let os = vec![
        outcome("a", "t0", true, "42", 0.001),
        outcome("b", "t0", false, "41", 0.002),
        outcome("a", "t1", true, "42", 0.001),
        outcome("b", "t1", true, "42", 0.002),
    ];
    let (page, _) = render(&ts, &os, &names(&["a", "b"]));
    assert_eq!(page.matches("data-disagree=\"true\"").count(), 1);
    assert_eq!(page.matches("data-disagree=\"false\"").count(), 1);
    assert!(page.contains("id=\"only-disagree\""));
    assert!(page.contains("<span class=\"pass\">pass</span>"));
    assert!(page.contains("<span class=\"fail\">fail</span>: expected 42, got 41"));
}

#[test]
fn the_chart_points_and_tables_are_the_reports_figures() {
    let ts = tasks(4, "q");
    let mut os = Vec::new();
    for i in 0..4 {
        let id = format!("t{i}");
        os.push(outcome("cheap", &id, i < 2, "x", 0.0001));
        os.push(outcome("dear", &id, i < 3, "x", 0.02));
        os.push(outcome("worse", &id, i < 1, "x", 0.05));
    }
    let rs = names(&["cheap", "dear", "worse"]);
    let rows = routes(&os, &rs, CostAxis::Usd);
    let pts = chart::points(&rows, CostAxis::Usd);
    assert_eq!(pts.len(), 3);
    for (p, r) in pts.iter().zip(&rows) {
        assert_eq!(p.route, r.route);
        assert_eq!(p.accuracy, format!("{:.1}", 100.0 * r.accuracy));
        assert_eq!(p.cost, format!("{:.6}", r.cost_per_task));
        assert_eq!(p.on_front, r.on_front);
    }
    assert_eq!(
        pts.iter().map(|p| p.on_front).collect::<Vec<_>>(),
        [true, true, false]
    );
    // More accurate is higher, dearer is further right.
    assert!(pts[1].y < pts[0].y && pts[1].x > pts[0].x);
    let (page, md) = render(&ts, &os, &rs);
    for r in &rows {
        let acc = report::accuracy_cell(r);
        assert!(md.contains(&acc));
        assert!(page.contains(&format!("<td class=\"n\">{}</td>", escape(&acc))));
        assert!(page.contains(&format!(
            "data-route=\"{}\" data-accuracy=\"{:.1}\" data-cost=\"{:.6}\"",
            r.route,
            100.0 * r.accuracy,
            r.cost_per_task
        )));
    }
    // Every pair of the markdown is a row of the page.
    for p in pairs(&os, &rs) {
        assert!(page.contains(&format!("<td class=\"n\">{:.4}</td>", p.p_value)));
        assert!(md.contains(&format!("| {:.4} |", p.p_value)));
    }
    // Focusable points with their figures for the keyboard and without
    // JavaScript.
    assert_eq!(page.matches("tabindex=\"0\"").count(), 3);
    assert!(page.contains(
        "<title>cheap: accuracy 50.0 %, 0.000100 USD per task, on the Pareto front</title>"
    ));
    assert!(page.contains("Baselines added:</p><ul>\n<li>baseline &lt;b&gt;</li>"));
}

#[test]
fn a_run_with_no_known_cost_has_no_points_but_its_tables() {
    let ts = tasks(1, "q");
    let mut o = outcome("a", "t0", true, "42", 0.0);
    o.recorded = false;
    let (page, _) = render(&ts, &[o], &names(&["a"]));
    assert!(page.contains("nothing to plot"));
    assert!(!page.contains("<svg"));
    assert!(page.contains("<td class=\"n\">100.0 % ("));
}

#[test]
fn the_cost_axis_has_readable_ticks() {
    let ts = tasks(1, "q");
    let os = vec![
        outcome("a", "t0", true, "42", 0.000_2),
        outcome("b", "t0", true, "42", 0.004),
    ];
    let (page, _) = render(&ts, &os, &names(&["a", "b"]));
    // 0 to 5 % past the dearest (0.0042), in quarters.
    for t in ["0", "0.0011", "0.0021", "0.0032", "0.0042"] {
        assert!(
            page.contains(&format!("text-anchor=\"middle\">{t}</text>")),
            "{t}"
        );
    }
}

#[test]
fn the_policy_runs_the_pages_own_script_only() {
    use base64::Engine as _;
    use sha2::{Digest, Sha256};
    let ts = tasks(1, "<script>alert(1)</script>");
    let (page, _) = render(
        &ts,
        &[outcome("a", "t0", true, "<script>x</script>", 0.1)],
        &names(&["a"]),
    );
    let body = page.split("<script>").nth(1).unwrap();
    let script = body.split("</script>").next().unwrap();
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(script.as_bytes()));
    assert!(page.contains(&format!(
        "content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{hash}'\""
    )));
    assert!(!page.contains("unsafe-eval") && !page.contains("script-src 'unsafe-inline'"));
}
