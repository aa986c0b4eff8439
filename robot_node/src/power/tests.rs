//! Tests of the power node's logic: accounting, the CSV logs, the reducer and the model feed.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lop_power::{ModelSource, NoData, PowerModel, PowerReading, SamplerConfig, State};

use super::*;

fn reading(at: Instant, w: f64) -> PowerReading {
    PowerReading { at, rails_w: vec![w, w / 2.0], total_w: w, energy_j: None, modelled: false }
}
fn rails() -> Vec<String> {
    vec!["VDD_IN".into(), "VDD_GPU".into()]
}
fn secs(t: f64) -> Duration {
    Duration::from_secs_f64(t)
}

/// The power node's modelled watts and the planner's priced watts describe the same
/// reference robot by default, so modelled energy and planned energy agree out of the box.
#[test]
fn power_model_defaults_match_the_simulators() {
    let (m, sim) = (PowerModel::default(), lop::sim::RobotPower::default());
    assert_eq!((m.computing_w, m.transmitting_w, m.idle_w), (sim.computing_w, sim.transmitting_w, sim.idle_w));
}
struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        TempDir(std::env::temp_dir().join(format!("lop-robot-power-{tag}-{}-{nanos}", std::process::id())))
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn power_accountant_integrates_piecewise_constant_signal() {
    let acc = EnergyAccountant::fed("test", rails(), 1000).expect("accountant");
    let t0_sys = SystemTime::now();
    let t0 = acc.instant_of(t0_sys).expect("maps");
    // 5 W, then 12 W on [1.0, 2.0) s, then 5 W; readings every 10 ms, offset 3 ms.
    let p = |t: f64| if (1.0..2.0).contains(&t) { 12.0 } else { 5.0 };
    for k in 0..300 {
        let t = 0.003 + 0.01 * f64::from(k);
        acc.push(reading(t0 + secs(t), p(t))).expect("push");
    }
    let r = acc.energy(7, t0_sys + secs(0.9), t0_sys + secs(2.1)).expect("figure");
    let exact = 5.0 * 0.1 + 12.0 * 1.0 + 5.0 * 0.1;
    assert!((r.joules - exact).abs() / exact < 0.02, "{} vs {exact}", r.joules);
    assert!((r.avg_w - exact / 1.2).abs() / (exact / 1.2) < 0.02);
    assert_eq!((r.id, r.source.as_str(), r.modelled, r.method), (7, "test", false, "trapezoid"));
    assert_eq!(r.rails_j[1].0, "VDD_GPU");
    assert!((r.rails_j[1].1 - r.joules / 2.0).abs() < 1e-9);
    assert_eq!(r.samples, 120);
    assert!((r.duration_s() - 1.2).abs() < 1e-6);
    // Errors and no-data cases.
    let e = acc.energy(1, t0_sys + secs(1.0), t0_sys + secs(0.5)).expect_err("reversed");
    assert!(e.to_string().contains("before it starts"), "{e}");
    let e = acc.energy(1, t0_sys + secs(2.5), t0_sys + secs(3.5)).expect_err("after the buffer");
    assert!(e.is_retryable() && e.to_string().contains("after the newest"), "{e}");
    let e = acc.energy(1, t0_sys, t0_sys + secs(0.5)).expect_err("before the buffer");
    assert!(matches!(e, PowerNodeError::NoData(NoData::StartsBeforeBuffer { .. })) && !e.is_retryable(), "{e}");
    let empty = EnergyAccountant::fed("test", rails(), 10).expect("accountant");
    let e = empty.energy(1, t0_sys, t0_sys + secs(0.1)).expect_err("empty");
    assert!(matches!(e, PowerNodeError::NoData(NoData::TooFewReadings { have: 0 })), "{e}");
    assert!(acc.push(reading(t0, 1.0)).is_err(), "out-of-order readings are refused");
    assert_eq!(acc.latest().map(|r| r.total_w), Some(5.0));
    assert_eq!(acc.readings_after(Some(t0 + secs(2.975))).len(), 2);
}

#[test]
fn power_accountant_with_sampler_thread() {
    let model = ModelSource::new(PowerModel::default(), State::Computing).expect("model");
    let cfg = SamplerConfig { rate_hz: 200.0, ..SamplerConfig::default() };
    let mut acc = EnergyAccountant::sampled(Box::new(model), cfg, 1000).expect("sampling");
    std::thread::sleep(Duration::from_millis(40));
    let start = SystemTime::now();
    std::thread::sleep(Duration::from_millis(150));
    let end = SystemTime::now();
    std::thread::sleep(Duration::from_millis(60));
    let r = acc.energy(1, start, end).expect("covered");
    assert!(r.modelled && r.source == "model");
    assert!((r.avg_w - 13.35).abs() < 1e-6, "{r:?}");
    assert!(acc.stop().expect("clean").is_some_and(|s| s.reads >= 5));
    assert!(!acc.sampler_finished());
}

#[test]
fn power_csv_log_rows_header_and_append() {
    let dir = TempDir::new("csv");
    let path = dir.0.join("nested/deeper/energy.csv");
    let mut log = CsvLog::create(&path, &rails()).expect("creates dirs").with_samples(dir.0.join("samples.csv")).expect("samples");
    let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_250);
    let report = EnergyReport {
        id: 3,
        start: t,
        end: t + Duration::from_millis(40),
        joules: 0.534,
        avg_w: 13.35,
        rails_j: vec![("VDD_IN".into(), 0.534), ("VDD_GPU".into(), 0.2)],
        samples: 4,
        source: "model".into(),
        modelled: true,
        method: "counter",
    };
    log.write(&report).expect("row");
    log.write(&EnergyReport { id: 4, rails_j: vec![("VDD_IN".into(), 1.0)], ..report.clone() }).expect("row");
    log.write_sample(t, &reading(Instant::now(), 8.0)).expect("sample row");
    let text = std::fs::read_to_string(&path).expect("read back");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        vec![
            "inference_id,start_unix_s,end_unix_s,duration_s,joules,avg_w,source,modelled,samples,rail:VDD_IN_j,rail:VDD_GPU_j",
            "3,1700000000.250000,1700000000.290000,0.040000,0.534000,13.350000,model,true,4,0.534000,0.200000",
            "4,1700000000.250000,1700000000.290000,0.040000,0.534000,13.350000,model,true,4,1.000000,",
        ]
    );
    let samples = std::fs::read_to_string(dir.0.join("samples.csv")).expect("read back");
    assert_eq!(samples, "unix_s,total_w,modelled,rail:VDD_IN_w,rail:VDD_GPU_w\n1700000000.250000,8.000000,false,8.000000,4.000000\n");
    drop(log);
    // Re-opening appends under the same header; another rail set is refused.
    let mut again = CsvLog::create(&path, &rails()).expect("reopen");
    again.write(&report).expect("row");
    assert_eq!(std::fs::read_to_string(&path).expect("read").lines().count(), 4);
    let e = CsvLog::create(&path, &["VDD_CPU".to_string()]).expect_err("other header");
    assert!(e.to_string().contains("use another file"), "{e}");
}

#[test]
fn power_rate_reducer_averages_to_at_most_the_rate() {
    let t0 = Instant::now();
    let mut red = RateReducer::new(10.0).expect("valid");
    let mut out = Vec::new();
    for k in 0..100u32 {
        let r = reading(t0 + Duration::from_millis(10 * u64::from(k)), f64::from(k));
        out.extend(red.push(&r));
    }
    assert_eq!(out.len(), 10, "1 s of 100 Hz at most 10 Hz: {}", out.len());
    assert_eq!((out[0].readings, out[0].total_w), (1, 0.0), "the first reading goes alone");
    assert_eq!(out[1].readings, 10);
    assert!((out[1].total_w - 5.5).abs() < 1e-9, "mean of 1..=10: {}", out[1].total_w);
    assert!((out[1].rails_w[1] - 2.75).abs() < 1e-9);
    for pair in out.windows(2) {
        assert!(pair[1].at - pair[0].at >= Duration::from_millis(100));
    }
    let mut every = RateReducer::new(f64::INFINITY).expect("valid");
    assert!((0..5).all(|k| every.push(&reading(t0 + Duration::from_millis(k), 1.0)).is_some()));
    assert!(RateReducer::new(0.0).is_err() && RateReducer::new(f64::NAN).is_err());
}

#[test]
fn power_model_states_energy_matches_analytic_figure() {
    let m = PowerModel::default();
    let acc = EnergyAccountant::fed("model", vec![MODEL_RAIL.into()], 10_000).expect("accountant");
    let t0 = Instant::now();
    let mut feed = ModelFeed::new(m).expect("valid model");
    // Two inferences: 30 ms compute, 20 ms transmit, 100 ms total; then a 3 s one with 2.5 s of
    // compute (long states are split below the gap limit), after 10 s idle (past the gap
    // limit: an idle reading just before it covers its start).
    let a = ModelStates::from_inference(t0 + secs(0.2), 0.030, 0.020, 0.100).expect("valid");
    let b = ModelStates::from_inference(a.end() + secs(10.0), 2.5, 0.1, 3.0).expect("valid");
    assert_eq!(a.transitions().len(), 4);
    let analytic_a = 13.35 * 0.030 + 4.25 * 0.020 + 4.04 * 0.050;
    assert!((a.energy_j(&m) - analytic_a).abs() < 1e-9);
    feed.feed(&a, &acc).expect("fed");
    feed.feed(&b, &acc).expect("fed");
    // Each interval as lop_power reads it from a result's wall-clock stamps, which may start
    // a little before the model's instants: half a millisecond of idling more.
    let early = secs(0.0005);
    for (states, expect) in [(&a, analytic_a), (&b, 13.35 * 2.5 + 4.25 * 0.1 + 4.04 * 0.4)] {
        let (s, e) = (acc.system_time_of(states.start()) - early, acc.system_time_of(states.end()));
        let expect = expect + m.idle_w * early.as_secs_f64();
        let r = acc.energy(1, s, e).expect("covered");
        assert!(r.modelled && r.method == "counter", "{r:?}");
        assert!((r.joules - expect).abs() < 1e-6, "{} vs {expect}", r.joules);
    }
    // Compute and transmit are capped by the total; bad numbers are refused.
    let c = ModelStates::from_inference(t0, 0.5, 0.5, 0.2).expect("valid");
    assert_eq!(c.segments(), &[(State::Computing, secs(0.2))]);
    assert!(ModelStates::from_inference(t0, -1.0, 0.0, 1.0).is_err());
    // A live model source follows the transitions.
    let src = ModelSource::new(m, State::Idle).expect("model");
    let now = Instant::now();
    let live = ModelStates::from_inference(now, 0.0, 0.0, 0.0).expect("valid");
    assert_eq!(live.apply(&src).len(), 1);
    assert_eq!(src.state(), State::Idle);
}
