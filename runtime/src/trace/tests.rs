use std::path::Path;
use std::time::Duration;

use super::*;

fn parse(text: &str) -> Result<Trace> {
    Trace::parse(text, Path::new("t.csv"))
}

fn kind_at(text: &str) -> (usize, TraceErrorKind) {
    match parse(text) {
        Err(Error::Trace { path, line, kind }) => {
            assert_eq!(path, Path::new("t.csv"));
            (line, kind)
        }
        other => panic!("expected a trace error, got {other:?}"),
    }
}

#[test]
fn parses_comments_header_and_steps() {
    let t = parse("# a comment\n\n t_s, mbps \n0.0,8\n0.5,16\n# trailing\n").unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(t.rate_mbps(Duration::ZERO), 8.0);
    assert_eq!(t.rate_mbps(Duration::from_millis(499)), 8.0);
    assert_eq!(t.rate_mbps(Duration::from_millis(500)), 16.0);
    // Loops with period 1.0 s (last time + last step).
    assert_eq!(t.period(), Duration::from_secs(1));
    assert_eq!(t.rate_mbps(Duration::from_millis(1000)), 8.0);
    assert_eq!(t.rate_mbps(Duration::from_millis(1700)), 16.0);
    assert_eq!(t.mean_mbps(), 12.0);
    let held = t.with_end(TraceEnd::Hold);
    assert_eq!(held.rate_mbps(Duration::from_secs(100)), 16.0);
}

#[test]
fn scale_multiplies_rates() {
    let t = Trace::from_samples(&[(0.0, 10.0), (0.5, 20.0)]).unwrap().scaled(0.5).unwrap().scaled(3.0).unwrap();
    assert_eq!(t.scale(), 1.5);
    assert_eq!(t.rate_mbps(Duration::from_millis(600)), 30.0);
    assert!(matches!(Trace::constant(1.0).unwrap().scaled(0.0), Err(Error::InvalidConfig { .. })));
    assert!(matches!(Trace::constant(1.0).unwrap().scaled(f64::NAN), Err(Error::InvalidConfig { .. })));
}

#[test]
fn errors_name_file_and_line() {
    assert_eq!(kind_at("# only\n0.0,1\n"), (2, TraceErrorKind::MissingHeader { found: "0.0,1".into() }));
    assert_eq!(kind_at("# only a comment\n"), (1, TraceErrorKind::MissingHeader { found: String::new() }));
    assert_eq!(kind_at("t_s,mbps\n0.0,abc\n"), (2, TraceErrorKind::NotANumber { field: "mbps", text: "abc".into() }));
    assert_eq!(kind_at("t_s,mbps\nx,1\n"), (2, TraceErrorKind::NotANumber { field: "t_s", text: "x".into() }));
    assert_eq!(kind_at("t_s,mbps\n0.0,inf\n"), (2, TraceErrorKind::NotANumber { field: "mbps", text: "inf".into() }));
    assert_eq!(kind_at("t_s,mbps\n0.0,1,2\n"), (2, TraceErrorKind::FieldCount { found: 3 }));
    assert_eq!(kind_at("t_s,mbps\n0.0,1\n0.5,-2\n"), (3, TraceErrorKind::NegativeRate { mbps: -2.0 }));
    assert_eq!(kind_at("t_s,mbps\n0.0,1\n0.5,1\n0.5,1\n"), (4, TraceErrorKind::NonIncreasingTime { previous: 0.5, t_s: 0.5 }));
    assert_eq!(kind_at("t_s,mbps\n0.5,1\n"), (2, TraceErrorKind::FirstNotAtZero { t_s: 0.5 }));
    assert_eq!(kind_at("# c\nt_s,mbps\n\n"), (3, TraceErrorKind::Empty));
    let msg = parse("t_s,mbps\n0.0,1\n0.5,-2\n").unwrap_err().to_string();
    assert_eq!(msg, "trace t.csv:3: negative rate -2 Mbit/s");
}

#[test]
fn load_reports_missing_file_and_reads_the_bundled_traces() {
    let err = Trace::load("/nonexistent/trace.csv").unwrap_err();
    assert!(matches!(&err, Error::TraceIo { path, .. } if path == Path::new("/nonexistent/trace.csv")), "{err}");
    // The bundled copy of ../shared/traces/indoor.csv.
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/traces/indoor.csv");
    let t = Trace::load(&bundled).unwrap();
    assert_eq!(t.len(), 600);
    assert_eq!(t.period(), Duration::from_secs(300));
    assert!((t.mean_mbps() - 93.0).abs() < 5.0, "mean {}", t.mean_mbps());
}

#[test]
fn transfer_integrates_over_steps() {
    // 1e6 bytes = 8e6 bits at 8 Mbit/s: exactly 1 s.
    let c = Trace::constant(8.0).unwrap();
    assert_eq!(c.transfer_end(Duration::ZERO, 1_000_000), Some(Duration::from_secs(1)));
    // 8 -> 16 Mbit/s at 0.5 s: 4e6 bits in the first 0.5 s, the other 4e6 take 0.25 s.
    let s = Trace::from_samples(&[(0.0, 8.0), (0.5, 16.0)]).unwrap();
    assert_eq!(s.transfer_end(Duration::ZERO, 1_000_000), Some(Duration::from_millis(750)));
    // Starting at 0.25 s: 2e6 bits by 0.5 s, 6e6 at 16 → 0.375 s more = 0.875 s.
    assert_eq!(s.transfer_end(Duration::from_millis(250), 1_000_000), Some(Duration::from_millis(875)));
    // Spanning a loop boundary: from 0.9 s, 1.6e6 bits at 16 until 1.0, then 0.8e6 bits at 8 Mbit/s: 0.1 s more.
    assert_eq!(s.transfer_end(Duration::from_millis(900), 300_000), Some(Duration::from_millis(1_100)));
    // An outage delays the start; a zero-forever trace never finishes.
    let z = Trace::from_samples(&[(0.0, 0.0), (0.5, 8.0)]).unwrap().with_end(TraceEnd::Hold);
    assert_eq!(z.transfer_end(Duration::ZERO, 1_000), Some(Duration::from_millis(501)));
    assert_eq!(Trace::constant(0.0).unwrap().transfer_end(Duration::ZERO, 1), None);
    let zh = Trace::from_samples(&[(0.0, 8.0), (0.5, 0.0)]).unwrap().with_end(TraceEnd::Hold);
    assert_eq!(zh.transfer_end(Duration::ZERO, 1_000_000), None);
    assert_eq!(c.transfer_end(Duration::from_secs(3), 0), Some(Duration::from_secs(3)));
}
