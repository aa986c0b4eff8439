//! The event loop: two compute resources (each a list scheduler under [`ChunkOrder::Wavefront`],
//! or strictly in op-major order under [`ChunkOrder::OpMajor`]) and two FIFO links.

use super::derive::Tasks;
use super::{ChunkOrder, Simulator, side_ix};
use crate::order::Earliest;
use std::collections::BinaryHeap;

/// A simulated plan: the task graph with every start and end filled in.
#[derive(Debug)]
pub(super) struct Run {
    pub t: Tasks,
    pub makespan: f64,
    /// Whether every chunk ran (false only for an inconsistent task graph).
    pub complete: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A side may compute again (the robot, once it has coded the frame).
    Free(usize),
    /// A coded input band is ready to leave.
    Release(u32),
    ComputeDone(u32),
    LinkDone(usize),
    Arrive(u32),
}

/// An event; the heap pops the earliest (ties: the first pushed, by sequence number).
type Event = Earliest<Kind>;

/// A transfer waiting for its link (the item: its id), ordered by readiness then id.
type Waiting = Earliest<u32>;

/// A chunk whose inputs are all available (the item: its task index), ordered by wavefront
/// key then task index.
type Ready = Earliest<u32>;

struct State<'a> {
    t: &'a mut Tasks,
    events: BinaryHeap<Event>,
    seq: u64,
    wavefront: bool,
    /// Per side: chunks started (under op-major, the next position in its sequence), the
    /// ready chunks (wavefront only), and whether a chunk is running.
    next: [usize; 2],
    ready: [BinaryHeap<Ready>; 2],
    busy: [bool; 2],
    /// Per link (0 up, 1 down): queue and whether it is sending.
    queue: [BinaryHeap<Waiting>; 2],
    link_busy: [bool; 2],
    overhead: f64,
    bandwidth: f64,
    latency: f64,
}

impl State<'_> {
    fn push(&mut self, time: f64, kind: Kind) {
        self.seq += 1;
        self.events.push(Event::new(time, self.seq, kind));
    }

    fn try_compute(&mut self, s: usize, now: f64) {
        if self.busy[s] {
            return;
        }
        let ti = if self.wavefront {
            let Some(r) = self.ready[s].pop() else { return };
            r.item
        } else {
            let Some(&ti) = self.t.seq[s].get(self.next[s]) else { return };
            if self.t.tasks[ti as usize].pending > 0 {
                return;
            }
            ti
        };
        self.next[s] += 1;
        let task = &mut self.t.tasks[ti as usize];
        task.start = now;
        task.end = now + task.dur;
        let end = task.end;
        self.busy[s] = true;
        self.push(end, Kind::ComputeDone(ti));
    }

    fn try_link(&mut self, l: usize, now: f64) {
        if self.link_busy[l] {
            return;
        }
        let Some(w) = self.queue[l].pop() else { return };
        let tr = &mut self.t.transfers[w.item as usize];
        tr.start = now;
        tr.end = now + self.overhead + tr.bytes as f64 / self.bandwidth;
        tr.arrive = tr.end + self.latency + tr.decode_s;
        let (end, arrive) = (tr.end, tr.arrive);
        self.link_busy[l] = true;
        self.push(end, Kind::LinkDone(l));
        self.push(arrive, Kind::Arrive(w.item));
    }

    /// One input of chunk `ti` became available.
    fn satisfy(&mut self, ti: u32) {
        let task = &mut self.t.tasks[ti as usize];
        task.pending -= 1;
        if task.pending == 0 && self.wavefront {
            let (s, key) = (side_ix(task.side), task.key);
            self.ready[s].push(Ready::new(key, u64::from(ti), ti));
        }
    }

    fn enqueue(&mut self, id: u32, ready: f64) {
        let l = if self.t.transfers[id as usize].up { 0 } else { 1 };
        self.queue[l].push(Waiting::new(ready, u64::from(id), id));
        self.try_link(l, ready);
    }
}

/// Runs the event loop over `t` and fills in every start, end and arrival.
pub(super) fn execute(sim: &Simulator<'_>, mut t: Tasks) -> Run {
    let link = sim.config.link;
    let mut st = State {
        t: &mut t,
        events: BinaryHeap::new(),
        seq: 0,
        wavefront: sim.config.order == ChunkOrder::Wavefront,
        next: [0, 0],
        ready: [BinaryHeap::new(), BinaryHeap::new()],
        busy: [false, false],
        queue: [BinaryHeap::new(), BinaryHeap::new()],
        link_busy: [false, false],
        overhead: link.overhead_s,
        bandwidth: link.bandwidth,
        latency: link.latency_s,
    };
    for id in 0..st.t.transfers.len() {
        if st.t.transfers[id].producer.is_none() {
            match st.t.transfers[id].release {
                r if r > 0.0 => st.push(r, Kind::Release(id as u32)),
                _ => st.enqueue(id as u32, 0.0),
            }
        }
    }
    // The robot codes the frame before it computes.
    if st.t.robot_free_at > 0.0 {
        st.busy[0] = true;
        let at = st.t.robot_free_at;
        st.push(at, Kind::Free(0));
    }
    if st.wavefront {
        for (ti, task) in st.t.tasks.iter().enumerate() {
            if task.pending == 0 {
                st.ready[side_ix(task.side)].push(Ready::new(task.key, ti as u64, ti as u32));
            }
        }
    }
    st.try_compute(0, 0.0);
    st.try_compute(1, 0.0);
    while let Some(ev) = st.events.pop() {
        let now = ev.key;
        match ev.item {
            Kind::Free(s) => st.busy[s] = false,
            Kind::Release(id) => st.enqueue(id, now),
            Kind::ComputeDone(ti) => {
                let s = side_ix(st.t.tasks[ti as usize].side);
                st.busy[s] = false;
                for k in 0..st.t.tasks[ti as usize].succ.len() {
                    let w = st.t.tasks[ti as usize].succ[k];
                    st.satisfy(w);
                }
                for k in 0..st.t.tasks[ti as usize].enables.len() {
                    let id = st.t.tasks[ti as usize].enables[k];
                    st.enqueue(id, now);
                }
            }
            Kind::LinkDone(l) => {
                st.link_busy[l] = false;
                st.try_link(l, now);
            }
            Kind::Arrive(id) => {
                for k in 0..st.t.transfers[id as usize].waiters.len() {
                    let w = st.t.transfers[id as usize].waiters[k];
                    st.satisfy(w);
                }
            }
        }
        // A free side picks its next chunk once every event of this instant is in, so that
        // the choice sees every chunk that became ready at `now`.
        if st.events.peek().is_none_or(|e| e.key > now) {
            st.try_compute(0, now);
            st.try_compute(1, now);
        }
    }
    let complete = st.next[0] == st.t.seq[0].len() && st.next[1] == st.t.seq[1].len();
    let mut makespan = 0.0f64;
    for &ti in &t.final_tasks {
        makespan = makespan.max(t.tasks[ti as usize].end);
    }
    for &tr in &t.final_transfers {
        makespan = makespan.max(t.transfers[tr as usize].arrive);
    }
    Run { t, makespan, complete }
}
