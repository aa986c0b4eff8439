//! Several inferences of one schedule on one side at once: batching across robots (EPARA's
//! multi-request batching). Each chunk is one kernel call over every member's rows, stacked on
//! axis 0 ([`lop::exec::SideExec::batched`]); each member's bands still travel on its own link
//! under its own inference id, so a robot cannot tell it was batched, and its result is the one
//! it would get alone (the engine's per-sample exactness).
//!
//! A member that stops (aborted, deadline passed, link gone) leaves the batch: the others go on,
//! its rows are filled with zeros and nothing more is sent for it. A member whose bands lag holds
//! every other member back, so once the others have waited [`BatchConfig::straggler_wait`] for it
//! it is dropped (its robot finishes the frame alone from what it holds). A member that leaves is
//! reported at once, not when the batch ends, so that its robot need not wait for the others.

use std::collections::BinaryHeap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use lop::exec::SideExec;
use lop::sim::Schedule;
use tch::Tensor;

use super::camera::CameraHeaders;
use super::side::{Incoming, Ready, SideConfig, SideStats, Stopped, Uses, arrived, start_state};
use super::wire::{GraphMeta, encode_band};
use crate::error::{Error, Result};

/// How a batch runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchConfig {
    /// How long the batch waits for a member's band that every other live member has sent
    /// before it drops that member.
    pub straggler_wait: Duration,
}

/// One inference of a batch: its own settings (inference id, deadline), the bands its I/O side
/// matched for it, and where its encoded bands go (false once its link is gone).
pub struct Member<'a> {
    /// Its settings; side, device, dilation and input wire must equal the other members'.
    pub config: SideConfig,
    /// Its bands and aborts.
    pub incoming: &'a Receiver<Incoming>,
    /// Its link.
    pub send: &'a mut dyn FnMut(Vec<u8>) -> bool,
}

impl std::fmt::Debug for Member<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member").field("config", &self.config).finish_non_exhaustive()
    }
}

/// What the batch knows of one member.
struct State {
    stop: Option<Stopped>,
    received: Vec<bool>,
    staged: Vec<Option<Tensor>>,
    /// The camera headers its cut frame's first band carried.
    headers: CameraHeaders,
    stats: SideStats,
    /// Whether its leaving was reported (to `run_batch`'s `left`).
    told: bool,
}

impl State {
    /// A member that has received nothing of `transfers` transfers.
    fn new(transfers: usize) -> State {
        State {
            stop: None,
            received: vec![false; transfers],
            staged: (0..transfers).map(|_| None).collect(),
            headers: CameraHeaders::default(),
            stats: SideStats::default(),
            told: false,
        }
    }
}

/// Reports every member that has stopped since the last call.
fn tell_leavers(states: &mut [State], left: &mut dyn FnMut(usize, &Stopped, &SideStats)) {
    for (m, s) in states.iter_mut().enumerate() {
        if let (Some(stop), false) = (&s.stop, s.told) {
            left(m, stop, &s.stats);
            s.told = true;
        }
    }
}

/// Runs the members' shared side of `schedule` as one batch on `exec` (batched with one sample
/// per member, in member order). Returns each member's outcome and statistics, in order; a
/// member's `compute_s` is its share of the batch's compute. A member that leaves before the
/// batch ends is also passed to `left` (its index, outcome and statistics) as soon as it leaves.
///
/// # Errors
/// [`Error::Executor`] when `exec`'s batch does not match the members or their settings differ;
/// engine and libtorch failures (a bug or a bad model), never one member's link trouble.
pub fn run_batch(
    exec: &mut SideExec<'_>,
    meta: &GraphMeta,
    schedule: &Schedule,
    members: &mut [Member<'_>],
    batch: &BatchConfig,
    left: &mut dyn FnMut(usize, &Stopped, &SideStats),
) -> Result<Vec<(Stopped, SideStats)>> {
    let Some(first) = shared_config(exec, members)? else { return Ok(Vec::new()) };
    let side = first.side;
    let n_transfers = schedule.transfers.len();
    let mut states: Vec<State> = members.iter().map(|_| State::new(n_transfers)).collect();
    let (mut pending, mut ready, mut left_chunks) = start_state(schedule, side);
    // Transfers towards this side not yet stored for the whole batch, and since when some
    // member has sent each.
    let mut incomplete: Vec<usize> = (0..n_transfers).filter(|&t| schedule.transfers[t].from() != side).collect();
    let mut first_staged: Vec<Option<Instant>> = vec![None; n_transfers];
    let mut uses = Uses::new(exec.graph(), schedule, side);
    super::side::expect_own_rows(exec, schedule, side);
    let _guard = tch::no_grad_guard();

    for (i, t) in schedule.transfers.iter().enumerate() {
        if t.from() == side && t.producer.is_none() {
            send_to_all(exec, meta, schedule, i, members, &mut states)?;
            uses.sent(exec, t.node);
        }
    }

    loop {
        tell_leavers(&mut states, left);
        for (m, member) in members.iter().enumerate() {
            while states[m].stop.is_none()
                && let Ok(msg) = member.incoming.try_recv()
            {
                accept(meta, schedule, &member.config, msg, &mut states[m], &mut first_staged)?;
            }
        }
        let now = Instant::now();
        for (m, member) in members.iter().enumerate() {
            if states[m].stop.is_none() && member.config.deadline.is_some_and(|d| now >= d) {
                states[m].stop = Some(Stopped::DeadlineExceeded);
            }
        }
        if states.iter().all(|s| s.stop.is_some()) {
            break;
        }
        complete_transfers(exec, schedule, &mut states, &mut incomplete, &mut pending, &mut ready)?;
        if let Some(r) = ready.pop() {
            let c = &schedule.chunks[r.item as usize];
            let t0 = Instant::now();
            exec.compute_and_store(c.node, &c.rows, 1).map_err(Error::Engine)?;
            // A batch's kernel is stretched as one member's would be (batches run on the edge,
            // whose stretch is measured, never paced).
            first.stretch.wait_after(c.node, c.rows.len(), t0.elapsed());
            let live = states.iter().filter(|s| s.stop.is_none()).count().max(1);
            let share = t0.elapsed().as_secs_f64() / live as f64;
            for s in states.iter_mut().filter(|s| s.stop.is_none()) {
                s.stats.compute_s += share;
                s.stats.chunks += 1;
            }
            left_chunks -= 1;
            arrived(schedule, &c.successors, &mut pending, &mut ready);
            for &tr in &c.enables {
                send_to_all(exec, meta, schedule, tr as usize, members, &mut states)?;
                uses.sent(exec, schedule.transfers[tr as usize].node);
            }
            uses.computed(exec, c.node);
            continue;
        }
        if left_chunks == 0 && incomplete.is_empty() {
            for s in states.iter_mut().filter(|s| s.stop.is_none()) {
                s.stop = Some(Stopped::Finished);
            }
            break;
        }
        // Blocked on bands. The transfer some member sent longest ago decides: past the
        // straggler wait, whoever has not sent it leaves the batch; otherwise wait a moment for
        // one of them (others' bands are picked up on the next pass).
        let oldest = incomplete.iter().copied().min_by_key(|&t| first_staged[t].unwrap_or(now + Duration::from_secs(3600)));
        let Some(t) = oldest else { continue };
        let held_back = states.iter().any(|s| s.stop.is_none() && s.staged[t].is_some());
        if held_back && first_staged[t].is_some_and(|at| now.duration_since(at) >= batch.straggler_wait) {
            for s in states.iter_mut().filter(|s| s.stop.is_none() && s.staged[t].is_none()) {
                s.stop = Some(Stopped::Aborted("its bands came too slowly for its batch".into()));
            }
            continue;
        }
        let Some(m) = (0..members.len()).find(|&m| states[m].stop.is_none() && states[m].staged[t].is_none()) else { continue };
        let t0 = Instant::now();
        let msg = members[m].incoming.recv_timeout(Duration::from_millis(1));
        let waited = t0.elapsed().as_secs_f64();
        for s in states.iter_mut().filter(|s| s.stop.is_none()) {
            s.stats.wait_s += waited;
        }
        match msg {
            Ok(msg) => accept(meta, schedule, &members[m].config, msg, &mut states[m], &mut first_staged)?,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => states[m].stop = Some(Stopped::Aborted("the session ended".into())),
        }
    }
    Ok(states.into_iter().map(|s| (s.stop.unwrap_or(Stopped::Finished), s.stats)).collect())
}

/// The configuration every member shares (the first one's); `None` for no members.
///
/// # Errors
/// [`Error::Executor`] when `exec` runs another batch size, or members differ in side, device,
/// dilation or input wire.
fn shared_config(exec: &SideExec<'_>, members: &[Member<'_>]) -> Result<Option<SideConfig>> {
    let Some(first) = members.first().map(|m| m.config.clone()) else { return Ok(None) };
    if exec.batch() != members.len() {
        return Err(Error::Executor(format!("a batch of {} samples run for {} members", exec.batch(), members.len())));
    }
    if members.iter().any(|m| {
        let c = &m.config;
        c.side != first.side || c.device != first.device || c.stretch != first.stretch || c.input_wire != first.input_wire
    }) {
        return Err(Error::Executor("batched inferences must share side, device, dilation and input wire".into()));
    }
    Ok(Some(first))
}

/// Takes one message for a member: an abort stops it; a band is decoded and staged until every
/// live member has sent the same transfer.
fn accept(
    meta: &GraphMeta,
    schedule: &Schedule,
    config: &SideConfig,
    msg: Incoming,
    state: &mut State,
    first_staged: &mut [Option<Instant>],
) -> Result<()> {
    let band = match msg {
        Incoming::Abort(why) => {
            state.stop = Some(Stopped::Aborted(why));
            return Ok(());
        }
        Incoming::Band(b) => b,
    };
    let ti = band.transfer as usize;
    let Some(t) = schedule.transfers.get(ti) else { return Ok(()) };
    if t.from() == config.side || state.received[ti] {
        return Ok(());
    }
    state.received[ti] = true;
    state.stats.bands_received += 1;
    state.stats.bytes_received += band.frame.len() as u64;
    state.staged[ti] = Some(band.tensor(meta, (t.node, &t.rows), config.device, &mut state.headers)?);
    first_staged[ti].get_or_insert_with(Instant::now);
    Ok(())
}

/// Stores, for the whole batch, every transfer that each live member has sent (a stopped
/// member's missing rows are zeros), and readies the chunks waiting for it.
fn complete_transfers(
    exec: &mut SideExec<'_>,
    schedule: &Schedule,
    states: &mut [State],
    incomplete: &mut Vec<usize>,
    pending: &mut [u32],
    ready: &mut BinaryHeap<Ready>,
) -> Result<()> {
    let mut k = 0;
    while k < incomplete.len() {
        let ti = incomplete[k];
        let all_sent = states.iter().all(|s| s.stop.is_some() || s.staged[ti].is_some());
        let Some(like) = states.iter().find_map(|s| s.staged[ti].as_ref().map(Tensor::shallow_clone)) else {
            k += 1;
            continue;
        };
        if !all_sent {
            k += 1;
            continue;
        }
        let torch = |source| Error::Engine(lop::Error::TorchContext { context: "stacking a batch's band".into(), source });
        let parts: Vec<Tensor> = states
            .iter_mut()
            .map(|s| match s.staged[ti].take() {
                Some(t) => Ok(t),
                None => like.f_zeros_like().map_err(torch),
            })
            .collect::<Result<_>>()?;
        let stacked = Tensor::f_cat(&parts, 0).map_err(torch)?;
        let t = &schedule.transfers[ti];
        let rows = if exec.graph().nodes[t.node].info.row_axis.is_some() { t.rows.clone() } else { 0..1 };
        exec.insert(t.node, rows, stacked).map_err(Error::Engine)?;
        arrived(schedule, &t.waiters, pending, ready);
        incomplete.swap_remove(k);
    }
    Ok(())
}

/// Sends transfer `ti` to every live member: its own sample's rows, under its inference id.
fn send_to_all(
    exec: &SideExec<'_>,
    meta: &GraphMeta,
    schedule: &Schedule,
    ti: usize,
    members: &mut [Member<'_>],
    states: &mut [State],
) -> Result<()> {
    let t = &schedule.transfers[ti];
    let rows = if meta.info(t.node).row_axis.is_some() { t.rows.clone() } else { 0..1 };
    let tensor = exec.extract(t.node, &rows).map_err(Error::Engine)?;
    for (m, member) in members.iter_mut().enumerate() {
        if states[m].stop.is_some() {
            continue;
        }
        let mine = tensor
            .f_narrow(0, m as i64, 1)
            .map_err(|source| Error::Engine(lop::Error::TorchContext { context: "a batch member's band".into(), source }))?;
        let frame = encode_band(meta, member.config.inference_id, t.node, &t.rows, &mine, member.config.input_wire)?;
        let s = &mut states[m];
        s.stats.bands_sent += 1;
        s.stats.bytes_sent += frame.len() as u64;
        if !(member.send)(frame) {
            s.stop = Some(Stopped::Aborted("the link is gone".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::exec::InputWire;
    use crate::exec::ReceivedBand;
    use lop::graph::Graph;
    use lop::plan::{Plan, Side};
    use lop::sim::ChunkBounds;
    use std::sync::mpsc;

    /// A frame as the I/O side hands it over: decoded and matched to its transfer.
    fn received(meta: &GraphMeta, schedule: &Schedule, frame: Vec<u8>) -> ReceivedBand {
        let expect = meta.expectations(schedule, InputWire::Native, Default::default()).unwrap();
        let (h, payload) = lop_msgs::protocol::Limits::default().decode_band(&frame).unwrap();
        let up = schedule.transfers.iter().any(|t| t.node == h.tensor_id as usize && t.up && t.rows.start == h.row_start as usize);
        let e = expect.get(&(up, h.tensor_id, h.row_start, h.row_end)).unwrap().clone();
        let start = frame.len() - payload.len();
        let end = frame.len();
        ReceivedBand { transfer: e.transfer, payload: start..end, dtype: h.dtype, shape: h.shape, coding: h.coding, frame }
    }

    /// Every upward band (the frame's rows) of inference `id` on `inputs`, in schedule order.
    fn input_bands(g: &Graph, meta: &GraphMeta, schedule: &Schedule, id: u64, inputs: &[Tensor]) -> Vec<Incoming> {
        let ids = g.inputs();
        schedule
            .transfers
            .iter()
            .filter(|t| t.up)
            .map(|t| {
                let k = ids.iter().position(|&i| i == t.node).unwrap();
                let axis = meta.info(t.node).row_axis.unwrap() as i64;
                let rows = inputs[k].narrow(axis, t.rows.start as i64, t.rows.len() as i64);
                let frame = encode_band(meta, id, t.node, &t.rows, &rows, InputWire::Native).unwrap();
                Incoming::Band(received(meta, schedule, frame))
            })
            .collect()
    }

    #[test]
    fn members_that_stop_or_lag_leave_the_batch_and_the_others_get_their_own_output() {
        let g = lop::model::load("zoo:resnet18@64x64", &Default::default()).unwrap();
        // Everything on the server, each op in 4 chunks: the frame goes up in bands.
        let mut plan = Plan::server_only(&g, 4);
        for s in &mut plan.splits {
            s.server_chunks = 4;
        }
        let schedule = Schedule::derive(&g, &plan, ChunkBounds::Aligned, Default::default()).unwrap();
        let meta = GraphMeta::of(&g);
        let ups = schedule.transfers.iter().filter(|t| t.up).count();
        assert!(ups >= 2, "the frame goes up in bands");
        let frames: Vec<Vec<Tensor>> = (0..3).map(|k| lop::exec::synthetic_inputs(&g, 40 + k).unwrap()).collect();
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..3).map(|_| mpsc::channel::<Incoming>()).unzip();
        // Member 0 sends its whole frame; member 1 all but its last band (it lags); member 2 one
        // band, then its session replaces it.
        for (k, tx) in txs.iter().enumerate() {
            let mut bands = input_bands(&g, &meta, &schedule, k as u64 + 1, &frames[k]);
            match k {
                1 => bands.truncate(ups - 1),
                2 => {
                    bands.truncate(1);
                    bands.push(Incoming::Abort("a newer inference started".into()));
                }
                _ => {}
            }
            for b in bands {
                tx.send(b).unwrap();
            }
        }
        let sent: Vec<std::cell::RefCell<Vec<Vec<u8>>>> = (0..3).map(|_| Default::default()).collect();
        let mut sends: Vec<Box<dyn FnMut(Vec<u8>) -> bool + '_>> = sent
            .iter()
            .map(|s| {
                Box::new(move |f: Vec<u8>| {
                    s.borrow_mut().push(f);
                    true
                }) as Box<dyn FnMut(Vec<u8>) -> bool>
            })
            .collect();
        let mut members: Vec<Member<'_>> = rxs
            .iter()
            .zip(sends.iter_mut())
            .enumerate()
            .map(|(k, (incoming, send))| Member {
                config: SideConfig {
                    side: Side::Server,
                    inference_id: k as u64 + 1,
                    device: tch::Device::Cpu,
                    stretch: crate::exec::Stretch::None,
                    input_wire: InputWire::Native,
                    codec: Default::default(),
                    camera: None,
                    deadline: Some(Instant::now() + Duration::from_secs(20)),
                },
                incoming,
                send: send.as_mut(),
            })
            .collect();
        let mut exec = SideExec::batched(&g, Side::Server, 3).unwrap();
        let t0 = Instant::now();
        let config = BatchConfig { straggler_wait: Duration::from_millis(50) };
        // Who left, and how many bands member 0 had been sent by then.
        let mut leavers: Vec<(usize, Stopped, usize)> = Vec::new();
        let mut left = |m: usize, stop: &Stopped, _: &SideStats| leavers.push((m, stop.clone(), sent[0].borrow().len()));
        let outcomes = run_batch(&mut exec, &meta, &schedule, &mut members, &config, &mut left).unwrap();
        drop(members);
        // The two that left were reported as they left, before member 0's output went out; the
        // one that finished with the batch is only in the outcomes.
        let mut told: Vec<usize> = leavers.iter().map(|l| l.0).collect();
        told.sort_unstable();
        assert_eq!(told, [1, 2], "{leavers:?}");
        for (m, stop, sent_then) in &leavers {
            assert_eq!(stop, &outcomes[*m].0);
            assert_eq!(*sent_then, 0, "member {m} was reported only after the batch's output went out");
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "the batch waited for the lagging member: {:?}", t0.elapsed());
        assert_eq!(outcomes[0].0, Stopped::Finished);
        assert_eq!(outcomes[1].0, Stopped::Aborted("its bands came too slowly for its batch".into()));
        assert_eq!(outcomes[2].0, Stopped::Aborted("a newer inference started".into()));
        assert_eq!(outcomes[0].1.bands_received as usize, ups);
        // Member 0's outputs, sent under its own inference id, are its frame's unsplit outputs.
        let whole = lop::exec::run_whole(&g, &frames[0]).unwrap().outputs;
        let out = g.outputs[0];
        let mine: Vec<ReceivedBand> = sent[0].borrow_mut().drain(..).map(|f| received(&meta, &schedule, f)).collect();
        assert_eq!(mine.len(), 1, "one output band");
        let header = lop_msgs::protocol::Limits::default().decode_band(&mine[0].frame).unwrap().0;
        assert_eq!(header.inference_id, 1);
        let t = &schedule.transfers[mine[0].transfer as usize];
        let got = mine[0].tensor(&meta, (out, &t.rows), tch::Device::Cpu, &mut CameraHeaders::default()).unwrap();
        assert!(lop::exec::max_rel_err(&got, &whole[0]).unwrap() <= 1e-5);
        assert!(sent[1].borrow().is_empty() && sent[2].borrow().is_empty(), "nothing is sent for members that left");
    }
}
