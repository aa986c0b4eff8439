//! Hand-written SVG pictures: a plan's timeline (four lanes: robot compute, server compute,
//! uplink, downlink; bands coloured by op; transfers labelled with bytes; the makespan marked)
//! and latency against bandwidth for every method (like the paper's Fig. 17).

use crate::sim::{Resource, SimReport, SpanKind};
use std::fmt::Write;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A colour per op id (golden-angle hues, so neighbours differ).
fn colour(node: usize) -> String {
    let hue = (node as f64 * 137.508) % 360.0;
    format!("hsl({hue:.0},65%,{}%)", 55 + (node % 3) * 8)
}

fn human_bytes(b: usize) -> String {
    match b {
        b if b >= 1_000_000 => format!("{:.2} MB", b as f64 / 1e6),
        b if b >= 1_000 => format!("{:.1} KB", b as f64 / 1e3),
        b => format!("{b} B"),
    }
}

/// Tick step (1, 2 or 5 x 10^k) giving about `n` ticks over `range`.
fn tick_step(range: f64, n: f64) -> f64 {
    let raw = (range / n).max(1e-12);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

/// A tick value printed with as many decimals as its step needs.
fn tick_label(v: f64, step: f64) -> String {
    let d = (-step.log10().floor()).max(0.0) as usize;
    format!("{v:.d$}")
}

/// The lanes drawn, top to bottom.
pub const LANES: [(Resource, &str); 4] = [
    (Resource::RobotCompute, "robot compute"),
    (Resource::ServerCompute, "server compute"),
    (Resource::Uplink, "uplink"),
    (Resource::Downlink, "downlink"),
];

/// The timeline of one simulated plan as an SVG document.
pub fn timeline(report: &SimReport, title: &str) -> String {
    let (w, left, right, top, lane_h, gap) = (1400.0, 150.0, 40.0, 60.0, 70.0, 18.0);
    let plot_w = w - left - right;
    let span_end = report.timeline.iter().map(|s| s.arrive.max(s.end)).fold(report.makespan_s, f64::max);
    let horizon = if span_end > 0.0 { span_end * 1.04 } else { 1.0 };
    let x = |t: f64| left + t / horizon * plot_w;
    let h = top + 4.0 * (lane_h + gap) + 60.0;
    let mut s = String::new();
    let _ =
        writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif">"#);
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="28" font-size="18" font-weight="bold">{} - makespan {:.2} ms, up {}, down {}</text>"#,
        esc(title),
        report.makespan_s * 1e3,
        human_bytes(report.bytes_up),
        human_bytes(report.bytes_down)
    );
    for (i, (res, name)) in LANES.iter().enumerate() {
        let y = top + i as f64 * (lane_h + gap);
        let _ = writeln!(s, r##"<g class="lane" data-lane="{name}">"##);
        let _ = writeln!(s, r##"<rect x="{left}" y="{y}" width="{plot_w}" height="{lane_h}" fill="#f4f4f4" stroke="#999"/>"##);
        let _ = writeln!(s, r#"<text x="10" y="{:.1}" font-size="15">{name}</text>"#, y + lane_h / 2.0 + 5.0);
        for sp in report.timeline.iter().filter(|sp| sp.resource == *res) {
            let (x0, x1) = (x(sp.start), x(sp.end));
            let bw = (x1 - x0).max(0.8);
            let tip = match sp.kind {
                SpanKind::Compute => format!("{} rows {:?}: {:.3}-{:.3} ms", sp.name, sp.rows, sp.start * 1e3, sp.end * 1e3),
                SpanKind::Transfer => {
                    format!("{} rows {:?}, {}: {:.3}-{:.3} ms", sp.name, sp.rows, human_bytes(sp.bytes), sp.start * 1e3, sp.end * 1e3)
                }
            };
            let _ = writeln!(
                s,
                r##"<rect x="{x0:.2}" y="{:.1}" width="{bw:.2}" height="{:.1}" fill="{}" stroke="#333" stroke-width="0.3"><title>{}</title></rect>"##,
                y + 4.0,
                lane_h - 8.0,
                colour(sp.node),
                esc(&tip)
            );
            if sp.kind == SpanKind::Transfer && bw > 46.0 {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#,
                    x0 + bw / 2.0,
                    y + lane_h / 2.0 + 4.0,
                    human_bytes(sp.bytes)
                );
            }
        }
        let _ = writeln!(s, "</g>");
    }
    let axis_y = top + 4.0 * (lane_h + gap);
    let step = tick_step(horizon * 1e3, 10.0);
    for i in 0..=((horizon * 1e3 / step).floor() as usize) {
        let t = i as f64 * step;
        let xx = x(t / 1e3);
        let _ = writeln!(s, r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{axis_y}" stroke="#ccc" stroke-width="0.5"/>"##);
        let _ =
            writeln!(s, r#"<text x="{xx:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#, axis_y + 16.0, tick_label(t, step));
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" font-size="13" text-anchor="middle">time (ms)</text>"#,
        left + plot_w / 2.0,
        axis_y + 36.0
    );
    let mx = x(report.makespan_s);
    let _ = writeln!(
        s,
        r##"<line id="makespan" x1="{mx:.1}" y1="{:.1}" x2="{mx:.1}" y2="{axis_y}" stroke="#d00" stroke-width="2" stroke-dasharray="6,4"/>"##,
        top - 12.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" font-size="13" fill="#d00" text-anchor="end">makespan {:.2} ms</text>"##,
        mx - 4.0,
        top - 16.0,
        report.makespan_s * 1e3
    );
    s.push_str("</svg>\n");
    s
}

/// One curve: its name and `(x, y)` points (`None`: no value), e.g. (bandwidth MB/s, latency ms).
pub type Series = (String, Vec<(f64, Option<f64>)>);

/// Latency against bandwidth for several methods, as an SVG document.
pub fn latency_plot(series: &[Series], title: &str, x_label: &str) -> String {
    line_plot(series, title, x_label, "latency (ms)")
}

/// Curves of `y` against `x`, one per series, as an SVG document: `lop` drawn thick, series
/// whose name contains "bound" dashed (they are limits, not methods).
pub fn line_plot(series: &[Series], title: &str, x_label: &str, y_label: &str) -> String {
    let (w, h, left, right, top, bottom) = (900.0, 560.0, 80.0, 200.0, 50.0, 60.0);
    let pts = series.iter().flat_map(|(_, p)| p.iter().filter_map(|(x, y)| y.map(|y| (*x, y))));
    let (mut xmax, mut ymax) = (0.0f64, 0.0f64);
    for (x, y) in pts {
        xmax = xmax.max(x);
        ymax = ymax.max(y);
    }
    let (xmax, ymax) = (if xmax > 0.0 { xmax } else { 1.0 }, if ymax > 0.0 { ymax * 1.05 } else { 1.0 });
    let (pw, ph) = (w - left - right, h - top - bottom);
    let px = |x: f64| left + x / xmax * pw;
    let py = |y: f64| top + ph - y / ymax * ph;
    let mut s = String::new();
    let _ =
        writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif">"#);
    let _ = writeln!(
        s,
        r##"<rect width="{w}" height="{h}" fill="white"/><text x="{left}" y="30" font-size="17" font-weight="bold">{}</text>"##,
        esc(title)
    );
    let _ = writeln!(s, r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##);
    for (val, vert) in [(tick_step(xmax, 10.0), true), (tick_step(ymax, 8.0), false)] {
        let lim = if vert { xmax } else { ymax };
        for i in 0..=((lim * 1.0001 / val).floor() as usize) {
            let v = i as f64 * val;
            let label = tick_label(v, val);
            if vert {
                let _ = writeln!(
                    s,
                    r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1}" stroke="#ddd"/><text x="{0:.1}" y="{2}" font-size="12" text-anchor="middle">{label}</text>"##,
                    px(v),
                    top + ph,
                    top + ph + 18.0
                );
            } else {
                let _ = writeln!(
                    s,
                    r##"<line x1="{left}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" font-size="12" text-anchor="end">{label}</text>"##,
                    py(v),
                    left + pw,
                    left - 6.0,
                    py(v) + 4.0
                );
            }
        }
    }
    let _ =
        writeln!(s, r#"<text x="{:.1}" y="{:.1}" font-size="14" text-anchor="middle">{}</text>"#, left + pw / 2.0, h - 15.0, esc(x_label));
    let _ = writeln!(
        s,
        r#"<text x="20" y="{:.1}" font-size="14" transform="rotate(-90 20 {:.1})" text-anchor="middle">{}</text>"#,
        top + ph / 2.0,
        top + ph / 2.0,
        esc(y_label)
    );
    let palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#8c564b"];
    for (i, (name, p)) in series.iter().enumerate() {
        let c = palette[i % palette.len()];
        let width = if name == "lop" { 3.0 } else { 1.8 };
        // Bounds are drawn dashed: they are limits, not methods.
        let dash = if name.contains("bound") { r#" stroke-dasharray="7 4""# } else { "" };
        let mut d = String::new();
        let mut pen = false;
        for (x, y) in p {
            match y {
                Some(y) if y.is_finite() => {
                    let _ = write!(d, "{}{:.1},{:.1} ", if pen { "L" } else { "M" }, px(*x), py(y.min(ymax)));
                    pen = true;
                }
                _ => pen = false,
            }
        }
        let _ = writeln!(s, r#"<path d="{d}" fill="none" stroke="{c}" stroke-width="{width}"{dash}/>"#);
        let ly = top + 20.0 + i as f64 * 22.0;
        let _ = writeln!(
            s,
            r#"<line x1="{0}" y1="{ly}" x2="{1}" y2="{ly}" stroke="{c}" stroke-width="3"{dash}/><text x="{2}" y="{3}" font-size="13">{4}</text>"#,
            left + pw + 15.0,
            left + pw + 45.0,
            left + pw + 52.0,
            ly + 4.0,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}
