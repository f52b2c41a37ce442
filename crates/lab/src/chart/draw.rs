//! Drawing a laid-out chart with plotters primitives, on either backend.
//!
//! Everything is placed by layout.rs; this file only picks colours, line
//! widths and text anchors. Nothing here asks the font for text sizes, so the
//! SVG backend never needs one (the bitmap backend does, to draw glyphs).

use super::layout::{
    value_text, Label, Layout, LegendEntry, ValueLabels, MISSING, SWATCH, SWATCH_GAP, VALUE_GAP,
};
use super::{Bar, BarChart, ChartError, PALETTE};
use plotters::backend::DrawingBackend;
use plotters::coord::Shift;
use plotters::drawing::{DrawingArea, DrawingAreaErrorKind};
use plotters::element::{DashedPathElement, PathElement, Rectangle};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{Color, FontDesc, FontFamily, FontStyle, FontTransform, RGBColor};
use plotters::style::{TextStyle, BLACK, WHITE};

pub(super) const GRID: RGBColor = RGBColor(0xE0, 0xE0, 0xE0);
pub(super) const AXIS: RGBColor = RGBColor(0x33, 0x33, 0x33);
const REFERENCE: RGBColor = RGBColor(0x22, 0x22, 0x22);
/// Secondary text: "n/a" marks and the caption.
pub(super) const MUTED: RGBColor = RGBColor(0x66, 0x66, 0x66);

pub(super) type Area<DB> = DrawingArea<DB, Shift>;

pub(super) fn failed<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> ChartError {
    ChartError::Draw(e.to_string())
}

pub(super) fn series_color(series: usize) -> RGBColor {
    let (r, g, b) = PALETTE[series % PALETTE.len()];
    RGBColor(r, g, b)
}

/// Draws `chart` as laid out by `lay` on `root`, back to front, and
/// finishes the image.
pub(super) fn draw_chart<DB: DrawingBackend>(
    root: &Area<DB>,
    chart: &BarChart,
    lay: &Layout,
) -> Result<(), ChartError> {
    root.fill(&WHITE).map_err(failed)?;
    draw_grid(root, lay)?;
    draw_bars(root, chart, lay)?;
    if let Some(y) = chart.reference_line {
        // Above the bars, so bars that reach past the baseline do not hide it.
        let dashed = REFERENCE.stroke_width(lay.line_width(2.0));
        let row = lay.y_px(y);
        let (dash, gap) = (lay.line_width(8.0), lay.line_width(5.0));
        let line = [(lay.left, row), (lay.right, row)];
        root.draw(&DashedPathElement::new(line, dash, gap, dashed))
            .map_err(failed)?;
    }
    draw_axes(root, lay)?;
    draw_labels(root, lay)?;
    draw_legend(root, &lay.legend, lay.legend_size, lay.scale)?;
    root.present().map_err(failed)
}

/// Writes `label` anchored at `anchor`, optionally rotated to read upwards.
pub(super) fn text<DB: DrawingBackend>(
    root: &Area<DB>,
    label: &Label,
    anchor: (HPos, VPos),
    color: &RGBColor,
    rotated: bool,
) -> Result<(), ChartError> {
    let font = FontDesc::new(FontFamily::SansSerif, label.size, FontStyle::Normal);
    let mut style = TextStyle::from(font)
        .color(color)
        .pos(Pos::new(anchor.0, anchor.1));
    if rotated {
        style = style.transform(FontTransform::Rotate270);
    }
    root.draw_text(&label.text, &style, (label.x, label.y))
        .map_err(failed)
}

/// Light horizontal lines at the ticks, behind the bars.
fn draw_grid<DB: DrawingBackend>(root: &Area<DB>, lay: &Layout) -> Result<(), ChartError> {
    for tick in lay.ticks.iter().filter(|t| t.y != lay.bottom) {
        let line = [(lay.left, tick.y), (lay.right, tick.y)];
        root.draw(&PathElement::new(line, GRID.stroke_width(1)))
            .map_err(failed)?;
    }
    Ok(())
}

fn draw_axes<DB: DrawingBackend>(root: &Area<DB>, lay: &Layout) -> Result<(), ChartError> {
    let style = AXIS.stroke_width(lay.line_width(1.0));
    let axes = [
        (lay.left, lay.top),
        (lay.left, lay.bottom),
        (lay.right, lay.bottom),
    ];
    root.draw(&PathElement::new(axes, style)).map_err(failed)?;
    let tick_len = lay.line_width(5.0) as i32;
    for tick in &lay.ticks {
        let mark = [(lay.left - tick_len, tick.y), (lay.left, tick.y)];
        root.draw(&PathElement::new(mark, style)).map_err(failed)?;
    }
    Ok(())
}

fn draw_bars<DB: DrawingBackend>(
    root: &Area<DB>,
    chart: &BarChart,
    lay: &Layout,
) -> Result<(), ChartError> {
    for (s, series) in chart.series.iter().enumerate() {
        let color = series_color(s);
        for (g, bar) in series.bars.iter().enumerate() {
            let (x0, x1) = lay.bar_columns(g, s);
            let center = (x0 + x1) / 2;
            let label = match bar {
                Some(bar) => {
                    let top = lay.y_px(bar.value);
                    let rect = Rectangle::new([(x0, top), (x1, lay.bottom)], color.filled());
                    root.draw(&rect).map_err(failed)?;
                    draw_whisker(root, lay, bar, center, x1 - x0)?;
                    (value_text(bar), lay.y_px(bar.top()), &BLACK)
                }
                None => (MISSING.to_string(), lay.bottom, &MUTED),
            };
            draw_value_label(root, lay, label.0, (center, label.1), label.2)?;
        }
    }
    Ok(())
}

/// The confidence interval: a vertical line with caps a quarter of the bar
/// wide (at least 2 px, at most 8 px at 1000x600). None if the interval is
/// just the value.
fn draw_whisker<DB: DrawingBackend>(
    root: &Area<DB>,
    lay: &Layout,
    bar: &Bar,
    x: i32,
    bar_w: i32,
) -> Result<(), ChartError> {
    if !bar.has_whisker() {
        return Ok(());
    }
    let style = BLACK.stroke_width(lay.line_width(1.5));
    let (low, high) = (lay.y_px(bar.ci_low), lay.y_px(bar.ci_high));
    let max_cap = ((8.0 * lay.scale).round() as i32).max(2); // clamp() needs min <= max
    let cap = (bar_w / 4).clamp(2, max_cap);
    let lines = [
        [(x, low), (x, high)],
        [(x - cap, low), (x + cap, low)],
        [(x - cap, high), (x + cap, high)],
    ];
    for line in lines {
        root.draw(&PathElement::new(line, style)).map_err(failed)?;
    }
    Ok(())
}

/// `value` just above the pixel row `at.1`, centred on column `at.0`,
/// horizontal or reading upwards as the layout decided.
fn draw_value_label<DB: DrawingBackend>(
    root: &Area<DB>,
    lay: &Layout,
    value: String,
    at: (i32, i32),
    color: &RGBColor,
) -> Result<(), ChartError> {
    let size = lay.value_size;
    let y = at.1 - (VALUE_GAP * lay.scale).round() as i32;
    let label = Label {
        text: value,
        x: at.0,
        y,
        size,
    };
    match lay.value_labels {
        ValueLabels::Horizontal => text(root, &label, (HPos::Center, VPos::Bottom), color, false),
        ValueLabels::Vertical => text(root, &label, (HPos::Left, VPos::Center), color, true),
        ValueLabels::Hidden => Ok(()),
    }
}

/// Title, axis labels, tick labels, group labels and caption.
fn draw_labels<DB: DrawingBackend>(root: &Area<DB>, lay: &Layout) -> Result<(), ChartError> {
    if let Some(title) = &lay.title {
        text(root, title, (HPos::Center, VPos::Top), &BLACK, false)?;
    }
    text(
        root,
        &lay.y_label,
        (HPos::Center, VPos::Center),
        &BLACK,
        true,
    )?;
    for tick in &lay.ticks {
        text(root, tick, (HPos::Right, VPos::Center), &BLACK, false)?;
    }
    // Rotated group labels end just under the axis and read upwards.
    let anchor = if lay.groups_rotated {
        (HPos::Right, VPos::Center)
    } else {
        (HPos::Center, VPos::Top)
    };
    for group in &lay.group_labels {
        text(root, group, anchor, &BLACK, lay.groups_rotated)?;
    }
    for line in &lay.note {
        text(root, line, (HPos::Center, VPos::Top), &MUTED, false)?;
    }
    Ok(())
}

/// Colour swatches with the series names (laid out only for 2+ series), text
/// of `size` on a canvas at `scale` of 1000x600.
pub(super) fn draw_legend<DB: DrawingBackend>(
    root: &Area<DB>,
    legend: &[LegendEntry],
    size: f64,
    scale: f64,
) -> Result<(), ChartError> {
    let swatch = (size * SWATCH).round() as i32;
    for entry in legend {
        let (x, y) = (entry.x, entry.y);
        let color = series_color(entry.series);
        let rect = Rectangle::new([(x, y), (x + swatch, y + swatch)], color.filled());
        root.draw(&rect).map_err(failed)?;
        let name = Label {
            text: entry.name.clone(),
            x: x + swatch + (SWATCH_GAP * scale).round() as i32,
            y: y + swatch / 2,
            size,
        };
        text(root, &name, (HPos::Left, VPos::Center), &BLACK, false)?;
    }
    Ok(())
}
