//! SVG plots: bars for throughput, lines for latency against throughput and for CDFs.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const SIZE: (u32, u32) = (900, 520);
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("plot: {e}")
}

/// One bar per `(label, value)`.
pub fn bars(path: &Path, title: &str, y_label: &str, data: &[(String, f64)]) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let top = data.iter().map(|d| d.1).fold(0.0, f64::max).max(1.0) * 1.15;
    let n = data.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d((0..n).into_segmented(), 0f64..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => data.get(*i).map(|d| d.0.clone()).unwrap_or_default(),
            _ => String::new(),
        })
        .y_desc(y_label)
        .y_label_formatter(&|y| si(*y))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(
            Histogram::vertical(&chart)
                .style_func(|i, _| {
                    let i = match i {
                        SegmentValue::Exact(i) | SegmentValue::CenterOf(i) => *i,
                        SegmentValue::Last => 0,
                    };
                    COLOURS[i % COLOURS.len()].filled()
                })
                .margin(14)
                .data(data.iter().enumerate().map(|(i, d)| (i, d.1))),
        )
        .map_err(err)?;
    chart
        .draw_series(data.iter().enumerate().map(|(i, d)| {
            Text::new(
                si(d.1),
                (SegmentValue::CenterOf(i), d.1 + top * 0.03),
                TextStyle::from(("sans-serif", 14).into_font())
                    .pos(Pos::new(HPos::Center, VPos::Bottom)),
            )
        }))
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Lines with points: one series per `(label, points)`. `log_x` for latency axes.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, 0f64, 0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (1.0, 10.0);
    }
    let y_range = 0f64..(y1 * 1.1).max(1e-9);
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(80);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .x_label_formatter(&|x| si(*x))
                .y_label_formatter(&|y| si(*y))
                .draw()
                .map_err(err)?;
            for (i, (label, p)) in series.iter().enumerate() {
                let c = COLOURS[i % COLOURS.len()];
                chart
                    .draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2)))
                    .map_err(err)?
                    .label(label.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
                chart
                    .draw_series(p.iter().map(|&xy| Circle::new(xy, 3, c.filled())))
                    .map_err(err)?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(err)?;
        }};
    }
    if log_x {
        let x0 = x0.max(1e-3);
        draw!(builder
            .build_cartesian_2d((x0 * 0.9..x1 * 1.1).log_scale(), y_range)
            .map_err(err)?);
    } else {
        draw!(builder
            .build_cartesian_2d(0f64..x1 * 1.1, y_range)
            .map_err(err)?);
    }
    root.present().map_err(err)?;
    Ok(())
}

/// 1234567 -> "1.23M".
pub fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_svg_files() {
        let dir = std::env::temp_dir().join(format!("hkv-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let b = dir.join("b.svg");
        bars(
            &b,
            "t",
            "ops/s",
            &[("hkv".into(), 2e6), ("memcached".into(), 1e6)],
        )
        .unwrap();
        let text = std::fs::read_to_string(&b).unwrap();
        assert!(text.contains("<svg") && text.contains("memcached"));
        let l = dir.join("l.svg");
        let s = vec![("hkv".to_string(), vec![(10.0, 0.5), (100.0, 1.0)])];
        lines(&l, "t", "us", "fraction", &s, true).unwrap();
        assert!(std::fs::read_to_string(&l).unwrap().contains("hkv"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn si_suffixes() {
        assert_eq!(si(1_234_567.0), "1.23M");
        assert_eq!(si(2_500.0), "2.5k");
        assert_eq!(si(42.0), "42");
    }
}
