//! Line and scatter plots as PNG (plotters, bitmap backend). Text needs a TrueType
//! font: DejaVu Sans (Debian's `fonts-dejavu-core`) or `$ALPHALOOP_FONT`; without one the
//! plot is drawn without labels and a warning says so.

use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers a font once; false when none was found.
fn font() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        let mut paths: Vec<String> = std::env::var("ALPHALOOP_FONT").into_iter().collect();
        paths.extend(FONT_PATHS.iter().map(|s| s.to_string()));
        for p in paths {
            if let Ok(bytes) = std::fs::read(&p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        tracing::warn!("no TrueType font found (install fonts-dejavu-core or set ALPHALOOP_FONT): plots have no labels");
        false
    })
}

/// One line of the plot: a name and (x, y) points, joined unless `dots` (a scatter of
/// independent points, such as one per alpha).
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dots: bool,
}

impl Series {
    /// A joined line.
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { name: name.into(), points, dots: false }
    }

    /// Unjoined points.
    pub fn dots(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { name: name.into(), points, dots: true }
    }
}

/// Series with more points than this are drawn without a marker per point.
const MAX_MARKED: usize = 100;

/// Fails unless `path` names a PNG file, the one format plots are written in. Commands
/// call it before their work, so that a misnamed plot does not fail only at the end.
pub fn check_png(path: &Path) -> Result<(), String> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("png") => Ok(()),
        _ => Err(format!("{}: plots are written as PNG; give a file name ending in .png", path.display())),
    }
}

/// An x tick's label: years and idea numbers read as 2004 and 20, not 2004.0 and 20.0.
/// Ticks are round numbers, so six decimals show any of them without a float's tail.
fn tick_label(x: f64) -> String {
    // (+ 0.0 turns −0 into 0.)
    format!("{}", (x * 1e6).round() / 1e6 + 0.0)
}

/// Draws lines against a shared x axis into a PNG.
pub fn lines(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<(), String> {
    check_png(path)?;
    let has_font = font();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.iter().copied()).filter(|p| p.1.is_finite()).collect();
    if all.is_empty() {
        return Err(format!("{}: nothing to plot", path.display()));
    }
    let (x0, x1) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |a, p| (a.0.min(p.0), a.1.max(p.0)));
    let (y0, y1) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |a, p| (a.0.min(p.1), a.1.max(p.1)));
    let pad = ((y1 - y0) * 0.1).max(1e-4);
    // A single x gets a unit of room; scattered points a margin, so none sits on the frame.
    let (x1, xpad) = if x1 > x0 { (x1, if series.iter().any(|s| s.dots) { (x1 - x0) * 0.05 } else { 0.0 }) } else { (x0 + 1.0, 0.0) };
    let mut b = ChartBuilder::on(&root);
    b.margin(20).x_label_area_size(if has_font { 45 } else { 10 }).y_label_area_size(if has_font { 70 } else { 10 });
    if has_font {
        b.caption(title, ("sans-serif", 22));
    }
    let mut chart = b
        .build_cartesian_2d((x0 - xpad)..(x1 + xpad), (y0 - pad)..(y1 + pad))
        .map_err(|e| err(&e))?;
    let mut mesh = chart.configure_mesh();
    let tick = |x: &f64| tick_label(*x);
    mesh.x_desc(x_label).y_desc(y_label).x_label_formatter(&tick);
    if !has_font {
        mesh.disable_x_axis().disable_y_axis();
    }
    mesh.draw().map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite()).collect();
        if s.dots {
            let drawn = chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, color.filled()))).map_err(|e| err(&e))?;
            if has_font {
                drawn.label(s.name.clone()).legend(move |(x, y)| Circle::new((x + 9, y), 4, color.filled()));
            }
            continue;
        }
        let drawn = chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2))).map_err(|e| err(&e))?;
        if has_font {
            drawn.label(s.name.clone()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        }
        // Markers only where the points are few enough to tell apart (a curve of daily
        // values is a line).
        if pts.len() <= MAX_MARKED {
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled()))).map_err(|e| err(&e))?;
        }
    }
    if has_font {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// A square matrix of values in [0, 1] as coloured cells (blue under 0.5, red over, white
/// at 0.5), each with its value written in; `labels` name the rows (top to bottom) and the
/// columns (left to right). Empty cells (None) stay grey.
pub fn heatmap(path: &Path, title: &str, labels: &[String], m: &[Vec<Option<f64>>]) -> Result<(), String> {
    check_png(path)?;
    let has_font = font();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let k = labels.len();
    if k == 0 {
        return Err(format!("{}: nothing to plot", path.display()));
    }
    let cell = (480 / k as u32).clamp(40, 120);
    let (left, top) = (150u32, 60u32);
    let root = BitMapBackend::new(path, (left + cell * k as u32 + 30, top + cell * k as u32 + 60)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    if has_font {
        root.draw(&Text::new(title.to_string(), (20, 15), ("sans-serif", 20))).map_err(|e| err(&e))?;
    }
    let colour = |v: f64| {
        let t = ((v - 0.5) * 2.0).clamp(-1.0, 1.0);
        let fade = |c: f64| (255.0 - (255.0 - c) * t.abs()) as u8;
        if t >= 0.0 { RGBColor(fade(200.0), fade(40.0), fade(40.0)) } else { RGBColor(fade(40.0), fade(80.0), fade(200.0)) }
    };
    for (i, row) in m.iter().enumerate().take(k) {
        for (j, v) in row.iter().enumerate().take(k) {
            let (x, y) = ((left + cell * j as u32) as i32, (top + cell * i as u32) as i32);
            let fill = v.map_or(RGBColor(220, 220, 220), colour);
            root.draw(&Rectangle::new([(x, y), (x + cell as i32, y + cell as i32)], fill.filled())).map_err(|e| err(&e))?;
            root.draw(&Rectangle::new([(x, y), (x + cell as i32, y + cell as i32)], BLACK.stroke_width(1))).map_err(|e| err(&e))?;
            if let (Some(v), true) = (v, has_font) {
                root.draw(&Text::new(format!("{v:.2}"), (x + cell as i32 / 2 - 14, y + cell as i32 / 2 - 8), ("sans-serif", 16))).map_err(|e| err(&e))?;
            }
        }
    }
    if has_font {
        for (i, l) in labels.iter().enumerate() {
            let y = (top + cell * i as u32 + cell / 2) as i32 - 8;
            root.draw(&Text::new(l.clone(), (10, y), ("sans-serif", 15))).map_err(|e| err(&e))?;
            let x = (left + cell * i as u32) as i32 + 4;
            root.draw(&Text::new(l.chars().take(12).collect::<String>(), (x, (top + cell * k as u32) as i32 + 8), ("sans-serif", 14))).map_err(|e| err(&e))?;
        }
        root.draw(&Text::new("row's win rate against column".to_string(), (left as i32, (top + cell * k as u32) as i32 + 32), ("sans-serif", 14))).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn tick_labels_have_no_float_tails() {
        let l = super::tick_label;
        assert_eq!([l(2004.0), l(20.0), l(0.005), l(0.1 + 0.2), l(-0.0), l(-0.015000000000000001)], ["2004", "20", "0.005", "0.3", "0", "-0.015"]);
    }
}
