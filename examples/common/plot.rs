//! SVG line charts for the examples' benchmark figures (no plotting dependency): charts stacked
//! vertically, message size on a log2 x axis, a linear or log10 y axis, a legend at the right.

/// A line: its name, and a value per size (`None`: a missing point).
pub struct Series {
    pub name: String,
    pub points: Vec<(usize, Option<f64>)>,
}

/// One chart: its y axis and its lines.
pub struct Chart {
    pub y_label: String,
    pub log_y: bool,
    pub series: Vec<Series>,
}

const COLOURS: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

/// The SVG of `charts` under `title`.
pub fn svg(title: &str, charts: &[Chart]) -> String {
    let (w, h, legend) = (1150.0, 400.0, 330.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        h * charts.len() as f64 + 30.0,
        (w - legend) / 2.0,
        escape(title)
    );
    for (i, c) in charts.iter().enumerate() {
        out += &chart(c, 30.0 + h * i as f64, (w, h, legend));
    }
    out + "</svg>\n"
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// One chart at vertical offset `top`.
fn chart(c: &Chart, top: f64, (w, h, legend): (f64, f64, f64)) -> String {
    let m = 80.0;
    let ty = |v: f64| if c.log_y { v.log10() } else { v };
    let points: Vec<(f64, f64)> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|(x, y)| y.filter(|v| *v > 0.0).map(|y| ((*x as f64).log2(), ty(y)))))
        .collect();
    if points.is_empty() {
        return String::new();
    }
    let (xmin, xmax) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (ymin, ymax) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let (ymin, ymax) = if c.log_y { (ymin.floor(), ymax.ceil().max(ymin.floor() + 1.0)) } else { (0.0, ymax * 1.1) };
    let right = w - legend - m;
    let bottom = top + h - m + 20.0;
    let x = |v: f64| m + (v - xmin) / (xmax - xmin).max(1.0) * (right - m);
    let y = |v: f64| bottom - (v - ymin) / (ymax - ymin).max(1e-9) * (h - m - 20.0);
    let mut out = format!(
        "<line x1=\"{m}\" y1=\"{bottom}\" x2=\"{right}\" y2=\"{bottom}\" stroke=\"black\"/>\
         <line x1=\"{m}\" y1=\"{}\" x2=\"{m}\" y2=\"{bottom}\" stroke=\"black\"/>\n\
         <text x=\"12\" y=\"{cy}\" transform=\"rotate(-90 12 {cy})\" text-anchor=\"middle\">{}</text>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">message size (bytes, log scale)</text>\n",
        top + 20.0,
        escape(&c.y_label),
        (m + right) / 2.0,
        bottom + 32.0,
        cy = top + h / 2.0,
    );
    // y ticks: decades on a log axis, quarters on a linear one (values in axis units).
    let ticks: Vec<f64> = if c.log_y {
        (ymin as i32..=ymax as i32).map(f64::from).collect()
    } else {
        (0..=4).map(|i| ymax * f64::from(i) / 4.0).collect()
    };
    for t in ticks {
        let label = short(if c.log_y { 10f64.powf(t) } else { t });
        out += &format!("<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>\n", m - 5.0, y(t) + 4.0);
    }
    let mut sizes: Vec<usize> = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for size in sizes {
        out += &format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            x((size as f64).log2()),
            bottom + 15.0,
            short(size as f64)
        );
    }
    for (k, s) in c.series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let dash = if k >= COLOURS.len() { " stroke-dasharray=\"4 3\"" } else { "" };
        let pts: Vec<String> = s
            .points
            .iter()
            .filter_map(|(sz, v)| {
                v.filter(|v| *v > 0.0).map(|v| format!("{:.1},{:.1}", x((*sz as f64).log2()), y(ty(v))))
            })
            .collect();
        out += &format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/>\n",
            pts.join(" ")
        );
        let (lx, ly) = (w - legend + 10.0, top + 34.0 + 16.0 * k as f64);
        out += &format!(
            "<line x1=\"{lx}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/>\
             <text x=\"{}\" y=\"{ly}\" fill=\"{colour}\">{}</text>\n",
            ly - 4.0,
            lx + 24.0,
            ly - 4.0,
            lx + 30.0,
            escape(&s.name)
        );
    }
    out
}

/// 4096 -> "4K", 8388608 -> "8M", 12000 -> "12000", 0.25 -> "0.25".
fn short(v: f64) -> String {
    let (v, unit) = match v {
        v if v >= 1048576.0 && (v / 1048576.0).fract() == 0.0 => (v / 1048576.0, "M"),
        v if v >= 1024.0 && (v / 1024.0).fract() == 0.0 => (v / 1024.0, "K"),
        v => (v, ""),
    };
    if v.fract() == 0.0 || v >= 100.0 {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.2}{unit}")
    }
}
