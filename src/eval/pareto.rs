//! `pareto.svg`: each route's cost (per task in USD, or its median
//! latency) against its accuracy with the 95 % interval, the Pareto front
//! joined, tick values on both axes, a title and a legend. Every label is placed
//! where its box overlaps no other label, point or interval and stays
//! inside the plot (or the gap just above it); a name that finds no such
//! place is drawn as a number and listed under the picture. Text widths
//! are reckoned at 0.6 em a character, wider than a sans-serif font draws
//! them, so the boxes hold.

use std::fmt::Write;

use super::CostAxis;
use super::report::{FAIR_SHARE, RouteRow};

/// The picture's width, and the plot's margins and height.
const W: f64 = 720.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const PLOT_H: f64 = 320.0;
/// Every text's size, a character's width reckoned (0.6 em) and a line's
/// box above and below the baseline.
const FONT: f64 = 12.0;
pub const CHAR_W: f64 = 0.6 * FONT;
pub const ASCENT: f64 = 11.0;
pub const DESCENT: f64 = 3.0;
/// The longest route name drawn by its point; a longer one is shortened
/// (the point's tooltip and the list below have it whole).
const MAX_LABEL: usize = 28;

const FRONT: &str = "#c33";
const OFF: &str = "#336";
const EXCLUDED: &str = "#999";

/// A box: left, top, right, bottom.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub x0: f64,
    pub y0: f64,
    pub x1: f64,
    pub y1: f64,
}

impl Bounds {
    pub fn intersects(&self, o: &Bounds) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }

    pub fn inside(&self, o: &Bounds) -> bool {
        self.x0 >= o.x0 && self.x1 <= o.x1 && self.y0 >= o.y0 && self.y1 <= o.y1
    }
}

/// Where a text of `chars` characters drawn at (`x`, `y`) with this
/// `text-anchor` lies.
pub fn text_bounds(x: f64, y: f64, anchor: &str, chars: usize) -> Bounds {
    let w = chars as f64 * CHAR_W;
    let x0 = match anchor {
        "middle" => x - w / 2.0,
        "end" => x - w,
        _ => x,
    };
    Bounds {
        x0,
        y0: y - ASCENT,
        x1: x0 + w,
        y1: y + DESCENT,
    }
}

/// A text to draw.
struct Text {
    x: f64,
    y: f64,
    anchor: &'static str,
    text: String,
}

impl Text {
    fn bounds(&self) -> Bounds {
        text_bounds(self.x, self.y, self.anchor, self.text.chars().count())
    }

    fn write(&self, s: &mut String, extra: &str) {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="{}"{extra}>{}</text>"#,
            self.x,
            self.y,
            self.anchor,
            escape(&self.text)
        );
    }
}

/// Tick values from 0 to past `max`, 1, 2 or 5 times a power of ten
/// apart, about five of them; and the decimals they need.
fn ticks(max: f64) -> (Vec<f64>, usize) {
    let max = if max > 0.0 && max.is_finite() {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * 0.999)
        .unwrap_or(10.0 * mag);
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    let n = (max / step - 1e-9).ceil().max(1.0) as usize;
    ((0..=n).map(|i| i as f64 * step).collect(), decimals)
}

/// The label positions tried around a point, nearest first: beside it to
/// the right, to the left, above and below, then a line further out.
fn spots() -> Vec<(f64, f64, &'static str)> {
    let mut v = Vec::new();
    for dy in [-6.0, 16.0, -20.0, 30.0, -34.0, 44.0] {
        v.push((9.0, dy, "start"));
        v.push((-9.0, dy, "end"));
        if !(-10.0..=20.0).contains(&dy) {
            v.push((0.0, dy, "middle"));
        }
    }
    v
}

/// `pareto.svg` of `rows` on `axis`. A route whose cost is unknown (no
/// answer recorded) has no place on it; one excluded from the front for
/// its failed or degraded answers is drawn hollow.
pub fn svg(rows: &[RouteRow], axis: CostAxis) -> String {
    let rows: Vec<&RouteRow> = rows.iter().filter(|r| r.cost.is_some()).collect();
    let cost = |r: &RouteRow| r.cost.unwrap_or(0.0);

    // The legend, in rows across the top.
    let mut legend: Vec<(&str, String)> = Vec::new();
    if rows.iter().any(|r| r.on_front) {
        legend.push(("front", "on the Pareto front".into()));
    }
    if rows.iter().any(|r| r.fair && !r.on_front) {
        legend.push(("off", "not on the front".into()));
    }
    if rows.iter().any(|r| !r.fair) {
        legend.push((
            "excluded",
            format!(
                "excluded: over {:.0} % failed or degraded",
                100.0 * FAIR_SHARE
            ),
        ));
    }
    if rows.iter().filter(|r| r.on_front).count() > 1 {
        legend.push(("line", "the front".into()));
    }
    legend.push(("interval", "95 % interval of the accuracy".into()));
    let mut body = String::new();
    let mut texts: Vec<Text> = Vec::new();
    texts.push(title(&rows, axis));
    let (mut lx, mut ly) = (LEFT, 46.0);
    for (glyph, text) in &legend {
        let width = 22.0 + text.chars().count() as f64 * CHAR_W;
        if lx + width > W - RIGHT && lx > LEFT {
            lx = LEFT;
            ly += 20.0;
        }
        let (gx, gy) = (lx + 6.0, ly - 4.0);
        let _ = match *glyph {
            "front" => writeln!(
                body,
                r#"<circle cx="{gx:.1}" cy="{gy:.1}" r="5" fill="{FRONT}"/>"#
            ),
            "off" => writeln!(
                body,
                r#"<circle cx="{gx:.1}" cy="{gy:.1}" r="5" fill="{OFF}"/>"#
            ),
            "excluded" => writeln!(
                body,
                r#"<circle cx="{gx:.1}" cy="{gy:.1}" r="4.5" fill="white" stroke="{EXCLUDED}" stroke-width="1.5"/>"#
            ),
            "line" => writeln!(
                body,
                r#"<line x1="{:.1}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="{FRONT}" stroke-dasharray="5,3"/>"#,
                lx - 2.0,
                lx + 14.0
            ),
            _ => writeln!(
                body,
                r#"<line x1="{gx:.1}" y1="{:.1}" x2="{gx:.1}" y2="{:.1}" stroke="{OFF}"/>"#,
                gy - 7.0,
                gy + 7.0
            ),
        };
        texts.push(Text {
            x: lx + 18.0,
            y: ly,
            anchor: "start",
            text: text.clone(),
        });
        lx += width + 18.0;
    }

    // The plot.
    let top = ly + 32.0;
    let bottom = top + PLOT_H;
    let right = W - RIGHT;
    // Where a route's name may go: the plot, the gap above it (a point at
    // 100 % is named there) and the right margin.
    let room = Bounds {
        x0: LEFT + 1.0,
        y0: top - 22.0,
        x1: W - 4.0,
        y1: bottom - 1.0,
    };
    let max_cost = rows.iter().map(|r| cost(r)).fold(0.0_f64, f64::max);
    let (xticks, decimals) = ticks(max_cost * 1.05);
    let x_max = xticks.last().copied().unwrap_or(1.0);
    // Accuracy from the lowest interval (to the tick below) up to 100 %.
    let floor = rows.iter().map(|r| r.interval.0).fold(1.0_f64, f64::min);
    let step = if floor >= 0.5 { 0.1 } else { 0.2 };
    let lo = ((floor / step).floor() * step).clamp(0.0, 0.9);
    let x = |c: f64| LEFT + (right - LEFT) * c / x_max;
    let y = |a: f64| bottom - (bottom - top) * (a - lo) / (1.0 - lo);
    let _ = writeln!(
        body,
        r#"<line x1="{LEFT}" y1="{bottom:.1}" x2="{right}" y2="{bottom:.1}" stroke="black"/>
<line x1="{LEFT}" y1="{top:.1}" x2="{LEFT}" y2="{bottom:.1}" stroke="black"/>"#
    );
    let mut a = lo;
    while a <= 1.0 + 1e-9 {
        let _ = writeln!(
            body,
            r##"<line x1="{LEFT}" y1="{:.1}" x2="{right}" y2="{:.1}" stroke="#ddd"/>"##,
            y(a),
            y(a)
        );
        texts.push(Text {
            x: LEFT - 6.0,
            y: y(a) + 4.0,
            anchor: "end",
            text: format!("{:.0} %", a * 100.0),
        });
        a += step;
    }
    for &t in &xticks {
        let _ = writeln!(
            body,
            r#"<line x1="{:.1}" y1="{bottom:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/>"#,
            x(t),
            x(t),
            bottom + 5.0
        );
        let label = format!("{t:.decimals$}");
        // The last tick's label ends at the plot's edge, not past it.
        let (tx, anchor) = if x(t) + label.len() as f64 * CHAR_W / 2.0 > W - 2.0 {
            (x(t), "end")
        } else {
            (x(t), "middle")
        };
        texts.push(Text {
            x: tx,
            y: bottom + 19.0,
            anchor,
            text: label,
        });
    }
    texts.push(Text {
        x: (LEFT + right) / 2.0,
        y: bottom + 40.0,
        anchor: "middle",
        text: match axis {
            CostAxis::Usd => "cost per task (USD)".into(),
            CostAxis::Latency => "median latency per task (ms)".into(),
        },
    });

    // The front, the intervals and the points.
    let mut front: Vec<&RouteRow> = rows.iter().copied().filter(|r| r.on_front).collect();
    front.sort_by(|a, b| cost(a).total_cmp(&cost(b)));
    let path: Vec<String> = front
        .iter()
        .map(|r| format!("{:.1},{:.1}", x(cost(r)), y(r.accuracy)))
        .collect();
    if path.len() > 1 {
        let _ = writeln!(
            body,
            r#"<polyline points="{}" fill="none" stroke="{FRONT}" stroke-dasharray="5,3"/>"#,
            path.join(" ")
        );
    }
    let mut points = Vec::new();
    let mut bars = Vec::new();
    for r in &rows {
        let (cx, cy) = (x(cost(r)), y(r.accuracy));
        let (lo_y, hi_y) = (y(r.interval.0), y(r.interval.1));
        let color = match (r.fair, r.on_front) {
            (false, _) => EXCLUDED,
            (true, true) => FRONT,
            (true, false) => OFF,
        };
        let fill = if r.fair { color } else { "white" };
        let _ = writeln!(
            body,
            r#"<g><title>{}</title><line x1="{cx:.1}" y1="{lo_y:.1}" x2="{cx:.1}" y2="{hi_y:.1}" stroke="{color}"/><circle cx="{cx:.1}" cy="{cy:.1}" r="5" fill="{fill}" stroke="{color}" stroke-width="1.5"/></g>"#,
            escape(&r.route)
        );
        points.push(Bounds {
            x0: cx - 6.0,
            y0: cy - 6.0,
            x1: cx + 6.0,
            y1: cy + 6.0,
        });
        bars.push(Bounds {
            x0: cx - 1.0,
            y0: hi_y,
            x1: cx + 1.0,
            y1: lo_y,
        });
    }

    // The labels: each where it overlaps nothing, else a number.
    let mut placed: Vec<Bounds> = Vec::new();
    let mut listed: Vec<String> = Vec::new();
    let fits = |b: &Bounds, placed: &[Bounds], strict: bool| {
        let hit = |boxes: &[Bounds]| boxes.iter().any(|p| p.intersects(b));
        let over = hit(placed) || hit(&points) || (strict && hit(&bars));
        b.inside(&room) && !over
    };
    for r in &rows {
        let (cx, cy) = (x(cost(r)), y(r.accuracy));
        let name: String = if r.route.chars().count() > MAX_LABEL {
            let mut s: String = r.route.chars().take(MAX_LABEL - 1).collect();
            s.push('…');
            s
        } else {
            r.route.clone()
        };
        let number = (listed.len() + 1).to_string();
        let mut chosen = None;
        'search: for (text, strict) in [
            (&name, true),
            (&name, false),
            (&number, true),
            (&number, false),
        ] {
            for (dx, dy, anchor) in spots() {
                let t = Text {
                    x: cx + dx,
                    y: cy + dy,
                    anchor,
                    text: text.clone(),
                };
                if fits(&t.bounds(), &placed, strict) {
                    chosen = Some(t);
                    break 'search;
                }
            }
        }
        match chosen {
            Some(t) => {
                if t.text != name {
                    listed.push(format!("{} = {}", t.text, r.route));
                }
                placed.push(t.bounds());
                t.write(&mut body, r#" class="route""#);
            }
            None => listed.push(format!(
                "{} at ({}, {:.1} %)",
                r.route,
                format_cost(cost(r), decimals + 1),
                100.0 * r.accuracy
            )),
        }
    }

    // What found no place by its point, listed under the axis' title.
    let mut ly = bottom + 64.0;
    let width_chars = ((W - 48.0) / CHAR_W) as usize;
    let mut lx = 24.0;
    if !listed.is_empty() {
        for entry in &listed {
            let text: String = if entry.chars().count() > width_chars {
                let mut s: String = entry.chars().take(width_chars - 1).collect();
                s.push('…');
                s
            } else {
                entry.clone()
            };
            let w = text.chars().count() as f64 * CHAR_W;
            if lx + w > W - 24.0 && lx > 24.0 {
                lx = 24.0;
                ly += 18.0;
            }
            texts.push(Text {
                x: lx,
                y: ly,
                anchor: "start",
                text,
            });
            lx += w + 24.0;
        }
        ly += 8.0;
    } else {
        ly -= 12.0;
    }
    let h = ly.ceil();
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="{FONT}">
<style>.title {{ font-weight: bold }}</style>
<rect width="100%" height="100%" fill="white"/>
"#
    );
    s.push_str(&body);
    for (i, t) in texts.iter().enumerate() {
        t.write(&mut s, if i == 0 { r#" class="title""# } else { "" });
    }
    // The y axis' title, turned; its box is the margin's left strip.
    let _ = writeln!(
        s,
        r#"<text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">accuracy</text>"#,
        (top + bottom) / 2.0,
        (top + bottom) / 2.0
    );
    s.push_str("</svg>\n");
    s
}

/// The picture's title, over the legend: what is plotted against what,
/// and on how many tasks when every route ran the same number.
fn title(rows: &[&RouteRow], axis: CostAxis) -> Text {
    let against = match axis {
        CostAxis::Usd => "cost per task",
        CostAxis::Latency => "median latency per task",
    };
    let mut text = format!("Accuracy against {against}");
    if let Some(first) = rows.first()
        && rows.iter().all(|r| r.n == first.n)
    {
        let _ = write!(
            text,
            ", {} task{} per route",
            first.n,
            if first.n == 1 { "" } else { "s" }
        );
    }
    Text {
        x: LEFT,
        y: 20.0,
        anchor: "start",
        text,
    }
}

fn format_cost(c: f64, decimals: usize) -> String {
    format!("{c:.decimals$}")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests;
