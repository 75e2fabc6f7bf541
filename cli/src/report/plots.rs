//! Line charts as inline SVG strings (plotters' SVG backend, no fonts or files needed).

use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Distinct colours for configs and hosts (Tableau 10).
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(214, 39, 40),
];

const CRASH: RGBColor = RGBColor(200, 0, 0);

/// One line of a chart.
pub(crate) struct Line {
    pub(crate) name: String,
    pub(crate) color: RGBColor,
    pub(crate) points: Vec<(f64, f64)>,
    pub(crate) dashed: bool,
    /// ± error bar per point (same length as `points`), or empty.
    pub(crate) spread: Vec<f64>,
}

/// A crash drawn on a chart: a red cross at a point, or a vertical line at an x.
pub(crate) enum Mark {
    Point { x: f64, y: f64, label: String },
    Vertical { x: f64, label: String },
}

/// A shaded span along the bottom of a time chart: which config ran when.
pub(crate) struct Band {
    pub(crate) x0: f64,
    pub(crate) x1: f64,
    pub(crate) color: RGBColor,
}

pub(crate) struct Chart {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) y_label: String,
    pub(crate) x_log: bool,
    pub(crate) lines: Vec<Line>,
    pub(crate) marks: Vec<Mark>,
    pub(crate) bands: Vec<Band>,
}

impl Chart {
    pub(crate) fn new(title: &str, x_label: &str, y_label: &str) -> Chart {
        Chart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_log: false,
            lines: Vec::new(),
            marks: Vec::new(),
            bands: Vec::new(),
        }
    }

    fn x_range(&self) -> (f64, f64) {
        let xs = self
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0))
            .chain(self.marks.iter().map(|m| match m {
                Mark::Point { x, .. } | Mark::Vertical { x, .. } => *x,
            }))
            .chain(self.bands.iter().flat_map(|b| [b.x0, b.x1]));
        let (lo, hi) = min_max(xs).unwrap_or((0.0, 1.0));
        if self.x_log {
            let lo = lo.max(1e-3);
            (lo / 1.5, hi.max(lo * 2.0) * 1.5)
        } else if hi > lo {
            (lo, hi + (hi - lo) * 0.02)
        } else {
            (lo - 1.0, hi + 1.0)
        }
    }

    fn y_range(&self) -> (f64, f64) {
        let ys = self.lines.iter().flat_map(|l| {
            l.points
                .iter()
                .enumerate()
                .map(|(i, p)| p.1 + l.spread.get(i).copied().unwrap_or(0.0))
        });
        let hi = min_max(ys).map_or(1.0, |(_, hi)| hi);
        (0.0, if hi > 0.0 { hi * 1.12 } else { 1.0 })
    }
}

fn min_max(xs: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    xs.filter(|x| x.is_finite()).fold(None, |acc, x| match acc {
        None => Some((x, x)),
        Some((lo, hi)) => Some((lo.min(x), hi.max(x))),
    })
}

/// Renders `chart` as an `<svg>` element of `w`×`h` pixels.
pub(crate) fn svg(chart: &Chart, w: u32, h: u32) -> anyhow::Result<String> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(to_anyhow)?;
        let (x0, x1) = chart.x_range();
        let (y0, y1) = chart.y_range();
        if chart.x_log {
            let mut cc = builder(&root, chart)
                .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
                .map_err(to_anyhow)?;
            draw(&mut cc, chart, (y0, y1), &|x| {
                (x / x0).ln() / (x1 / x0).ln()
            })?;
        } else {
            let mut cc = builder(&root, chart)
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(to_anyhow)?;
            draw(&mut cc, chart, (y0, y1), &|x| (x - x0) / (x1 - x0))?;
        }
        root.present().map_err(to_anyhow)?;
    }
    Ok(buf)
}

/// Tick labels: `1`, `16`, `2,500`, `0.25`.
fn tick(v: f64) -> String {
    if v.abs() >= 10.0 || v == v.trunc() {
        super::fmt_num(v, 0)
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn to_anyhow<E: std::error::Error + Send + Sync + 'static>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart: {e}")
}

fn builder<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    chart: &Chart,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(root);
    b.caption(&chart.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    b
}

fn draw<'a, X>(
    cc: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, RangedCoordf64>>,
    chart: &Chart,
    (y0, y1): (f64, f64),
    x_frac: &dyn Fn(f64) -> f64,
) -> anyhow::Result<()>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    cc.configure_mesh()
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(to_anyhow)?;
    let band_top = y0 + (y1 - y0) * 0.035;
    cc.draw_series(
        chart
            .bands
            .iter()
            .map(|b| Rectangle::new([(b.x0, y0), (b.x1, band_top)], b.color.mix(0.55).filled())),
    )
    .map_err(to_anyhow)?;
    for line in &chart.lines {
        let style = line.color.stroke_width(2);
        let color = line.color;
        let anno = if line.dashed {
            cc.draw_series(DashedLineSeries::new(
                line.points.iter().copied(),
                6,
                4,
                style,
            ))
            .map_err(to_anyhow)?
        } else {
            cc.draw_series(LineSeries::new(line.points.iter().copied(), style))
                .map_err(to_anyhow)?
        };
        let dashed = line.dashed;
        anno.label(line.name.as_str()).legend(move |(x, y)| {
            let end = if dashed { x + 8 } else { x + 20 };
            PathElement::new(vec![(x, y), (end, y)], color.stroke_width(2))
        });
        if !line.dashed {
            cc.draw_series(
                line.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, color.filled())),
            )
            .map_err(to_anyhow)?;
        }
        let bars = line
            .points
            .iter()
            .zip(&line.spread)
            .filter(|(_, s)| **s > 0.0);
        cc.draw_series(bars.map(|(&(x, y), s)| {
            PathElement::new(
                vec![(x, (y - s).max(y0)), (x, y + s)],
                color.stroke_width(1),
            )
        }))
        .map_err(to_anyhow)?;
    }
    for m in &chart.marks {
        let (x, y, label) = match m {
            Mark::Point { x, y, label } => (*x, *y + (y1 - y0) * 0.04, label),
            Mark::Vertical { x, label } => (*x, y1 - (y1 - y0) * 0.02, label),
        };
        match m {
            Mark::Point { x, y, .. } => {
                cc.draw_series([Cross::new((*x, *y), 7, CRASH.stroke_width(3))])
                    .map_err(to_anyhow)?;
            }
            Mark::Vertical { x, .. } => {
                cc.draw_series([PathElement::new(
                    vec![(*x, y0), (*x, y1)],
                    CRASH.stroke_width(2),
                )])
                .map_err(to_anyhow)?;
            }
        }
        // Labels in the right half end at the mark so that they stay inside the plot.
        let h = if x_frac(x) > 0.5 {
            HPos::Right
        } else {
            HPos::Left
        };
        let style = ("sans-serif", 12)
            .into_font()
            .color(&CRASH)
            .pos(Pos::new(h, VPos::Top));
        cc.draw_series([Text::new(format!(" {label} "), (x, y), style)])
            .map_err(to_anyhow)?;
    }
    if !chart.lines.is_empty() {
        cc.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(to_anyhow)?;
    }
    Ok(())
}
