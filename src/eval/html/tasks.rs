//! The page's per-task view: each task's prompt and each route's answers
//! side by side with the check's verdict and why, one collapsible
//! `<details>` per task, marked when the routes disagree (one route right
//! where another is wrong) so the page's filter can show those only.
//! Bounded: an answer or a prompt past [`MAX_TEXT`] characters is cut
//! (the page says so), and past [`MAX_TASKS`] tasks the rest are counted,
//! not shown.

use std::collections::HashMap;
use std::fmt::Write;

use super::super::run::Outcome;
use super::super::task::Task;
use super::escape::{cut, escape};

/// The most characters of one answer or one prompt the page shows.
pub const MAX_TEXT: usize = 2000;
/// The most tasks shown in full; the rest are summarised.
pub const MAX_TASKS: usize = 200;

/// A message's text: its `content` as a string, or the content parts'
/// text, or the JSON of whatever it is.
fn message_text(m: &serde_json::Value) -> String {
    let role = m.get("role").and_then(|r| r.as_str()).unwrap_or("?");
    let content = match m.get("content") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Array(parts)) => parts
            .iter()
            .map(|p| match p.get("text").and_then(|t| t.as_str()) {
                Some(t) => t.to_string(),
                None => p.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    format!("{role}: {content}")
}

/// Escaped, cut at [`MAX_TEXT`], with a note of how much was left out.
fn bounded(s: &str) -> String {
    let (shown, left) = cut(s, MAX_TEXT);
    let mut out = escape(shown);
    if left > 0 {
        let _ = write!(
            out,
            "<span class=\"cut\">… [{left} more characters not shown]</span>"
        );
    }
    out
}

/// Whether some route got the task right and another wrong.
fn disagree(cells: &[Vec<&Outcome>]) -> bool {
    let all: Vec<bool> = cells.iter().flatten().map(|o| o.correct).collect();
    all.iter().any(|&c| c) && all.iter().any(|&c| !c)
}

/// The per-task section.
pub fn view(tasks: &[Task], routes: &[String], outcomes: &[Outcome]) -> String {
    let mut by: HashMap<(&str, &str), Vec<&Outcome>> = HashMap::new();
    for o in outcomes {
        by.entry((o.id.as_str(), o.route.as_str()))
            .or_default()
            .push(o);
    }
    for v in by.values_mut() {
        v.sort_by_key(|o| o.repeat);
    }
    let cells = |t: &Task| -> Vec<Vec<&Outcome>> {
        routes
            .iter()
            .map(|r| {
                by.get(&(t.id.as_str(), r.as_str()))
                    .cloned()
                    .unwrap_or_default()
            })
            .collect()
    };
    let mut s = String::new();
    let split = disagreeing(tasks, &cells);
    let _ = writeln!(
        s,
        "<p>{} tasks; the routes disagree on {} (one right where another is wrong). \
         Answers and prompts longer than {MAX_TEXT} characters are cut; \
         at most {MAX_TASKS} tasks are shown in full.</p>\
         <p><label><input type=\"checkbox\" id=\"only-disagree\"> \
         show only tasks where the routes disagree</label></p>",
        tasks.len(),
        split,
    );
    let _ = writeln!(s, "<div id=\"tasks\">");
    for t in tasks.iter().take(MAX_TASKS) {
        let cs = cells(t);
        let dis = disagree(&cs);
        let marks: String = cs
            .iter()
            .map(
                |c| match (c.iter().any(|o| o.correct), c.iter().all(|o| o.correct)) {
                    _ if c.is_empty() => '·',
                    (true, true) => '✓',
                    (false, _) => '✗',
                    _ => '±',
                },
            )
            .collect();
        let _ = writeln!(
            s,
            "<details class=\"task\" data-disagree=\"{dis}\"><summary><code>{}</code> \
             <span class=\"group\">{}</span> <span class=\"marks\" title=\"{}\">{marks}</span>{}</summary>",
            escape(&t.id),
            escape(t.group()),
            escape(&format!("in route order: {}", routes.join(", "))),
            if dis {
                " <strong>routes disagree</strong>"
            } else {
                ""
            },
        );
        let prompt: Vec<String> = t.messages.iter().map(message_text).collect();
        let _ = writeln!(
            s,
            "<h4>Prompt</h4><pre class=\"prompt\">{}</pre>",
            bounded(&prompt.join("\n\n"))
        );
        if let Some(a) = &t.answer {
            let _ = writeln!(s, "<p>Reference answer: <code>{}</code></p>", bounded(a));
        }
        let _ = writeln!(s, "<div class=\"answers\">");
        for (route, c) in routes.iter().zip(&cs) {
            let _ = writeln!(s, "<section class=\"answer\"><h4>{}</h4>", escape(route));
            if c.is_empty() {
                let _ = writeln!(s, "<p>no result</p>");
            }
            for o in c {
                let verdict = match (o.failed, o.correct) {
                    (true, _) => "<span class=\"fail\">failed</span>",
                    (false, true) => "<span class=\"pass\">pass</span>",
                    (false, false) => "<span class=\"fail\">fail</span>",
                };
                let repeat = if c.len() > 1 {
                    format!(" (repeat {})", o.repeat)
                } else {
                    String::new()
                };
                let _ = writeln!(
                    s,
                    "<p class=\"verdict\">{verdict}{repeat}: {}</p><pre>{}</pre>",
                    bounded(&o.detail),
                    bounded(&o.answer),
                );
            }
            let _ = writeln!(s, "</section>");
        }
        let _ = writeln!(s, "</div></details>");
    }
    let _ = writeln!(s, "</div>");
    let rest = tasks.get(MAX_TASKS..).unwrap_or_default();
    if !rest.is_empty() {
        let _ = write!(
            s,
            "<p class=\"rest\">{} more tasks not shown in full ({} of them with the routes disagreeing); \
             <code>results.jsonl</code> has every answer. Right answers among them:",
            rest.len(),
            disagreeing(rest, &cells),
        );
        for (i, r) in routes.iter().enumerate() {
            let (k, n) = rest.iter().fold((0, 0), |(k, n), t| {
                let c = cells(t);
                let c = c.get(i).map(Vec::as_slice).unwrap_or_default();
                (k + c.iter().filter(|o| o.correct).count(), n + c.len())
            });
            let _ = write!(s, " {} {k} of {n};", escape(r));
        }
        let _ = writeln!(s, "</p>");
    }
    s
}

fn disagreeing<'a>(tasks: &[Task], cells: &impl Fn(&Task) -> Vec<Vec<&'a Outcome>>) -> usize {
    tasks.iter().filter(|t| disagree(&cells(t))).count()
}
