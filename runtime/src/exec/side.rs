//! One side of one inference: its chunks in wavefront order (the simulator's rule), each band
//! sent the moment its rows exist, received bands stored as they arrive.

use std::collections::BinaryHeap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use lop::exec::SideExec;
use lop::graph::{Graph, NodeId};
use lop::ops::Op;
use lop::plan::Side;
use lop::rows::Rows;
use lop::sim::Schedule;
use tch::{Device, Tensor};

use super::camera::{CameraHeaders, CameraSend};
use super::received::ReceivedBand;
use super::stretch::Stretch;
use super::wire::{GraphMeta, InputWire, encode_band};
use crate::error::{Error, Result};

/// What the I/O side hands the compute thread during an inference.
#[derive(Debug)]
pub enum Incoming {
    /// A band matched to one of the schedule's transfers towards this side.
    Band(ReceivedBand),
    /// Stop: the peer failed, the link broke, or the deadline passed.
    Abort(String),
}

/// Why a side stopped before finishing its part.
#[derive(Debug, Clone, PartialEq)]
pub enum Stopped {
    /// Its part is done.
    Finished,
    /// Told to stop (by the I/O side), with the reason.
    Aborted(String),
    /// The deadline passed.
    DeadlineExceeded,
}

/// Per-side statistics of one inference.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SideStats {
    /// Seconds computing chunks (dilation included).
    pub compute_s: f64,
    /// Seconds blocked waiting for bands.
    pub wait_s: f64,
    /// Bands and bytes (whole frames) sent.
    pub bands_sent: u32,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Bands received.
    pub bands_received: u32,
    /// Bytes received (whole frames).
    pub bytes_received: u64,
    /// Chunks computed.
    pub chunks: u32,
    /// Bands of the peer's this side computed itself instead of waiting for them (a robot
    /// past a binding frame deadline, [`run_side_racing`]).
    pub stolen: u32,
    /// Kernels that took longer than their paced duration ([`Stretch::Paced`]): this machine
    /// could not run them as fast as the emulated device.
    pub overruns: u32,
    /// Seconds those kernels took beyond their paced durations, all together.
    pub overrun_s: f64,
    /// Seconds the robot spent coding its frame for the link (encoding its bands, and for a
    /// lossy codec decoding them and coding the rows it keeps).
    pub coding_s: f64,
    /// Whether this side coded its frame's bands (see [`SideConfig::codec`]).
    pub coded: bool,
    /// Bytes of the coded input bands sent (whole frames), and of the pixels they carry: the
    /// frame's coded size over its raw size ([`crate::frame_ratio::FrameRatio`]).
    pub input_coded_bytes: u64,
    /// See `input_coded_bytes`.
    pub input_raw_bytes: u64,
    /// Inferences computed together in the batch this one ran in (1: alone; 0: not run on a
    /// server replica).
    pub batch: u32,
}

/// How to run one side.
#[derive(Debug, Clone)]
pub struct SideConfig {
    /// Which side.
    pub side: Side,
    /// The inference.
    pub inference_id: u64,
    /// Where tensors live.
    pub device: Device,
    /// How each chunk's compute is stretched by waiting (DESIGN.md section 9: a CPU standing in
    /// for a slower robot): not at all, by its measured duration, or to its profile's time.
    pub stretch: Stretch,
    /// How graph inputs travel.
    pub input_wire: InputWire,
    /// How the robot codes its frame's bands (the table's codec; the server reads each band's
    /// coding from its header).
    pub codec: lop::codec::FrameCodec,
    /// The camera's own JPEG of the frame, sent under `passthrough` (robot only): unchanged, or
    /// cut by rows when the plan splits the frame ([`super::camera`]).
    pub camera: Option<super::camera::CameraJpeg>,
    /// When to give up.
    pub deadline: Option<Instant>,
}

/// A chunk whose inputs are all held, ordered by its wavefront key (smallest first), ties by
/// its index; the entry carries the index.
pub(super) type Ready = lop::order::Earliest<u32>;

/// The ready entry of chunk `id` with wavefront key `key`.
pub(super) fn ready(key: f64, id: u32) -> Ready {
    Ready::new(key, u64::from(id), id)
}

/// Runs `config.side`'s part of `schedule`: `exec` holds the graph inputs (robot) or nothing
/// (server); `send` takes each encoded band (returning false once the link is gone, which
/// aborts). Returns why it stopped and the statistics; `exec` keeps every row the side holds,
/// so a robot that stopped early can finish the inference from it ([`super::finish_locally`]).
///
/// # Errors
/// Engine and libtorch failures (a bug or a bad model), never link trouble.
pub fn run_side(
    exec: &mut SideExec<'_>,
    meta: &GraphMeta,
    schedule: &Schedule,
    config: &SideConfig,
    incoming: &Receiver<Incoming>,
    send: &mut dyn FnMut(Vec<u8>) -> bool,
) -> Result<(Stopped, SideStats)> {
    run(exec, meta, schedule, config, incoming, send, false)
}

/// [`run_side`] for a robot whose frame has a binding deadline (`config.deadline`): past it the
/// robot stops waiting, not working. It goes on with its own chunks as planned (the edge needs
/// their bands), and where it would wait for a band of the edge's it computes that band's rows
/// itself, from what it holds (recomputing what it released), taking any band that arrives
/// meanwhile. So the edge and the robot race for every band still missing, and the inference
/// ends with the unsplit model's output at whichever pace is faster; [`SideStats::stolen`]
/// counts the bands the robot computed. It stops only when the link is gone, or with nothing
/// left to compute or wait for.
///
/// # Errors
/// As [`run_side`].
pub fn run_side_racing(
    exec: &mut SideExec<'_>,
    meta: &GraphMeta,
    schedule: &Schedule,
    config: &SideConfig,
    incoming: &Receiver<Incoming>,
    send: &mut dyn FnMut(Vec<u8>) -> bool,
) -> Result<(Stopped, SideStats)> {
    run(exec, meta, schedule, config, incoming, send, true)
}

fn run(
    exec: &mut SideExec<'_>,
    meta: &GraphMeta,
    schedule: &Schedule,
    config: &SideConfig,
    incoming: &Receiver<Incoming>,
    send: &mut dyn FnMut(Vec<u8>) -> bool,
    race: bool,
) -> Result<(Stopped, SideStats)> {
    expect_own_rows(exec, schedule, config.side);
    let uses = Uses::new(exec.graph(), schedule, config.side);
    let progress = Progress::new(schedule, config.side);
    let _guard = tch::no_grad_guard();
    let camera = config.camera.clone().map(CameraSend::new);
    let mut run = SideRun { exec, part: Part { meta, schedule, config }, incoming, send, race, uses, progress, camera };
    let stop = run.go()?;
    Ok((stop, run.progress.stats))
}

/// Tells `exec` which rows of each value `side` computes (its chunks of each op cover one
/// range), so that the chunks of an op land in one buffer ([`SideExec::expect_rows`]).
pub(super) fn expect_own_rows(exec: &mut SideExec<'_>, schedule: &Schedule, side: Side) {
    let mut spans: Vec<Option<Rows>> = vec![None; exec.graph().nodes.len()];
    for c in schedule.chunks.iter().filter(|c| c.side == side) {
        let span = &mut spans[c.node];
        *span = Some(match span.take() {
            Some(s) => s.start.min(c.rows.start)..s.end.max(c.rows.end),
            None => c.rows.clone(),
        });
    }
    for (id, span) in spans.into_iter().enumerate() {
        if let Some(span) = span {
            exec.expect_rows(id, span);
        }
    }
}

/// What a side runs: the graph's wire facts, the schedule, and how.
#[derive(Clone, Copy)]
struct Part<'r> {
    meta: &'r GraphMeta,
    schedule: &'r Schedule,
    config: &'r SideConfig,
}

/// How far a side has come: the chunks it waits for and can compute, the bands it has received
/// and still needs, and its statistics.
struct Progress {
    stats: SideStats,
    /// Every chunk's count of inputs not yet held.
    pending: Vec<u32>,
    /// This side's chunks that hold all their inputs, in wavefront order.
    ready: BinaryHeap<Ready>,
    /// This side's chunks not computed yet.
    left_chunks: usize,
    /// Bands this side must receive before it is done: every transfer towards it.
    left_bands: usize,
    /// Per transfer: whether its band is here.
    received: Vec<bool>,
    /// The camera headers the robot's cut frame brought (server only).
    headers: CameraHeaders,
}

/// One side's run of one inference ([`run_side`], [`run_side_racing`]).
struct SideRun<'r, 'g> {
    exec: &'r mut SideExec<'g>,
    part: Part<'r>,
    incoming: &'r Receiver<Incoming>,
    send: &'r mut dyn FnMut(Vec<u8>) -> bool,
    /// Past the deadline, race the peer for its bands rather than stop.
    race: bool,
    uses: Uses,
    progress: Progress,
    /// The robot's camera JPEG, cut once if the plan splits the frame.
    camera: Option<CameraSend>,
}

impl SideRun<'_, '_> {
    /// Runs the side to its end: the bands of values held from the start go first, then chunks
    /// in wavefront order, bands taken in as they arrive, until all are done or it stops.
    fn go(&mut self) -> Result<Stopped> {
        if let Some(stop) = self.send_held()? {
            return Ok(stop);
        }
        loop {
            if let Some(stop) = self.take_arrived()? {
                return Ok(stop);
            }
            let past_deadline = self.part.config.deadline.is_some_and(|d| Instant::now() >= d);
            if past_deadline && !self.race {
                return Ok(Stopped::DeadlineExceeded);
            }
            if let Some(r) = self.progress.ready.pop() {
                if let Some(stop) = self.compute(r)? {
                    return Ok(stop);
                }
                continue;
            }
            if self.progress.left_chunks == 0 && self.progress.left_bands == 0 {
                return Ok(Stopped::Finished);
            }
            let stop = if past_deadline { self.steal()? } else { self.wait()? };
            if let Some(stop) = stop {
                return Ok(stop);
            }
        }
    }

    /// Transfers of values held before anything runs (graph inputs) leave at once, each coded
    /// in turn under a frame codec; then the robot codes the rows it keeps, so that it computes
    /// on the decoded frame. Stops (`Some`) when the link is gone.
    fn send_held(&mut self) -> Result<Option<Stopped>> {
        let Part { meta, schedule, config } = self.part;
        let mut coded_any = false;
        for (i, t) in schedule.transfers.iter().enumerate() {
            if t.from() == config.side && t.producer.is_none() {
                let coded = config.codec.is_coded() && meta.is_input(t.node);
                let sent = if coded { self.send_coded(i)? } else { self.send_transfer(i)? };
                coded_any |= coded;
                if !sent {
                    return Ok(Some(Stopped::Aborted("the link is gone".into())));
                }
                self.uses.sent(self.exec, t.node);
            }
        }
        if coded_any {
            let stats = &mut self.progress.stats;
            stats.coded = true;
            let t0 = Instant::now();
            super::coded::code_kept_rows(self.exec, meta, schedule, config.codec)?;
            stats.coding_s += t0.elapsed().as_secs_f64();
        }
        Ok(None)
    }

    /// Codes and sends the band of transfer `ti` of a graph input under the frame codec;
    /// whether the link took it.
    fn send_coded(&mut self, ti: usize) -> Result<bool> {
        let Part { meta, schedule, config } = self.part;
        let t = &schedule.transfers[ti];
        let stats = &mut self.progress.stats;
        let t0 = Instant::now();
        let frame =
            super::coded::encode_coded_band(self.exec, meta, config.inference_id, (t.node, &t.rows), config.codec, self.camera.as_mut())?;
        stats.coding_s += t0.elapsed().as_secs_f64();
        stats.input_coded_bytes += frame.len() as u64;
        stats.input_raw_bytes += meta.wire_shape(t.node, &t.rows).0.iter().map(|&d| u64::from(d)).product::<u64>();
        stats.bands_sent += 1;
        stats.bytes_sent += frame.len() as u64;
        Ok((self.send)(frame))
    }

    /// Sends the band of transfer `ti` as it is held; whether the link took it.
    fn send_transfer(&mut self, ti: usize) -> Result<bool> {
        let Part { meta, schedule, config } = self.part;
        let t = &schedule.transfers[ti];
        let rows = if meta.info(t.node).row_axis.is_some() { t.rows.clone() } else { 0..1 };
        let tensor: Tensor = self.exec.extract(t.node, &rows).map_err(Error::Engine)?;
        let frame = encode_band(meta, config.inference_id, t.node, &t.rows, &tensor, config.input_wire)?;
        self.progress.stats.bands_sent += 1;
        self.progress.stats.bytes_sent += frame.len() as u64;
        Ok((self.send)(frame))
    }

    /// Takes in whatever has arrived, without blocking. Stops (`Some`) when told to.
    fn take_arrived(&mut self) -> Result<Option<Stopped>> {
        while let Ok(msg) = self.incoming.try_recv() {
            if let Some(stop) = self.progress.accept(self.exec, self.part, msg)? {
                return Ok(Some(stop));
            }
        }
        Ok(None)
    }

    /// Computes the ready chunk `r` (stretched as configured), readies the chunks waiting for
    /// it and sends the bands it completes. Stops (`Some`) when the link is gone.
    fn compute(&mut self, r: Ready) -> Result<Option<Stopped>> {
        let Part { schedule, config, .. } = self.part;
        let c = &schedule.chunks[r.item as usize];
        let stats = &mut self.progress.stats;
        let t0 = Instant::now();
        self.exec.compute_and_store(c.node, &c.rows, 1).map_err(Error::Engine)?;
        let over = config.stretch.wait_after(c.node, c.rows.len(), t0.elapsed());
        if !over.is_zero() {
            stats.overruns += 1;
            stats.overrun_s += over.as_secs_f64();
        }
        stats.compute_s += t0.elapsed().as_secs_f64();
        stats.chunks += 1;
        // Each chunk's time, for comparing a run with its profile chunk by chunk.
        tracing::trace!(
            side = config.side.name(),
            node = c.node,
            rows_start = c.rows.start,
            rows_end = c.rows.end,
            seconds = t0.elapsed().as_secs_f64(),
            "chunk computed"
        );
        self.progress.left_chunks -= 1;
        arrived(schedule, &c.successors, &mut self.progress.pending, &mut self.progress.ready);
        for &tr in &c.enables {
            if !self.send_transfer(tr as usize)? {
                return Ok(Some(Stopped::Aborted("the link is gone".into())));
            }
            self.uses.sent(self.exec, schedule.transfers[tr as usize].node);
        }
        self.uses.computed(self.exec, c.node);
        Ok(None)
    }

    /// Racing past the deadline: computes the first band not received rather than wait for it,
    /// from what the side holds, taking in what arrives meanwhile (the steal ends once the band
    /// itself arrives). Stops (`Some`) when told to, or with no band left to wait for.
    fn steal(&mut self) -> Result<Option<Stopped>> {
        let (part, incoming) = (self.part, self.incoming);
        let Part { meta, schedule, config } = part;
        let p = &mut self.progress;
        let Some(ti) = (0..schedule.transfers.len()).find(|&i| schedule.transfers[i].from() != config.side && !p.received[i]) else {
            return Ok(Some(Stopped::DeadlineExceeded));
        };
        let t = &schedule.transfers[ti];
        let rows = if meta.info(t.node).row_axis.is_some() { t.rows.clone() } else { 0..1 };
        let t0 = Instant::now();
        // After each piece: the stretch of a dilated robot, taking in what arrives meanwhile.
        let mut between = |exec: &mut SideExec<'_>, node: NodeId, rows: usize, took: Duration| -> Result<Step> {
            let (wait, _) = config.stretch.after(node, rows, took);
            p.stretch(exec, part, incoming, ti, Instant::now() + wait)
        };
        if let Step::Stop(stop) = compute_rows(self.exec, t.node, &rows, &mut between)? {
            return Ok(Some(stop));
        }
        p.stats.compute_s += t0.elapsed().as_secs_f64();
        if !p.received[ti] {
            p.received[ti] = true;
            p.left_bands -= 1;
            p.stats.stolen += 1;
            arrived(schedule, &t.waiters, &mut p.pending, &mut p.ready);
        }
        Ok(None)
    }

    /// Nothing to compute: waits for a band, until the deadline if there is one. Stops (`Some`)
    /// when told to, when the session ended, or at the deadline unless racing (then the
    /// deadline ends the wait, not the inference).
    fn wait(&mut self) -> Result<Option<Stopped>> {
        let config = self.part.config;
        let t0 = Instant::now();
        let wait = config.deadline.map_or(Duration::from_secs(3600), |d| d.saturating_duration_since(t0));
        let msg = self.incoming.recv_timeout(wait);
        self.progress.stats.wait_s += t0.elapsed().as_secs_f64();
        match msg {
            Ok(msg) => self.progress.accept(self.exec, self.part, msg),
            Err(RecvTimeoutError::Timeout) => Ok((config.deadline.is_some() && !self.race).then_some(Stopped::DeadlineExceeded)),
            Err(RecvTimeoutError::Disconnected) => Ok(Some(Stopped::Aborted("the session ended".into()))),
        }
    }
}

impl Progress {
    /// Where `side` starts: nothing received, its chunks that need no input ready.
    fn new(schedule: &Schedule, side: Side) -> Progress {
        let (pending, ready, left_chunks) = start_state(schedule, side);
        Progress {
            stats: SideStats::default(),
            pending,
            ready,
            left_chunks,
            left_bands: schedule.transfers.iter().filter(|t| t.from() != side).count(),
            received: vec![false; schedule.transfers.len()],
            headers: CameraHeaders::default(),
        }
    }

    /// Takes in one message: an abort stops the side (`Some`); a band towards it not received
    /// yet is stored, readying the chunks that wait for it.
    fn accept(&mut self, exec: &mut SideExec<'_>, part: Part<'_>, msg: Incoming) -> Result<Option<Stopped>> {
        let Part { meta, schedule, config } = part;
        let band = match msg {
            Incoming::Abort(why) => return Ok(Some(Stopped::Aborted(why))),
            Incoming::Band(b) => b,
        };
        let ti = band.transfer as usize;
        // The I/O side matched it to a transfer towards this side and dropped duplicates; check again
        // so that a bug there cannot corrupt the state.
        let Some(t) = schedule.transfers.get(ti) else { return Ok(None) };
        if t.from() == config.side || self.received[ti] {
            return Ok(None);
        }
        self.received[ti] = true;
        self.left_bands -= 1;
        self.stats.bands_received += 1;
        self.stats.bytes_received += band.frame.len() as u64;
        let tensor = band.tensor(meta, (t.node, &t.rows), config.device, &mut self.headers)?;
        let rows = if meta.info(t.node).row_axis.is_some() { t.rows.clone() } else { 0..1 };
        exec.insert(t.node, rows, tensor).map_err(Error::Engine)?;
        arrived(schedule, &t.waiters, &mut self.pending, &mut self.ready);
        Ok(None)
    }

    /// A stolen piece's stretch (a dilated robot's), until `until`, taking in what arrives
    /// meanwhile: [`Step::Arrived`] once the band of transfer `ti` has, [`Step::Stop`] when the
    /// inference stops, else [`Step::Go`] at `until`.
    fn stretch(
        &mut self,
        exec: &mut SideExec<'_>,
        part: Part<'_>,
        incoming: &Receiver<Incoming>,
        ti: usize,
        until: Instant,
    ) -> Result<Step> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let msg = if left.is_zero() { incoming.try_recv().ok() } else { incoming.recv_timeout(left).ok() };
            match msg {
                Some(msg) => {
                    if let Some(stop) = self.accept(exec, part, msg)? {
                        return Ok(Step::Stop(stop));
                    }
                    if self.received[ti] {
                        return Ok(Step::Arrived);
                    }
                }
                None if left.is_zero() || Instant::now() >= until => return Ok(Step::Go),
                // Disconnected: the stretch is still due.
                None => std::thread::sleep(until.saturating_duration_since(Instant::now())),
            }
        }
    }
}

/// Where a side starts: every chunk's count of inputs not yet held, the chunks of `side` that need
/// none (ready at once), and how many chunks `side` computes in all.
pub(super) fn start_state(schedule: &Schedule, side: Side) -> (Vec<u32>, BinaryHeap<Ready>, usize) {
    let pending: Vec<u32> = schedule.chunks.iter().map(|c| c.inputs).collect();
    let mut ready = BinaryHeap::new();
    let mut left_chunks = 0usize;
    for (i, c) in schedule.side_chunks(side) {
        left_chunks += 1;
        if c.inputs == 0 {
            ready.push(self::ready(c.key, i));
        }
    }
    (pending, ready, left_chunks)
}

/// Counts one input of each chunk in `chunks` as held, readying those that now hold them all.
pub(super) fn arrived(schedule: &Schedule, chunks: &[u32], pending: &mut [u32], ready: &mut BinaryHeap<Ready>) {
    for &c in chunks {
        pending[c as usize] -= 1;
        if pending[c as usize] == 0 {
            ready.push(self::ready(schedule.chunks[c as usize].key, c));
        }
    }
}

/// What a stolen computation does after each piece.
enum Step {
    /// Goes on.
    Go,
    /// The band it computes arrived from the peer: stop computing it.
    Arrived,
    /// The inference stopped.
    Stop(Stopped),
}

/// Computes the rows `rows` of value `id` that `exec` does not hold, and first, recursively,
/// the rows of its inputs they need (from the graph inputs, which the robot holds whole),
/// calling `between` with each piece's compute time; stops early where it says so.
fn compute_rows(
    exec: &mut SideExec<'_>,
    id: NodeId,
    rows: &Rows,
    between: &mut dyn FnMut(&mut SideExec<'_>, NodeId, usize, Duration) -> Result<Step>,
) -> Result<Step> {
    for piece in exec.missing(id, rows) {
        for (input, need) in exec.needs(id, &piece) {
            if matches!(exec.graph().nodes[input].op, Op::Constant(_)) {
                continue;
            }
            match compute_rows(exec, input, &need, between)? {
                Step::Go => {}
                other => return Ok(other),
            }
        }
        // The piece may have arrived while its inputs were computed.
        if exec.missing(id, &piece).is_empty() {
            continue;
        }
        let t0 = Instant::now();
        exec.compute_and_store(id, &piece, 1).map_err(Error::Engine)?;
        match between(exec, id, piece.len(), t0.elapsed())? {
            Step::Go => {}
            other => return Ok(other),
        }
    }
    Ok(Step::Go)
}

/// Reference counts that free a value's rows on this side once every chunk reading it is done
/// and every transfer of it has left. Graph inputs and outputs are kept (the robot may have to
/// finish alone, and it returns the outputs).
pub(super) struct Uses {
    left: Vec<usize>,
    keep: Vec<bool>,
}

impl Uses {
    pub(super) fn new(graph: &Graph, schedule: &Schedule, side: Side) -> Uses {
        let mut left = vec![0usize; graph.nodes.len()];
        for (_, c) in schedule.side_chunks(side) {
            for &i in &graph.nodes[c.node].inputs {
                left[i] += 1;
            }
        }
        for t in &schedule.transfers {
            if t.from() == side {
                left[t.node] += 1;
            }
        }
        let mut keep: Vec<bool> = graph.nodes.iter().map(|n| matches!(n.op, lop::ops::Op::Input)).collect();
        for &o in &graph.outputs {
            keep[o] = true;
        }
        Uses { left, keep }
    }

    fn done_with(&mut self, exec: &mut SideExec<'_>, id: usize) {
        self.left[id] = self.left[id].saturating_sub(1);
        if self.left[id] == 0 && !self.keep[id] {
            exec.release(id);
        }
    }

    pub(super) fn computed(&mut self, exec: &mut SideExec<'_>, node: usize) {
        let inputs = exec.graph().nodes[node].inputs.clone();
        for i in inputs {
            self.done_with(exec, i);
        }
    }

    pub(super) fn sent(&mut self, exec: &mut SideExec<'_>, node: usize) {
        self.done_with(exec, node);
    }
}
