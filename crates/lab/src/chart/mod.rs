//! Charts in the style of a file-system paper's figures: grouped bar charts
//! ([`BarChart`]) and scaling curves ([`LineChart`], in line.rs).
//!
//! A bar chart has one group per x-axis entry (typically a file system), one
//! bar per series inside each group (typically a workload variant), an
//! optional 95% confidence-interval whisker on every bar, an optional dashed
//! reference line (the baseline, e.g. 1.0 for "normalised to ext4") and a
//! small caption. A line chart has one line per series (typically a file
//! system) through its points (a rate against threads, outstanding I/Os or
//! tasks), with a 95% whisker at every point.
//!
//! Drawing goes through `plotters`, but without its chart builder: that one
//! measures text with a font for captions, legends and axis labels, which
//! would make the SVG need a font at render time and change with the fonts
//! installed. Here the layout (layout.rs) estimates text widths from character
//! counts, so [`render_svg`] is pure and deterministic (same chart, same bytes)
//! and only [`render_png`] needs a TrueType font (font.rs), because the bitmap
//! backend has to rasterise glyphs itself.

mod draw;
mod font;
mod layout;
mod line;
#[cfg(test)]
mod tests;

use plotters::backend::{BitMapBackend, SVGBackend};
use plotters::drawing::IntoDrawingArea;
use serde::Serialize;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub use font::FONT_ENV;
pub use line::{Line, LineChart, Point};

use plotters::backend::DrawingBackend;
use plotters::coord::Shift;
use plotters::drawing::DrawingArea;

/// A chart [`render_svg`], [`render_png`] and [`write_chart`] can draw:
/// [`BarChart`] or [`LineChart`].
pub trait Chart: sealed::Draw {}

impl Chart for BarChart {}
impl Chart for LineChart {}

mod sealed {
    use super::*;

    /// What each kind of chart supplies to the shared rendering code.
    pub trait Draw {
        /// Checks everything drawing relies on.
        fn check(&self) -> Result<(), ChartError>;
        /// Whether the chart can be laid out on a `width` x `height` canvas.
        fn fits(&self, width: u32, height: u32) -> Result<(), ChartError>;
        /// Lays the chart out on a `width` x `height` canvas and draws it.
        fn draw_on<DB: DrawingBackend>(
            &self,
            root: &DrawingArea<DB, Shift>,
            width: u32,
            height: u32,
        ) -> Result<(), ChartError>;
    }

    impl Draw for BarChart {
        fn check(&self) -> Result<(), ChartError> {
            self.validate()
        }

        fn fits(&self, width: u32, height: u32) -> Result<(), ChartError> {
            layout::Layout::new(self, width, height).map(drop)
        }

        fn draw_on<DB: DrawingBackend>(
            &self,
            root: &DrawingArea<DB, Shift>,
            width: u32,
            height: u32,
        ) -> Result<(), ChartError> {
            let layout = layout::Layout::new(self, width, height)?;
            draw::draw_chart(root, self, &layout)
        }
    }

    impl Draw for LineChart {
        fn check(&self) -> Result<(), ChartError> {
            self.validate()
        }

        fn fits(&self, width: u32, height: u32) -> Result<(), ChartError> {
            line::LineLayout::new(self, width, height).map(drop)
        }

        fn draw_on<DB: DrawingBackend>(
            &self,
            root: &DrawingArea<DB, Shift>,
            width: u32,
            height: u32,
        ) -> Result<(), ChartError> {
            let layout = line::LineLayout::new(self, width, height)?;
            line::draw(root, self, &layout)
        }
    }
}

/// Canvas of [`render_svg`] (and of the PNG that [`write_chart`] writes):
/// readable on a screen and in a two-column paper at full text width.
pub const DEFAULT_SIZE: (u32, u32) = (1000, 600);

/// Largest PNG side [`render_png`] accepts: bounds the RGB buffer (8192² × 3
/// bytes = 192 MiB) and keeps `width * height` far from `u32` overflow
/// inside plotters' bitmap backend.
pub const MAX_PNG_SIDE: u32 = 8192;

/// Fill colours of the series, in order (Tableau 10): distinct, readable in
/// grey-scale print, and fixed so the same series always gets the same colour.
pub const PALETTE: [(u8, u8, u8); 10] = [
    (0x4E, 0x79, 0xA7), // blue
    (0xF2, 0x8E, 0x2B), // orange
    (0xE1, 0x57, 0x59), // red
    (0x76, 0xB7, 0xB2), // teal
    (0x59, 0xA1, 0x4F), // green
    (0xED, 0xC9, 0x48), // yellow
    (0xB0, 0x7A, 0xA1), // purple
    (0xFF, 0x9D, 0xA7), // pink
    (0x9C, 0x75, 0x5F), // brown
    (0xBA, 0xB0, 0xAC), // grey
];

/// A grouped bar chart: `groups` along the x axis, one bar per [`Series`] in
/// every group.
#[derive(Debug, Clone, Serialize)]
pub struct BarChart {
    /// Title above the plot (may be empty: no title line).
    pub title: String,
    /// Label of the y axis, e.g. "ops/s relative to ext4 (= 1.0)".
    pub y_label: String,
    /// The x-axis groups in drawing order, e.g. file systems.
    pub groups: Vec<String>,
    /// The bars of every group, in drawing order and legend order; at most
    /// [`PALETTE`]`.len()` series. A legend is drawn when there is more than one.
    pub series: Vec<Series>,
    /// Draws a dashed horizontal line at this y value (e.g. 1.0 for the
    /// baseline). The y axis always extends far enough to show it.
    pub reference_line: Option<f64>,
    /// Small caption under the plot, wrapped to at most three lines.
    pub note: Option<String>,
}

/// One bar in every group, all in the same colour.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// Legend entry, e.g. "depth 2.1".
    pub name: String,
    /// One entry per group (`bars.len() == groups.len()`); `None` leaves the
    /// slot empty with an "n/a" mark (e.g. the variant does not exist there).
    pub bars: Vec<Option<Bar>>,
}

/// A bar's height and the confidence interval drawn as its whisker.
///
/// All three must be finite and non-negative, with `ci_low <= ci_high`.
/// When both bounds equal `value` no whisker is drawn.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Bar {
    /// Height of the bar, printed above it with two decimals.
    pub value: f64,
    /// Lower end of the whisker.
    pub ci_low: f64,
    /// Upper end of the whisker.
    pub ci_high: f64,
}

impl Bar {
    /// A bar without a whisker.
    pub fn exact(value: f64) -> Self {
        Bar {
            value,
            ci_low: value,
            ci_high: value,
        }
    }

    fn has_whisker(&self) -> bool {
        self.ci_low != self.value || self.ci_high != self.value
    }

    /// Highest point drawn for this bar (bar top or whisker top).
    fn top(&self) -> f64 {
        self.value.max(self.ci_high)
    }

    fn check(&self) -> Result<(), String> {
        let fields = [
            ("value", self.value),
            ("ci_low", self.ci_low),
            ("ci_high", self.ci_high),
        ];
        for (name, v) in fields {
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

/// Why a chart could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChartError {
    /// The chart's data cannot be drawn (empty, mismatched lengths, NaN,
    /// negative or infinite values) or does not fit the requested size.
    Invalid(String),
    /// No TrueType font was found for the PNG's text; the message says where
    /// we looked and which package provides one. SVG output is unaffected.
    NoFont(String),
    /// plotters or the PNG encoder failed.
    Draw(String),
}

impl fmt::Display for ChartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChartError::Invalid(why) => write!(f, "invalid chart: {why}"),
            ChartError::NoFont(why) => write!(f, "no font for PNG text: {why}"),
            ChartError::Draw(why) => write!(f, "drawing the chart failed: {why}"),
        }
    }
}

impl std::error::Error for ChartError {}

impl BarChart {
    /// Checks everything [`render_svg`] and [`render_png`] rely on; both call
    /// it first, so bad data becomes an [`ChartError::Invalid`], never a panic.
    pub fn validate(&self) -> Result<(), ChartError> {
        let invalid = |why: String| Err(ChartError::Invalid(why));
        if self.groups.is_empty() {
            return invalid("no groups".into());
        }
        if self.series.is_empty() {
            return invalid("no series".into());
        }
        if self.series.len() > PALETTE.len() {
            return invalid(format!(
                "{} series, at most {} have distinct colours",
                self.series.len(),
                PALETTE.len()
            ));
        }
        for s in &self.series {
            if s.bars.len() != self.groups.len() {
                return invalid(format!(
                    "series {:?} has {} bars for {} groups",
                    s.name,
                    s.bars.len(),
                    self.groups.len()
                ));
            }
            for (group, bar) in self.groups.iter().zip(&s.bars) {
                if let Some(Err(why)) = bar.map(|b| b.check()) {
                    return invalid(format!("series {:?}, group {group:?}: {why}", s.name));
                }
            }
        }
        if let Some(r) = self.reference_line.filter(|r| !r.is_finite() || *r < 0.0) {
            return invalid(format!("reference line at {r}, must be finite and >= 0"));
        }
        if !self.y_top().is_finite() {
            return invalid("values too large to scale".into());
        }
        Ok(())
    }

    /// Top of the y axis: 10% above the highest bar, whisker or reference
    /// line, so the value labels above the tallest bar have room.
    fn y_top(&self) -> f64 {
        let bars = self.series.iter().flat_map(|s| s.bars.iter().flatten());
        let highest = bars
            .map(Bar::top)
            .chain(self.reference_line)
            .fold(0.0, f64::max);
        // All zero (or all missing): any positive scale works; 1.0 gives
        // round tick labels.
        if highest > 0.0 {
            highest * 1.1
        } else {
            1.0
        }
    }
}

/// SVG of the chart on a [`DEFAULT_SIZE`] canvas.
///
/// Needs no font: text goes into `<text>` elements that the viewer renders,
/// and the layout only estimates text widths. Deterministic: the same chart
/// always gives the same bytes.
pub fn render_svg<C: Chart>(chart: &C) -> Result<String, ChartError> {
    chart.check()?;
    let (width, height) = DEFAULT_SIZE;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, DEFAULT_SIZE).into_drawing_area();
        chart.draw_on(&root, width, height)?;
    } // The backend writes the document's end when dropped.
    Ok(svg)
}

/// PNG (8-bit RGB) of the same chart at `width` x `height` pixels; text and
/// line widths scale with the canvas relative to [`DEFAULT_SIZE`].
///
/// Text needs a TrueType font, found at run time (see [`FONT_ENV`] and
/// font.rs: `$NVMFS_CHART_FONT`, DejaVu Sans and other common paths, then
/// any .ttf under the usual font directories). Without one this returns
/// [`ChartError::NoFont`] naming the package to install (fonts-dejavu-core),
/// so callers can skip the PNG and say why.
pub fn render_png<C: Chart>(chart: &C, width: u32, height: u32) -> Result<Vec<u8>, ChartError> {
    chart.check()?;
    if !(1..=MAX_PNG_SIDE).contains(&width) || !(1..=MAX_PNG_SIDE).contains(&height) {
        return Err(ChartError::Invalid(format!(
            "PNG size {width}x{height}, each side must be 1..={MAX_PNG_SIDE}"
        )));
    }
    // Lay out first: a canvas too small is an error even without a font.
    chart.fits(width, height)?;
    font::ensure_registered()?;
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (width, height)).into_drawing_area();
        chart.draw_on(&root, width, height)?;
    }
    encode_png(&rgb, width, height)
}

fn encode_png(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>, ChartError> {
    let failed = |e: png::EncodingError| ChartError::Draw(format!("PNG encoding: {e}"));
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(failed)?;
    writer.write_image_data(rgb).map_err(failed)?;
    writer.finish().map_err(failed)?;
    Ok(out)
}

/// What [`write_chart`] wrote.
#[derive(Debug)]
pub struct ChartFiles {
    /// The SVG, always written.
    pub svg: PathBuf,
    /// The PNG, or why it was skipped (no font, drawing failure).
    pub png: Result<PathBuf, String>,
}

/// Writes `dir/stem.svg` and `dir/stem.png` ([`DEFAULT_SIZE`]), creating
/// `dir` if needed.
///
/// An invalid chart or stem is an [`io::ErrorKind::InvalidInput`] error and
/// writes nothing. A PNG that cannot be rendered (typically [`ChartError::NoFont`])
/// is not an error: the SVG is still written and [`ChartFiles::png`] holds the
/// reason, for the caller to report.
pub fn write_chart<C: Chart>(chart: &C, dir: &Path, stem: &str) -> io::Result<ChartFiles> {
    // The stem names files inside `dir`, not a path elsewhere.
    if stem.is_empty() || stem.contains(['/', '\\']) || stem == ".." {
        let why = format!("chart file stem {stem:?} must be a plain, non-empty name");
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    }
    let svg = render_svg(chart).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    fs::create_dir_all(dir)?;
    let svg_path = dir.join(format!("{stem}.svg"));
    fs::write(&svg_path, svg)?;
    let png = match render_png(chart, DEFAULT_SIZE.0, DEFAULT_SIZE.1) {
        Ok(bytes) => {
            let png_path = dir.join(format!("{stem}.png"));
            fs::write(&png_path, bytes)?;
            Ok(png_path)
        }
        Err(e) => Err(e.to_string()),
    };
    Ok(ChartFiles { svg: svg_path, png })
}
