use std::time::Duration;

use lop_msgs::protocol::{Band, BandHeader, DType, Start};
use lop_msgs::{Digest, Frame};
use tokio::time::{Instant, timeout};

use super::*;

const MS: Duration = Duration::from_millis(1);

/// Receives with a bound (on the paused clock, so a stuck link fails fast in real time too).
async fn recv_within(rx: &mut ShapedRx, limit: Duration) -> Option<Vec<u8>> {
    timeout(limit, rx.recv()).await.expect("recv timed out").unwrap()
}

fn assert_near(got: Duration, want: Duration) {
    let diff = got.abs_diff(want);
    assert!(diff <= MS, "got {got:?}, want {want:?} ± 1 ms");
}

fn band(tensor_id: u32, payload_len: usize) -> Vec<u8> {
    let header = BandHeader {
        inference_id: 1,
        tensor_id,
        row_start: 0,
        row_end: 1,
        row_axis: 0,
        dtype: DType::U8,
        shape: vec![1, payload_len as u32],
        coding: Default::default(),
    };
    Frame::Band(Band { header, payload: vec![tensor_id as u8; payload_len] }).encode().unwrap()
}

fn start_frame(inference_id: u64) -> Frame {
    Frame::Start(Start {
        inference_id,
        bucket: 0,
        plan_hash: Digest([1; 32]),
        input_stamp_ns: 0,
        deadline_ns: 1,
        due_ns: 0,
        path: Vec::new(),
    })
}

fn constant(mbps: f64, latency_ms: u64) -> ShapedConfig {
    ShapedConfig::symmetric(Trace::constant(mbps).unwrap()).with_latency(Duration::from_millis(latency_ms))
}

#[tokio::test(start_paused = true)]
async fn one_megabyte_at_8_mbits_arrives_after_1005_ms() {
    let (robot, mut edge) = shaped_pair(constant(8.0, 5));
    let t0 = Instant::now();
    robot.tx.send(vec![7; 1_000_000]).await.unwrap();
    let got = recv_within(&mut edge.rx, Duration::from_secs(5)).await.unwrap();
    assert_eq!(got.len(), 1_000_000);
    assert_near(t0.elapsed(), Duration::from_millis(1005));
}

#[tokio::test(start_paused = true)]
async fn message_spanning_a_rate_step_uses_the_new_rate() {
    // 8 Mbit/s for 0.5 s carries 4e6 of the 8e6 bits; the rest takes 4e6 / 16e6 = 0.25 s; + 5 ms.
    let trace = Trace::from_samples(&[(0.0, 8.0), (0.5, 16.0)]).unwrap();
    let (robot, mut edge) = shaped_pair(ShapedConfig::symmetric(trace).with_latency(5 * MS));
    let t0 = Instant::now();
    robot.tx.send(vec![0; 1_000_000]).await.unwrap();
    recv_within(&mut edge.rx, Duration::from_secs(5)).await.unwrap();
    assert_near(t0.elapsed(), Duration::from_millis(755));
}

#[tokio::test(start_paused = true)]
async fn bands_arrive_in_fifo_order_back_to_back() {
    let (mut robot, edge) = shaped_pair(constant(8.0, 10));
    let t0 = Instant::now();
    let sizes = [50_000, 1_000, 20_000, 3_000];
    let frames: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| band(i as u32, n)).collect();
    for f in &frames {
        edge.tx.send(f.clone()).await.unwrap();
    }
    let mut wire_ns = 0u64;
    for f in &frames {
        let got = recv_within(&mut robot.rx, Duration::from_secs(5)).await.unwrap();
        assert_eq!(&got, f);
        // Each occupies the wire after the previous: bits / 8e6 s = bytes * 1000 ns.
        wire_ns += f.len() as u64 * 1_000;
        assert_near(t0.elapsed(), Duration::from_nanos(wire_ns) + 10 * MS);
    }
}

#[tokio::test(start_paused = true)]
async fn control_frame_overtakes_queued_bands() {
    let (robot, mut edge) = shaped_pair(constant(8.0, 0));
    // Bands of ~100 ms each. The first starts transmitting, then two more queue behind it.
    let bands: Vec<Vec<u8>> = (0..3).map(|i| band(i, 100_000)).collect();
    robot.tx.send(bands[0].clone()).await.unwrap();
    tokio::time::sleep(MS).await;
    robot.tx.send(bands[1].clone()).await.unwrap();
    robot.tx.send(bands[2].clone()).await.unwrap();
    robot.tx.send_frame(&start_frame(9)).await.unwrap();
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(recv_within(&mut edge.rx, Duration::from_secs(5)).await.unwrap());
    }
    let start = start_frame(9).encode().unwrap();
    assert_eq!(order, vec![bands[0].clone(), start, bands[1].clone(), bands[2].clone()]);
}

#[tokio::test(start_paused = true)]
async fn control_frame_goes_first_when_nothing_has_started() {
    // On the test's single thread the transmitter has not run yet, so no band has started.
    let (robot, mut edge) = shaped_pair(constant(8.0, 0));
    robot.tx.send(band(0, 10_000)).await.unwrap();
    robot.tx.send_frame(&start_frame(1)).await.unwrap();
    let first = recv_within(&mut edge.rx, Duration::from_secs(5)).await.unwrap();
    assert_eq!(first, start_frame(1).encode().unwrap());
}

#[tokio::test(start_paused = true)]
async fn counters_track_each_direction() {
    let (mut robot, mut edge) = shaped_pair(constant(100.0, 1));
    robot.tx.send(vec![0; 100]).await.unwrap();
    robot.tx.send(vec![0; 50]).await.unwrap();
    edge.tx.send(vec![0; 7]).await.unwrap();
    assert_eq!(robot.tx.sent(), Traffic { messages: 2, bytes: 150 });
    assert_eq!(edge.rx.received(), Traffic::default());
    for _ in 0..2 {
        recv_within(&mut edge.rx, Duration::from_secs(1)).await.unwrap();
    }
    recv_within(&mut robot.rx, Duration::from_secs(1)).await.unwrap();
    assert_eq!(edge.rx.received(), Traffic { messages: 2, bytes: 150 });
    assert_eq!(edge.tx.sent(), Traffic { messages: 1, bytes: 7 });
    assert_eq!(robot.rx.received(), Traffic { messages: 1, bytes: 7 });
}

#[tokio::test(start_paused = true)]
async fn per_message_overhead_occupies_the_wire() {
    let (robot, mut edge) = shaped_pair(constant(8.0, 0).with_overhead(2 * MS));
    let t0 = Instant::now();
    robot.tx.send(vec![0; 1_000]).await.unwrap(); // 2 ms + 1 ms
    robot.tx.send(vec![0; 1_000]).await.unwrap(); // then again
    recv_within(&mut edge.rx, Duration::from_secs(1)).await.unwrap();
    assert_near(t0.elapsed(), 3 * MS);
    recv_within(&mut edge.rx, Duration::from_secs(1)).await.unwrap();
    assert_near(t0.elapsed(), 6 * MS);
}

#[tokio::test(start_paused = true)]
async fn nothing_moves_at_rate_zero_until_it_turns_positive() {
    let trace = Trace::from_samples(&[(0.0, 0.0), (0.5, 8.0)]).unwrap().with_end(crate::TraceEnd::Hold);
    let (robot, mut edge) = shaped_pair(ShapedConfig::symmetric(trace));
    let t0 = Instant::now();
    robot.tx.send(vec![0; 1_000]).await.unwrap();
    // Not there during the outage; the cancelled recv loses nothing.
    assert!(timeout(Duration::from_millis(400), edge.rx.recv()).await.is_err());
    recv_within(&mut edge.rx, Duration::from_secs(1)).await.unwrap();
    assert_near(t0.elapsed(), Duration::from_millis(501));
}

#[tokio::test(start_paused = true)]
async fn a_link_stuck_at_zero_still_closes() {
    let (robot, mut edge) = shaped_pair(ShapedConfig::symmetric(Trace::constant(0.0).unwrap()));
    robot.tx.send(vec![0; 10]).await.unwrap();
    assert!(timeout(Duration::from_secs(60), edge.rx.recv()).await.is_err());
    drop(edge);
    assert!(matches!(robot.tx.send(vec![0; 10]).await, Err(Error::Closed)));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_recv_loses_nothing() {
    let (robot, mut edge) = shaped_pair(constant(8.0, 50));
    robot.tx.send(vec![1; 1_000]).await.unwrap();
    // Cancelled at 20 ms: the message is on its way (wire done at 1 ms, delivered at 51 ms).
    assert!(timeout(20 * MS, edge.rx.recv()).await.is_err());
    assert_eq!(recv_within(&mut edge.rx, Duration::from_secs(1)).await, Some(vec![1; 1_000]));
}

#[tokio::test(start_paused = true)]
async fn closing_one_end_is_a_clean_close_for_the_other() {
    let (robot, mut edge) = shaped_pair(constant(8.0, 5));
    robot.tx.send(vec![1; 10_000]).await.unwrap();
    robot.tx.send(vec![2; 10]).await.unwrap();
    drop(robot);
    // What was sent before the close still arrives, then None.
    assert_eq!(recv_within(&mut edge.rx, Duration::from_secs(1)).await, Some(vec![1; 10_000]));
    assert_eq!(recv_within(&mut edge.rx, Duration::from_secs(1)).await, Some(vec![2; 10]));
    assert_eq!(recv_within(&mut edge.rx, Duration::from_secs(1)).await, None);
    assert_eq!(recv_within(&mut edge.rx, Duration::from_secs(1)).await, None);
    // The robot's receiver is gone too, so the edge can no longer send.
    let err = edge.tx.send(vec![3]).await.unwrap_err();
    assert!(err.is_closed(), "{err}");
}

#[test]
fn queue_picks_by_link_time() {
    let t0 = Instant::now();
    let mut q = Queue::default();
    q.bulk.push_back((t0 + 2 * MS, vec![1]));
    q.control.push_back((t0 + 3 * MS, vec![2]));
    // Wire free at 1 ms: the band (sent at 2 ms) starts before the control frame was sent.
    assert_eq!(q.pop(t0 + MS).unwrap().1, vec![1]);
    q.bulk.push_back((t0 + 2 * MS, vec![3]));
    // Wire free at 5 ms: both waiting, control first.
    assert_eq!(q.pop(t0 + 5 * MS).unwrap().1, vec![2]);
    assert_eq!(q.pop(t0 + 5 * MS).unwrap().1, vec![3]);
    assert!(q.pop(t0).is_none());
}
