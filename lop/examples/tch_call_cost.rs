//! `cargo run --release -p lop --example tch_call_cost`: what one small libtorch call costs
//! through tch's C++ wrapper (torch-sys), in nanoseconds: a view (`narrow`), an element-wise op
//! (`add`), a concatenation (`cat`) and a metadata read (`size`) on a 16x8x8 tensor, one thread,
//! the best of 5 runs of 200,000 calls each. The figure the release profile's `opt-level = 1`
//! for torch-sys (Cargo.toml) was checked with: build at each level, run both, compare.

use std::time::Instant;
use tch::{Device, Kind, Tensor};

const CALLS: u32 = 200_000;
const ROUNDS: usize = 5;

/// The fastest of [`ROUNDS`] runs of `call`, in nanoseconds per call.
fn best_ns(mut call: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let t0 = Instant::now();
        for _ in 0..CALLS {
            call();
        }
        best = best.min(t0.elapsed().as_secs_f64() / f64::from(CALLS) * 1e9);
    }
    best
}

fn main() {
    tch::set_num_threads(1);
    let a = Tensor::ones([1, 16, 8, 8], (Kind::Float, Device::Cpu));
    let b = Tensor::ones([1, 16, 8, 8], (Kind::Float, Device::Cpu));
    let narrow = best_ns(|| {
        drop(std::hint::black_box(a.narrow(2, 1, 4)));
    });
    let add = best_ns(|| {
        drop(std::hint::black_box(&a + &b));
    });
    let cat = best_ns(|| {
        drop(std::hint::black_box(Tensor::cat(&[&a, &b], 2)));
    });
    let size = best_ns(|| {
        std::hint::black_box(a.size());
    });
    println!("ns per call: narrow {narrow:.0}, add {add:.0}, cat {cat:.0}, size {size:.0}");
}
