//! Static images of the charts (`--outputs png,svg`): each [`Chart`] drawn with plotters
//! at 1600×1000, text in the font shipped in the binary (a 52 KB subset of Liberation
//! Sans, SIL OFL 1.1, `assets/fonts`), so no browser and no system font is needed at run
//! time. The PNG is
//! drawn into an RGB buffer and encoded with the `png` crate.

use super::{Chart, Series};
use plotters::coord::Shift;
use plotters::coord::ranged1d::Ranged;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// Image width, pixels.
pub const WIDTH: u32 = 1600;
/// Image height, pixels.
pub const HEIGHT: u32 = 1000;

const FAMILY: &str = "sans-serif";
/// At most this many tick labels on the x axis: a label of a dozen characters at 22 px
/// is ~140 px wide, and the plot is ~1,300 px wide.
const X_TICKS: usize = 8;
/// At most this many on a y axis (~700 px tall, labels 22 px high).
const Y_TICKS: usize = 10;

/// The static image formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// PNG, RGB.
    Png,
    /// SVG.
    Svg,
}

impl ImageFormat {
    /// The file extension.
    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Svg => "svg",
        }
    }
}

/// A chart that could not be drawn or encoded.
#[derive(Debug, thiserror::Error)]
pub enum DrawError {
    /// plotters failed.
    #[error("drawing the chart {chart:?}: {message}")]
    Draw {
        /// Its title.
        chart: String,
        /// Why.
        message: String,
    },
    /// The PNG encoder failed.
    #[error("encoding the PNG: {0}")]
    Png(#[from] png::EncodingError),
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is ours, compiled in: it parses (a unit test draws with it).
        if plotters::style::register_font(FAMILY, FontStyle::Normal, crate::packed::chart_font())
            .is_err()
        {
            tracing::warn!("the shipped chart font did not parse; charts will have no text");
        }
    });
}

/// Draws `chart` as an SVG document.
pub fn svg(chart: &Chart) -> Result<String, DrawError> {
    register_font();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, chart).map_err(|message| DrawError::Draw {
            chart: chart.title.clone(),
            message,
        })?;
        root.present().map_err(|e| DrawError::Draw {
            chart: chart.title.clone(),
            message: e.to_string(),
        })?;
    }
    Ok(out)
}

/// Draws `chart` as a PNG file's bytes.
pub fn png(chart: &Chart) -> Result<Vec<u8>, DrawError> {
    register_font();
    let mut rgb = vec![255u8; (WIDTH * HEIGHT * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, chart).map_err(|message| DrawError::Draw {
            chart: chart.title.clone(),
            message,
        })?;
        root.present().map_err(|e| DrawError::Draw {
            chart: chart.title.clone(),
            message: e.to_string(),
        })?;
    }
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, WIDTH, HEIGHT);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(&rgb)?;
        writer.finish()?;
    }
    Ok(out)
}

/// Renders every drawable chart in `format` and writes each to `dir/<id>.<ext>`
/// atomically. Returns the files written and the failures (one does not stop the rest).
pub fn write_images(
    charts: &[Chart],
    format: ImageFormat,
    dir: &Path,
) -> (Vec<PathBuf>, Vec<(PathBuf, String)>) {
    let mut written = Vec::new();
    let mut failed = Vec::new();
    for chart in charts.iter().filter(|c| c.drawable()) {
        let path = dir.join(format!("{}.{}", chart.id, format.extension()));
        let bytes = match format {
            ImageFormat::Png => png(chart),
            ImageFormat::Svg => svg(chart).map(String::into_bytes),
        };
        match bytes
            .map_err(|e| e.to_string())
            .and_then(|b| super::super::write_atomic(&path, &b).map_err(|e| e.to_string()))
        {
            Ok(()) => written.push(path),
            Err(e) => failed.push((path, e)),
        }
    }
    (written, failed)
}

fn rgb(hex: &str) -> RGBColor {
    let c = |i: usize| {
        hex.get(i..i + 2)
            .and_then(|s| u8::from_str_radix(s, 16).ok())
            .unwrap_or(0)
    };
    RGBColor(c(1), c(3), c(5))
}

/// The range of `values`, padded so points do not sit on the frame. `from_zero`: a
/// quantity that starts at zero (latency, rates) is shown from zero.
fn range(values: impl Iterator<Item = f64>, from_zero: bool) -> Range<f64> {
    let (mut lo, mut hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if lo > hi {
        return 0.0..1.0;
    }
    if from_zero && lo >= 0.0 {
        lo = 0.0;
    }
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let pad = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
        return (lo - pad)..(hi + pad);
    }
    let pad = (hi - lo) * 0.05;
    if lo != 0.0 {
        lo -= pad;
    }
    hi += pad;
    lo..hi
}

/// The decimals that show every tick of `ticks` exactly, so no two labels read the same.
pub fn decimals(ticks: &[f64]) -> usize {
    let step = ticks
        .windows(2)
        .map(|w| (w[1] - w[0]).abs())
        .filter(|g| *g > 0.0)
        .fold(f64::INFINITY, f64::min);
    let step = if step.is_finite() {
        step
    } else {
        ticks.first().map_or(1.0, |v| v.abs().max(1e-12))
    };
    (0..15)
        .find(|&d| {
            ticks.iter().all(|v| {
                let shown: f64 = format!("{v:.d$}").parse().unwrap_or(f64::NAN);
                (shown - v).abs() <= step * 1e-6
            })
        })
        .unwrap_or(15)
}

/// A tick label with `d` decimals; `-0` reads `0`.
fn tick(v: f64, d: usize) -> String {
    let s = format!("{v:.d$}");
    if s.trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        s.trim_start_matches('-').to_string()
    } else {
        s
    }
}

/// The tick values plotters draws on `r` for at most `n` labels.
fn ticks_of(r: &Range<f64>, n: usize) -> Vec<f64> {
    let coord: RangedCoordf64 = r.clone().into();
    coord.key_points(n)
}

/// The runs of drawable points of `s`, split where a value is missing; a stepped
/// series' points with the corner of each step between them.
fn segments(s: &Series) -> Vec<Vec<(f64, f64)>> {
    let mut out = vec![Vec::new()];
    for &(x, y) in &s.points {
        match y {
            Some(y) if x.is_finite() && y.is_finite() => {
                if let Some(last) = out.last_mut() {
                    if let (true, Some(&(_, before))) = (s.step, last.last()) {
                        last.push((x, before));
                    }
                    last.push((x, y));
                }
            }
            _ => out.push(Vec::new()),
        }
    }
    out.retain(|seg| !seg.is_empty());
    out
}

/// A box in pixels, for keeping a chart's notes apart.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rect {
    x0: i32,
    x1: i32,
    y0: i32,
    y1: i32,
}

impl Rect {
    /// The square of half-side `r` around (x, y).
    fn around(x: i32, y: i32, r: i32) -> Self {
        Rect {
            x0: x - r,
            x1: x + r,
            y0: y - r,
            y1: y + r,
        }
    }

    fn overlaps(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
}

/// How a legend entry's sample is drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sample {
    Line,
    Dashed,
    Dot,
    Bar,
}

/// One entry of a chart's legend: its text, colour and sample.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    label: String,
    color: RGBColor,
    sample: Sample,
}

/// The legend of `c`: each kind of bar, then each series with a point to draw.
fn legend_entries(c: &Chart) -> Vec<Entry> {
    let bars = c.bars.iter().flat_map(|b| {
        b.kinds
            .iter()
            .enumerate()
            .filter(|(k, _)| b.items.iter().any(|bar| bar.3 == *k))
            .map(|(_, kind)| Entry {
                label: kind.label.clone(),
                color: rgb(&kind.color),
                sample: Sample::Bar,
            })
    });
    let series = c
        .series
        .iter()
        .filter(|s| !s.label.is_empty() && !segments(s).is_empty())
        .map(|s| Entry {
            label: s.label.clone(),
            color: rgb(&s.color),
            sample: match (s.line, s.dashed) {
                (false, _) => Sample::Dot,
                (true, true) => Sample::Dashed,
                (true, false) => Sample::Line,
            },
        });
    bars.chain(series).collect()
}

/// Legend text size, pixels, and the room one entry takes.
const LEGEND_FONT: u32 = 22;
const LEGEND_ROW: i32 = 34;
/// The legend panel is at most this share of the image's width; longer labels are cut.
const LEGEND_MAX_SHARE: f64 = 0.3;

/// The legend panel's width: room for the longest label (about 0.55 em a character),
/// its sample and margins, at most [`LEGEND_MAX_SHARE`] of the image.
fn legend_width(entries: &[Entry]) -> u32 {
    let longest = entries
        .iter()
        .map(|e| e.label.chars().count())
        .max()
        .unwrap_or(0);
    let text = (longest as f64 * f64::from(LEGEND_FONT) * 0.55).ceil() as u32;
    (text + 90).min((f64::from(WIDTH) * LEGEND_MAX_SHARE) as u32)
}

/// Draws the legend down `panel`: a sample in each entry's colour and style, then its
/// label, wrapped at spaces onto more lines where it would leave the panel (a word longer
/// than a line is cut with `…`); entries past the panel's foot are counted in a last line.
fn draw_legend<DB: DrawingBackend>(
    panel: &DrawingArea<DB, Shift>,
    entries: &[Entry],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (w, h) = panel.dim_in_pixel();
    let font =
        TextStyle::from((FAMILY, LEGEND_FONT).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let chars = (f64::from(w.saturating_sub(90)) / (f64::from(LEGEND_FONT) * 0.55)) as usize;
    let line_height = LEGEND_FONT as i32 + 4;
    let foot = h as i32 - LEGEND_ROW;
    let mut y = 110;
    for (i, entry) in entries.iter().enumerate() {
        let lines = wrap(&entry.label, chars.max(8));
        let height = LEGEND_ROW + line_height * (lines.len() as i32 - 1);
        if y + height > foot {
            let more = format!("… and {} more", entries.len() - i);
            panel.draw_text(&more, &font, (62, y))?;
            break;
        }
        let stroke = entry.color.stroke_width(3);
        match entry.sample {
            Sample::Line => panel.draw(&PathElement::new(vec![(10, y), (50, y)], stroke))?,
            Sample::Dashed => {
                panel.draw(&PathElement::new(vec![(10, y), (24, y)], stroke))?;
                panel.draw(&PathElement::new(vec![(34, y), (50, y)], stroke))?;
            }
            Sample::Dot => panel.draw(&Circle::new((30, y), 7, entry.color.filled()))?,
            Sample::Bar => panel.draw(&Rectangle::new(
                [(12, y - 8), (48, y + 8)],
                entry.color.filled(),
            ))?,
        }
        for (k, line) in lines.iter().enumerate() {
            panel.draw_text(line, &font, (62, y + line_height * k as i32))?;
        }
        y += height;
    }
    Ok(())
}

/// `text` in lines of at most `chars` characters, broken at spaces; a word longer than a
/// line is cut, its end replaced by `…`.
fn wrap(text: &str, chars: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        let word: String = if word.chars().count() > chars {
            let mut w: String = word.chars().take(chars.saturating_sub(1)).collect();
            w.push('…');
            w
        } else {
            word.to_string()
        };
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= chars => {
                line.push(' ');
                line.push_str(&word);
            }
            _ => lines.push(word),
        }
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

/// `c` with every text it draws scrubbed of registered secrets: a PNG's text is pixels,
/// which no later scrub of the file can reach (a parameter's value on an axis, a label).
fn scrubbed(c: &Chart) -> Chart {
    use llmsurge_proto::redact::scrub;
    let s = |t: &mut String| *t = scrub(t).into_owned();
    let mut c = c.clone();
    s(&mut c.title);
    for axis in [&mut c.x, &mut c.y].into_iter().chain(c.y2.as_mut()) {
        s(&mut axis.name);
        s(&mut axis.unit);
    }
    c.x_labels.iter_mut().flatten().for_each(s);
    c.x_names.iter_mut().flatten().for_each(|(_, n)| s(n));
    c.series.iter_mut().for_each(|x| s(&mut x.label));
    c.marks.iter_mut().for_each(|m| s(&mut m.label));
    c.notes.iter_mut().for_each(s);
    if let Some(b) = c.bars.as_mut() {
        b.kinds.iter_mut().for_each(|k| s(&mut k.label));
    }
    c
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Chart) -> Result<(), String> {
    let c = &scrubbed(c);
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    // Notes (a comparison's verdicts) at the foot, under the plot, each wrapped to the
    // image's width; at most a third of the image, the rest counted.
    let root = if c.notes.is_empty() {
        root.clone()
    } else {
        let chars = (f64::from(WIDTH - 80) / (24.0 * 0.55)) as usize;
        let mut lines: Vec<String> = c.notes.iter().flat_map(|n| wrap(n, chars)).collect();
        let room = (HEIGHT / 3 / 32) as usize;
        if lines.len() > room {
            let more = lines.len() - (room - 1);
            lines.truncate(room - 1);
            lines.push(format!(
                "… and {more} more lines (the HTML page has them all)"
            ));
        }
        let foot = 20 + 32 * lines.len() as u32;
        let (plot, notes) = root.split_vertically(HEIGHT.saturating_sub(foot));
        for (i, line) in lines.iter().enumerate() {
            notes
                .draw_text(
                    line,
                    &TextStyle::from((FAMILY, 24).into_font()),
                    (40, 8 + 32 * i as i32),
                )
                .map_err(e)?;
        }
        plot
    };
    // The legend in a panel right of the plot, never over a point.
    let entries = legend_entries(c);
    let root = if entries.is_empty() {
        root.clone()
    } else {
        // Charts that share a time axis keep one plot width, so their axes line up.
        let width = if c.x_group.is_some() {
            (f64::from(WIDTH) * LEGEND_MAX_SHARE) as u32
        } else {
            legend_width(&entries)
        };
        let (plot, panel) = root.split_horizontally(WIDTH.saturating_sub(width));
        draw_legend(&panel, &entries).map_err(e)?;
        plot
    };
    let root = &root;
    let points = |right: bool| {
        c.series
            .iter()
            .filter(move |s| s.right == right)
            .flat_map(|s| s.points.iter())
    };
    let bars = c.bars.as_ref().map_or(&[][..], |b| &b.items[..]);
    let xr = match (&c.x_labels, c.x_range) {
        (Some(l), _) => -0.5..(l.len() as f64 - 0.5),
        (None, Some((lo, hi))) if lo < hi => lo..hi,
        _ => range(
            c.series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0))
                .chain(bars.iter().flat_map(|b| [b.1, b.2])),
            false,
        ),
    };
    // A bar's row spans row ± 0.4.
    let yr = range(
        points(false)
            .filter_map(|p| p.1)
            .chain(c.marks.iter().map(|m| m.y))
            .chain(c.error_bars.iter().flat_map(|b| [b.low, b.high]))
            .chain(bars.iter().flat_map(|b| [b.0 - 0.5, b.0 + 0.5])),
        !c.y_data_only,
    );
    let y2r = range(points(true).filter_map(|p| p.1), !c.y_data_only);
    let has_y2 = c.y2.is_some() && c.series.iter().any(|s| s.right);

    let (xr_start, xr_end) = (xr.start, xr.end);
    // A count on x (streams, a server's slots): whole ticks, not 1.2, 1.4, ….
    let whole_x = c.x_labels.is_none()
        && c.series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .all(|x| x.fract() == 0.0);
    let x_ticks = match c.x_labels.as_ref() {
        Some(l) => l.len(),
        None if whole_x && xr_end - xr_start <= X_TICKS as f64 => {
            (xr_end - xr_start).floor() as usize + 1
        }
        None => X_TICKS,
    };
    let x_dec = if whole_x {
        0
    } else {
        decimals(&ticks_of(&xr, X_TICKS))
    };
    let y_dec = decimals(&ticks_of(&yr, Y_TICKS));
    let y2_dec = decimals(&ticks_of(&y2r, Y_TICKS));
    let x_labels = c.x_labels.clone();
    let x_fmt = move |v: &f64| match &x_labels {
        Some(l) => {
            let k = v.round();
            if (v - k).abs() < 1e-9 && k >= 0.0 {
                l.get(k as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        }
        // Whole ticks only on a count's axis: a half step would read as its neighbour.
        None if whole_x && v.fract().abs() > 1e-9 => String::new(),
        None => tick(*v, x_dec),
    };

    let mut builder = ChartBuilder::on(root);
    builder
        .caption(&c.title, (FAMILY, 40))
        .margin(30)
        .x_label_area_size(90)
        .y_label_area_size(150);
    if has_y2 {
        builder.right_y_label_area_size(150);
    }
    let mut chart = builder
        .build_cartesian_2d(xr.clone(), yr)
        .map_err(e)?
        .set_secondary_coord(xr, y2r);
    chart
        .configure_mesh()
        .x_desc(c.x.label())
        .y_desc(c.y.label())
        .x_labels(x_ticks)
        .y_labels(Y_TICKS)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|v| tick(*v, y_dec))
        .label_style((FAMILY, 22))
        .axis_desc_style((FAMILY, 28))
        .light_line_style(RGBColor(246, 246, 246))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()
        .map_err(e)?;
    if has_y2 && let Some(y2) = &c.y2 {
        chart
            .configure_secondary_axes()
            .y_desc(y2.label())
            .y_labels(Y_TICKS)
            .y_label_formatter(&|v| tick(*v, y2_dec))
            .label_style((FAMILY, 22))
            .axis_desc_style((FAMILY, 28))
            .draw()
            .map_err(e)?;
    }
    if let Some(b) = &c.bars {
        for (k, kind) in b.kinds.iter().enumerate() {
            let color = rgb(&kind.color);
            // Tall enough to see when rows are thinner than a pixel.
            let half = 0.4f64;
            chart
                .draw_series(b.items.iter().filter(|bar| bar.3 == k).map(|bar| {
                    Rectangle::new(
                        [(bar.1, bar.0 - half), (bar.2.max(bar.1), bar.0 + half)],
                        color.filled(),
                    )
                }))
                .map_err(e)?;
        }
    }
    for s in &c.series {
        let color = rgb(&s.color);
        let style = ShapeStyle::from(&color).stroke_width(3);
        for seg in segments(s) {
            if !s.line {
                let dots = seg.iter().map(|&p| Circle::new(p, 7, color.filled()));
                if s.right {
                    chart.draw_secondary_series(dots).map_err(e)?;
                } else {
                    chart.draw_series(dots).map_err(e)?;
                }
                continue;
            }
            if s.dashed {
                let line = DashedLineSeries::new(seg.clone(), 12, 8, style);
                if s.right {
                    chart.draw_secondary_series(line).map_err(e)?;
                } else {
                    chart.draw_series(line).map_err(e)?;
                }
            } else if s.right {
                chart
                    .draw_secondary_series(LineSeries::new(seg.clone(), style))
                    .map_err(e)?;
            } else {
                chart
                    .draw_series(LineSeries::new(seg.clone(), style))
                    .map_err(e)?;
            }
            if s.markers {
                let dots = seg.iter().map(|&p| Circle::new(p, 6, color.filled()));
                if s.right {
                    chart.draw_secondary_series(dots).map_err(e)?;
                } else {
                    chart.draw_series(dots).map_err(e)?;
                }
            }
        }
    }
    // An error bar: a vertical stroke with a cap at each end.
    let cap = (xr_end - xr_start) / 150.0;
    for b in &c.error_bars {
        let color = rgb(&b.color).stroke_width(2);
        let strokes = [
            vec![(b.x, b.low), (b.x, b.high)],
            vec![(b.x - cap, b.low), (b.x + cap, b.low)],
            vec![(b.x - cap, b.high), (b.x + cap, b.high)],
        ];
        chart
            .draw_series(strokes.into_iter().map(|p| PathElement::new(p, color)))
            .map_err(e)?;
    }
    // A note beside its point: right of it, or left in the right third (it would leave
    // the frame); above, else below, else further off, where it covers no other note and
    // no other point's ring (two close points overprinted each other's notes).
    let right_third = xr_end - (xr_end - xr_start) / 3.0;
    let rings: Vec<Rect> = c
        .marks
        .iter()
        .map(|m| {
            let (px, py) = chart.backend_coord(&(m.x, m.y));
            Rect::around(px, py, 13)
        })
        .collect();
    let mut placed: Vec<Rect> = Vec::new();
    for (k, m) in c.marks.iter().enumerate() {
        let ring = ShapeStyle::from(&BLACK).stroke_width(3);
        chart
            .draw_series(std::iter::once(Circle::new((m.x, m.y), 12, ring)))
            .map_err(e)?;
        let left = m.x > right_third;
        let (px, py) = chart.backend_coord(&(m.x, m.y));
        let width = (m.label.chars().count() as f64 * 24.0 * 0.55) as i32;
        let dx = if left { -16 } else { 16 };
        // Offsets of the note's bottom edge from the point, nearest first.
        let box_at = |dy: i32| {
            let (x0, x1) = if left {
                (px + dx - width, px + dx)
            } else {
                (px + dx, px + dx + width)
            };
            Rect {
                x0,
                x1,
                y0: py + dy - 26,
                y1: py + dy,
            }
        };
        let free = |r: &Rect| {
            !placed.iter().any(|p| p.overlaps(r))
                && !rings
                    .iter()
                    .enumerate()
                    .any(|(i, ring)| i != k && ring.overlaps(r))
        };
        let dy = [-14, 40, -44, 70, -74, 100]
            .into_iter()
            .find(|&dy| free(&box_at(dy)))
            .unwrap_or(-14);
        placed.push(box_at(dy));
        let style = TextStyle::from((FAMILY, 24).into_font()).pos(Pos::new(
            if left { HPos::Right } else { HPos::Left },
            VPos::Bottom,
        ));
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((m.x, m.y)) + Text::new(m.label.clone(), (dx, dy), style),
            ))
            .map_err(e)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pixels of `png` in `color`, as (x, y).
    fn pixels_of(png: Vec<u8>, color: (u8, u8, u8)) -> Vec<(u32, u32)> {
        let mut reader = png::Decoder::new(std::io::Cursor::new(png))
            .read_info()
            .expect("png header");
        let mut buf = vec![0; reader.output_buffer_size().expect("a size")];
        let info = reader.next_frame(&mut buf).expect("a frame");
        buf[..info.buffer_size()]
            .chunks(3)
            .enumerate()
            .filter(|(_, p)| (p[0], p[1], p[2]) == color)
            .map(|(i, _)| (i as u32 % WIDTH, i as u32 / WIDTH))
            .collect()
    }

    #[test]
    fn the_legend_stands_beside_the_plot_never_over_a_point() {
        let mut c = Chart::new(
            "t",
            "charts-load",
            "A title",
            super::super::Axis::new("x", ""),
            super::super::Axis::new("y", ""),
        );
        // Points in the upper left corner, where a legend inside the plot would sit,
        // and a long label.
        let mut s = Series::new(
            "a long label of a curve with several parameters=1",
            "#1f77b4",
            vec![(0.0, Some(10.0)), (0.2, Some(9.8)), (10.0, Some(0.5))],
        );
        s.markers = true;
        c.series.push(s);
        let blue = pixels_of(png(&c).expect("png"), (0x1f, 0x77, 0xb4));
        let panel = WIDTH - legend_width(&legend_entries(&c));
        let (plot, legend): (Vec<_>, Vec<_>) = blue.iter().partition(|(x, _)| *x < panel);
        // Both markers in the corner drawn whole (a 6 px disc is ~110 px; the line adds).
        let corner = plot.iter().filter(|(x, y)| *x < 400 && *y < 250).count();
        assert!(corner > 200, "{corner} marker pixels in the upper left");
        // The legend's sample, in its panel.
        assert!(legend.len() > 60, "{} sample pixels", legend.len());
    }

    /// The y of the SVG text element holding `label`.
    fn text_y(svg: &str, label: &str) -> f64 {
        let end = svg.find(&format!(">\n{label}\n<")).expect("the label");
        let start = svg[..end].rfind("<text").expect("its element");
        let attrs = &svg[start..end];
        let y = attrs.find(" y=\"").expect("a y") + 4;
        attrs[y..][..attrs[y..].find('"').expect("its end")]
            .parse()
            .expect("a number")
    }

    #[test]
    fn a_count_on_x_gets_whole_ticks() {
        let mut c = Chart::new(
            "t",
            "s",
            "t",
            super::super::Axis::new("streams", ""),
            super::super::Axis::new("y", "ms"),
        );
        c.series.push(Series::new(
            "a",
            "#000000",
            vec![(1.0, Some(100.0)), (2.0, Some(300.0))],
        ));
        let svg = svg(&c).expect("svg");
        for half in ["1.2", "1.4", "1.5", "1.6", "1.8"] {
            assert!(
                !svg.contains(&format!(">\n{half}\n<")),
                "{half} on the x axis"
            );
        }
        assert!(
            svg.contains(">\n1\n<") && svg.contains(">\n2\n<"),
            "whole ticks"
        );
    }

    #[test]
    fn notes_of_close_points_do_not_overprint() {
        let mut c = Chart::new(
            "t",
            "s",
            "t",
            super::super::Axis::new("x", ""),
            super::super::Axis::new("y", ""),
        );
        c.series.push(Series::new(
            "a",
            "#000000",
            vec![(0.0, Some(0.0)), (10.0, Some(20.0))],
        ));
        for (x, label) in [(1.0, "first-note"), (1.05, "second-note")] {
            c.marks.push(super::super::Mark {
                x,
                y: 10.0,
                label: label.into(),
            });
        }
        let svg = svg(&c).expect("svg");
        let (a, b) = (text_y(&svg, "first-note"), text_y(&svg, "second-note"));
        assert!((a - b).abs() >= 26.0, "{a} and {b}");
    }

    #[test]
    fn a_stepped_series_holds_each_value_until_the_next_sample() {
        let mut s = Series::new(
            "g",
            "#000000",
            vec![
                (0.0, Some(1.0)),
                (1.0, Some(3.0)),
                (2.0, None),
                (3.0, Some(2.0)),
                (4.0, Some(5.0)),
            ],
        );
        assert_eq!(
            segments(&s),
            [vec![(0.0, 1.0), (1.0, 3.0)], vec![(3.0, 2.0), (4.0, 5.0)]]
        );
        s.step = true;
        assert_eq!(
            segments(&s),
            [
                vec![(0.0, 1.0), (1.0, 1.0), (1.0, 3.0)],
                vec![(3.0, 2.0), (4.0, 2.0), (4.0, 5.0)]
            ]
        );
    }

    #[test]
    fn an_images_text_is_scrubbed_of_registered_secrets() {
        let secret = "sk-drawn-secret-4f1e9a";
        llmsurge_proto::redact::register_secret(secret);
        let mut c = Chart::new(
            "t",
            "s",
            &format!("vs {secret}"),
            super::super::Axis::new(secret, ""),
            super::super::Axis::new("y", ""),
        );
        c.x_labels = Some(vec![secret.into()]);
        c.series.push(Series::new(
            format!("api_key={secret}"),
            "#000000",
            vec![(0.0, Some(1.0))],
        ));
        c.marks.push(super::super::Mark {
            x: 0.0,
            y: 1.0,
            label: secret.into(),
        });
        c.notes.push(secret.into());
        let shown = format!("{:?}", scrubbed(&c));
        assert!(!shown.contains(secret), "{shown}");
        // What the SVG draws is the scrubbed chart.
        assert!(!svg(&c).expect("svg").contains(secret));
    }

    #[test]
    fn legend_labels_wrap_at_spaces_and_cut_only_a_word_longer_than_a_line() {
        assert_eq!(wrap("a=1 b=2 c=3", 7), ["a=1 b=2", "c=3"]);
        assert_eq!(wrap("short", 20), ["short"]);
        assert_eq!(wrap("abcdefghij k", 5), ["abcd…", "k"]);
        assert_eq!(wrap("", 5), [""]);
    }

    #[test]
    fn tick_labels_show_every_step() {
        assert_eq!(decimals(&[0.0, 0.5, 1.0, 1.5]), 1);
        assert_eq!(decimals(&[0.0, 0.0002, 0.0004]), 4);
        assert_eq!(decimals(&[0.0, 200.0, 400.0]), 0);
        assert_eq!(tick(-0.0001, 2), "0.00");
        for r in [0.0..0.0012, 3.0..3.3, 0.0..12_345.0, -5.0..5.0] {
            let t = ticks_of(&r, X_TICKS);
            let d = decimals(&t);
            let labels: Vec<String> = t.iter().map(|v| tick(*v, d)).collect();
            let mut unique = labels.clone();
            unique.dedup();
            assert_eq!(labels, unique, "{r:?}");
            assert!(labels.len() <= X_TICKS && labels.len() >= 2, "{labels:?}");
        }
    }

    #[test]
    fn draws_both_formats_with_the_shipped_font() {
        let mut c = Chart::new(
            "t",
            "charts-load",
            "A title",
            super::super::Axis::new("x name", "s"),
            super::super::Axis::new("y name", "ms"),
        );
        c.series.push(Series::new(
            "p50",
            "#1f77b4",
            vec![(0.0, Some(1.0)), (2.0, None), (3.0, Some(2.0))],
        ));
        let svg = svg(&c).expect("svg");
        assert!(svg.contains("A title") && svg.contains("y name (ms)"));
        let png = png(&c).expect("png");
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let reader = decoder.read_info().expect("png header");
        assert_eq!((reader.info().width, reader.info().height), (WIDTH, HEIGHT));
    }
}
