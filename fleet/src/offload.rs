//! When an offloaded inference is back on the robot: the server pipelining bands while the frame
//! arrives (DESIGN.md section 1), priced from a model's [`ModelCost`].

use lop_core::ModelCost;

/// When an offloaded inference that starts at `t0` is back on the robot, given when the server
/// can take it up (`server_free`), its speed, the link and the one-way latency. Also returns the
/// server's next free time.
///
/// The server works through its queue one kernel at a time, but it does not sit idle while a
/// frame's bands arrive: it interleaves the bands of every robot it serves. So a request holds
/// the server for its work only (`server_s / speed`, from when the server is free and the first
/// bands have crossed), and it cannot finish before its last row has arrived plus the tail. The
/// result then crosses back.
pub fn offload_finish(cost: &ModelCost, t0: f64, server_free: f64, speed: f64, bytes_per_s: f64, latency_s: f64) -> (f64, f64) {
    let start = server_free.max(t0 + latency_s);
    let free = start + cost.server_s / speed;
    let done = free.max(t0 + latency_s + cost.upload_s(bytes_per_s) + cost.tail_s / speed);
    (done + cost.download_s(bytes_per_s) + latency_s, free)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost() -> ModelCost {
        ModelCost { name: "m".into(), input_bytes: 1e6, output_bytes: 1e3, server_s: 0.010, tail_s: 0.002, robot_s: 0.2 }
    }

    #[test]
    fn an_idle_server_is_bound_by_the_upload_and_the_tail() {
        // 1 MB at 10 MB/s is 100 ms; the 10 ms of work hides behind it except the 2 ms tail.
        let (back, free) = offload_finish(&cost(), 1.0, 0.0, 1.0, 1e7, 0.001);
        let done = 1.0 + 0.001 + 0.1 + 0.002;
        assert!((back - (done + 1e-4 + 0.001)).abs() < 1e-12, "{back}");
        // The server is held for its 10 ms of work only, not while the bands arrive.
        assert!((free - 1.011).abs() < 1e-12, "{free}");
    }

    #[test]
    fn a_busy_server_is_bound_by_its_queue_and_slower_servers_take_longer() {
        // Free only at t = 2: the whole 10 ms of work starts then.
        let (back, free) = offload_finish(&cost(), 1.0, 2.0, 1.0, 1e7, 0.001);
        assert!((free - 2.010).abs() < 1e-12, "{free}");
        assert!((back - (2.010 + 1e-4 + 0.001)).abs() < 1e-12, "{back}");
        let (_, slow) = offload_finish(&cost(), 1.0, 2.0, 0.25, 1e7, 0.001);
        assert!((slow - 2.040).abs() < 1e-12, "{slow}");
    }
}
