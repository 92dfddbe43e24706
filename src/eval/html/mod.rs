//! `report.html`: the run's report as one self-contained page, opened
//! from disk: inline CSS and a small inline script, no external URL, no
//! web font. It has the markdown report's tables (the same rows, cells
//! formatted by the same functions of [`super::report`]), an interactive
//! Pareto chart ([`chart`]) and a per-task view ([`tasks`]). Every string
//! from outside (answers, task text, route and group names, checkers'
//! details) goes through [`escape::escape`]; the script reads no data but
//! the page's own attributes and sets only `textContent` and `hidden`, and
//! the page's Content-Security-Policy loads nothing and runs that script
//! only (by its hash).
//! Without JavaScript every figure is still in the tables and the chart.

pub mod chart;
pub mod escape;
pub mod tasks;

use std::fmt::Write;

use super::CostAxis;
use super::report::{self, GroupRow, Head, PairRow, RouteRow};
use super::run::Outcome;
use super::task::Task;
use escape::escape;

const STYLE: &str = r#"
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left}
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
.chart svg{max-width:640px;width:100%;height:auto;font-size:12px}
.grid{stroke:#eee}.axis{stroke:#333}.ci{stroke:#99a;stroke-width:2}.front{fill:none;stroke:#c33;stroke-width:2}
.pt circle{fill:#336;stroke:#336;stroke-width:2}.pt.front circle{fill:#c33;stroke:#c33}
.pt.excluded circle{fill:#fff;stroke:#999}.pt:focus circle,.pt:hover circle{stroke:#000;stroke-width:3}
.pt:focus{outline:none}#pareto-info{display:block;min-height:1.5em;font-weight:bold}
details.task{border:1px solid #ddd;margin:.3em 0;padding:.3em .6em}details.task[hidden]{display:none}
.answers{display:grid;grid-template-columns:repeat(auto-fit,minmax(260px,1fr));gap:.6em}
.answer{border-left:3px solid #ddd;padding-left:.5em;min-width:0}
pre{white-space:pre-wrap;word-break:break-word;background:#f8f8f8;padding:.4em;margin:.2em 0}
.pass{color:#070;font-weight:bold}.fail{color:#b00;font-weight:bold}.cut{color:#777;font-style:italic}
.marks{font-family:monospace;letter-spacing:.2em}
"#;

/// Shows a chart point's figures on hover and focus; filters the tasks.
/// It reads only the page's own attributes and writes only `textContent`
/// and `hidden`: nothing it touches is parsed as HTML.
const SCRIPT: &str = r#"
(function(){
  var info=document.getElementById('pareto-info');
  document.querySelectorAll('#pareto .pt').forEach(function(p){
    var show=function(){ if(info){ info.textContent=p.getAttribute('aria-label'); } };
    p.addEventListener('mouseenter',show); p.addEventListener('focus',show);
  });
  var box=document.getElementById('only-disagree');
  if(box){ box.addEventListener('change',function(){
    document.querySelectorAll('#tasks details.task').forEach(function(d){
      d.hidden=box.checked && d.getAttribute('data-disagree')!=='true';
    });
  }); }
})();
"#;

/// The page's script's SHA-256, base64: its Content-Security-Policy runs
/// that script only, so even markup that got past [`escape::escape`]
/// could run nothing.
pub fn script_hash() -> String {
    use base64::Engine as _;
    use sha2::{Digest, Sha256};
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(SCRIPT.as_bytes()))
}

/// Everything the page is made of: what `report.md` is made of, plus the
/// tasks and this run's results for the per-task view.
pub struct Input<'a> {
    pub head: &'a Head,
    pub rows: &'a [RouteRow],
    pub groups: &'a [GroupRow],
    pub pairs: &'a [PairRow],
    pub routes: &'a [String],
    pub tasks: &'a [Task],
    pub outcomes: &'a [Outcome],
}

/// `report.html`.
pub fn page(i: &Input<'_>) -> String {
    let head = i.head;
    let mut s = String::new();
    let title = escape(&format!("conclave eval: {}", head.title));
    let _ = writeln!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'sha256-{}'\">\
         <title>{title}</title><style>{STYLE}</style></head><body>\n<h1>{title}</h1>",
        script_hash()
    );
    if !head.notes.is_empty() {
        let _ = writeln!(s, "<p>Baselines added:</p><ul>");
        for n in &head.notes {
            let _ = writeln!(s, "<li>{}</li>", escape(n));
        }
        let _ = writeln!(s, "</ul>");
    }
    let _ = writeln!(
        s,
        "<p>Sampling: {} on every request (the judge's too).</p>",
        escape(&head.sampling.to_string())
    );
    if head.partial {
        let _ = writeln!(
            s,
            "<p><strong>Partial:</strong> the run was interrupted; run it again to resume.</p>"
        );
    }
    let _ = writeln!(s, "<h2>Routes</h2>");
    routes_table(&mut s, head.cost, i.rows);
    did(&mut s, i.rows);
    groups_table(&mut s, i.rows, i.groups);
    pairs_table(&mut s, i.pairs);
    let _ = writeln!(s, "<h2>Pareto chart</h2>");
    s.push_str(&chart::chart(i.rows, head.cost));
    let _ = writeln!(
        s,
        "<p>Cost and tokens are the gateway's own records (its event log); a judge's grading is not counted. \
         <code>errors</code>: answers that failed; they count as wrong. A route with more than {:.0} % \
         of its answers failed or degraded is excluded from the Pareto front.</p>",
        100.0 * report::FAIR_SHARE
    );
    let _ = writeln!(s, "<h2>Tasks</h2>");
    s.push_str(&tasks::view(i.tasks, i.routes, i.outcomes));
    let _ = writeln!(s, "<script>{SCRIPT}</script></body></html>");
    s
}

/// A row of cells, each escaped; `n` marks the numeric ones.
fn row(s: &mut String, cells: &[(String, bool)]) {
    s.push_str("<tr>");
    for (c, n) in cells {
        let class = if *n { " class=\"n\"" } else { "" };
        let _ = write!(s, "<td{class}>{}</td>", escape(c));
    }
    s.push_str("</tr>\n");
}

fn header(s: &mut String, names: &[&str]) {
    s.push_str("<table><thead><tr>");
    for n in names {
        let _ = write!(s, "<th scope=\"col\">{}</th>", escape(n));
    }
    s.push_str("</tr></thead><tbody>\n");
}

/// The markdown report's main table, cell for cell.
fn routes_table(s: &mut String, axis: CostAxis, rows: &[RouteRow]) {
    let pareto = match axis {
        CostAxis::Usd => "Pareto (cost)",
        CostAxis::Latency => "Pareto (latency)",
    };
    header(
        s,
        &[
            "route",
            "tasks",
            "accuracy (95 % CI)",
            "cost USD (per task)",
            "tokens in / out",
            "latency p50 / p95 ms",
            "TTFT p50 / p95 ms",
            "errors",
            "failed calls",
            pareto,
        ],
    );
    for r in rows {
        row(
            s,
            &[
                (report::route_cell(r), false),
                (r.n.to_string(), true),
                (report::accuracy_cell(r), true),
                (report::cost(r), true),
                (format!("{} / {}", r.input_tokens, r.output_tokens), true),
                (
                    format!(
                        "{} / {}",
                        report::ms(r.latency_p50),
                        report::ms(r.latency_p95)
                    ),
                    true,
                ),
                (
                    format!("{} / {}", report::ms(r.ttft_p50), report::ms(r.ttft_p95)),
                    true,
                ),
                (r.errors.to_string(), true),
                (report::of(r.failed_calls, r.calls, r.recorded), true),
                (report::front_cell(r), false),
            ],
        );
    }
    s.push_str("</tbody></table>\n");
}

/// What each route did, as the markdown report's list says it.
fn did(s: &mut String, rows: &[RouteRow]) {
    let _ = writeln!(s, "<h2>What each route did</h2><ul>");
    for r in rows {
        let line = report::cells::did(r, str::to_owned, str::to_owned);
        let _ = writeln!(
            s,
            "<li><strong>{}</strong>: {}</li>",
            escape(&r.route),
            escape(&line)
        );
    }
    let _ = writeln!(s, "</ul>");
}

fn groups_table(s: &mut String, rows: &[RouteRow], groups: &[GroupRow]) {
    if groups.len() <= 1 {
        return;
    }
    let _ = writeln!(s, "<h2>Accuracy by group</h2>");
    let mut names = vec!["group"];
    names.extend(rows.iter().map(|r| r.route.as_str()));
    header(s, &names);
    for g in groups {
        let mut cells = vec![(g.group.clone(), false)];
        cells.extend(g.cells.iter().map(|&(k, n)| match n {
            0 => ("–".to_string(), true),
            n => (
                format!("{k}/{n} ({:.0} %)", 100.0 * k as f64 / n as f64),
                true,
            ),
        }));
        row(s, &cells);
    }
    s.push_str("</tbody></table>\n");
}

fn pairs_table(s: &mut String, pairs: &[PairRow]) {
    if pairs.is_empty() {
        return;
    }
    let _ = writeln!(s, "<h2>Pairs (McNemar's exact test on the same tasks)</h2>");
    header(
        s,
        &[
            "A",
            "B",
            "pairs",
            "only A right",
            "only B right",
            "p",
            "verdict",
        ],
    );
    for p in pairs {
        let verdict = match report::winner(p) {
            Some((w, l)) => format!("{w} beats {l}"),
            None => "no significant difference".into(),
        };
        row(
            s,
            &[
                (p.a.clone(), false),
                (p.b.clone(), false),
                (p.pairs.to_string(), true),
                (p.a_only.to_string(), true),
                (p.b_only.to_string(), true),
                (format!("{:.4}", p.p_value), true),
                (verdict, false),
            ],
        );
    }
    s.push_str("</tbody></table>\n");
}

#[cfg(test)]
mod tests;
