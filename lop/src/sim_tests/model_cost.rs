//! The tests of `lop_core::sim::model_cost`, on the engine's graphs.

use crate::graph::{DType, GraphBuilder};
use crate::ops::{Op, Pool};
use crate::plan::Side;
use crate::profile::Fit;
use crate::sim::Link;
use crate::sim::SimConfig;
use crate::sim::model_cost::*;

#[test]
fn derive_sums_the_profiles_and_checks_the_figures() {
    let mut b = GraphBuilder::new("chain");
    let x = b.input("x", vec![1, 1, 16, 4], DType::U8);
    let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
    let p = b.add("pool", Op::MaxPool(Pool::same_3x3()), &[n]).expect("pool");
    b.output(p);
    let g = b.build().expect("graph");
    let robot = crate::profile::from_fits(&g, Side::Robot, |_| Fit::new(1e-3, 1e-3)).expect("robot");
    let server = crate::profile::from_fits(&g, Side::Server, |_| Fit::new(1e-4, 1e-4)).expect("server");
    let config = SimConfig { link: Link::mbytes(1.0, 0.001), ..SimConfig::default() };
    let c = model_cost("chain", &g, &robot, &server, config).expect("derive");
    // 64 bytes of rows and one band header.
    assert_eq!(c.input_bytes, 64.0 + crate::sim::band_header_bytes(4) as f64);
    // Two ops of 16 rows each on the server.
    assert!((c.server_s - 2.0 * (1e-4 + 16.0 * 1e-4)).abs() < 1e-12, "{}", c.server_s);
    // norm's last row and pool's last 2 rows depend on the input's last row.
    assert!((c.tail_s - ((1e-4 + 1e-4) + (1e-4 + 2e-4))).abs() < 1e-12, "{}", c.tail_s);
    assert!(c.robot_s >= 2.0 * (1e-3 + 16.0 * 1e-3) - 1e-12);
    let mut broken = c.clone();
    broken.tail_s = 1.0;
    assert!(broken.check().expect_err("refused").to_string().contains("exceeds the whole work"));
    broken.tail_s = f64::NAN;
    assert!(broken.check().expect_err("refused").to_string().contains("tail_s"));
}
