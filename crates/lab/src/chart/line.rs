//! Scaling curves: a rate against a load (threads, outstanding I/Os, tasks), one line per
//! series (typically a file system) with a 95% confidence-interval whisker at every point,
//! as in seed 001's figures.
//!
//! Laid out like the bar chart: text widths are estimated (layout.rs), so the SVG needs no
//! font and is deterministic. The y axis starts at 0, so curves of different file systems
//! compare by height, or is base-10 logarithmic for rates that span orders of magnitude (a
//! library in-process against FUSE); the x axis is linear or base-2 logarithmic (loads that
//! double, such as 1, 8, 64, 128 threads, are then evenly spaced), and its ticks are the
//! loads measured.

use super::draw::{draw_legend, failed, series_color, text, Area, AXIS, GRID, MUTED};
use super::layout::{
    fit_size, legend, note, px, text_width, ticks, title, truncate, y_label, Label, LegendEntry,
    AXIS_SIZE, LEGEND_SIZE, MARGIN, MIN_PLOT_HEIGHT, MIN_SIZE, TICK_SIZE,
};
use super::{ChartError, PALETTE};
use plotters::backend::DrawingBackend;
use plotters::element::{Circle, PathElement};
use plotters::style::text_anchor::{HPos, VPos};
use plotters::style::{Color, BLACK, WHITE};
use serde::Serialize;

/// A line chart: one [`Line`] per series against a shared x axis.
#[derive(Debug, Clone, Serialize)]
pub struct LineChart {
    /// Title above the plot (may be empty: no title line).
    pub title: String,
    /// Label of the x axis, e.g. "threads".
    pub x_label: String,
    /// Label of the y axis, e.g. "transactions/s".
    pub y_label: String,
    /// A base-2 logarithmic x axis; every x must then be above 0.
    pub log_x: bool,
    /// A base-10 logarithmic y axis from the decade below the lowest value above 0 to the
    /// decade above the highest; values of 0 sit on its bottom.
    pub log_y: bool,
    /// The series in drawing and legend order; at most [`PALETTE`]`.len()`. A legend is
    /// drawn when there is more than one. A line without points still has its legend entry.
    pub lines: Vec<Line>,
    /// Small caption under the plot, wrapped to at most three lines.
    pub note: Option<String>,
}

/// One series: its points joined in order.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    /// Legend entry, e.g. "ext3".
    pub name: String,
    /// Points with strictly increasing x.
    pub points: Vec<Point>,
}

/// A measured point and its confidence interval, drawn as a whisker.
///
/// `x` must be finite (and above 0 on a logarithmic axis); `y` and the bounds finite and
/// non-negative with `ci_low <= ci_high`. When both bounds equal `y` no whisker is drawn.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    pub ci_low: f64,
    pub ci_high: f64,
}

impl Point {
    /// A point without a whisker.
    pub fn exact(x: f64, y: f64) -> Self {
        Point {
            x,
            y,
            ci_low: y,
            ci_high: y,
        }
    }

    fn has_whisker(&self) -> bool {
        self.ci_low != self.y || self.ci_high != self.y
    }

    fn check(&self, log_x: bool) -> Result<(), String> {
        if !self.x.is_finite() || (log_x && self.x <= 0.0) {
            let need = if log_x { "finite and > 0" } else { "finite" };
            return Err(format!("x is {}, must be {need}", self.x));
        }
        for (name, v) in [
            ("y", self.y),
            ("ci_low", self.ci_low),
            ("ci_high", self.ci_high),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{name} is {v}, must be finite and >= 0"));
            }
        }
        if self.ci_low > self.ci_high {
            return Err(format!(
                "ci_low {} is above ci_high {}",
                self.ci_low, self.ci_high
            ));
        }
        Ok(())
    }
}

impl LineChart {
    /// Checks everything rendering relies on, so bad data becomes a
    /// [`ChartError::Invalid`], never a panic.
    pub fn validate(&self) -> Result<(), ChartError> {
        let invalid = |why: String| Err(ChartError::Invalid(why));
        if self.lines.is_empty() {
            return invalid("no lines".into());
        }
        if self.lines.len() > PALETTE.len() {
            return invalid(format!(
                "{} lines, at most {} have distinct colours",
                self.lines.len(),
                PALETTE.len()
            ));
        }
        if self.lines.iter().all(|l| l.points.is_empty()) {
            return invalid("no points".into());
        }
        for l in &self.lines {
            for p in &l.points {
                if let Err(why) = p.check(self.log_x) {
                    return invalid(format!("line {:?}, x {}: {why}", l.name, p.x));
                }
            }
            if l.points.windows(2).any(|w| w[0].x >= w[1].x) {
                return invalid(format!("line {:?}: x values must increase", l.name));
            }
        }
        if !self.y_top().is_finite() {
            return invalid("values too large to scale".into());
        }
        Ok(())
    }

    /// Top of the y axis: 10% above the highest point or whisker (1.0 when all are 0).
    fn y_top(&self) -> f64 {
        let highest = self
            .lines
            .iter()
            .flat_map(|l| &l.points)
            .map(|p| p.y.max(p.ci_high))
            .fold(0.0, f64::max);
        if highest > 0.0 {
            highest * 1.1
        } else {
            1.0
        }
    }

    /// The y axis: `(low, high)` values at its ends, and its ticks.
    fn y_axis(&self) -> ((f64, f64), Vec<(f64, String)>) {
        if !self.log_y {
            let top = self.y_top();
            return ((0.0, top), ticks(top));
        }
        let values = self
            .lines
            .iter()
            .flat_map(|l| &l.points)
            .flat_map(|p| [p.y, p.ci_low, p.ci_high]);
        let lowest = values
            .clone()
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        let highest = values.fold(0.0, f64::max);
        if !lowest.is_finite() {
            // Nothing above 0: one decade, 0.1 to 1.
            return ((0.1, 1.0), log_ticks(-1, 0));
        }
        let lo = lowest.log10().floor() as i32;
        let hi = ((highest * 1.1).log10().ceil() as i32).max(lo + 1);
        ((10f64.powi(lo), 10f64.powi(hi)), log_ticks(lo, hi))
    }

    /// Every x of every line, sorted, each once.
    fn xs(&self) -> Vec<f64> {
        let mut xs: Vec<f64> = self
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.x))
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        xs
    }
}

/// Ticks of a logarithmic axis from 10^`lo` to 10^`hi`: the decades, and 2x and 5x each
/// when there are at most two decades.
fn log_ticks(lo: i32, hi: i32) -> Vec<(f64, String)> {
    let steps: &[f64] = if hi - lo <= 2 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let mut out = Vec::new();
    for e in lo..=hi {
        for &m in steps {
            let v = m * 10f64.powi(e);
            if e < hi || m == 1.0 {
                out.push((v, y_text(v)));
            }
        }
    }
    out
}

/// A logarithmic axis' tick label: plain below a billion (with decimals below 1), else
/// scientific.
fn y_text(v: f64) -> String {
    if v >= 1e9 {
        format!("{v:.0e}")
    } else if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let decimals = (-v.log10().floor()) as usize;
        format!("{v:.decimals$}")
    }
}

/// An x value as a tick label: integers without decimals.
fn x_text(x: f64) -> String {
    if x == x.trunc() && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// Where everything goes, in pixels (see layout.rs for the bar chart's counterpart).
#[derive(Debug, Clone)]
pub(super) struct LineLayout {
    pub scale: f64,
    pub left: i32,
    pub right: i32,
    pub top: i32,
    pub bottom: i32,
    /// The y axis' ends as values (0 at the bottom unless logarithmic).
    y_range: (f64, f64),
    log_y: bool,
    /// The x axis' ends in axis units (log2 of x on a logarithmic axis).
    x_range: (f64, f64),
    log_x: bool,
    pub title: Option<Label>,
    pub legend: Vec<LegendEntry>,
    pub legend_size: f64,
    pub y_label: Label,
    /// Anchored at the right end, `y` is the tick's row.
    pub y_ticks: Vec<Label>,
    /// Anchored at the top centre, `x` is the tick's column.
    pub x_ticks: Vec<Label>,
    /// Anchored at its top centre.
    pub x_label: Label,
    pub note: Vec<Label>,
}

impl LineLayout {
    /// Lays `chart` (already validated) out on a `width` x `height` canvas.
    pub(super) fn new(chart: &LineChart, width: u32, height: u32) -> Result<Self, ChartError> {
        let (w, h) = (f64::from(width), f64::from(height));
        let sc = (w / 1000.0).min(h / 600.0).clamp(0.5, 8.0);
        let mut y = MARGIN * sc;
        let title = title(&chart.title, w, sc, &mut y);
        let names: Vec<&str> = chart.lines.iter().map(|l| l.name.as_str()).collect();
        let legend = legend(&names, w, sc, &mut y);
        let note = note(chart.note.as_deref(), w, h, sc);
        let note_top = note.first().map_or(h - MARGIN * sc, |l| f64::from(l.y));
        let avail = w - 2.0 * MARGIN * sc;
        let x_label_size = fit_size(
            chart.x_label.chars().count(),
            avail,
            AXIS_SIZE * sc,
            MIN_SIZE * sc,
        );
        let x_label_top = note_top - x_label_size * 1.3;
        let tick_size = TICK_SIZE * sc;
        let bottom = x_label_top - tick_size * 1.3 - 12.0 * sc;
        let (y_range, y_ticks) = chart.y_axis();
        let tick_w = y_ticks.iter().map(|(_, t)| text_width(t, tick_size));
        let left = MARGIN * sc + AXIS_SIZE * sc * 1.3 + tick_w.fold(0.0, f64::max) + 10.0 * sc;
        let right = w - MARGIN * sc - 10.0 * sc;
        let top = y + 6.0 * sc;
        if right - left < 40.0 || bottom - top < MIN_PLOT_HEIGHT {
            return Err(ChartError::Invalid(format!(
                "a {width}x{height} canvas is too small for this line chart"
            )));
        }
        let mut lay = LineLayout {
            scale: sc,
            left: px(left),
            right: px(right),
            top: px(top),
            bottom: px(bottom),
            y_range,
            log_y: chart.log_y,
            x_range: x_range(&chart.xs(), chart.log_x),
            log_x: chart.log_x,
            title,
            legend,
            legend_size: LEGEND_SIZE * sc,
            y_label: y_label(&chart.y_label, MARGIN * sc, top, bottom, sc),
            y_ticks: Vec::new(),
            x_ticks: Vec::new(),
            x_label: Label {
                text: truncate(&chart.x_label, avail, x_label_size),
                x: px((left + right) / 2.0),
                y: px(x_label_top),
                size: x_label_size,
            },
            note,
        };
        lay.place_ticks(y_ticks, &chart.xs(), tick_size);
        Ok(lay)
    }

    /// Tick labels of both axes. X ticks are the measured loads; where neighbours would
    /// overlap, the later one is left out.
    fn place_ticks(&mut self, y_ticks: Vec<(f64, String)>, xs: &[f64], size: f64) {
        let tick_x = self.left - px(8.0 * self.scale);
        self.y_ticks = y_ticks
            .into_iter()
            .map(|(v, text)| Label {
                text,
                x: tick_x,
                y: self.y_px(v),
                size,
            })
            .collect();
        let label_y = self.bottom + px(8.0 * self.scale);
        let gap = 8.0 * self.scale;
        let mut last_right = f64::NEG_INFINITY;
        for &x in xs {
            let text = x_text(x);
            let half = text_width(&text, size) / 2.0;
            let col = self.x_px(x);
            if f64::from(col) - half < last_right + gap {
                continue;
            }
            last_right = f64::from(col) + half;
            self.x_ticks.push(Label {
                text,
                x: col,
                y: label_y,
                size,
            });
        }
    }

    /// Pixel row of value `v`; the bottom of the y axis is the x axis (values of 0 and,
    /// on a logarithmic axis, below its range sit there).
    pub(super) fn y_px(&self, v: f64) -> i32 {
        let plot_h = f64::from(self.bottom - self.top);
        let (lo, hi) = self.y_range;
        let share = if self.log_y {
            if v <= lo {
                0.0
            } else {
                (v.log10() - lo.log10()) / (hi.log10() - lo.log10())
            }
        } else {
            v / hi
        };
        self.bottom - px(share * plot_h)
    }

    /// Pixel column of load `x`.
    pub(super) fn x_px(&self, x: f64) -> i32 {
        let u = if self.log_x { x.log2() } else { x };
        let (lo, hi) = self.x_range;
        let plot_w = f64::from(self.right - self.left);
        self.left + px((u - lo) / (hi - lo) * plot_w)
    }

    fn line_width(&self, base: f64) -> u32 {
        (base * self.scale).round().max(1.0) as u32
    }
}

/// The x axis' ends in axis units: the loads' range with 6% of it on either side, so no
/// marker sits on an axis; a single load gets an axis one unit (or 10% of it) either side.
fn x_range(xs: &[f64], log_x: bool) -> (f64, f64) {
    let u = |x: f64| if log_x { x.log2() } else { x };
    let (lo, hi) = match (xs.first(), xs.last()) {
        (Some(&a), Some(&b)) => (u(a), u(b)),
        _ => (0.0, 1.0),
    };
    if hi - lo > 1e-12 {
        let pad = (hi - lo) * 0.06;
        (lo - pad, hi + pad)
    } else {
        let pad = if log_x {
            1.0
        } else {
            (lo.abs() * 0.1).max(1.0)
        };
        (lo - pad, hi + pad)
    }
}

/// Draws `chart` as laid out by `lay` on `root`, back to front, and finishes the image.
pub(super) fn draw<DB: DrawingBackend>(
    root: &Area<DB>,
    chart: &LineChart,
    lay: &LineLayout,
) -> Result<(), ChartError> {
    root.fill(&WHITE).map_err(failed)?;
    draw_grid(root, lay)?;
    for (i, line) in chart.lines.iter().enumerate() {
        draw_line(root, lay, line, i)?;
    }
    draw_axes(root, lay)?;
    draw_labels(root, lay)?;
    draw_legend(root, &lay.legend, lay.legend_size, lay.scale)?;
    root.present().map_err(failed)
}

/// Light lines at the y ticks and at the loads, behind the curves.
fn draw_grid<DB: DrawingBackend>(root: &Area<DB>, lay: &LineLayout) -> Result<(), ChartError> {
    let style = GRID.stroke_width(1);
    for tick in lay.y_ticks.iter().filter(|t| t.y != lay.bottom) {
        let line = [(lay.left, tick.y), (lay.right, tick.y)];
        root.draw(&PathElement::new(line, style)).map_err(failed)?;
    }
    for tick in &lay.x_ticks {
        let line = [(tick.x, lay.top), (tick.x, lay.bottom)];
        root.draw(&PathElement::new(line, style)).map_err(failed)?;
    }
    Ok(())
}

/// One series: the segments between its points, then a whisker and a marker per point.
fn draw_line<DB: DrawingBackend>(
    root: &Area<DB>,
    lay: &LineLayout,
    line: &Line,
    index: usize,
) -> Result<(), ChartError> {
    let color = series_color(index);
    let at = |p: &Point| (lay.x_px(p.x), lay.y_px(p.y));
    let path: Vec<(i32, i32)> = line.points.iter().map(at).collect();
    if path.len() > 1 {
        let style = color.stroke_width(lay.line_width(2.0));
        root.draw(&PathElement::new(path, style)).map_err(failed)?;
    }
    let whisker = color.stroke_width(lay.line_width(1.5));
    let cap = (4.0 * lay.scale).round().max(2.0) as i32;
    for p in line.points.iter().filter(|p| p.has_whisker()) {
        let (x, low, high) = (lay.x_px(p.x), lay.y_px(p.ci_low), lay.y_px(p.ci_high));
        for seg in [
            [(x, low), (x, high)],
            [(x - cap, low), (x + cap, low)],
            [(x - cap, high), (x + cap, high)],
        ] {
            root.draw(&PathElement::new(seg, whisker)).map_err(failed)?;
        }
    }
    let radius = (4.0 * lay.scale).round().max(2.0) as i32;
    for p in &line.points {
        root.draw(&Circle::new(at(p), radius, color.filled()))
            .map_err(failed)?;
    }
    Ok(())
}

fn draw_axes<DB: DrawingBackend>(root: &Area<DB>, lay: &LineLayout) -> Result<(), ChartError> {
    let style = AXIS.stroke_width(lay.line_width(1.0));
    let axes = [
        (lay.left, lay.top),
        (lay.left, lay.bottom),
        (lay.right, lay.bottom),
    ];
    root.draw(&PathElement::new(axes, style)).map_err(failed)?;
    let len = lay.line_width(5.0) as i32;
    for tick in &lay.y_ticks {
        let mark = [(lay.left - len, tick.y), (lay.left, tick.y)];
        root.draw(&PathElement::new(mark, style)).map_err(failed)?;
    }
    for tick in &lay.x_ticks {
        let mark = [(tick.x, lay.bottom), (tick.x, lay.bottom + len)];
        root.draw(&PathElement::new(mark, style)).map_err(failed)?;
    }
    Ok(())
}

/// Title, axis labels, tick labels and caption.
fn draw_labels<DB: DrawingBackend>(root: &Area<DB>, lay: &LineLayout) -> Result<(), ChartError> {
    if let Some(t) = &lay.title {
        text(root, t, (HPos::Center, VPos::Top), &BLACK, false)?;
    }
    text(
        root,
        &lay.y_label,
        (HPos::Center, VPos::Center),
        &BLACK,
        true,
    )?;
    for tick in &lay.y_ticks {
        text(root, tick, (HPos::Right, VPos::Center), &BLACK, false)?;
    }
    for tick in &lay.x_ticks {
        text(root, tick, (HPos::Center, VPos::Top), &BLACK, false)?;
    }
    text(root, &lay.x_label, (HPos::Center, VPos::Top), &BLACK, false)?;
    for line in &lay.note {
        text(root, line, (HPos::Center, VPos::Top), &MUTED, false)?;
    }
    Ok(())
}
