//! The picture holds: tick values on both axes, a legend, and no label
//! over another, over a point, or past the picture's edges, however
//! crowded the routes.

use regex::Regex;

use super::*;

fn row(route: &str, cost: f64, accuracy: f64, fair: bool, on_front: bool) -> RouteRow {
    RouteRow {
        route: route.into(),
        n: 30,
        correct: (accuracy * 30.0) as u64,
        accuracy,
        interval: ((accuracy - 0.15).max(0.0), (accuracy + 0.15).min(1.0)),
        errors: if fair { 0 } else { 29 },
        capped: 0,
        recorded: 30,
        calls: 30,
        failed_calls: 0,
        samples: 0,
        failed_samples: 0,
        degraded: 0,
        cost_usd: cost * 30.0,
        cost_per_task: cost,
        input_tokens: 0,
        output_tokens: 0,
        latency_p50: None,
        latency_p95: None,
        ttft_p50: None,
        ttft_p95: None,
        served_by: Vec::new(),
        strategy: Vec::new(),
        cost: Some(cost),
        fair,
        on_front,
    }
}

/// Every text of `svg` as (its box, its text, its class), and the
/// viewBox; a turned text's box is turned too.
pub fn texts(svg: &str) -> (Vec<(Bounds, String, String)>, Bounds) {
    let vb = Regex::new(r#"viewBox="0 0 ([\d.]+) ([\d.]+)""#).unwrap();
    let c = vb.captures(svg).expect("a viewBox");
    let view = Bounds {
        x0: 0.0,
        y0: 0.0,
        x1: c[1].parse().unwrap(),
        y1: c[2].parse().unwrap(),
    };
    let text = Regex::new(
        r#"<text x="([-\d.]+)" y="([-\d.]+)"(?: transform="rotate\(-90 [-\d.]+ [-\d.]+\)")? text-anchor="(\w+)"(?: class="(\w+)")?>([^<]*)</text>"#,
    )
    .unwrap();
    let mut out = Vec::new();
    for c in text.captures_iter(svg) {
        let (x, y): (f64, f64) = (c[1].parse().unwrap(), c[2].parse().unwrap());
        let body = c[5]
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&amp;", "&");
        let mut b = text_bounds(x, y, &c[3], body.chars().count());
        if c[0].contains("rotate(-90") {
            // Turned about its anchor: x and y swap around it.
            b = Bounds {
                x0: x - (y - b.y0).max(b.y1 - y),
                x1: x + (y - b.y0).max(b.y1 - y),
                y0: y - (b.x1 - x).abs().max((x - b.x0).abs()),
                y1: y + (b.x1 - x).abs().max((x - b.x0).abs()),
            };
        }
        let class = c.get(4).map_or("", |m| m.as_str()).to_string();
        out.push((b, body, class));
    }
    assert_eq!(out.len(), svg.matches("<text").count(), "every text parsed");
    (out, view)
}

/// The points' boxes.
fn points(svg: &str) -> Vec<Bounds> {
    let re = Regex::new(r#"<circle cx="([-\d.]+)" cy="([-\d.]+)" r="5""#).unwrap();
    re.captures_iter(svg)
        .map(|c| {
            let (x, y): (f64, f64) = (c[1].parse().unwrap(), c[2].parse().unwrap());
            Bounds {
                x0: x - 5.0,
                y0: y - 5.0,
                x1: x + 5.0,
                y1: y + 5.0,
            }
        })
        .collect()
}

/// No text over another or over a point, all inside the picture.
pub fn assert_laid_out(svg: &str) {
    let (texts, view) = texts(svg);
    for (i, (a, ta, _)) in texts.iter().enumerate() {
        assert!(a.inside(&view), "{ta:?} {a:?} outside {view:?}");
        for (b, tb, _) in texts.iter().skip(i + 1) {
            assert!(!a.intersects(b), "{ta:?} {a:?} overlaps {tb:?} {b:?}");
        }
        for p in points(svg) {
            assert!(!a.intersects(&p), "{ta:?} {a:?} over a point {p:?}");
        }
    }
}

#[test]
fn ticks_are_round_values_past_the_largest() {
    let (t, d) = ticks(0.00033);
    let want = [0.0, 0.0001, 0.0002, 0.0003, 0.0004];
    assert_eq!((t.len(), d), (want.len(), 4));
    assert!(
        t.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12),
        "{t:?}"
    );
    assert_eq!(ticks(1250.0).0, vec![0.0, 500.0, 1000.0, 1500.0]);
    assert_eq!(ticks(0.0).0.len(), 6, "no cost: 0 to 1");
    let (t, d) = ticks(0.009);
    assert_eq!(d, 3);
    assert!(
        (t.last().copied().unwrap_or_default() - 0.01).abs() < 1e-12,
        "{t:?}"
    );
}

#[test]
fn the_picture_has_ticks_a_legend_and_every_label_in_place() {
    let rows = vec![
        row("small", 0.0001, 0.62, true, true),
        row("large", 0.0021, 0.91, true, true),
        row("cascade", 0.0006, 0.86, true, true),
        row("best-of-3", 0.0032, 0.9, true, false),
        row("passthrough", 0.000_01, 0.0, false, false),
    ];
    let svg = svg(&rows, CostAxis::Usd);
    assert_laid_out(&svg);
    let (texts, _) = texts(&svg);
    let all: Vec<&str> = texts.iter().map(|t| t.1.as_str()).collect();
    for want in [
        "cost per task (USD)",
        "0.000",
        "0.001",
        "0.004",
        "on the Pareto front",
        "not on the front",
        "excluded: over 5 % failed or degraded",
        "the front",
        "95 % interval of the accuracy",
        "0 %",
        "100 %",
    ] {
        assert!(all.contains(&want), "{want:?} not in {all:?}");
    }
    // Every route is named by its point.
    for r in &rows {
        assert!(
            texts.iter().any(|t| t.2 == "route" && t.1 == r.route),
            "{} unlabelled: {all:?}",
            r.route
        );
    }
    // The excluded route is drawn hollow.
    assert!(svg.contains(r##"fill="white" stroke="#999""##), "{svg}");
}

#[test]
fn crowded_and_long_named_routes_never_overlap() {
    // Twelve routes at nearly one point, two with the same figures, and
    // names too long for the plot.
    let mut rows: Vec<RouteRow> = (0..12)
        .map(|i| {
            row(
                &format!("route-number-{i}"),
                0.001 + 0.000_001 * f64::from(i),
                0.8 + 0.001 * f64::from(i),
                true,
                i == 11,
            )
        })
        .collect();
    rows.push(row("same-a", 0.002, 0.5, true, false));
    rows.push(row("same-b", 0.002, 0.5, true, false));
    rows.push(row(
        &"a-very-long-route-name-".repeat(8),
        0.003,
        1.0,
        true,
        true,
    ));
    rows.push(row("edge <&> \"quoted\"", 0.0, 1.0, true, true));
    let svg = svg(&rows, CostAxis::Latency);
    assert_laid_out(&svg);
    let (texts, _) = texts(&svg);
    // What found no place by its point is listed under the picture.
    assert!(
        texts.iter().any(|t| t.1.contains(" = route-number-")),
        "{:?}",
        texts.iter().map(|t| &t.1).collect::<Vec<_>>()
    );
    assert!(texts.iter().any(|t| t.1 == "median latency per task (ms)"));
}

/// Each point's centre, by the route its tooltip names.
fn centres(svg: &str) -> Vec<(String, f64, f64, f64, f64)> {
    let re = Regex::new(
        r#"<g><title>([^<]*)</title><line x1="[-\d.]+" y1="([-\d.]+)" x2="[-\d.]+" y2="([-\d.]+)" stroke="[^"]+"/><circle cx="([-\d.]+)" cy="([-\d.]+)""#,
    )
    .unwrap();
    re.captures_iter(svg)
        .map(|c| {
            let f = |i: usize| c[i].parse::<f64>().unwrap();
            (c[1].to_string(), f(4), f(5), f(2), f(3))
        })
        .collect()
}

#[test]
fn a_title_every_interval_and_the_front_joined_in_cost_order() {
    let rows = vec![
        row("large", 0.0021, 0.91, true, true),
        row("small", 0.0001, 0.62, true, true),
        row("cascade", 0.0006, 0.86, true, true),
        row("best-of-3", 0.0032, 0.8, true, false),
    ];
    let pic = svg(&rows, CostAxis::Usd);
    assert_laid_out(&pic);
    let (texts, _) = texts(&pic);
    let title = texts.iter().find(|t| t.2 == "title").expect("a title");
    assert_eq!(
        title.1,
        "Accuracy against cost per task, 30 tasks per route"
    );
    // The title is the topmost text.
    assert!(texts.iter().all(|t| t.0.y0 >= title.0.y0), "{texts:?}");

    // Every route's accuracy interval, through its point, as long as the
    // interval is wide on the accuracy scale (0.3 here for each).
    let c = centres(&pic);
    assert_eq!(c.len(), rows.len(), "{pic}");
    let scale = |r: &(String, f64, f64, f64, f64)| r.3 - r.4;
    for r in &c {
        let (_, _, cy, lo, hi) = r;
        assert!(lo > hi && *lo >= *cy && *cy >= *hi, "{r:?}");
    }
    // A clipped interval (at 91 %, up to 100 %) is drawn shorter.
    let by = |n: &str| c.iter().find(|r| r.0 == n).unwrap().clone();
    assert!(scale(&by("large")) < scale(&by("small")) - 1.0);
    assert!((scale(&by("small")) - scale(&by("best-of-3"))).abs() < 0.2);

    // The front is one line through its points, cheapest first; the route
    // off the front is not on it.
    let re = Regex::new(r#"<polyline points="([^"]+)""#).unwrap();
    let lines: Vec<_> = re.captures_iter(&pic).collect();
    assert_eq!(lines.len(), 1, "{pic}");
    let joined: Vec<(f64, f64)> = lines[0][1]
        .split(' ')
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect();
    let want: Vec<(f64, f64)> = ["small", "cascade", "large"]
        .iter()
        .map(|n| (by(n).1, by(n).2))
        .collect();
    assert_eq!(joined.len(), want.len());
    for (a, b) in joined.iter().zip(&want) {
        assert!(
            (a.0 - b.0).abs() < 0.11 && (a.1 - b.1).abs() < 0.11,
            "{joined:?} {want:?}"
        );
    }

    // Routes of different sizes: no task count in the title; on latency.
    let mut mixed = rows.clone();
    mixed[0].n = 12;
    let pic = svg(&mixed, CostAxis::Latency);
    let (all, _) = self::texts(&pic);
    let title = all.iter().find(|t| t.2 == "title").expect("a title");
    assert_eq!(title.1, "Accuracy against median latency per task");
}
