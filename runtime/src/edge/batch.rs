//! What a replica's worker thread runs (batching across robots, EPARA's multi-request
//! batching): the oldest inference waiting on the replica together with the others of its plan,
//! as one batch where the model has a batch axis, else one after the other.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::Instant;

use lop::exec::SideExec;
use lop::graph::Graph;
use lop::plan::Side;

use super::options::Batching;
use super::replica::{JOB_QUEUED, JOB_RUNNING, Waiting};
use crate::error::Error;
use crate::exec::{BatchConfig, GraphMeta, Incoming, Member, SideConfig, SideStats, Stopped, run_batch, run_side};
use crate::outbox::Outbox;
use crate::plans::Prepared;

/// Batches run so far (two inferences or more) and the inferences in them.
#[derive(Debug, Default)]
pub(super) struct BatchCounts {
    pub(super) batches: AtomicU64,
    pub(super) batched: AtomicU64,
}

/// Runs, on a replica's worker thread, the oldest waiting inference together with the others of
/// its plan (at most `batching.max`); inferences replaced before they started are skipped.
pub(super) fn run_waiting(graph: &mut Graph, waiting: &std::sync::Mutex<VecDeque<Waiting>>, batching: Batching, counts: &BatchCounts) {
    let jobs = started(take_group(waiting, batching.max));
    if jobs.len() > 1 {
        match SideExec::batched(graph, Side::Server, jobs.len()) {
            Ok(mut exec) => return run_together(&mut exec, jobs, batching, counts),
            // A model without a batch axis: its inferences run one after the other.
            Err(e) => tracing::debug!(error = %e, "inferences run one by one"),
        }
    }
    for j in jobs {
        run_alone(graph, j);
    }
}

/// Takes the oldest waiting inference and the others of its plan and input wire behind it (at
/// most `max` in all); none when nothing waits.
fn take_group(waiting: &std::sync::Mutex<VecDeque<Waiting>>, max: usize) -> Vec<Waiting> {
    let mut q = waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(first) = q.pop_front() else { return Vec::new() };
    let mut group = vec![first];
    let mut k = 0;
    while group.len() < max && k < q.len() {
        let same = q[k].plan.plan_hash == group[0].plan.plan_hash && q[k].config.input_wire == group[0].config.input_wire;
        match (same, same.then(|| q.remove(k)).flatten()) {
            (true, Some(w)) => group.push(w),
            _ => k += 1,
        }
    }
    group
}

/// The inferences of `group` that start now; one replaced by a newer inference of its session
/// before it started is answered at once (aborted, nothing to do).
fn started(group: Vec<Waiting>) -> Vec<Waiting> {
    let mut jobs = Vec::with_capacity(group.len());
    for w in group {
        if w.state.compare_exchange(JOB_QUEUED, JOB_RUNNING, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            jobs.push(w);
        } else {
            // Replaced by a newer inference of its session before it started: nothing to do.
            let _ = w.result.send(Ok((Stopped::Aborted("replaced before it started".into()), SideStats::default())));
        }
    }
    jobs
}

/// Runs `jobs` (two or more of one plan) as one batch on `exec`, counted in `counts`, and sends
/// each its outcome (its statistics with the batch's size), or every one the batch's error. A
/// member that leaves the batch early (a straggler, aborted, past its deadline) is answered as it
/// leaves, so its robot finishes the frame alone at once instead of when the batch ends.
fn run_together(exec: &mut SideExec<'_>, jobs: Vec<Waiting>, batching: Batching, counts: &BatchCounts) {
    counts.batches.fetch_add(1, Ordering::Relaxed);
    counts.batched.fetch_add(jobs.len() as u64, Ordering::Relaxed);
    let n = jobs.len() as u32;
    let (mut results, jobs): (Vec<_>, Vec<_>) = jobs.into_iter().map(Job::split).unzip();
    let mut sends: Vec<Box<dyn FnMut(Vec<u8>) -> bool>> = jobs
        .iter()
        .map(|j| {
            let (out, first_out, id) = (j.out.clone(), j.first_out.clone(), j.config.inference_id);
            Box::new(move |b: Vec<u8>| {
                first_out.get_or_init(Instant::now);
                out.send_band(id, b)
            }) as Box<dyn FnMut(Vec<u8>) -> bool>
        })
        .collect();
    let mut members: Vec<Member<'_>> = jobs
        .iter()
        .zip(sends.iter_mut())
        .map(|(j, send)| Member { config: j.config.clone(), incoming: &j.bands, send: send.as_mut() })
        .collect();
    let config = BatchConfig { straggler_wait: batching.straggler_wait };
    let mut left = |m: usize, stop: &Stopped, stats: &SideStats| {
        if let Some(result) = results[m].take() {
            let _ = result.send(Ok((stop.clone(), SideStats { batch: n, ..*stats })));
        }
    };
    let res = run_batch(exec, &jobs[0].meta, &jobs[0].plan.schedule, &mut members, &config, &mut left);
    drop(members);
    match res {
        Ok(outcomes) => {
            for (result, (stop, st)) in results.into_iter().zip(outcomes) {
                if let Some(result) = result {
                    let _ = result.send(Ok((stop, SideStats { batch: n, ..st })));
                }
            }
        }
        Err(e) => {
            let text = e.to_string();
            for result in results.into_iter().flatten() {
                let _ = result.send(Err(Error::Executor(text.clone())));
            }
        }
    }
}

/// What a batch member needs of its [`Waiting`] once its answer path is taken apart.
struct Job {
    plan: Arc<Prepared>,
    meta: Arc<GraphMeta>,
    config: SideConfig,
    bands: mpsc::Receiver<Incoming>,
    out: Outbox,
    first_out: Arc<OnceLock<Instant>>,
}

impl Job {
    /// Takes `w` apart: where its outcome goes, and the rest.
    fn split(w: Waiting) -> (Option<Answer>, Job) {
        let job = Job { plan: w.plan, meta: w.meta, config: w.config, bands: w.bands, out: w.out, first_out: w.first_out };
        (Some(w.result), job)
    }
}

/// Where an inference's outcome goes.
type Answer = tokio::sync::oneshot::Sender<crate::error::Result<(Stopped, SideStats)>>;

/// Runs one inference alone on the replica's model and sends its outcome.
fn run_alone(graph: &mut Graph, j: Waiting) {
    let mut exec = SideExec::new(graph, Side::Server);
    let (out, first_out, id) = (j.out.clone(), j.first_out.clone(), j.config.inference_id);
    let mut send = |b: Vec<u8>| {
        first_out.get_or_init(Instant::now);
        out.send_band(id, b)
    };
    let res = run_side(&mut exec, &j.meta, &j.plan.schedule, &j.config, &j.bands, &mut send).map(|(stop, mut st)| {
        st.batch = 1;
        (stop, st)
    });
    let _ = j.result.send(res);
}
