//! Charts as inline SVG, written directly: text stays text (drawn in the reader's own
//! fonts, so no font file is needed, and a page's numbers and labels can be searched and
//! tested), a chart scales to the page's width, and nothing is fetched to show it.

use crate::data::Date;
use std::fmt::Write;

/// Series colours (colour-blind safe: Okabe and Ito's, black last).
pub const PALETTE: [&str; 8] = ["#0072B2", "#D55E00", "#009E73", "#E69F00", "#56B4E9", "#CC79A7", "#F0E442", "#000000"];

const W: f64 = 720.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 46.0;

/// What the x axis holds.
#[derive(Clone, Debug)]
pub enum X {
    /// Days since 1970-01-01 ([`Date`]'s number), ticked at years or months.
    Dates,
    Numbers,
    /// Named slots 0, 1, 2 … (quintiles, sectors).
    Categories(Vec<String>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Line,
    Bars,
    Dots,
}

struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    kind: Kind,
    colour: &'static str,
}

/// A chart of lines and bars against one x and one y axis.
pub struct Chart {
    x: X,
    x_label: String,
    y_label: String,
    height: f64,
    series: Vec<Series>,
    /// Dashed rules across the plot (a multiple-testing bar, a diagonal's anchor), each
    /// with its name.
    rules: Vec<Rule>,
}

struct Rule {
    /// Across at this y, or (vertical) up at this x.
    vertical: bool,
    at: f64,
    name: String,
}

impl Chart {
    pub fn new(x: X, x_label: &str, y_label: &str) -> Chart {
        Chart { x, x_label: x_label.into(), y_label: y_label.into(), height: 280.0, series: Vec::new(), rules: Vec::new() }
    }

    pub fn height(mut self, h: f64) -> Chart {
        self.height = h;
        self
    }

    /// A joined line; a NaN y breaks it.
    pub fn line(mut self, name: &str, points: Vec<(f64, f64)>) -> Chart {
        let colour = PALETTE[self.series.len() % PALETTE.len()];
        self.series.push(Series { name: name.into(), points, kind: Kind::Line, colour });
        self
    }

    /// Bars from 0 to each y (several bar series share each category's slot).
    pub fn bars(mut self, name: &str, points: Vec<(f64, f64)>) -> Chart {
        let colour = PALETTE[self.series.len() % PALETTE.len()];
        self.series.push(Series { name: name.into(), points, kind: Kind::Bars, colour });
        self
    }

    /// Points not joined (one per alpha, say).
    pub fn dots(mut self, name: &str, points: Vec<(f64, f64)>) -> Chart {
        let colour = PALETTE[self.series.len() % PALETTE.len()];
        self.series.push(Series { name: name.into(), points, kind: Kind::Dots, colour });
        self
    }

    /// A horizontal rule at `y`.
    pub fn rule(mut self, y: f64, name: &str) -> Chart {
        self.rules.push(Rule { vertical: false, at: y, name: name.into() });
        self
    }

    /// A vertical rule at `x`.
    pub fn vrule(mut self, x: f64, name: &str) -> Chart {
        self.rules.push(Rule { vertical: true, at: x, name: name.into() });
        self
    }

    /// Category labels are slanted when they are too many or too long to sit side by side
    /// (at about 6.2 units a character); the chart grows by the room they take.
    fn slanted(&self) -> Option<f64> {
        match &self.x {
            X::Categories(c) => {
                let named = c.len().min(24);
                let longest = c.iter().map(|n| n.chars().count()).max().unwrap_or(0);
                let slot = (W - LEFT - RIGHT) / named.max(1) as f64;
                (longest as f64 * 6.2 > slot).then(|| longest.min(28) as f64 * 4.6)
            }
            _ => None,
        }
    }

    /// Whether any series has a finite point (a chart without one is not drawn).
    pub fn has_data(&self) -> bool {
        self.series.iter().any(|s| s.points.iter().any(|p| p.0.is_finite() && p.1.is_finite()))
    }

    pub fn svg(&self) -> String {
        // Slanted labels get room below the plot, which keeps its height.
        let slant = self.slanted().unwrap_or(0.0);
        let (h, bottom) = (self.height + slant, BOTTOM + slant);
        let (pw, ph) = (W - LEFT - RIGHT, h - TOP - bottom);
        let finite = || self.series.iter().flat_map(|s| s.points.iter().copied()).filter(|p| p.0.is_finite() && p.1.is_finite());
        let (mut x0, mut x1) = finite().fold((f64::INFINITY, f64::NEG_INFINITY), |a, p| (a.0.min(p.0), a.1.max(p.0)));
        let (mut y0, mut y1) = finite().fold((f64::INFINITY, f64::NEG_INFINITY), |a, p| (a.0.min(p.1), a.1.max(p.1)));
        for r in &self.rules {
            if r.vertical {
                (x0, x1) = (x0.min(r.at), x1.max(r.at));
            } else {
                (y0, y1) = (y0.min(r.at), y1.max(r.at));
            }
        }
        if self.series.iter().any(|s| s.kind == Kind::Bars) {
            (y0, y1) = (y0.min(0.0), y1.max(0.0));
        }
        if !x0.is_finite() {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        if let X::Categories(c) = &self.x {
            (x0, x1) = (-0.5, c.len() as f64 - 0.5);
        } else if self.series.iter().any(|s| s.kind == Kind::Bars) {
            // Room for the first and last bar.
            let n = self.series.iter().filter(|s| s.kind == Kind::Bars).map(|s| s.points.len()).max().unwrap_or(1).max(1) as f64;
            let half = (x1 - x0) / n / 2.0;
            (x0, x1) = (x0 - half, x1 + half);
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        // A flat series gets a range around its value (a range of a rounding error would
        // be ticked in nine decimals).
        let flat = (y1 - y0) <= 1e-9 * y0.abs().max(y1.abs()).max(1e-300);
        let pad = if flat { (y0.abs() * 0.1).max(1e-3) } else { (y1 - y0) * 0.05 };
        let (y0, y1) = (y0 - pad, y1 + pad);
        let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
        let sy = |y: f64| TOP + (y1 - y) / (y1 - y0) * ph;

        let mut s = String::new();
        let _ = write!(s, r#"<svg class="chart" viewBox="0 0 {W} {h}" role="img">"#);
        // Grid and y ticks.
        let yt = nice_ticks(y0, y1, 6);
        let step = yt.get(1).map_or(1.0, |b| b - yt[0]);
        for y in &yt {
            let _ = write!(s, r##"<line class="grid" x1="{LEFT}" x2="{:.1}" y1="{1:.1}" y2="{1:.1}" stroke="#e5e5e5"/>"##, LEFT + pw, sy(*y));
            let _ = write!(s, r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"#, LEFT - 6.0, sy(*y) + 4.0, esc(&number(*y, step)));
        }
        // X ticks.
        let slanted = self.slanted().is_some();
        for (x, label) in self.x_ticks(x0, x1) {
            let _ = write!(s, r##"<line class="grid" x1="{0:.1}" x2="{0:.1}" y1="{TOP}" y2="{1:.1}" stroke="#f0f0f0"/>"##, sx(x), TOP + ph);
            if slanted {
                let _ = write!(s, r#"<text class="tick" transform="translate({:.1} {:.1}) rotate(-40)" text-anchor="end" font-size="11">{}</text>"#, sx(x) + 3.0, TOP + ph + 12.0, esc(&crate::cli::table::short(&label, 28)));
            } else {
                let _ = write!(s, r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#, sx(x), TOP + ph + 16.0, esc(&label));
            }
        }
        if y0 < 0.0 && y1 > 0.0 {
            let _ = write!(s, r##"<line class="zero" x1="{LEFT}" x2="{:.1}" y1="{1:.1}" y2="{1:.1}" stroke="#888"/>"##, LEFT + pw, sy(0.0));
        }
        // Bars, side by side within a slot.
        let bar_series: Vec<&Series> = self.series.iter().filter(|s| s.kind == Kind::Bars).collect();
        for (k, b) in bar_series.iter().enumerate() {
            let slot = match &self.x {
                X::Categories(_) => pw / (x1 - x0),
                _ => pw / b.points.len().max(1) as f64,
            };
            let width = (slot * 0.8 / bar_series.len() as f64).max(0.5);
            let _ = write!(s, r#"<g class="series bars" fill="{}">"#, b.colour);
            for &(x, y) in b.points.iter().filter(|p| p.0.is_finite() && p.1.is_finite()) {
                let left = sx(x) - slot * 0.4 + width * k as f64;
                let (top, bottom) = (sy(y.max(0.0)), sy(y.min(0.0)));
                let _ = write!(s, r#"<rect x="{left:.2}" y="{top:.2}" width="{width:.2}" height="{:.2}"/>"#, (bottom - top).max(0.3));
            }
            s.push_str("</g>");
        }
        for l in self.series.iter().filter(|s| s.kind == Kind::Line) {
            let mut d = String::new();
            let mut pen = false;
            for (i, &(x, y)) in l.points.iter().enumerate() {
                if x.is_finite() && y.is_finite() {
                    let _ = write!(d, "{}{:.1} {:.1}", if pen { " L" } else { " M" }, sx(x), sy(y));
                    // A point with no neighbour to join is drawn as a dot.
                    let next = l.points.get(i + 1).is_some_and(|p| p.0.is_finite() && p.1.is_finite());
                    if !pen && !next {
                        let _ = write!(s, r#"<circle class="series dot" cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#, sx(x), sy(y), l.colour);
                    }
                    pen = true;
                } else {
                    pen = false;
                }
            }
            let _ = write!(s, r#"<path class="series line" d="{}" fill="none" stroke="{}" stroke-width="1.6"/>"#, d.trim_start(), l.colour);
        }
        for d in self.series.iter().filter(|s| s.kind == Kind::Dots) {
            let _ = write!(s, r#"<g class="series dots" fill="{}" fill-opacity="0.75">"#, d.colour);
            for &(x, y) in d.points.iter().filter(|p| p.0.is_finite() && p.1.is_finite()) {
                let _ = write!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3"/>"#, sx(x), sy(y));
            }
            s.push_str("</g>");
        }
        for r in &self.rules {
            if r.vertical {
                let _ = write!(s, r##"<line class="rule" x1="{0:.1}" x2="{0:.1}" y1="{TOP}" y2="{1:.1}" stroke="#444" stroke-dasharray="5 4"/>"##, sx(r.at), TOP + ph);
                // Named on the side with room.
                let (x, anchor) = if sx(r.at) > LEFT + pw * 0.7 { (sx(r.at) - 4.0, "end") } else { (sx(r.at) + 4.0, "start") };
                let _ = write!(s, r#"<text x="{x:.1}" y="{:.1}" text-anchor="{anchor}" font-size="11">{}</text>"#, TOP + 14.0, esc(&r.name));
            } else {
                let _ = write!(s, r##"<line class="rule" x1="{LEFT}" x2="{:.1}" y1="{1:.1}" y2="{1:.1}" stroke="#444" stroke-dasharray="5 4"/>"##, LEFT + pw, sy(r.at));
                let _ = write!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"#, LEFT + pw - 4.0, sy(r.at) - 4.0, esc(&r.name));
            }
        }
        // Frame, axis labels and the legend.
        let _ = write!(s, r##"<rect x="{LEFT}" y="{TOP}" width="{pw:.1}" height="{ph:.1}" fill="none" stroke="#999"/>"##);
        let _ = write!(s, r#"<text class="axis-label" x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">{}</text>"#, LEFT + pw / 2.0, h - 8.0, esc(&self.x_label));
        let _ = write!(s, r#"<text class="axis-label" transform="translate(14 {:.1}) rotate(-90)" text-anchor="middle" font-size="12">{}</text>"#, TOP + ph / 2.0, esc(&self.y_label));
        let mut lx = LEFT;
        for se in &self.series {
            let _ = write!(s, r#"<rect x="{lx:.1}" y="8" width="14" height="10" fill="{}"/>"#, se.colour);
            let _ = write!(s, r#"<text class="legend" x="{:.1}" y="17" font-size="12">{}</text>"#, lx + 18.0, esc(&se.name));
            lx += 30.0 + 6.5 * se.name.chars().count() as f64;
        }
        s.push_str("</svg>");
        s
    }

    fn x_ticks(&self, x0: f64, x1: f64) -> Vec<(f64, String)> {
        match &self.x {
            // Past 24 slots (generations 0 to 50, say) every k-th is named.
            X::Categories(c) => {
                let every = c.len().div_ceil(24).max(1);
                c.iter().enumerate().filter(|(i, _)| i % every == 0).map(|(i, n)| (i as f64, n.clone())).collect()
            }
            X::Numbers => {
                let t = nice_ticks(x0, x1, 8);
                let step = t.get(1).map_or(1.0, |b| b - t[0]);
                t.into_iter().map(|x| (x, number(x, step))).collect()
            }
            X::Dates => date_ticks(x0, x1),
        }
    }
}

/// Round-numbered ticks (steps of 1, 2 or 5 times a power of ten) inside `lo..=hi`, about
/// `n` of them.
pub fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / n.max(1) as f64;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// A tick's label with as many decimals as its step needs.
fn number(x: f64, step: f64) -> String {
    let decimals = if step >= 1.0 { 0 } else { (-step.log10().floor()) as usize };
    format!("{:.*}", decimals, x + 0.0)
}

/// Ticks at the first of January (or of every 1, 2, 3 or 6 months over a short span).
fn date_ticks(x0: f64, x1: f64) -> Vec<(f64, String)> {
    let (a, b) = (Date(x0.ceil() as i32).ymd(), Date(x1.floor() as i32).ymd());
    let months = (b.0 - a.0) * 12 + b.1 as i32 - a.1 as i32;
    if months >= 30 {
        let every = ((b.0 - a.0) / 8 + 1).max(1);
        return (a.0 + 1..=b.0)
            .filter(|y| (y - a.0 - 1) % every == 0)
            .filter_map(|y| Some((f64::from(Date::from_ymd(y, 1, 1)?.0), y.to_string())))
            .collect();
    }
    let every = [1, 2, 3, 6].into_iter().find(|m| months / m <= 8).unwrap_or(6);
    let mut out = Vec::new();
    let (mut y, mut m) = (a.0, a.1);
    loop {
        (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        let Some(d) = Date::from_ymd(y, m, 1) else { break };
        if f64::from(d.0) > x1 {
            break;
        }
        if (m as i32 - 1) % every == 0 {
            out.push((f64::from(d.0), format!("{y}-{m:02}")));
        }
    }
    out
}

/// Text for HTML and SVG: `& < > "` escaped.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            c => o.push(c),
        }
    }
    o
}

/// A matrix of values in −1..1 as coloured cells (blue negative, red positive), labelled
/// along both sides, each cell with its value.
pub fn heatmap(labels: &[String], values: &[Vec<f64>]) -> String {
    let n = labels.len().max(1) as f64;
    let cell = ((W - 160.0) / n).clamp(8.0, 48.0);
    let (left, top) = (150.0, 20.0);
    let size = left + cell * n + 10.0;
    let mut s = String::new();
    let _ = write!(s, r#"<svg class="chart heatmap" viewBox="0 0 {size:.0} {:.0}">"#, top + cell * n + 10.0);
    for (i, row) in values.iter().enumerate() {
        let _ = write!(s, r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"#, left - 4.0, top + cell * (i as f64 + 0.6), esc(&labels[i]));
        for (j, v) in row.iter().enumerate() {
            let c = v.clamp(-1.0, 1.0);
            let (r, g, b) = if c >= 0.0 { (255.0, 255.0 * (1.0 - c), 255.0 * (1.0 - c)) } else { (255.0 * (1.0 + c), 255.0 * (1.0 + c), 255.0) };
            let fill = if v.is_finite() { format!("rgb({r:.0},{g:.0},{b:.0})") } else { "#ddd".into() };
            let _ = write!(s, r##"<rect x="{:.1}" y="{:.1}" width="{cell:.1}" height="{cell:.1}" fill="{fill}" stroke="#fff"><title>{} / {}: {v:.2}</title></rect>"##, left + cell * j as f64, top + cell * i as f64, esc(&labels[i]), esc(&labels[j]));
            if cell >= 28.0 && v.is_finite() {
                let _ = write!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{v:.2}</text>"#, left + cell * (j as f64 + 0.5), top + cell * (i as f64 + 0.6));
            }
        }
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_inside() {
        assert_eq!(nice_ticks(-0.013, 0.041, 6), vec![-0.01, 0.0, 0.01, 0.02, 0.03, 0.04]);
        let t = nice_ticks(3.0, 97.0, 8);
        assert_eq!((t[0], t[t.len() - 1], t[1] - t[0]), (20.0, 80.0, 20.0));
        assert_eq!(number(0.020000000000000004, 0.01), "0.02");
    }

    #[test]
    fn dates_are_ticked_at_years_or_months() {
        let d = |y, m, day| f64::from(Date::from_ymd(y, m, day).expect("date").0);
        let years: Vec<String> = date_ticks(d(2013, 1, 2), d(2015, 12, 31)).into_iter().map(|t| t.1).collect();
        assert_eq!(years, ["2014", "2015"]);
        let months: Vec<String> = date_ticks(d(2017, 1, 3), d(2017, 12, 29)).into_iter().map(|t| t.1).collect();
        assert_eq!(months, ["2017-03", "2017-05", "2017-07", "2017-09", "2017-11"]);
    }

    #[test]
    fn a_chart_has_its_series_labels_and_no_gap_filled() {
        let svg = Chart::new(X::Numbers, "horizon (days)", "Rank IC").line("a & b", vec![(1.0, 0.1), (2.0, f64::NAN), (3.0, 0.3)]).bars("c", vec![(1.0, -0.2)]).svg();
        assert!(svg.contains("a &amp; b") && svg.contains(">horizon (days)<") && svg.contains(">Rank IC<"));
        // The NaN breaks the line into two pieces.
        let d = svg.split(r#"class="series line" d=""#).nth(1).and_then(|r| r.split('"').next()).expect("path");
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert_eq!(svg.matches("<rect x=").count(), 1 + 1 + 2, "one bar, the frame and two legend swatches");
    }

    #[test]
    fn dots_rules_and_many_categories() {
        let svg = Chart::new(X::Numbers, "valid t", "test t").dots("alpha", vec![(1.0, 2.0), (3.0, f64::NAN), (5.0, -1.0)]).vrule(6.0, "bar").rule(1.96, "5 %").svg();
        assert_eq!(svg.matches("<circle").count(), 2, "a NaN point is left out");
        assert_eq!(svg.matches(r#"class="rule""#).count(), 2);
        assert!(svg.contains(">bar<") && svg.contains(">5 %<"));
        // The vertical rule at x = 6 widened the x range past the points (5 at most).
        let frame_right = LEFT + (W - LEFT - RIGHT);
        let rule_x: f64 = svg.split(r#"class="rule" x1=""#).nth(1).and_then(|r| r.split('"').next()).and_then(|v| v.parse().ok()).expect("rule x");
        assert!(rule_x <= frame_right && rule_x > frame_right - 40.0, "{rule_x}");
        let cats: Vec<String> = (0..12).map(|i| format!("feature_{i}")).collect();
        let svg = Chart::new(X::Categories(cats), "feature", "gain").bars("gain", (0..12).map(|i| (i as f64, i as f64)).collect()).svg();
        assert_eq!(svg.matches("rotate(-40)").count(), 12, "twelve labels are slanted");
        // Fifty-one short labels: every third is named, upright.
        let gens: Vec<String> = (0..51).map(|i| i.to_string()).collect();
        let svg = Chart::new(X::Categories(gens), "generation", "records").bars("n", (0..51).map(|i| (i as f64, 1.0)).collect()).svg();
        assert_eq!((svg.matches(r#"text-anchor="middle" font-size="11""#).count(), svg.matches("rotate(-40)").count()), (17, 0));
    }
}
