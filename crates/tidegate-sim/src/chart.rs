//! Line charts as standalone SVG files, for the simulator's reports.
//!
//! The reports need a handful of chart kinds (latency, goodput against offered load, the
//! limit, the queue and the drop probability over time), one line per arm, readable in a
//! browser or on a documentation page without a plotting stack. A chart is a plain value
//! ([`Chart`]) rendered to a string: no dependency, no randomness, and numbers written with a
//! fixed precision, so that the same report renders to the same bytes.

use std::fmt::Write as _;

/// A chart of one or more lines sharing their axes.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// A logarithmic y axis suits latencies that span milliseconds to seconds; points at or
    /// below zero are then left out.
    pub y_scale: Scale,
    /// Draws a dot on every point: for sparse series such as a sweep's load points.
    pub markers: bool,
    pub series: Vec<Series>,
}

/// How values map onto the y axis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scale {
    #[default]
    Linear,
    Log,
}

/// One named line.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    /// `(x, y)` in the order to join them; non-finite values break the line.
    pub points: Vec<(f64, f64)>,
    /// Drawn thicker and on top of the others: the line the chart is about.
    pub emphasis: bool,
    pub pen: Pen,
}

/// How a line is coloured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pen {
    /// By the line's position in the chart.
    #[default]
    Position,
    /// The colour of the `index`th arm of a report, so that an arm has the same colour in
    /// every chart of it, whichever lines each chart has; `dashed` for an arm's second line
    /// (the simulated one beside the real one).
    Arm { index: usize, dashed: bool },
    /// Grey: a line every arm shares, such as the offered load.
    Reference,
}

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 400.0;
/// The plot area's margins: room for tick labels, axis titles and the legend.
const LEFT: f64 = 70.0;
const RIGHT: f64 = 200.0;
/// Legend names longer than this are cut, with an ellipsis.
const LEGEND_CHARS: usize = 28;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 52.0;

/// Tableau's ten colours; past ten lines, the colours come round again dashed.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];
/// The emphasised line's colour: black stands out from every colour of the palette.
const EMPHASIS: &str = "#111111";
/// A reference line's colour: a grey darker than the palette's own.
const REFERENCE: &str = "#8c8c8c";
const DASHES: [&str; 3] = ["", " stroke-dasharray=\"6 3\"", " stroke-dasharray=\"2 2\""];

impl Chart {
    /// A linear chart without markers.
    pub fn new(title: &str, x_label: &str, y_label: &str) -> Chart {
        Chart {
            title: title.to_owned(),
            x_label: x_label.to_owned(),
            y_label: y_label.to_owned(),
            y_scale: Scale::Linear,
            markers: false,
            series: Vec::new(),
        }
    }

    /// Adds a line, coloured by its position.
    pub fn line(self, name: &str, points: Vec<(f64, f64)>) -> Chart {
        self.line_with(name, Pen::Position, points)
    }

    /// Adds a line drawn with `pen`.
    pub fn line_with(mut self, name: &str, pen: Pen, points: Vec<(f64, f64)>) -> Chart {
        self.series.push(Series {
            name: name.to_owned(),
            points,
            emphasis: false,
            pen,
        });
        self
    }

    /// Emphasises the line called `name`, if there is one.
    pub fn emphasise(mut self, name: &str) -> Chart {
        for series in &mut self.series {
            series.emphasis |= series.name == name;
        }
        self
    }

    /// Renders the chart as a complete SVG document.
    pub fn to_svg(&self) -> String {
        let plotted: Vec<Vec<Option<(f64, f64)>>> = self
            .series
            .iter()
            .map(|s| s.points.iter().map(|&p| self.plottable(p)).collect())
            .collect();
        let all = || plotted.iter().flatten().flatten();
        let x_axis = Axis::linear(all().map(|p| p.0));
        let y_axis = match self.y_scale {
            Scale::Linear => Axis::linear(all().map(|p| p.1).chain([0.0])),
            Scale::Log => Axis::log(all().map(|p| p.1)),
        };
        let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
        let px = |x: f64| LEFT + x_axis.fraction(x) * plot_w;
        let py = |y: f64| TOP + (1.0 - y_axis.fraction(y)) * plot_h;

        let mut svg = svg_start(WIDTH, HEIGHT, LEFT + plot_w / 2.0, &self.title);
        // Grid lines and tick labels.
        for &t in &x_axis.ticks {
            let x = px(t);
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                TOP + plot_h,
                TOP + plot_h + 16.0,
                number(t)
            );
        }
        for &t in &y_axis.ticks {
            let y = py(t);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + plot_w,
                LEFT - 6.0,
                y + 4.0,
                number(t)
            );
        }
        let _ = writeln!(
            svg,
            r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333333"/>
<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>
<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"##,
            LEFT + plot_w / 2.0,
            HEIGHT - 12.0,
            escape(&self.x_label),
            TOP + plot_h / 2.0,
            escape(&self.y_label)
        );
        // Emphasised lines last, so that they are drawn on top.
        let mut order: Vec<usize> = (0..self.series.len()).collect();
        order.sort_by_key(|&i| self.series[i].emphasis);
        for i in order {
            let (series, points) = (&self.series[i], &plotted[i]);
            let (slot, dashed) = match series.pen {
                Pen::Position => (Some(i), false),
                Pen::Arm { index, dashed } => (Some(index), dashed),
                Pen::Reference => (None, true),
            };
            let colour = match slot {
                _ if series.emphasis => EMPHASIS,
                Some(slot) => PALETTE[slot % PALETTE.len()],
                None => REFERENCE,
            };
            let dash = if dashed {
                DASHES[1]
            } else {
                DASHES[(slot.unwrap_or(0) / PALETTE.len()) % DASHES.len()]
            };
            let width = if series.emphasis { 3.2 } else { 1.6 };
            // Each run of consecutive plottable points is one polyline.
            for run in points.split(Option::is_none) {
                let coords: Vec<String> = run
                    .iter()
                    .flatten()
                    .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                    .collect();
                if coords.len() > 1 {
                    let _ = writeln!(
                        svg,
                        r##"<polyline fill="none" stroke="{colour}" stroke-width="{width}"{dash} points="{}"/>"##,
                        coords.join(" ")
                    );
                }
                if self.markers || coords.len() == 1 {
                    for &(x, y) in run.iter().flatten() {
                        let _ = writeln!(
                            svg,
                            r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"##,
                            px(x),
                            py(y)
                        );
                    }
                }
            }
            let ly = TOP + 8.0 + 18.0 * i as f64;
            let lx = LEFT + plot_w + 12.0;
            let _ = writeln!(
                svg,
                r##"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="{width}"{dash}/><text x="{:.1}" y="{:.1}"{}>{}</text>"##,
                lx + 18.0,
                lx + 24.0,
                ly + 4.0,
                if series.emphasis {
                    r#" font-weight="bold""#
                } else {
                    ""
                },
                escape(&legend_name(&series.name))
            );
        }
        svg.push_str("</svg>\n");
        svg
    }

    fn plottable(&self, (x, y): (f64, f64)) -> Option<(f64, f64)> {
        let fits = x.is_finite() && y.is_finite() && (self.y_scale == Scale::Linear || y > 0.0);
        fits.then_some((x, y))
    }
}

/// An axis's range and its tick values.
#[derive(Debug)]
struct Axis {
    /// In axis units: the value for linear axes, its base-10 logarithm for log axes.
    low: f64,
    high: f64,
    log: bool,
    ticks: Vec<f64>,
}

impl Axis {
    /// A linear axis over the values, extended to round numbers (1, 2 or 5 times a power of
    /// ten between ticks, about six ticks).
    fn linear(values: impl Iterator<Item = f64>) -> Axis {
        let (min, max) = bounds(values).unwrap_or((0.0, 1.0));
        let (min, max) = if max > min {
            (min, max)
        } else {
            (min - 0.5, max + 0.5)
        };
        let step = nice_step((max - min) / 6.0);
        let low = (min / step).floor() * step;
        let high = (max / step).ceil() * step;
        let count = ((high - low) / step).round() as usize;
        let ticks = (0..=count).map(|i| low + step * i as f64).collect();
        Axis {
            low,
            high,
            log: false,
            ticks,
        }
    }

    /// A logarithmic axis over the (positive) values, from one power of ten to another.
    fn log(values: impl Iterator<Item = f64>) -> Axis {
        let (min, max) = bounds(values).unwrap_or((1.0, 10.0));
        let low = min.log10().floor();
        let high = max.log10().ceil().max(low + 1.0);
        let ticks = (low as i32..=high as i32).map(|e| 10f64.powi(e)).collect();
        Axis {
            low,
            high,
            log: true,
            ticks,
        }
    }

    /// Where `value` falls on the axis, from 0 (low end) to 1 (high end).
    fn fraction(&self, value: f64) -> f64 {
        let v = if self.log { value.log10() } else { value };
        (v - self.low) / (self.high - self.low)
    }
}

fn bounds(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// The smallest of 1, 2 or 5 times a power of ten that is at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude)
}

/// A tick label: no trailing zeros, no float noise (0.30000000000000004 prints as 0.3).
fn number(v: f64) -> String {
    if v.abs() >= 1e6 || (v != 0.0 && v.abs() < 1e-3) {
        return format!("{v:e}");
    }
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

fn legend_name(name: &str) -> String {
    if name.chars().count() <= LEGEND_CHARS {
        return name.to_owned();
    }
    let cut: String = name.chars().take(LEGEND_CHARS - 1).collect();
    format!("{cut}…")
}

/// The start of a standalone SVG document `width` x `height`: a white background and
/// `title` centred on `title_x`. The caller adds the content and `</svg>`.
pub(crate) fn svg_start(width: f64, height: f64, title_x: f64, title: &str) -> String {
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="{title_x}" y="22" text-anchor="middle" font-size="15">{}</text>
"##,
        escape(title)
    )
}

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latency_chart() -> Chart {
        Chart::new("p99 latency <by arm>", "second", "ms")
            .line("off", vec![(0.0, 100.0), (1.0, 900.0), (2.0, 4_000.0)])
            .line(
                "tidegate default",
                vec![(0.0, 100.0), (1.0, f64::NAN), (2.0, 140.0)],
            )
    }

    #[test]
    fn a_chart_is_a_complete_svg_document_with_a_line_and_a_legend_entry_per_series() {
        let svg = latency_chart().to_svg();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.ends_with("</svg>\n"));
        // The title's markup is escaped, the legend names every series.
        assert!(svg.contains("p99 latency &lt;by arm&gt;"));
        assert!(svg.contains(">off</text>") && svg.contains(">tidegate default</text>"));
        // "off" is one line of three points; the gap splits the other into two lone points.
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn the_emphasised_line_is_drawn_last_in_bold_and_long_names_are_cut() {
        let long = "a protection with a very long descriptive name";
        let svg = latency_chart()
            .line(long, vec![(0.0, 1.0), (2.0, 2.0)])
            .emphasise("off")
            .to_svg();
        let last = svg.rfind("<polyline").unwrap();
        assert!(svg[last..].contains(&format!("stroke=\"{EMPHASIS}\" stroke-width=\"3.2\"")));
        assert!(svg.contains(r#"font-weight="bold">off</text>"#));
        assert!(svg.contains("a protection with a very lo…</text>"), "{svg}");
    }

    #[test]
    fn an_arm_keeps_its_colour_whatever_lines_come_before_it() {
        let arm = |index, dashed| Pen::Arm { index, dashed };
        let points = || vec![(0.0, 1.0), (1.0, 2.0)];
        // The arm's line is second in one chart and first in the other.
        let goodput = Chart::new("goodput", "second", "ok/s")
            .line_with("offered", Pen::Reference, points())
            .line_with("vegas", arm(3, false), points())
            .line_with("vegas sim", arm(3, true), points())
            .to_svg();
        let limit = Chart::new("limit", "second", "requests")
            .line_with("vegas", arm(3, false), points())
            .to_svg();
        let stroke = |svg: &str, nth: usize| {
            let line = svg.match_indices("<polyline").nth(nth).unwrap().0;
            svg[line..svg[line..].find("/>").unwrap() + line].to_owned()
        };
        let colour = PALETTE[3];
        assert!(stroke(&goodput, 1).contains(&format!("stroke=\"{colour}\"")));
        assert!(stroke(&limit, 0).contains(&format!("stroke=\"{colour}\"")));
        // The simulated line: the arm's colour, dashed; the offered load: grey, dashed.
        let sim = stroke(&goodput, 2);
        assert!(
            sim.contains(colour) && sim.contains("stroke-dasharray"),
            "{sim}"
        );
        let offered = stroke(&goodput, 0);
        assert!(offered.contains(REFERENCE) && offered.contains("stroke-dasharray"));
    }

    #[test]
    fn the_same_chart_renders_to_the_same_bytes() {
        assert_eq!(latency_chart().to_svg(), latency_chart().to_svg());
    }

    #[test]
    fn linear_axes_end_on_round_numbers_that_cover_the_data() {
        let axis = Axis::linear([0.0, 3.7, 251.0].into_iter());
        assert_eq!(axis.low, 0.0);
        assert_eq!(axis.high, 300.0);
        assert_eq!(
            axis.ticks,
            vec![0.0, 50.0, 100.0, 150.0, 200.0, 250.0, 300.0]
        );
        // A flat series still gets a range.
        let flat = Axis::linear([5.0, 5.0].into_iter());
        assert!(flat.low < 5.0 && flat.high > 5.0);
        assert_eq!(number(0.1 + 0.2), "0.3");
        assert_eq!(number(2_000.0), "2000");
    }

    #[test]
    fn log_axes_span_whole_powers_of_ten_and_drop_non_positive_points() {
        let axis = Axis::log([2.0, 4_500.0].into_iter());
        assert_eq!(axis.ticks, vec![1.0, 10.0, 100.0, 1_000.0, 10_000.0]);
        assert!((axis.fraction(100.0) - 0.5).abs() < 1e-12);
        let chart = Chart {
            y_scale: Scale::Log,
            markers: true,
            ..Chart::new("t", "x", "y").line("s", vec![(0.0, 0.0), (1.0, 10.0), (2.0, 100.0)])
        };
        let svg = chart.to_svg();
        assert_eq!(svg.matches("<circle").count(), 2, "{svg}");
    }

    #[test]
    fn points_map_inside_the_plot_area() {
        let chart = Chart::new("t", "x", "y").line("s", vec![(0.0, 0.0), (10.0, 10.0)]);
        let svg = chart.to_svg();
        // (0, 0) is the bottom-left corner, (10, 10) the top-right one.
        let bottom = TOP + HEIGHT - TOP - BOTTOM;
        let right = WIDTH - RIGHT;
        assert!(
            svg.contains(&format!(
                "points=\"{LEFT:.1},{bottom:.1} {right:.1},{TOP:.1}\""
            )),
            "{svg}"
        );
    }
}
