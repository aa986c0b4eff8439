//! An admitted inference from its queueing to its answer: queued by its session, which keeps its
//! view of it ([`Active`], which its bands go to), and its task ([`Job`]), which sends it to its
//! replica with its first band, waits for its outcome, gives back its place in the replica's count,
//! records it (busy time, the model's server seconds, the [`Served`] report) and answers Done or
//! Error.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use lop::graph::Graph;
use lop::plan::Side;
use lop_msgs::Frame;
use lop_msgs::protocol::{Done, DoneStats, ErrorCode, ErrorFrame, Start};
use tch::Device;
use tokio::sync::oneshot;

use super::admission::Admitted;
use super::batch::run_waiting;
use super::model::SERVER_S_EWMA;
use super::replica::{JOB_QUEUED, JOB_RELEASED, Replica, Waiting};
use super::served::{Served, ServedOutcome};
use super::session::{Active, Session};
use super::state::Inner;
use crate::error::{Error, Result};
use crate::exec::{SideConfig, SideStats, Stopped, Stretch};
use crate::outbox::Outbox;

/// What ended the server part of an inference: the replica's outcome, or (`Err`) a replica
/// that dropped the inference without one.
type JobResult = std::result::Result<Result<(Stopped, SideStats)>, oneshot::error::RecvError>;

/// A queued inference's task: what it needs once its Start is handled, until it ends.
struct Job {
    svc: Arc<Inner>,
    out: Outbox,
    /// The inference's id.
    id: u64,
    /// The model's index.
    mi: usize,
    /// [`JOB_QUEUED`], [`JOB_RUNNING`](super::replica::JOB_RUNNING) or [`JOB_RELEASED`] (shared
    /// with its [`Active`]).
    state: Arc<AtomicU8>,
    replicas: Arc<Vec<Replica>>,
    replica: usize,
    robot_id: String,
    started: Instant,
    started_wall: std::time::SystemTime,
    /// The upload as this edge saw it (set by the session's bands), for Done.
    upload_ns: Arc<AtomicU64>,
    /// When its first result band went out (set on the replica's thread).
    first_out: Arc<std::sync::OnceLock<Instant>>,
    deadline: Instant,
}

impl Job {
    /// Waits for the inference's first band (or its end), runs it on the replica, then gives
    /// back its place in the replica's count, records it (busy time, the model's server
    /// seconds, [`EdgeService::served`](super::EdgeService::served)) and answers Done or Error.
    async fn run(self, first_band: oneshot::Receiver<()>, waiting: Waiting, finished: oneshot::Receiver<Result<(Stopped, SideStats)>>) {
        let res = match tokio::time::timeout_at(tokio::time::Instant::from_std(self.deadline), first_band).await {
            Ok(Ok(())) => self.on_replica(waiting, finished).await,
            // Replaced, or its session ended, or its deadline passed, before any band came.
            why => self.released(why.is_err()),
        };
        let ended = Instant::now();
        if self.state.load(Ordering::SeqCst) != JOB_RELEASED {
            self.replicas[self.replica].queued.fetch_sub(1, Ordering::Relaxed);
        }
        let (stats, outcome) = outcome_of(&res);
        self.record(stats, &outcome);
        let served = self.served(ended, stats, outcome);
        if let Ok(b) = self.answer(res).encode() {
            self.out.send(b);
        }
        // No receiver is not an error: nobody asked.
        let _ = self.svc.served.send(served);
    }

    /// Adds the inference's compute time to the edge's busy time and, when it is done, to the
    /// model's mean server seconds.
    fn record(&self, stats: Option<SideStats>, outcome: &ServedOutcome) {
        if let Some(st) = stats.filter(|st| st.compute_s.is_finite() && st.compute_s > 0.0) {
            self.svc.busy_ns.fetch_add((st.compute_s * 1e9) as u64, Ordering::Relaxed);
            if *outcome == ServedOutcome::Done {
                // In the first device's seconds: a faster device's inference counts for more.
                let speed = self.replicas.get(self.replica).and_then(|r| self.svc.opts.devices.get(r.device)).map_or(1.0, |d| d.speed);
                let cell = &self.svc.models[self.mi].server_s;
                let old = f64::from_bits(cell.load(Ordering::Relaxed));
                cell.store((old + SERVER_S_EWMA * (st.compute_s * speed - old)).to_bits(), Ordering::Relaxed);
            }
        }
    }

    /// The report of the inference, ended at `ended` with the side's statistics (`None` when it
    /// failed before reporting) and `outcome`.
    fn served(&self, ended: Instant, stats: Option<SideStats>, outcome: ServedOutcome) -> Served {
        Served {
            inference_id: self.id,
            robot_id: self.robot_id.clone(),
            model_id: self.svc.models[self.mi].id.clone(),
            replica: self.replica,
            start: self.started,
            end: ended,
            start_wall: self.started_wall,
            server_compute_s: stats.map_or(0.0, |s| s.compute_s),
            bytes_received: stats.map_or(0, |s| s.bytes_received),
            bytes_sent: stats.map_or(0, |s| s.bytes_sent),
            upload_s: self.upload_ns.load(Ordering::Relaxed) as f64 * 1e-9,
            queue_s: stats.map_or(0.0, |s| (ended.saturating_duration_since(self.started).as_secs_f64() - s.compute_s - s.wait_s).max(0.0)),
            batch: stats.map_or(0, |s| s.batch),
            download_s: self.first_out.get().map_or(0.0, |f| ended.saturating_duration_since(*f).as_secs_f64()),
            device: stats
                .and_then(|_| self.replicas.get(self.replica))
                .and_then(|r| self.svc.opts.devices.get(r.device))
                .map(|d| d.name.clone())
                .unwrap_or_default(),
            outcome,
        }
    }

    /// Puts the inference in its replica's queue, posts a run for it, and waits for its outcome.
    async fn on_replica(&self, waiting: Waiting, finished: oneshot::Receiver<Result<(Stopped, SideStats)>>) -> JobResult {
        let replica = &self.replicas[self.replica];
        replica.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push_back(waiting);
        let (queue, batching, counts) = (replica.waiting.clone(), self.svc.opts.batching, self.svc.batch_counts.clone());
        // Each waiting inference posts one run; a run finds the queue empty when an
        // earlier one took its inference into a batch. The outcome comes on `finished`.
        drop(replica.worker.run(move |g: &mut Graph| run_waiting(g, &queue, batching, &counts)));
        finished.await
    }

    /// The outcome of an inference that ended before any band came (`expired`: its deadline
    /// passed); its place in the replica's count is given back unless that was done already.
    fn released(&self, expired: bool) -> JobResult {
        if self.state.compare_exchange(JOB_QUEUED, JOB_RELEASED, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            self.replicas[self.replica].queued.fetch_sub(1, Ordering::Relaxed);
        }
        let stop = if expired { Stopped::DeadlineExceeded } else { Stopped::Aborted("no band before it ended".into()) };
        Ok(Ok((stop, SideStats::default())))
    }

    /// The answer to the robot (Done with the server's statistics, or Error), counted as done
    /// or aborted.
    fn answer(&self, res: JobResult) -> Frame {
        let (svc, id) = (&self.svc, self.id);
        match res {
            Ok(Ok((Stopped::Finished, st))) => {
                svc.done.fetch_add(1, Ordering::Relaxed);
                Frame::Done(Done {
                    inference_id: id,
                    stats: DoneStats {
                        server_compute_ns: (st.compute_s * 1e9) as u64,
                        server_wait_ns: (st.wait_s * 1e9) as u64,
                        bytes_received: st.bytes_received,
                        bytes_sent: st.bytes_sent,
                        bands_received: st.bands_received,
                        bands_sent: st.bands_sent,
                        upload_ns: self.upload_ns.load(Ordering::Relaxed),
                    },
                })
            }
            Ok(Ok((stop, _))) => {
                svc.aborted.fetch_add(1, Ordering::Relaxed);
                let code = if stop == Stopped::DeadlineExceeded { ErrorCode::DeadlineExceeded } else { ErrorCode::Other };
                Frame::Error(ErrorFrame { inference_id: id, code, text: format!("{stop:?}").chars().take(200).collect() })
            }
            Ok(Err(Error::InputMismatch(why))) => {
                svc.aborted.fetch_add(1, Ordering::Relaxed);
                svc.input_mismatches.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(inference = id, %why, "refused a coded input band");
                Frame::Error(ErrorFrame { inference_id: id, code: ErrorCode::InputMismatch, text: why.chars().take(200).collect() })
            }
            Ok(Err(e)) => {
                svc.aborted.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "server side failed");
                Frame::Error(ErrorFrame { inference_id: id, code: ErrorCode::Internal, text: e.to_string().chars().take(200).collect() })
            }
            Err(_) => {
                svc.aborted.fetch_add(1, Ordering::Relaxed);
                Frame::Error(ErrorFrame { inference_id: id, code: ErrorCode::Internal, text: "the replica failed".into() })
            }
        }
    }
}

/// The server side's statistics (none when it failed before reporting) and how it ended.
fn outcome_of(res: &JobResult) -> (Option<SideStats>, ServedOutcome) {
    match res {
        Ok(Ok((Stopped::Finished, st))) => (Some(*st), ServedOutcome::Done),
        Ok(Ok((Stopped::DeadlineExceeded, st))) => (Some(*st), ServedOutcome::DeadlineExceeded),
        Ok(Ok((Stopped::Aborted(why), st))) => (Some(*st), ServedOutcome::Aborted(why.clone())),
        Ok(Err(e)) => (None, ServedOutcome::Failed(e.to_string())),
        Err(_) => (None, ServedOutcome::Failed("the replica failed".into())),
    }
}

impl Session {
    /// Queues an admitted inference on its replica: counted, its job spawned ([`Job::run`]),
    /// and it becomes the session's current inference, which the bands go to.
    pub(super) fn queue(&mut self, s: &Start, mi: usize, admitted: Admitted) {
        let Admitted { plan, replicas, replica: replica_ix } = admitted;
        self.svc.inferences.fetch_add(1, Ordering::Relaxed);
        replicas[replica_ix].queued.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(AtomicU8::new(JOB_QUEUED));
        let (bands, band_rx) = mpsc::channel();
        let deadline = Instant::now() + Duration::from_nanos(s.deadline_ns.max(1));
        let config = self.side_config(s, replicas[replica_ix].device, deadline);
        let (result, finished) = oneshot::channel();
        let first_out = Arc::new(std::sync::OnceLock::new());
        let waiting = Waiting {
            plan: plan.clone(),
            meta: self.svc.models[mi].meta.clone(),
            config,
            bands: band_rx,
            out: self.out.clone(),
            state: state.clone(),
            result,
            first_out: first_out.clone(),
        };
        // The job goes to the replica with the inference's first band: a Start alone (a robot
        // that never sends, or a flood of Starts) holds no replica.
        let (go, first_band) = oneshot::channel::<()>();
        let job = Job {
            svc: self.svc.clone(),
            out: self.out.clone(),
            id: s.inference_id,
            mi,
            state: state.clone(),
            replicas: replicas.clone(),
            replica: replica_ix,
            robot_id: self.robot_id.clone(),
            started: Instant::now(),
            started_wall: std::time::SystemTime::now(),
            upload_ns: Arc::new(AtomicU64::new(0)),
            first_out,
            deadline,
        };
        let (started, upload_ns) = (job.started, job.upload_ns.clone());
        tokio::spawn(job.run(first_band, waiting, finished));
        let received = vec![false; plan.schedule.transfers.len()];
        self.current = Some(Active {
            id: s.inference_id,
            plan,
            bands,
            received,
            state,
            replicas,
            replica: replica_ix,
            go: Some(go),
            charged: false,
            arrived: started,
            upload_ns,
        });
    }

    /// How the server side of the Start runs on the device `device` (an index into the edge's
    /// devices) until `deadline`.
    fn side_config(&self, s: &Start, device: usize, deadline: Instant) -> SideConfig {
        SideConfig {
            side: Side::Server,
            inference_id: s.inference_id,
            device: self.svc.opts.devices.get(device).map_or(Device::Cpu, |d| d.device),
            stretch: Stretch::measured(self.svc.opts.dilation),
            input_wire: self.input_wire,
            // The server codes nothing: each band's header says how to decode it.
            codec: Default::default(),
            camera: None,
            deadline: Some(deadline),
        }
    }
}
