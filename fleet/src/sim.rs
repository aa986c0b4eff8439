//! The fleet simulator: many robots and many servers, discrete events over measured model
//! costs, one routing policy at a time on the same generated fleet.
//!
//! What it models, and what it leaves out:
//! - Every robot sends frames at a fixed rate with a deadline; its Wi-Fi bandwidth follows a
//!   trace (same to every server: the wireless hop dominates), from its own random offset.
//! - Every server computes one inference at a time, first come first served, at its speed
//!   factor; an offloaded inference is priced by [`offload_finish`]: the server pipelines the
//!   frame's bands as they arrive (DESIGN.md section 1).
//! - Servers report their queued seconds every `report_period_s` (the 10 Hz load message);
//!   a robot sees the last report, drained by the time since, plus its own sends after it. So
//!   every policy routes on the same stale knowledge, as a real robot would.
//! - What a robot hears ([`Hearing`]): every server's report, or the digests of its shards
//!   ([`crate::shard`]), which carry each report half a period later (the aggregator's mean phase)
//!   and only for the shard's servers; a robot routes over the servers it hears.
//! - A frame the policy keeps on the robot waits for the robot's previous ones.
//! - Results of a frequency-sensitive stream (30 fps cameras) are published in frame order: a
//!   frame waits for its predecessors unless it is late, in which case it is published flagged
//!   late and holds nobody. A frame counts towards goodput when it is published by its deadline.
//! - Not modelled: Wi-Fi contention between robots, batching, forwarding and model placement
//!   (every server holds every model warm).

use lop_core::order::Earliest;
use lop_core::{Error, ModelCost, Result, Rng, RobotPower};

use crate::offload::offload_finish;
use crate::route::{Choice, Policy, Router, ServerView};
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

/// A bandwidth trace as the simulator reads it: equally spaced samples, looped.
#[derive(Debug, Clone, PartialEq)]
pub struct BandwidthTrace {
    /// A name for reports.
    pub name: String,
    /// Seconds between samples.
    pub period_s: f64,
    /// Bytes per second, one per sample.
    pub bytes_per_s: Vec<f64>,
}

impl BandwidthTrace {
    /// A trace of `bytes_per_s` samples every `period_s`.
    ///
    /// # Errors
    /// [`Error::Input`] for no samples, a non-positive period, or a negative or non-finite rate.
    pub fn new(name: &str, period_s: f64, bytes_per_s: Vec<f64>) -> Result<BandwidthTrace> {
        if bytes_per_s.is_empty() || !(period_s.is_finite() && period_s > 0.0) {
            return Err(Error::Input(format!(
                "trace '{name}': needs samples and a positive period (got {} samples, {period_s} s)",
                bytes_per_s.len()
            )));
        }
        if let Some(bad) = bytes_per_s.iter().find(|v| !v.is_finite() || **v < 0.0) {
            return Err(Error::Input(format!("trace '{name}': rate {bad} must be finite and >= 0")));
        }
        Ok(BandwidthTrace { name: name.to_string(), period_s, bytes_per_s })
    }

    /// Bytes per second at time `t` (looped).
    pub fn rate(&self, t: f64) -> f64 {
        let k = (t.max(0.0) / self.period_s) as usize % self.bytes_per_s.len();
        self.bytes_per_s[k]
    }

    /// The mean rate.
    pub fn mean(&self) -> f64 {
        self.bytes_per_s.iter().sum::<f64>() / self.bytes_per_s.len() as f64
    }

    /// The trace's length, seconds.
    pub fn duration_s(&self) -> f64 {
        self.period_s * self.bytes_per_s.len() as f64
    }
}

/// The fleet to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetSpec {
    /// Robots.
    pub robots: usize,
    /// Servers.
    pub servers: usize,
    /// Offered load as a fraction of the fleet's aggregate server capacity.
    pub load: f64,
    /// Simulated seconds.
    pub seconds: f64,
    /// Seed of everything drawn.
    pub seed: u64,
    /// One-way latency robot to server, seconds.
    pub latency_s: f64,
    /// Seconds between a server's load reports.
    pub report_period_s: f64,
    /// The robots' power figures (for their energy).
    pub power: RobotPower,
    /// What each robot hears of the servers' load.
    pub hearing: Hearing,
}

/// What each robot hears of the servers' load reports.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Hearing {
    /// Every server's report, as it is published (the runtime's `direct` view: small sites).
    Every,
    /// The site's aggregate: servers in capacity-balanced shards of at most `shard_size`
    /// ([`crate::shard::partition`]); each robot hears the digests of `shards` of them
    /// ([`crate::shard::robot_shards`]), one message per shard and digest period, and routes
    /// over their servers only. A digest carries each server's last report, made half a report
    /// period before on average (servers and aggregator tick at unrelated phases).
    Site {
        /// Servers per shard, at most.
        shard_size: usize,
        /// Shards each robot hears.
        shards: usize,
        /// Seconds between the aggregator's digests.
        digest_period_s: f64,
    },
}

impl Hearing {
    /// Load messages each robot receives per second, with `servers` servers reporting every
    /// `period_s` (and under [`Hearing::Site`], the aggregator's digest period).
    pub fn messages_per_robot_s(self, servers: usize, period_s: f64) -> f64 {
        match self {
            Hearing::Every => servers as f64 / period_s,
            Hearing::Site { shard_size, shards, digest_period_s } => {
                shards.min(servers.div_ceil(shard_size.max(1)).max(1)) as f64 / digest_period_s
            }
        }
    }
}

impl Default for FleetSpec {
    fn default() -> Self {
        FleetSpec {
            robots: 100,
            servers: 10,
            load: 0.8,
            seconds: 60.0,
            seed: 1,
            latency_s: 0.002,
            report_period_s: 0.1,
            power: RobotPower::default(),
            hearing: Hearing::Every,
        }
    }
}

/// One generated robot.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RobotSpec {
    /// Index into the fleet's models.
    pub model: usize,
    /// Frames per second.
    pub fps: f64,
    /// Seconds from a frame's capture to its deadline.
    pub deadline_s: f64,
    /// Whether results are published in frame order (a camera stream).
    pub frequency_sensitive: bool,
    /// Index into the fleet's traces.
    pub trace: usize,
    /// Where in its trace the robot starts, seconds.
    pub trace_offset_s: f64,
    /// The first frame's time, seconds.
    pub phase_s: f64,
    /// The nearest server (static assignment).
    pub home: usize,
}

/// Frame rates drawn for robots, and which are frequency-sensitive streams.
const RATES: [(f64, bool); 3] = [(10.0, false), (15.0, false), (30.0, true)];
/// Deadlines as multiples of the model's uncontended latency on the fastest server at the mean
/// bandwidth of the robot's trace.
const SLACKS: [f64; 3] = [2.0, 3.0, 4.0];
/// Server speed classes (relative; the whole fleet is then scaled to the offered load), drawn
/// with weights 2:1:1.
const SPEEDS: [f64; 4] = [1.0, 1.0, 0.5, 0.25];

/// A generated fleet, ready to simulate under any policy.
#[derive(Debug, Clone)]
pub struct Fleet {
    spec: FleetSpec,
    models: Vec<ModelCost>,
    traces: Vec<BandwidthTrace>,
    robots: Vec<RobotSpec>,
    speeds: Vec<f64>,
    /// The servers each robot hears, ascending (every server under [`Hearing::Every`]).
    heard: Heard,
}

/// The servers each robot hears.
#[derive(Debug, Clone)]
enum Heard {
    Every(Vec<u32>),
    Shards(Vec<Vec<u32>>),
}

impl Heard {
    fn of(&self, robot: usize) -> &[u32] {
        match self {
            Heard::Every(all) => all,
            Heard::Shards(per_robot) => &per_robot[robot],
        }
    }
}

/// What one policy achieved.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PolicyReport {
    /// Frames per second published by their deadline.
    pub goodput: f64,
    /// Frames per second the robots produced.
    pub offered: f64,
    /// Goodput over offered.
    pub goodput_ratio: f64,
    /// 99th percentile of capture-to-publication latency, milliseconds.
    pub p99_ms: f64,
    /// Every robot's energy over the run (power model), joules.
    pub robot_energy_j: f64,
    /// 99th percentile of the routing decision's wall time, microseconds.
    pub decision_p99_us: f64,
    /// Frames routed.
    pub frames: usize,
    /// Frames the policy kept on the robot.
    pub robot_only_frames: usize,
    /// Frames published after their deadline.
    pub late_frames: usize,
}

impl Fleet {
    /// Draws robots (model, rate, deadline, trace) and servers (speed) from `spec.seed`, and
    /// scales server speeds so that the robots' frames are `spec.load` of the aggregate
    /// capacity.
    ///
    /// # Errors
    /// [`Error::Input`] for no robots, servers, models or traces, a bad model cost, or a load,
    /// duration or latency out of range.
    pub fn generate(spec: FleetSpec, models: Vec<ModelCost>, traces: Vec<BandwidthTrace>) -> Result<Fleet> {
        if spec.robots == 0 || spec.servers == 0 || models.is_empty() || traces.is_empty() {
            return Err(Error::Input("a fleet needs robots, servers, model costs and bandwidth traces".into()));
        }
        if !(spec.load.is_finite() && spec.load > 0.0) {
            return Err(Error::Input(format!("load {} must be > 0 (a fraction of the aggregate capacity)", spec.load)));
        }
        if !(spec.seconds.is_finite() && spec.seconds > 0.0 && spec.seconds <= 86_400.0) {
            return Err(Error::Input(format!("seconds {} must be in (0, 86400]", spec.seconds)));
        }
        if !(spec.latency_s.is_finite() && spec.latency_s >= 0.0 && spec.report_period_s.is_finite() && spec.report_period_s > 0.0) {
            return Err(Error::Input("latency must be >= 0 and the report period > 0".into()));
        }
        if let Hearing::Site { shard_size, shards, digest_period_s } = spec.hearing
            && (shard_size == 0 || shards == 0 || !(digest_period_s.is_finite() && digest_period_s > 0.0))
        {
            return Err(Error::Input(format!(
                "site hearing needs a shard size and shards heard >= 1 and a digest period > 0 (got {shard_size}, {shards}, {digest_period_s} s)"
            )));
        }
        for m in &models {
            m.check()?;
        }
        let mut rng = Rng::new(spec.seed);
        let mut speeds: Vec<f64> = (0..spec.servers).map(|_| SPEEDS[rng.below(SPEEDS.len())]).collect();
        let mut robots: Vec<RobotSpec> = (0..spec.robots)
            .map(|i| {
                let (fps, frequency_sensitive) = RATES[rng.below(RATES.len())];
                let trace = i % traces.len();
                RobotSpec {
                    model: rng.below(models.len()),
                    fps,
                    deadline_s: SLACKS[rng.below(SLACKS.len())],
                    frequency_sensitive,
                    trace,
                    trace_offset_s: rng.unit() * traces[trace].duration_s(),
                    phase_s: rng.unit() / fps,
                    home: i % spec.servers,
                }
            })
            .collect();
        // Capacity: servers' speeds over the robots' mean work per frame.
        let offered: f64 = robots.iter().map(|r| r.fps).sum();
        let work: f64 = robots.iter().map(|r| r.fps * models[r.model].server_s).sum::<f64>() / offered;
        let scale = offered * work / (spec.load * speeds.iter().sum::<f64>());
        for s in &mut speeds {
            *s *= scale;
        }
        let fastest = speeds.iter().copied().fold(0.0, f64::max);
        for r in &mut robots {
            let m = &models[r.model];
            let bw = traces[r.trace].mean();
            let (back, _) = offload_finish(m, 0.0, 0.0, fastest, bw, spec.latency_s);
            r.deadline_s *= back;
        }
        let heard = match spec.hearing {
            Hearing::Every => Heard::Every((0..spec.servers as u32).collect()),
            Hearing::Site { shard_size, shards, .. } => {
                let parts = crate::shard::partition(&speeds, shard_size);
                let per_robot = (0..robots.len())
                    .map(|i| {
                        let mut list: Vec<u32> =
                            crate::shard::robot_shards(crate::shard::robot_hash(&format!("robot-{i}")), parts.len(), shards)
                                .into_iter()
                                .flat_map(|s| parts[s].iter().map(|&j| j as u32))
                                .collect();
                        list.sort_unstable();
                        list
                    })
                    .collect();
                Heard::Shards(per_robot)
            }
        };
        // A robot's home (static assignment's server) is one it hears.
        if let Heard::Shards(per_robot) = &heard {
            for (i, (r, list)) in robots.iter_mut().zip(per_robot).enumerate() {
                r.home = list[i % list.len()] as usize;
            }
        }
        Ok(Fleet { spec, models, traces, robots, speeds, heard })
    }

    /// The generated robots.
    pub fn robots(&self) -> &[RobotSpec] {
        &self.robots
    }

    /// The servers' speeds after scaling.
    pub fn speeds(&self) -> &[f64] {
        &self.speeds
    }

    /// Frames per second the robots produce.
    pub fn offered(&self) -> f64 {
        self.robots.iter().map(|r| r.fps).sum()
    }

    /// The frames no policy can serve in time, as a goodput ceiling (frames per second): a frame
    /// counts when the fastest server, idle, or the robot, idle, would have it back by its
    /// deadline.
    pub fn attainable(&self) -> f64 {
        let fastest = self.speeds.iter().copied().fold(0.0, f64::max);
        let mut ok = 0usize;
        self.for_each_frame(|_, r, t| {
            let m = &self.models[r.model];
            let bw = self.traces[r.trace].rate(t + r.trace_offset_s);
            let (back, _) = offload_finish(m, t, t, fastest, bw, self.spec.latency_s);
            if back.min(t + m.robot_s) <= t + r.deadline_s {
                ok += 1;
            }
        });
        ok as f64 / self.spec.seconds
    }

    /// Calls `f(robot index, robot, capture time)` for every frame in time order.
    fn for_each_frame(&self, mut f: impl FnMut(usize, &RobotSpec, f64)) {
        // One entry per robot: its next frame's number, popped earliest first (ties: the
        // lower robot index).
        let mut heap: BinaryHeap<Earliest<u64>> = BinaryHeap::with_capacity(self.robots.len());
        let time = |r: &RobotSpec, k: u64| r.phase_s + k as f64 / r.fps;
        for (i, r) in self.robots.iter().enumerate() {
            if time(r, 0) < self.spec.seconds {
                heap.push(Earliest::new(time(r, 0), i as u64, 0));
            }
        }
        while let Some(Earliest { key: t, tie, item: k }) = heap.pop() {
            let i = tie as usize;
            let r = &self.robots[i];
            f(i, r, t);
            let next = time(r, k + 1);
            if next < self.spec.seconds {
                heap.push(Earliest::new(next, tie, k + 1));
            }
        }
    }

    /// Load messages each robot receives per second (see [`Hearing`]).
    pub fn messages_per_robot_s(&self) -> f64 {
        self.spec.hearing.messages_per_robot_s(self.speeds.len(), self.spec.report_period_s)
    }

    /// Servers each robot hears, on average.
    pub fn servers_heard(&self) -> f64 {
        (0..self.robots.len()).map(|i| self.heard.of(i).len()).sum::<usize>() as f64 / self.robots.len().max(1) as f64
    }

    /// Simulates the fleet under `policy`.
    pub fn run(&self, policy: Policy) -> PolicyReport {
        let mut run = PolicyRun::new(self, policy);
        self.for_each_frame(|i, r, t| run.frame(i, r, t));
        run.report()
    }
}

/// The load reports the robots see: queued seconds at `seen_t` (snapshot number `seen_ix`),
/// taken every `tick` and heard `lag` later. Direct: every report, as it is made. Site: a
/// digest every digest period, of reports made half a report period before on average.
struct Reports {
    tick: f64,
    lag: f64,
    /// When the next snapshot is taken.
    next_t: f64,
    /// Snapshots taken so far.
    taken: u32,
    /// Snapshots taken and not yet heard (digests on their way), oldest first.
    on_the_way: VecDeque<(f64, u32, Vec<f64>)>,
    seen: Vec<f64>,
    seen_t: f64,
    seen_ix: u32,
}

impl Reports {
    fn new(spec: &FleetSpec, servers: usize) -> Reports {
        let (tick, lag) = match spec.hearing {
            Hearing::Every => (spec.report_period_s, 0.0),
            Hearing::Site { digest_period_s, .. } => (digest_period_s, spec.report_period_s / 2.0),
        };
        Reports { tick, lag, next_t: tick, taken: 0, on_the_way: VecDeque::new(), seen: vec![0.0; servers], seen_t: 0.0, seen_ix: 0 }
    }

    /// Takes the snapshots of the servers' queues (`free_at`) due by `t`, and hears those
    /// whose lag has passed by then.
    fn hear_by(&mut self, free_at: &[f64], t: f64) {
        while self.next_t <= t {
            let snapshot: Vec<f64> = free_at.iter().map(|f| (f - self.next_t).max(0.0)).collect();
            self.taken += 1;
            self.on_the_way.push_back((self.next_t, self.taken, snapshot));
            self.next_t += self.tick;
        }
        while self.on_the_way.front().is_some_and(|(at, _, _)| at + self.lag <= t) {
            if let Some((at, ix, v)) = self.on_the_way.pop_front() {
                (self.seen, self.seen_t, self.seen_ix) = (v, at, ix);
            }
        }
    }
}

/// One policy's simulation of a fleet, frame by frame ([`Fleet::run`]).
struct PolicyRun<'a> {
    fleet: &'a Fleet,
    rng: Rng,
    /// Where each robot's slots start in the per-(robot, heard server) arrays; routers index
    /// the servers a robot hears.
    offsets: Vec<usize>,
    routers: Vec<Router>,
    /// When each server is done with its queue.
    free_at: Vec<f64>,
    reports: Reports,
    /// Each robot's own sends since the report it sees (snapshot `own_ix`), per heard server.
    own: Vec<f64>,
    own_ix: Vec<u32>,
    robot_free: Vec<f64>,
    last_published: Vec<f64>,
    latencies: Vec<f32>,
    decisions: Vec<f32>,
    views: Vec<ServerView>,
    good: usize,
    robot_only: usize,
    late: usize,
    frames: usize,
    energy: f64,
}

impl<'a> PolicyRun<'a> {
    fn new(fleet: &'a Fleet, policy: Policy) -> PolicyRun<'a> {
        let (spec, robots, n_s) = (&fleet.spec, fleet.robots.len(), fleet.speeds.len());
        let mut offsets = Vec::with_capacity(robots + 1);
        offsets.push(0usize);
        for i in 0..robots {
            offsets.push(offsets[i] + fleet.heard.of(i).len());
        }
        let routers = (fleet.robots.iter().enumerate())
            .map(|(i, r)| Router::new(policy, fleet.heard.of(i).iter().position(|&j| j as usize == r.home).unwrap_or(0)))
            .collect();
        let slots = offsets[robots];
        PolicyRun {
            fleet,
            rng: Rng::new(spec.seed ^ 0x5eed_f1ee7 ^ ((policy as u64 + 1) * 0x9e37_79b9)),
            offsets,
            routers,
            free_at: vec![0.0; n_s],
            reports: Reports::new(spec, n_s),
            own: vec![0.0; slots],
            own_ix: vec![u32::MAX; slots],
            robot_free: vec![0.0; robots],
            last_published: vec![0.0; robots],
            latencies: Vec::new(),
            decisions: Vec::new(),
            views: Vec::with_capacity(n_s),
            good: 0,
            robot_only: 0,
            late: 0,
            frames: 0,
            energy: spec.power.idle_w * spec.seconds * robots as f64,
        }
    }

    /// Routes, serves and publishes robot `i`'s frame captured at `t`.
    fn frame(&mut self, i: usize, r: &RobotSpec, t: f64) {
        self.reports.hear_by(&self.free_at, t);
        let f = self.fleet;
        let m = &f.models[r.model];
        let bw = f.traces[r.trace].rate(t + r.trace_offset_s);
        let deadline = t + r.deadline_s;
        let started = Instant::now();
        self.see(i, bw, t);
        let robot_back = self.robot_free[i].max(t) + m.robot_s;
        let choice = self.routers[i].choose(m, t, deadline, robot_back, &self.views, &mut self.rng);
        self.decisions.push(started.elapsed().as_secs_f32() * 1e6);
        let back = self.apply(i, choice, m, t, bw, robot_back);
        self.frames += 1;
        self.publish(i, r, t, deadline, back);
    }

    /// Fills `views` with the servers robot `i` hears as it sees them at `t`: the last report
    /// drained by the time since, plus its own sends after it.
    fn see(&mut self, i: usize, bw: f64, t: f64) {
        let f = self.fleet;
        self.views.clear();
        let since = t - self.reports.seen_t;
        let base = self.offsets[i];
        for (k, &j) in f.heard.of(i).iter().enumerate() {
            let j = j as usize;
            let slot = base + k;
            let mine = if self.own_ix[slot] == self.reports.seen_ix { self.own[slot] } else { 0.0 };
            self.views.push(ServerView {
                queued_s: (self.reports.seen[j] - since).max(0.0) + mine,
                speed: f.speeds[j],
                bytes_per_s: bw,
                latency_s: f.spec.latency_s,
                warm: true,
            });
        }
    }

    /// Serves robot `i`'s frame where `choice` says; returns when its result is back.
    fn apply(&mut self, i: usize, choice: Choice, m: &ModelCost, t: f64, bw: f64, robot_back: f64) -> f64 {
        let (f, power) = (self.fleet, self.fleet.spec.power);
        match choice {
            Choice::Server(k) => {
                let j = f.heard.of(i)[k] as usize;
                let (back, done) = offload_finish(m, t, self.free_at[j], f.speeds[j], bw, f.spec.latency_s);
                self.free_at[j] = done;
                let slot = self.offsets[i] + k;
                if self.own_ix[slot] != self.reports.seen_ix {
                    self.own_ix[slot] = self.reports.seen_ix;
                    self.own[slot] = 0.0;
                }
                self.own[slot] += m.server_s / f.speeds[j];
                self.energy += (power.transmitting_w - power.idle_w) * m.upload_s(bw);
                back
            }
            Choice::Robot => {
                self.robot_only += 1;
                self.robot_free[i] = robot_back;
                self.energy += (power.computing_w - power.idle_w) * m.robot_s;
                robot_back
            }
        }
    }

    /// Publishes robot `i`'s result of the frame captured at `t`, back at `back`, in frame
    /// order for a frequency-sensitive stream, and counts it.
    fn publish(&mut self, i: usize, r: &RobotSpec, t: f64, deadline: f64, back: f64) {
        let publish = if r.frequency_sensitive { back.max(self.last_published[i]) } else { back };
        if publish <= deadline {
            self.good += 1;
            if r.frequency_sensitive {
                self.last_published[i] = publish;
            }
            self.latencies.push(((publish - t) * 1e3) as f32);
        } else {
            self.late += 1;
            self.latencies.push(((back - t) * 1e3) as f32);
        }
    }

    fn report(mut self) -> PolicyReport {
        let seconds = self.fleet.spec.seconds;
        let (good, frames) = (self.good, self.frames);
        PolicyReport {
            goodput: good as f64 / seconds,
            offered: frames as f64 / seconds,
            goodput_ratio: if frames > 0 { good as f64 / frames as f64 } else { 0.0 },
            p99_ms: percentile(&mut self.latencies, 0.99),
            robot_energy_j: self.energy,
            decision_p99_us: percentile(&mut self.decisions, 0.99),
            frames,
            robot_only_frames: self.robot_only,
            late_frames: self.late,
        }
    }
}

/// The `q` quantile (nearest rank) of `v`, reordering it; 0 for an empty slice.
fn percentile(v: &mut [f32], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let k = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    let (_, x, _) = v.select_nth_unstable_by(k, f32::total_cmp);
    f64::from(*x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn models() -> Vec<ModelCost> {
        vec![
            ModelCost { name: "small".into(), input_bytes: 150_528.0, output_bytes: 4_000.0, server_s: 0.004, tail_s: 0.001, robot_s: 0.6 },
            ModelCost { name: "det".into(), input_bytes: 1_228_800.0, output_bytes: 8_000.0, server_s: 0.012, tail_s: 0.003, robot_s: 2.0 },
        ]
    }

    fn traces() -> Vec<BandwidthTrace> {
        let wavy: Vec<f64> = (0..600).map(|k| 1e7 * (1.0 + 0.5 * (k as f64 * 0.1).sin())).collect();
        vec![BandwidthTrace::new("flat", 0.5, vec![1.2e7]).expect("flat"), BandwidthTrace::new("wavy", 0.5, wavy).expect("wavy")]
    }

    fn fleet(load: f64) -> Fleet {
        let spec = FleetSpec { robots: 60, servers: 6, load, seconds: 20.0, seed: 9, ..FleetSpec::default() };
        Fleet::generate(spec, models(), traces()).expect("fleet")
    }

    #[test]
    fn capacity_is_scaled_to_the_offered_load() {
        let f = fleet(0.5);
        let work: f64 = f.robots().iter().map(|r| r.fps * models()[r.model].server_s).sum();
        let capacity: f64 = f.speeds().iter().sum();
        // Work seconds per second over the servers' aggregate speed is the load.
        assert!((work / capacity - 0.5).abs() < 1e-9, "{}", work / capacity);
        let f2 = fleet(0.5);
        assert_eq!(f.robots(), f2.robots(), "the same seed draws the same fleet");
    }

    #[test]
    fn every_frame_is_routed_once_and_counted_once() {
        let f = fleet(0.9);
        let expected: usize = f.robots().iter().map(|r| ((20.0 - r.phase_s) * r.fps).ceil() as usize).sum();
        for p in Policy::ALL {
            let rep = f.run(p);
            assert_eq!(rep.frames, expected, "{p:?}");
            let good = (rep.goodput * 20.0).round() as usize;
            assert_eq!(good + rep.late_frames, rep.frames, "{p:?}");
            assert!(rep.goodput <= f.attainable() + 1e-9, "{p:?}: goodput above the ceiling");
        }
    }

    #[test]
    fn ours_serves_light_load_fully_and_beats_static_assignment_near_capacity() {
        let light = fleet(0.5).run(Policy::Lop);
        assert!(light.goodput_ratio > 0.99, "{light:?}");
        let f = fleet(0.9);
        let ours = f.run(Policy::Lop);
        let nearest = f.run(Policy::Nearest);
        assert!(ours.goodput > 1.2 * nearest.goodput, "lop {ours:?} vs nearest {nearest:?}");
        // Nearest sends everything to its home server, even a slow one.
        assert_eq!(nearest.robot_only_frames, 0);
    }

    #[test]
    fn bad_specs_are_refused() {
        let bad = |spec: FleetSpec| Fleet::generate(spec, models(), traces()).expect_err("refused").to_string();
        assert!(bad(FleetSpec { load: 0.0, ..FleetSpec::default() }).contains("load"));
        assert!(bad(FleetSpec { servers: 0, ..FleetSpec::default() }).contains("servers"));
        assert!(bad(FleetSpec { seconds: f64::NAN, ..FleetSpec::default() }).contains("seconds"));
        assert!(BandwidthTrace::new("x", 0.5, vec![]).is_err());
        assert!(BandwidthTrace::new("x", 0.5, vec![-1.0]).is_err());
    }
}
