use super::layout::{Layout, ValueLabels};
use super::*;

fn with_ci(value: f64) -> Option<Bar> {
    Some(Bar {
        value,
        ci_low: value * 0.9,
        ci_high: value * 1.1,
    })
}

fn series(name: &str, bars: Vec<Option<Bar>>) -> Series {
    Series {
        name: name.to_string(),
        bars,
    }
}

fn sample() -> BarChart {
    BarChart {
        title: "Sample <chart> & co".to_string(),
        y_label: "ops/s relative to ext4 (= 1.0)".to_string(),
        groups: vec!["nvmfs".into(), "ext2".into(), "ext4".into()],
        series: vec![
            series(
                "depth 0.7",
                vec![with_ci(2.0), Some(Bar::exact(1.0)), with_ci(1.5)],
            ),
            series(
                "depth 2.1",
                vec![with_ci(3.41), None, Some(Bar::exact(1.0))],
            ),
        ],
        reference_line: Some(1.0),
        note: Some("quick run, scaled 1/50; missing bars: variant unavailable".to_string()),
    }
}

/// A paper-sized example: 10 file systems x 3 directory depths.
fn ten_by_three() -> BarChart {
    let groups = [
        "nvmfs", "ext2", "ext3", "ext4", "ext4-dax", "xfs", "xfs-dax", "btrfs", "f2fs", "tmpfs",
    ];
    let series = ["depth 0.7", "depth 2.1", "depth 3.4"]
        .iter()
        .enumerate()
        .map(|(s, name)| {
            let bars = (0..groups.len())
                .map(|g| match (g, s) {
                    (0, _) => with_ci(3.2 + s as f64 * 0.4),
                    (3, _) => Some(Bar::exact(1.0)),
                    (9, 2) => None,
                    _ => with_ci(0.4 + ((g * 7 + s * 3) % 10) as f64 * 0.15),
                })
                .collect();
            series(name, bars)
        })
        .collect();
    BarChart {
        title: "Metadata ops/s normalised to ext4 (95% CI)".to_string(),
        y_label: "ops/s relative to ext4 (= 1.0)".to_string(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        series,
        reference_line: Some(1.0),
        note: Some("quick run, scaled 1/50; missing bars: variant unavailable".to_string()),
    }
}

#[derive(Debug)]
struct SvgRect {
    y: i32,
    height: i32,
    fill: String,
}

fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let key = format!(" {name}=\"");
    let start = tag.find(&key).map(|i| i + key.len()).unwrap_or(tag.len());
    let len = tag[start..].find('"').unwrap_or(0);
    &tag[start..start + len]
}

/// The `<rect>` elements plotters' SVG backend writes, one per line.
fn rects(svg: &str) -> Vec<SvgRect> {
    let int = |tag: &str, name: &str| attr(tag, name).parse::<i32>().unwrap();
    svg.lines()
        .filter(|l| l.trim_start().starts_with("<rect"))
        .map(|tag| SvgRect {
            y: int(tag, "y"),
            height: int(tag, "height"),
            fill: attr(tag, "fill").to_string(),
        })
        .collect()
}

fn hex(series: usize) -> String {
    let (r, g, b) = PALETTE[series];
    format!("#{r:02X}{g:02X}{b:02X}")
}

/// Bars of `series`: rects of its colour standing on the x axis (its
/// legend swatch has the same colour but sits above the plot).
fn bars_of(svg: &str, lay: &Layout, series: usize) -> Vec<SvgRect> {
    let fill = hex(series);
    let on_axis = |r: &SvgRect| r.fill == fill && r.y + r.height == lay.bottom;
    rects(svg).into_iter().filter(on_axis).collect()
}

fn layout(chart: &BarChart) -> Layout {
    Layout::new(chart, DEFAULT_SIZE.0, DEFAULT_SIZE.1).unwrap()
}

/// Text written as a whole `<text>` element.
fn has_text(svg: &str, text: &str) -> bool {
    svg.contains(&format!(">\n{text}\n</text>"))
}

#[test]
fn svg_has_labels_legend_title_and_a_rect_per_present_bar() {
    let chart = sample();
    let svg = render_svg(&chart).unwrap();
    let lay = layout(&chart);
    assert!(
        has_text(&svg, "Sample &lt;chart&gt; &amp; co"),
        "escaped title"
    );
    assert!(has_text(&svg, "ops/s relative to ext4 (= 1.0)"));
    for label in chart
        .groups
        .iter()
        .chain(chart.series.iter().map(|s| &s.name))
    {
        assert!(has_text(&svg, label), "{label} missing");
    }
    assert!(has_text(
        &svg,
        "quick run, scaled 1/50; missing bars: variant unavailable"
    ));
    // 3 and 2 present bars; every colour also has one legend swatch.
    assert_eq!(bars_of(&svg, &lay, 0).len(), 3);
    assert_eq!(bars_of(&svg, &lay, 1).len(), 2);
    for s in 0..2 {
        let all = rects(&svg).into_iter().filter(|r| r.fill == hex(s)).count();
        assert_eq!(all, bars_of(&svg, &lay, s).len() + 1);
    }
    assert_eq!(svg.matches(">\nn/a\n</text>").count(), 1);
    for value in ["2.00", "1.00", "1.50", "3.41"] {
        assert!(has_text(&svg, value), "value label {value}");
    }
    assert!(svg.contains("#222222"), "dashed reference line");
}

#[test]
fn single_series_has_no_legend() {
    let mut chart = sample();
    chart.series.truncate(1);
    let svg = render_svg(&chart).unwrap();
    let lay = layout(&chart);
    let all = rects(&svg).into_iter().filter(|r| r.fill == hex(0)).count();
    assert_eq!(all, 3);
    assert_eq!(bars_of(&svg, &lay, 0).len(), 3);
    assert!(!has_text(&svg, "depth 0.7"));
}

#[test]
fn bar_heights_are_proportional_to_values() {
    let chart = BarChart {
        title: String::new(),
        y_label: "ops/s".to_string(),
        groups: vec!["a".into(), "b".into(), "c".into()],
        series: vec![series(
            "only",
            vec![
                Some(Bar::exact(1.0)),
                Some(Bar::exact(2.0)),
                Some(Bar::exact(0.5)),
            ],
        )],
        reference_line: None,
        note: None,
    };
    let svg = render_svg(&chart).unwrap();
    let lay = layout(&chart);
    let heights: Vec<i32> = bars_of(&svg, &lay, 0).iter().map(|r| r.height).collect();
    assert_eq!(heights.len(), 3);
    let (one, two, half) = (heights[0], heights[1], heights[2]);
    assert!(
        one > 50,
        "bars are drawn tall enough to compare: {heights:?}"
    );
    assert!((two - 2 * one).abs() <= 1, "{heights:?}");
    assert!((2 * half - one).abs() <= 1, "{heights:?}");
    // The axis ends 10% above the tallest bar.
    let plot_h = f64::from(lay.bottom - lay.top);
    assert!(
        (f64::from(two) * 1.1 - plot_h).abs() <= 2.0,
        "{two} vs {plot_h}"
    );
}

#[test]
fn svg_is_deterministic() {
    let chart = ten_by_three();
    assert_eq!(render_svg(&chart).unwrap(), render_svg(&chart).unwrap());
}

#[test]
fn invalid_input_is_an_error_not_a_panic() {
    let mut cases: Vec<(&str, BarChart)> = Vec::new();
    let mut add = |name, edit: &dyn Fn(&mut BarChart)| {
        let mut chart = sample();
        edit(&mut chart);
        cases.push((name, chart));
    };
    add("no groups", &|c| {
        c.groups.clear();
        c.series.iter_mut().for_each(|s| s.bars.clear());
    });
    add("no series", &|c| c.series.clear());
    add("short series", &|c| {
        c.series[1].bars.pop();
    });
    add("long series", &|c| c.series[0].bars.push(None));
    add("NaN value", &|c| {
        c.series[0].bars[0] = Some(Bar::exact(f64::NAN))
    });
    add("NaN ci", &|c| {
        c.series[0].bars[1] = Some(Bar {
            ci_high: f64::NAN,
            ..Bar::exact(1.0)
        })
    });
    add("negative", &|c| {
        c.series[1].bars[0] = Some(Bar::exact(-1.0))
    });
    add("negative ci", &|c| {
        c.series[1].bars[0] = Some(Bar {
            ci_low: -0.1,
            ..Bar::exact(1.0)
        })
    });
    add("infinite", &|c| {
        c.series[1].bars[0] = Some(Bar::exact(f64::INFINITY))
    });
    add("ci reversed", &|c| {
        c.series[1].bars[0] = Some(Bar {
            value: 1.0,
            ci_low: 1.2,
            ci_high: 0.8,
        })
    });
    add("too large to scale", &|c| {
        c.series[1].bars[0] = Some(Bar::exact(f64::MAX))
    });
    add("NaN reference", &|c| c.reference_line = Some(f64::NAN));
    add("negative reference", &|c| c.reference_line = Some(-1.0));
    add("too many series", &|c| {
        let extra = c.series[0].clone();
        c.series.resize(PALETTE.len() + 1, extra);
    });
    for (name, chart) in cases {
        assert!(
            matches!(render_svg(&chart), Err(ChartError::Invalid(_))),
            "{name}"
        );
        assert!(
            matches!(render_png(&chart, 1000, 600), Err(ChartError::Invalid(_))),
            "{name}"
        );
    }
    let chart = sample();
    for (w, h) in [
        (0, 600),
        (1000, 0),
        (MAX_PNG_SIDE + 1, 600),
        (40, 30),
        (20, 600),
    ] {
        let result = render_png(&chart, w, h).map(|png| png.len());
        assert!(
            matches!(result, Err(ChartError::Invalid(_))),
            "{w}x{h}: {result:?}"
        );
    }
}

#[test]
fn all_missing_or_zero_still_renders() {
    let mut chart = sample();
    chart.reference_line = None;
    chart.series[0].bars = vec![None; 3];
    chart.series[1].bars = vec![Some(Bar::exact(0.0)); 3];
    let svg = render_svg(&chart).unwrap();
    assert_eq!(svg.matches(">\nn/a\n</text>").count(), 3);
    assert!(has_text(&svg, "0.00"));
}

#[test]
fn twelve_groups_by_four_series_stay_legible() {
    let mut chart = ten_by_three();
    chart.groups.push("a-file-system-with-a-long-name".into());
    chart.groups.push("zfs".into());
    for s in &mut chart.series {
        s.bars.extend([with_ci(1.2), None]);
    }
    let bars = (0..12).map(|g| with_ci(0.5 + g as f64 * 0.1)).collect();
    chart.series.push(series("depth 5.0", bars));
    let lay = layout(&chart);
    assert!(
        lay.groups_rotated,
        "the long name does not fit horizontally"
    );
    assert_ne!(lay.value_labels, ValueLabels::Hidden);
    assert!(lay.group_labels.iter().all(|l| l.size >= 11.0));
    let svg = render_svg(&chart).unwrap();
    assert!(has_text(&svg, "zfs"));
    // Cut at 25% of the canvas height.
    let long = &lay.group_labels[10].text;
    assert!(
        long.starts_with("a-file-system") && long.ends_with('…'),
        "{long}"
    );
    assert!(has_text(&svg, long));
    assert_eq!(bars_of(&svg, &lay, 3).len(), 12);
}

#[test]
fn tick_labels_are_round() {
    let tick_texts = |highest: f64| {
        let mut chart = sample();
        chart.reference_line = None;
        chart.series.truncate(1);
        chart.series[0].bars = vec![Some(Bar::exact(highest)), None, None];
        let lay = layout(&chart);
        lay.ticks.into_iter().map(|t| t.text).collect::<Vec<_>>()
    };
    // Axis tops 2.2, 4.4, 0.0011 and 2.2e6.
    assert_eq!(tick_texts(2.0), ["0", "0.5", "1.0", "1.5", "2.0"]);
    assert_eq!(tick_texts(4.0), ["0", "1", "2", "3", "4"]);
    assert_eq!(
        tick_texts(0.001),
        ["0", "0.00025", "0.00050", "0.00075", "0.00100"]
    );
    assert_eq!(
        tick_texts(2e6),
        ["0", "500000", "1000000", "1500000", "2000000"]
    );
}

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n'];

#[test]
fn png_has_the_requested_size_and_content() {
    let png = match render_png(&ten_by_three(), 800, 500) {
        Err(ChartError::NoFont(why)) => {
            println!("skipped: no font ({why})");
            return;
        }
        result => result.unwrap(),
    };
    assert_eq!(png[..8], PNG_SIGNATURE);
    assert_eq!(&png[12..16], b"IHDR");
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 800);
    assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 500);
    let mut reader = png::Decoder::new(std::io::Cursor::new(&png))
        .read_info()
        .unwrap();
    let mut rgb = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut rgb).unwrap();
    assert_eq!((frame.width, frame.height), (800, 500));
    let pixels = &rgb[..frame.buffer_size()];
    let blue = [PALETTE[0].0, PALETTE[0].1, PALETTE[0].2];
    assert!(pixels.chunks(3).any(|p| p != [255, 255, 255]), "not blank");
    assert!(pixels.chunks(3).any(|p| p == blue), "has bars");
    // Text is anti-aliased black: some pixels are dark grey, not a palette colour.
    assert!(pixels
        .chunks(3)
        .any(|p| p[0] < 64 && p[0] == p[1] && p[1] == p[2]));
}

#[test]
fn write_chart_writes_svg_and_png() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("charts");
    let chart = sample();
    let files = write_chart(&chart, &out, "fig1").unwrap();
    assert_eq!(files.svg, out.join("fig1.svg"));
    assert_eq!(
        fs::read_to_string(&files.svg).unwrap(),
        render_svg(&chart).unwrap()
    );
    match &files.png {
        Ok(path) => {
            assert_eq!(*path, out.join("fig1.png"));
            assert_eq!(fs::read(path).unwrap()[..8], PNG_SIGNATURE);
        }
        Err(why) => {
            assert!(why.contains("fonts-dejavu-core"), "{why}");
            println!("skipped: no font ({why})");
        }
    }
    let bad = BarChart {
        groups: Vec::new(),
        ..sample()
    };
    let err = write_chart(&bad, &out, "bad").unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert!(!out.join("bad.svg").exists());
    let err = write_chart(&chart, &out, "../escape").unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
}

/// Writes the example chart to $NVMFS_CHART_EXAMPLE_DIR when set, for eyeballing.
#[test]
fn example_chart() {
    if let Some(dir) = std::env::var_os("NVMFS_CHART_EXAMPLE_DIR") {
        let files = write_chart(&ten_by_three(), Path::new(&dir), "chart-example").unwrap();
        println!("wrote {files:?}");
    }
}

// Line charts (line.rs).

fn curve(name: &str, points: &[(f64, f64)]) -> Line {
    Line {
        name: name.to_string(),
        points: points
            .iter()
            .map(|&(x, y)| Point {
                x,
                y,
                ci_low: y * 0.9,
                ci_high: y * 1.1,
            })
            .collect(),
    }
}

fn scaling() -> LineChart {
    LineChart {
        title: "Filemark <small> & files".to_string(),
        x_label: "threads".to_string(),
        y_label: "transactions/s".to_string(),
        log_x: true,
        log_y: false,
        lines: vec![
            curve("ext2", &[(1.0, 1000.0), (8.0, 1500.0), (64.0, 1800.0)]),
            curve("xfs", &[(1.0, 500.0), (8.0, 600.0), (64.0, 650.0)]),
            curve("jfs", &[]),
        ],
        note: Some("quick run; whiskers: 95% CI".to_string()),
    }
}

/// (cx, cy, fill) of the `<circle>` markers plotters' SVG backend writes.
fn circles(svg: &str) -> Vec<(i32, i32, String)> {
    let int = |tag: &str, name: &str| attr(tag, name).parse::<i32>().unwrap();
    svg.lines()
        .filter(|l| l.trim_start().starts_with("<circle"))
        .map(|tag| {
            (
                int(tag, "cx"),
                int(tag, "cy"),
                attr(tag, "fill").to_string(),
            )
        })
        .collect()
}

#[test]
fn line_svg_has_labels_legend_and_a_marker_per_point() {
    let chart = scaling();
    let svg = render_svg(&chart).unwrap();
    assert!(has_text(&svg, "Filemark &lt;small&gt; &amp; files"));
    for label in [
        "threads",
        "transactions/s",
        "ext2",
        "xfs",
        "jfs",
        "1",
        "8",
        "64",
    ] {
        assert!(has_text(&svg, label), "{label} missing");
    }
    assert!(has_text(&svg, "quick run; whiskers: 95% CI"));
    let marks = circles(&svg);
    assert_eq!(marks.len(), 6);
    assert_eq!(marks.iter().filter(|m| m.2 == hex(0)).count(), 3);
    assert_eq!(marks.iter().filter(|m| m.2 == hex(1)).count(), 3);
    // Three legend swatches, one per line, the empty one included.
    for s in 0..3 {
        let swatches = rects(&svg).into_iter().filter(|r| r.fill == hex(s)).count();
        assert_eq!(swatches, 1, "line {s}");
    }
    assert_eq!(render_svg(&chart).unwrap(), svg, "deterministic");
}

#[test]
fn line_points_sit_at_their_values() {
    let chart = LineChart {
        lines: vec![curve("only", &[(1.0, 100.0), (2.0, 200.0), (4.0, 50.0)])],
        note: None,
        title: String::new(),
        ..scaling()
    };
    let svg = render_svg(&chart).unwrap();
    let lay = line::LineLayout::new(&chart, DEFAULT_SIZE.0, DEFAULT_SIZE.1).unwrap();
    let marks = circles(&svg);
    assert_eq!(marks.len(), 3);
    let h = |m: &(i32, i32, String)| lay.bottom - m.1;
    let (a, b, c) = (h(&marks[0]), h(&marks[1]), h(&marks[2]));
    assert!(a > 50, "tall enough to compare: {a}");
    assert!(
        (b - 2 * a).abs() <= 1 && (2 * c - a).abs() <= 1,
        "{a} {b} {c}"
    );
    // Doubling loads are evenly spaced on the logarithmic axis, left to right.
    let (d1, d2) = (marks[1].0 - marks[0].0, marks[2].0 - marks[1].0);
    assert!(d1 > 100 && (d1 - d2).abs() <= 1, "{d1} {d2}");
    // No legend for a single line: the only rect of its colour would be a swatch.
    assert!(!rects(&svg).iter().any(|r| r.fill == hex(0)));
    // On a linear axis 1 -> 2 is a third of 2 -> 4... of 1 -> 4's span.
    let linear = LineChart {
        log_x: false,
        ..chart
    };
    let marks = circles(&render_svg(&linear).unwrap());
    let (d1, d2) = (marks[1].0 - marks[0].0, marks[2].0 - marks[1].0);
    assert!((2 * d1 - d2).abs() <= 1, "{d1} {d2}");
}

#[test]
fn invalid_line_charts_are_errors_not_panics() {
    let mut cases: Vec<(&str, LineChart)> = Vec::new();
    let mut add = |name, edit: &dyn Fn(&mut LineChart)| {
        let mut chart = scaling();
        edit(&mut chart);
        cases.push((name, chart));
    };
    add("no lines", &|c| c.lines.clear());
    add("no points", &|c| {
        c.lines.iter_mut().for_each(|l| l.points.clear())
    });
    add("too many lines", &|c| {
        let extra = c.lines[0].clone();
        c.lines.resize(PALETTE.len() + 1, extra);
    });
    add("NaN y", &|c| c.lines[0].points[1].y = f64::NAN);
    add("negative y", &|c| c.lines[0].points[1].y = -1.0);
    add("infinite ci", &|c| {
        c.lines[1].points[0].ci_high = f64::INFINITY
    });
    add("ci reversed", &|c| {
        c.lines[1].points[0].ci_low = 2.0;
        c.lines[1].points[0].ci_high = 1.0;
    });
    add("zero x on a log axis", &|c| c.lines[0].points[0].x = 0.0);
    add("NaN x", &|c| c.lines[0].points[0].x = f64::NAN);
    add("x not increasing", &|c| c.lines[0].points[2].x = 8.0);
    add("too large to scale", &|c| c.lines[0].points[0].y = f64::MAX);
    for (name, chart) in cases {
        assert!(
            matches!(render_svg(&chart), Err(ChartError::Invalid(_))),
            "{name}"
        );
        assert!(
            matches!(render_png(&chart, 1000, 600), Err(ChartError::Invalid(_))),
            "{name}"
        );
    }
    let mut linear = scaling();
    linear.log_x = false;
    linear.lines[0].points[0].x = 0.0;
    render_svg(&linear).expect("0 is fine on a linear axis");
    assert!(matches!(
        render_png(&scaling(), 40, 30),
        Err(ChartError::Invalid(_))
    ));
}

#[test]
fn line_chart_png_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_chart(&scaling(), dir.path(), "fig1").unwrap();
    assert_eq!(
        fs::read_to_string(&files.svg).unwrap(),
        render_svg(&scaling()).unwrap()
    );
    let png = match files.png {
        Ok(path) => fs::read(path).unwrap(),
        Err(why) => {
            println!("skipped: no font ({why})");
            return;
        }
    };
    let mut reader = png::Decoder::new(std::io::Cursor::new(&png))
        .read_info()
        .unwrap();
    let mut rgb = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut rgb).unwrap();
    assert_eq!((frame.width, frame.height), DEFAULT_SIZE);
    let orange = [PALETTE[1].0, PALETTE[1].1, PALETTE[1].2];
    assert!(rgb.chunks(3).any(|p| p == orange), "has the second line");
}

#[test]
fn x_ticks_skip_labels_that_would_overlap() {
    let points: Vec<(f64, f64)> = (1..=200).map(|x| (f64::from(x), 1.0)).collect();
    let chart = LineChart {
        log_x: false,
        lines: vec![curve("dense", &points)],
        ..scaling()
    };
    let lay = line::LineLayout::new(&chart, DEFAULT_SIZE.0, DEFAULT_SIZE.1).unwrap();
    assert!(lay.x_ticks.len() < 100, "{}", lay.x_ticks.len());
    assert_eq!(lay.x_ticks[0].text, "1");
    for w in lay.x_ticks.windows(2) {
        assert!(w[1].x - w[0].x >= 20, "{} {}", w[0].text, w[1].text);
    }
}

#[test]
fn log_y_spaces_decades_evenly() {
    let chart = LineChart {
        log_y: true,
        lines: vec![
            curve("fast", &[(1.0, 10_000.0), (2.0, 100_000.0)]),
            curve("slow", &[(1.0, 100.0), (2.0, 0.0)]),
        ],
        ..scaling()
    };
    let svg = render_svg(&chart).unwrap();
    let lay = line::LineLayout::new(&chart, DEFAULT_SIZE.0, DEFAULT_SIZE.1).unwrap();
    // Decade ticks only (four decades), from 10 (below 90, the lowest whisker) up.
    let texts: Vec<&str> = lay.y_ticks.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(texts, ["10", "100", "1000", "10000", "100000", "1000000"]);
    let marks = circles(&svg);
    assert_eq!(marks.len(), 4);
    let (a, b, c) = (marks[0].1, marks[1].1, marks[2].1);
    assert!(
        (a - b) > 50 && ((a - b) - (c - a) / 2).abs() <= 1,
        "{a} {b} {c}"
    );
    // The point at 0 sits on the x axis.
    assert_eq!(marks[3].1, lay.bottom);
    // Two decades or less get 2x and 5x ticks too.
    let narrow = LineChart {
        lines: vec![curve("only", &[(1.0, 30.0), (2.0, 300.0)])],
        ..chart
    };
    let lay = line::LineLayout::new(&narrow, DEFAULT_SIZE.0, DEFAULT_SIZE.1).unwrap();
    let texts: Vec<&str> = lay.y_ticks.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(texts, ["10", "20", "50", "100", "200", "500", "1000"]);
}

/// Writes an example line chart to $NVMFS_CHART_EXAMPLE_DIR when set, for eyeballing.
#[test]
fn example_line_chart() {
    if let Some(dir) = std::env::var_os("NVMFS_CHART_EXAMPLE_DIR") {
        let files = write_chart(&scaling(), Path::new(&dir), "line-example").unwrap();
        println!("wrote {files:?}");
    }
}
