//! Where everything goes, in pixels.
//!
//! Pure arithmetic on the chart and the canvas size. Text widths are
//! estimated from character counts ([`text_width`]) instead of measured with
//! a font, so the layout, and with it the SVG, does not depend on the fonts
//! installed. The estimate errs on the wide side, so text laid out to fit
//! does fit in DejaVu Sans and similar fonts.

use super::{Bar, BarChart, ChartError};

// Font sizes in plotters units on a 1000x600 canvas (an SVG font-size is
// this / 1.24, plotters' convention), scaled with the canvas.
pub(super) const TITLE_SIZE: f64 = 26.0;
pub(super) const AXIS_SIZE: f64 = 18.0;
pub(super) const TICK_SIZE: f64 = 15.0;
const GROUP_SIZE: f64 = 16.0;
pub(super) const LEGEND_SIZE: f64 = 16.0;
const VALUE_SIZE: f64 = 13.0;
const NOTE_SIZE: f64 = 14.0;
/// Smallest size text shrinks to before it is rotated or cut.
pub(super) const MIN_SIZE: f64 = 11.0;
pub(super) const MARGIN: f64 = 12.0;
/// Share of a group's width its bars take; the rest separates the groups.
const GROUP_FILL: f64 = 0.8;
/// Estimated advance of one character in units of the plotters size: DejaVu
/// Sans averages ~0.62 em over digits and lower case, and an em is size/1.24
/// in the SVG and about size/1.16 with ab_glyph, so 0.55 errs on the wide side.
const CHAR_WIDTH: f64 = 0.55;
/// Legend swatch side, relative to the legend's text size.
pub(super) const SWATCH: f64 = 0.8;
/// Space between a legend swatch and its name, in pixels at 1000x600.
pub(super) const SWATCH_GAP: f64 = 6.0;
/// Space between a bar (or whisker) top and its value label, at 1000x600.
pub(super) const VALUE_GAP: f64 = 5.0;
/// Caption lines kept; the rest of a longer note is cut.
const NOTE_LINES: usize = 3;
/// Smallest plot height (pixels) worth drawing.
pub(super) const MIN_PLOT_HEIGHT: f64 = 40.0;

/// Estimated width in pixels of `text` at plotters size `size`.
pub(super) fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * CHAR_WIDTH * size
}

/// The label printed above a bar.
pub(super) fn value_text(bar: &Bar) -> String {
    format!("{:.2}", bar.value)
}

/// Label drawn in an empty slot (a `None` bar).
pub(super) const MISSING: &str = "n/a";

pub(super) fn px(v: f64) -> i32 {
    v.round() as i32
}

/// Largest size in `min..=max` at which `chars` characters fit `avail`
/// pixels (`min` when none does).
pub(super) fn fit_size(chars: usize, avail: f64, max: f64, min: f64) -> f64 {
    if chars == 0 {
        return max;
    }
    (avail / (chars as f64 * CHAR_WIDTH)).clamp(min, max)
}

/// `text` cut to fit `avail` pixels at `size`, ending in '…' when cut.
pub(super) fn truncate(text: &str, avail: f64, size: f64) -> String {
    let max_chars = (avail / (CHAR_WIDTH * size)).floor().max(1.0) as usize;
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max_chars - 1).collect();
    cut.push('…');
    cut
}

/// How the values are printed above the bars, decided once per chart so
/// all labels look alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ValueLabels {
    /// The widest label fits the bar's width.
    Horizontal,
    /// Rotated to read upwards: bars too narrow, but as wide as a line.
    Vertical,
    /// Bars narrower than a line of text.
    Hidden,
}

/// A line of text and its anchor point; draw.rs knows which point of the
/// text each kind of label anchors.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Label {
    pub text: String,
    pub x: i32,
    pub y: i32,
    pub size: f64,
}

/// A legend entry: colour swatch with its top-left corner at (x, y), the
/// series name to its right.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LegendEntry {
    pub series: usize,
    pub name: String,
    pub x: i32,
    pub y: i32,
}

/// Every position the drawing needs. The plot area spans `left..right` and
/// `top..bottom`; `bottom` is the x axis (value 0), `top` is [`Layout::y_top`].
#[derive(Debug, Clone)]
pub(super) struct Layout {
    /// Canvas size relative to 1000x600; line widths scale with it.
    pub scale: f64,
    pub left: i32,
    pub right: i32,
    pub top: i32,
    pub bottom: i32,
    /// Value at the top of the y axis.
    pub y_top: f64,
    /// Anchored at its top centre.
    pub title: Option<Label>,
    pub legend: Vec<LegendEntry>,
    pub legend_size: f64,
    /// Rotated to read upwards, anchored at its centre.
    pub y_label: Label,
    /// Anchored at the right end, `y` is the tick's row.
    pub ticks: Vec<Label>,
    /// Anchored at the top centre, or at the top of the rotated text.
    pub group_labels: Vec<Label>,
    pub groups_rotated: bool,
    pub value_labels: ValueLabels,
    pub value_size: f64,
    /// Caption lines, each anchored at its top centre.
    pub note: Vec<Label>,
    n_groups: usize,
    n_series: usize,
}

impl Layout {
    /// Lays `chart` (already validated) out on a `width` x `height` canvas:
    /// title, legend and caption first, the plot area takes what is left.
    pub(super) fn new(chart: &BarChart, width: u32, height: u32) -> Result<Layout, ChartError> {
        let (w, h) = (f64::from(width), f64::from(height));
        let sc = (w / 1000.0).min(h / 600.0).clamp(0.5, 8.0);
        let mut y = MARGIN * sc;
        let title = title(&chart.title, w, sc, &mut y);
        let names: Vec<&str> = chart.series.iter().map(|s| s.name.as_str()).collect();
        let legend = legend(&names, w, sc, &mut y);
        let note = note(chart.note.as_deref(), w, h, sc);
        let note_top = note.first().map_or(h - MARGIN * sc, |l| f64::from(l.y));
        let y_top = chart.y_top();
        let ticks = ticks(y_top);
        let tick_size = TICK_SIZE * sc;
        let tick_w = ticks.iter().map(|(_, t)| text_width(t, tick_size));
        let left = MARGIN * sc + AXIS_SIZE * sc * 1.3 + tick_w.fold(0.0, f64::max) + 10.0 * sc;
        let right = w - MARGIN * sc - 10.0 * sc;
        let group_w = (right - left) / chart.groups.len() as f64;
        let groups = fit_groups(&chart.groups, group_w, h, sc);
        let bottom = note_top - groups.height - 14.0 * sc;
        let slot = group_w * GROUP_FILL / chart.series.len() as f64;
        let (value_labels, value_size, label_h) = fit_values(chart, slot, sc);
        let top = plot_top(y + 6.0 * sc, bottom, label_h);
        let min_w = (2 * chart.groups.len() * chart.series.len()) as f64;
        if right - left < min_w || bottom - top < MIN_PLOT_HEIGHT {
            return Err(ChartError::Invalid(format!(
                "a {width}x{height} canvas is too small for {} groups x {} series",
                chart.groups.len(),
                chart.series.len()
            )));
        }
        let mut layout = Layout {
            scale: sc,
            left: px(left),
            right: px(right),
            top: px(top),
            bottom: px(bottom),
            y_top,
            title,
            legend,
            legend_size: LEGEND_SIZE * sc,
            y_label: y_label(&chart.y_label, MARGIN * sc, top, bottom, sc),
            ticks: Vec::new(),
            group_labels: Vec::new(),
            groups_rotated: groups.rotated,
            value_labels,
            value_size,
            note,
            n_groups: chart.groups.len(),
            n_series: chart.series.len(),
        };
        layout.place_axis_labels(ticks, tick_size, groups);
        Ok(layout)
    }

    /// Tick labels and group labels, which need the plot area's pixels.
    fn place_axis_labels(&mut self, ticks: Vec<(f64, String)>, tick_size: f64, groups: GroupFit) {
        let tick_x = self.left - px(8.0 * self.scale);
        self.ticks = ticks
            .into_iter()
            .map(|(v, text)| Label {
                text,
                x: tick_x,
                y: self.y_px(v),
                size: tick_size,
            })
            .collect();
        let label_y = self.bottom + px(8.0 * self.scale);
        self.group_labels = (groups.texts.into_iter().enumerate())
            .map(|(g, text)| Label {
                text,
                x: self.group_center(g),
                y: label_y,
                size: groups.size,
            })
            .collect();
    }

    /// Pixel row of value `v`; 0 is the x axis, [`Layout::y_top`] the top.
    /// Heights are rounded from the axis, so a bar twice as high as another
    /// is twice as tall to within a pixel.
    pub(super) fn y_px(&self, v: f64) -> i32 {
        let plot_h = f64::from(self.bottom - self.top);
        self.bottom - px(v / self.y_top * plot_h)
    }

    /// A line width of `base` pixels at 1000x600, scaled to this canvas.
    pub(super) fn line_width(&self, base: f64) -> u32 {
        (base * self.scale).round().max(1.0) as u32
    }

    fn group_width(&self) -> f64 {
        f64::from(self.right - self.left) / self.n_groups as f64
    }

    pub(super) fn group_center(&self, group: usize) -> i32 {
        px(f64::from(self.left) + self.group_width() * (group as f64 + 0.5))
    }

    /// Left and right pixel columns of the bar of `series` in `group`.
    pub(super) fn bar_columns(&self, group: usize, series: usize) -> (i32, i32) {
        let group_w = self.group_width();
        let slot = group_w * GROUP_FILL / self.n_series as f64;
        let group_x = f64::from(self.left) + group_w * group as f64;
        let x0 = group_x + group_w * (1.0 - GROUP_FILL) / 2.0 + slot * series as f64;
        // Neighbouring bars get a small gap when they are wide enough to spare it.
        let gap = i32::from(slot >= 6.0);
        (px(x0) + gap, px(x0 + slot) - gap)
    }
}

/// The title line at `y` (none for an empty title), shrunk or cut to the
/// canvas width; advances `y` past it.
pub(super) fn title(text: &str, w: f64, sc: f64, y: &mut f64) -> Option<Label> {
    if text.trim().is_empty() {
        return None;
    }
    let avail = w - 2.0 * MARGIN * sc;
    let size = fit_size(text.chars().count(), avail, TITLE_SIZE * sc, MIN_SIZE * sc);
    let label = Label {
        text: truncate(text, avail, size),
        x: px(w / 2.0),
        y: px(*y),
        size,
    };
    *y += size * 1.3;
    Some(label)
}

/// Legend entries in centred rows from `y` down (only for two or more
/// series), wrapping when a row is full; advances `y` past them.
pub(super) fn legend(names: &[&str], w: f64, sc: f64, y: &mut f64) -> Vec<LegendEntry> {
    if names.len() < 2 {
        return Vec::new();
    }
    let size = LEGEND_SIZE * sc;
    let (swatch_and_gap, spacing) = (size * SWATCH + SWATCH_GAP * sc, 24.0 * sc);
    let avail = w - 2.0 * MARGIN * sc;
    // Entries (series, name, width) in rows, left to right.
    let mut rows: Vec<Vec<(usize, String, f64)>> = Vec::new();
    let mut row: Vec<(usize, String, f64)> = Vec::new();
    for (i, s) in names.iter().enumerate() {
        let name = truncate(s, avail - swatch_and_gap, size);
        let entry_w = swatch_and_gap + text_width(&name, size);
        let row_w: f64 = row.iter().map(|e| e.2 + spacing).sum();
        if !row.is_empty() && row_w + entry_w > avail {
            rows.push(std::mem::take(&mut row));
        }
        row.push((i, name, entry_w));
    }
    rows.push(row);
    let mut entries = Vec::new();
    for row in rows {
        let row_w: f64 =
            row.iter().map(|e| e.2).sum::<f64>() + spacing * row.len().saturating_sub(1) as f64;
        let mut x = (w - row_w) / 2.0;
        for (series, name, entry_w) in row {
            let (ex, ey) = (px(x), px(*y));
            entries.push(LegendEntry {
                series,
                name,
                x: ex,
                y: ey,
            });
            x += entry_w + spacing;
        }
        *y += size * 1.4;
    }
    entries
}

/// The caption wrapped at spaces into at most [`NOTE_LINES`] lines (the last
/// cut with '…' if there is more), at the bottom of the canvas.
pub(super) fn note(note: Option<&str>, w: f64, h: f64, sc: f64) -> Vec<Label> {
    let Some(text) = note.filter(|t| !t.trim().is_empty()) else {
        return Vec::new();
    };
    let (size, avail) = (NOTE_SIZE * sc, w - 2.0 * MARGIN * sc);
    let max_chars = ((avail / (CHAR_WIDTH * size)).floor() as usize).max(1);
    let mut lines: Vec<String> = vec![String::new()];
    for word in text.split_whitespace() {
        let line_len = lines.last().map_or(0, |l| l.chars().count());
        if line_len > 0 && line_len + 1 + word.chars().count() > max_chars {
            lines.push(String::new());
        }
        if let Some(line) = lines.last_mut() {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    if lines.len() > NOTE_LINES {
        lines.truncate(NOTE_LINES);
        lines[NOTE_LINES - 1].push_str(" …");
    }
    let line_h = size * 1.3;
    let top = h - MARGIN * sc - line_h * lines.len() as f64;
    (lines.iter().enumerate())
        .map(|(i, line)| Label {
            text: truncate(line, avail, size),
            x: px(w / 2.0),
            y: px(top + line_h * i as f64),
            size,
        })
        .collect()
}

/// Round tick values from 0 up to `y_top` (about five) with their labels.
pub(super) fn ticks(y_top: f64) -> Vec<(f64, String)> {
    let raw = y_top / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    // Extreme magnitudes (subnormal, overflow) cannot be ticked evenly.
    if !(step > 0.0 && step.is_finite()) {
        return vec![(0.0, "0".to_string())];
    }
    // Very large or small values print in scientific notation.
    let scientific = !(1e-3..1e9).contains(&y_top);
    let decimals = (0..9)
        .find(|&d| {
            let scaled = step * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
        })
        .unwrap_or(9) as usize;
    (0..=20)
        .map(|i| f64::from(i) * step)
        .take_while(|v| *v <= y_top)
        .map(|v| {
            let text = if v == 0.0 {
                "0".to_string()
            } else if scientific {
                format!("{v:.2e}")
            } else {
                format!("{v:.decimals$}")
            };
            (v, text)
        })
        .collect()
}

/// How the group labels fit under their groups.
struct GroupFit {
    size: f64,
    rotated: bool,
    texts: Vec<String>,
    /// Height of the label area under the x axis.
    height: f64,
}

/// Horizontal labels, shrunk down to [`MIN_SIZE`] if needed to fit the group
/// width; labels still too long are rotated to read upwards, as wide as the
/// group allows and cut at 25% of the canvas height.
fn fit_groups(groups: &[String], group_w: f64, h: f64, sc: f64) -> GroupFit {
    let avail = group_w * 0.95;
    let longest = groups.iter().map(|g| g.chars().count()).max().unwrap_or(0);
    let size = fit_size(longest, avail, GROUP_SIZE * sc, MIN_SIZE * sc);
    if longest as f64 * CHAR_WIDTH * size <= avail {
        let texts = groups.to_vec();
        return GroupFit {
            size,
            rotated: false,
            texts,
            height: size * 1.2,
        };
    }
    let size = (group_w * 0.9).clamp(MIN_SIZE * sc, GROUP_SIZE * sc);
    let texts: Vec<String> = groups.iter().map(|g| truncate(g, h * 0.25, size)).collect();
    let height = texts
        .iter()
        .map(|t| text_width(t, size))
        .fold(0.0, f64::max);
    GroupFit {
        size,
        rotated: true,
        texts,
        height,
    }
}

/// Top of the plot area, at or below `min_top`, such that a label reaching
/// `label_h` pixels above the tallest bar stays below `min_top`. The tallest
/// bar (or whisker) ends at 1/1.1 of the axis, so the label may use the
/// axis' top 1/11 and needs extra room only for the rest.
fn plot_top(min_top: f64, bottom: f64, label_h: f64) -> f64 {
    let free = 1.0 - 1.0 / 1.1;
    // Solve top + (bottom - top) * free = min_top + label_h for top.
    let top = (min_top + label_h - bottom * free) / (1.0 - free);
    top.max(min_top)
}

/// How value labels fit a bar slot `slot` pixels wide: the mode, the text
/// size, and how far the labels reach above their bars.
fn fit_values(chart: &BarChart, slot: f64, sc: f64) -> (ValueLabels, f64, f64) {
    let size = VALUE_SIZE * sc;
    let bars = chart.series.iter().flat_map(|s| &s.bars);
    let chars = |b: &Option<Bar>| b.as_ref().map_or(MISSING.len(), |b| value_text(b).len());
    let longest = bars.map(chars).max().unwrap_or(0) as f64 * CHAR_WIDTH * size;
    if longest <= slot {
        (ValueLabels::Horizontal, size, size + VALUE_GAP * sc)
    } else if slot >= size * 0.9 {
        (ValueLabels::Vertical, size, longest + VALUE_GAP * sc)
    } else {
        (ValueLabels::Hidden, size, 0.0)
    }
}

/// The rotated y-axis label, centred on the plot's height and fitted to it.
pub(super) fn y_label(text: &str, x: f64, top: f64, bottom: f64, sc: f64) -> Label {
    let avail = bottom - top;
    let size = fit_size(text.chars().count(), avail, AXIS_SIZE * sc, MIN_SIZE * sc);
    Label {
        text: truncate(text, avail, size),
        x: px(x + size * 0.6),
        y: px((top + bottom) / 2.0),
        size,
    }
}
