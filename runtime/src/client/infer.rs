//! One inference: the plan for the link's bandwidth, its Start, and the robot's part on the
//! model's worker thread, overlapped with the edge's ([`RobotRun`]). When the edge fails, is
//! silent, unreachable or late, the robot finishes the inference from what it holds (a
//! fallback, with its reason); a frame past its deadline races the edge for the bands still
//! missing. Then the session's route ends (ending.rs: the edge's Done, waited for briefly when
//! it trails the edge's last band, gives its figures), and a Forward is handed back to the
//! caller (a fleet's hop).

use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime};

use lop::exec::SideExec;
use lop::graph::Graph;
use lop::plan::Side;
use lop_msgs::Frame;
use lop_msgs::protocol::{Cancel, Start};
use tch::Tensor;
use tokio::sync::mpsc as tmpsc;

use super::connection::{Conn, Route, Shared, lock};
use super::ending::LinkReport;
use super::{Connector, Hop, Hopped, Inference, InferenceStats, RobotClient, SILENT_EDGE_RETRY};
use crate::error::{Error, Result};
use crate::exec::{CameraJpeg, GraphMeta, Incoming, SideConfig, SideStats, Stopped, finish_dilated, outputs, run_side, run_side_racing};
use crate::plans::Prepared;

/// The fallback reason of an inference whose edge did not finish in time.
const DEADLINE_EXCEEDED: &str = "deadline exceeded";

/// The fallback reason of a frame past its binding deadline for which the robot computed bands
/// of the edge's rather than wait for them (the edge was still working on it: not a silent edge).
const RACE_WON: &str = "past the frame's deadline";

/// The stop reason of a hop the edge forwarded (never a fallback: the caller sends it on).
const FORWARDED: &str = "forwarded";

/// The robot's side of one inference: its outputs, statistics, why it finished alone (if it
/// did), and when it handed its last band to the link.
type RobotSide = (Vec<Tensor>, SideStats, Option<String>, Option<Instant>);

/// How long an inference may take, seconds: its budget (how long the edge may work on it) and
/// the frame's deadline within it (`None`: the budget is the deadline).
#[derive(Debug, Clone, Copy)]
struct TimeBudget {
    budget: f64,
    due: Option<f64>,
}

impl TimeBudget {
    /// Whether the frame's deadline comes before the budget's end: past it, the robot races the
    /// edge, which may work on until the budget.
    fn racing(&self) -> bool {
        self.due.is_some_and(|d| d < self.budget)
    }
}

impl<C: Connector> RobotClient<C> {
    /// Runs one inference on `inputs` with the plan for a link of `bandwidth_mb_s` MB/s (bucket
    /// units). Never loses a request to link trouble: if the edge fails, the robot finishes it
    /// (also when the edge forwards it: a single edge's robot has nowhere else to send it).
    ///
    /// # Errors
    /// Inputs that do not fit the model, engine failures.
    pub async fn infer(&mut self, inputs: Vec<Tensor>, bandwidth_mb_s: f64) -> Result<Inference> {
        self.infer_camera(inputs, None, bandwidth_mb_s).await
    }

    /// As [`RobotClient::infer`], with the camera's own JPEG of the frame: under the frame codec
    /// `passthrough` the frame crosses as those bytes, unchanged. `inputs` must then be their
    /// decoding by [`lop::codec::decode`] (the edge checks the digest and refuses other pixels).
    /// Without one (or under another codec) the frame is coded as the table says.
    ///
    /// # Errors
    /// As [`RobotClient::infer`].
    pub async fn infer_camera(&mut self, inputs: Vec<Tensor>, camera: Option<CameraJpeg>, bandwidth_mb_s: f64) -> Result<Inference> {
        match self.run(inputs, camera, bandwidth_mb_s, None).await? {
            Hopped::Done(inference) => Ok(inference),
            // Not reached: without a hop a Forward is finished on the robot like any refusal.
            Hopped::Forwarded { .. } => Err(Error::Protocol("an inference not sent as a hop was forwarded".into())),
        }
    }

    /// Runs one try of an inference in a fleet: as [`RobotClient::infer`], sent with `hop`'s path
    /// and budget; an edge that forwards it returns [`Hopped::Forwarded`] at once (the robot
    /// computes nothing for it), for the caller to send to that edge.
    ///
    /// # Errors
    /// As [`RobotClient::infer`].
    pub async fn infer_hop(&mut self, inputs: Vec<Tensor>, bandwidth_mb_s: f64, hop: &Hop) -> Result<Hopped> {
        self.run(inputs, None, bandwidth_mb_s, Some(hop)).await
    }

    /// As [`RobotClient::infer_hop`], with the camera's own JPEG of the frame (as
    /// [`RobotClient::infer_camera`]): a fleet's frames cross as the camera wrote them too.
    ///
    /// # Errors
    /// As [`RobotClient::infer`].
    pub async fn infer_hop_camera(
        &mut self,
        inputs: Vec<Tensor>,
        camera: Option<CameraJpeg>,
        bandwidth_mb_s: f64,
        hop: &Hop,
    ) -> Result<Hopped> {
        self.run(inputs, camera, bandwidth_mb_s, Some(hop)).await
    }

    async fn run(&mut self, inputs: Vec<Tensor>, camera: Option<CameraJpeg>, bandwidth_mb_s: f64, hop: Option<&Hop>) -> Result<Hopped> {
        let t0 = Instant::now();
        let method = self.opts.method.clone();
        let plan = self
            .book
            .get(&method, if self.opts.follow_frame_ratio { self.ratio.effective_mb_s(bandwidth_mb_s) } else { bandwidth_mb_s })
            .ok_or_else(|| Error::InvalidConfig { what: format!("no plans for method '{method}'") })?;
        let id = self.next_id;
        self.next_id += 1;
        let (use_link, silent_since) = self.use_link(&plan).await;
        let time = self.time_budget(&plan, hop);
        let config = self.side_config(id, &plan, camera, t0, time);
        let (band_tx, band_rx) = mpsc::channel();
        // A hop may come back forwarded: the inputs go on with it (a shallow copy, no data).
        let kept: Vec<Tensor> = if hop.is_some() { inputs.iter().map(Tensor::shallow_clone).collect() } else { Vec::new() };
        let forwarded_here = hop.is_some().then(|| self.conn.as_ref().map(|c| c.shared.clone())).flatten();
        // Not routed (the robot runs without the edge), the bands' sender stays here to the end.
        let (started, _unrouted) = match &self.conn {
            Some(conn) if use_link => (Some(send_start(conn, id, &plan, band_tx, time, hop)?), None),
            _ => (None, Some(band_tx)),
        };
        let (out, start_sent) = started.unzip();
        let alone = plan.uses_link() && out.is_none();
        let (meta, racing) = (self.meta.clone(), time.racing());
        let job =
            RobotRun { id, inputs, config, meta, plan: plan.clone(), bands: band_rx, out, alone, silent_since, racing, forwarded_here };
        let (outputs, side, reason, last_sent) = self.worker.call(move |g| job.run(g)).await??;
        // The inference ends with its outputs; what follows only reads what the edge said of it.
        let total_s = t0.elapsed().as_secs_f64();
        if use_link {
            self.cancel_unanswered(id, &side, reason.as_deref())?;
            self.track_silence(id, t0, reason.as_deref(), side.bands_received);
            // Answered by the edge: its Done trails its last band, which may have been the
            // robot's last wait (ending.rs).
            if reason.is_none() {
                self.await_done(id).await;
            }
        }
        let send_span_s = start_sent.zip(last_sent).map(|(s, l)| l.saturating_duration_since(s).as_secs_f64());
        let mut link = self.end_route(id, side.bytes_sent, send_span_s);
        if let Some(f) = link.forward.take().filter(|_| reason.as_deref() == Some(FORWARDED)) {
            tracing::debug!(inference = id, to = %f.to, path = ?f.path, "forwarded by the edge");
            let budget_left = Duration::from_secs_f64(time.budget).saturating_sub(t0.elapsed());
            return Ok(Hopped::Forwarded { to: f.to, path: f.path, budget_left, inputs: kept });
        }
        if let Some(r) = &reason {
            tracing::warn!(inference = id, reason = %r, "finished on the robot alone");
        }
        self.ratio.record(side.input_coded_bytes, side.input_raw_bytes);
        let stats = self.inference_stats(id, &plan, total_s, &side, reason, &link);
        Ok(Hopped::Done(Inference { outputs, stats }))
    }

    /// Whether an inference of `plan` uses the link now, and since when the edge has been silent
    /// while the robot runs alone until its next try. A silent edge (a cut or lossy link the
    /// session has not noticed yet) would cost every frame its whole deadline before the robot
    /// finishes it: run alone at once instead, and try the edge again every SILENT_EDGE_RETRY.
    async fn use_link(&mut self, plan: &Prepared) -> (bool, Option<Instant>) {
        let silent_wait = self.silent.filter(|(_, tried)| tried.elapsed() < SILENT_EDGE_RETRY).map(|(since, _)| since);
        let use_link = plan.uses_link() && silent_wait.is_none() && self.ensure_connected().await;
        if use_link && let Some((since, _)) = self.silent {
            self.silent = Some((since, Instant::now()));
        }
        (use_link, silent_wait)
    }

    /// The inference's time: a hop's budget left, or the plan's predicted makespan scaled by the
    /// deadline factor and slack; and the frame's deadline, within it.
    fn time_budget(&self, plan: &Prepared, hop: Option<&Hop>) -> TimeBudget {
        let budget = match hop.and_then(|h| h.budget) {
            Some(left) => left.as_secs_f64(),
            None => plan.predicted_s.unwrap_or(1.0) * self.opts.deadline_factor + self.opts.deadline_slack.as_secs_f64(),
        };
        // The robot waits for the edge until the frame's deadline (at most the budget); past it,
        // it races the edge, which may work until the budget.
        let due = hop.and_then(|h| h.due).map(|d| d.as_secs_f64().min(budget));
        TimeBudget { budget, due }
    }

    /// How the robot's side of inference `id` runs, started at `t0`.
    fn side_config(&self, id: u64, plan: &Prepared, camera: Option<CameraJpeg>, t0: Instant, time: TimeBudget) -> SideConfig {
        let codec = self.book.table.spec.frame.codec;
        SideConfig {
            side: Side::Robot,
            inference_id: id,
            device: self.opts.device,
            stretch: self.stretch.clone(),
            input_wire: self.opts.input_wire,
            codec,
            camera: camera.filter(|_| codec == lop::codec::FrameCodec::Passthrough),
            // A plan that keeps everything on the robot waits for nothing: no deadline (one
            // would only turn a slow robot's own run into a "fallback" that recomputes it).
            deadline: plan.uses_link().then(|| t0 + Duration::from_secs_f64(time.due.unwrap_or(time.budget))),
        }
    }

    /// Notes, after an inference that used the link, whether the edge went silent (its deadline
    /// ran out with not one band back: the next inferences run alone) or answers again.
    fn track_silence(&mut self, id: u64, t0: Instant, reason: Option<&str>, bands_received: u32) {
        let timed_out_silent = reason == Some(DEADLINE_EXCEEDED) && bands_received == 0;
        self.silent = match (timed_out_silent, self.silent) {
            (true, None) => {
                tracing::warn!(
                    inference = id,
                    "no band from the edge within the deadline: running alone, trying the edge every {} ms",
                    SILENT_EDGE_RETRY.as_millis()
                );
                Some((t0, Instant::now()))
            }
            (true, kept @ Some(_)) => kept,
            (false, Some((since, _))) => {
                tracing::info!(silent_s = since.elapsed().as_secs_f64(), "the edge answers again");
                None
            }
            (false, None) => None,
        };
    }

    /// Tells the edge to drop inference `id` when the robot finished it without the edge's
    /// answer (computed the bands it would have waited for past the frame's deadline, or ran out
    /// the deadline): the edge may still be working on it. Cancel frees its replica for other
    /// frames (an edge that already ended it ignores it).
    fn cancel_unanswered(&self, id: u64, side: &SideStats, reason: Option<&str>) -> Result<()> {
        if (side.stolen > 0 || reason == Some(DEADLINE_EXCEEDED))
            && let Some(conn) = &self.conn
        {
            let _ = conn.out.send(Frame::Cancel(Cancel { inference_id: id }).encode()?);
        }
        Ok(())
    }

    /// The statistics of inference `id`, run by `plan` in `total_s` seconds with the robot's
    /// side `side`.
    fn inference_stats(
        &self,
        id: u64,
        plan: &Prepared,
        total_s: f64,
        side: &SideStats,
        reason: Option<String>,
        link: &LinkReport,
    ) -> InferenceStats {
        InferenceStats {
            id,
            method: self.opts.method.clone(),
            bucket: plan.bucket,
            bucket_mb_s: plan.bucket_mb_s,
            plan_hash: plan.plan_hash.to_hex(),
            fallback: reason.is_some(),
            fallback_reason: reason,
            total_s,
            robot_compute_s: side.compute_s,
            robot_overruns: side.overruns,
            robot_overrun_s: side.overrun_s,
            robot_coding_s: side.coding_s,
            frame_coded: side.coded,
            frame_ratio: self.ratio.seen(),
            robot_wait_s: side.wait_s,
            server_compute_s: link.server_compute_s,
            bytes_up: side.bytes_sent,
            bytes_down: side.bytes_received,
            predicted_s: plan.predicted_s,
            upload_s: link.upload_s,
            send_span_s: link.send_span_s,
        }
    }
}

/// Routes the session's bands of inference `id` to `bands` and sends its Start; returns where
/// the robot's bands go, and when the Start went.
fn send_start(
    conn: &Conn,
    id: u64,
    plan: &Arc<Prepared>,
    bands: mpsc::Sender<Incoming>,
    time: TimeBudget,
    hop: Option<&Hop>,
) -> Result<(tmpsc::UnboundedSender<Vec<u8>>, Instant)> {
    lock(&conn.shared).route = Some(Route { id, plan: plan.clone(), bands, received: vec![false; plan.schedule.transfers.len()] });
    let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let start = Frame::Start(Start {
        inference_id: id,
        bucket: plan.bucket,
        plan_hash: plan.plan_hash,
        input_stamp_ns: stamp,
        deadline_ns: (time.budget * 1e9) as u64,
        due_ns: time.due.map_or(0, |d| ((d * 1e9) as u64).max(1)),
        path: hop.map(|h| h.path.clone()).unwrap_or_default(),
    });
    let _ = conn.out.send(start.encode()?);
    let sent = Instant::now();
    Ok((conn.out.clone(), sent))
}

/// The robot's side of one inference, moved to the model's worker thread to run there.
struct RobotRun {
    id: u64,
    inputs: Vec<Tensor>,
    config: SideConfig,
    meta: Arc<GraphMeta>,
    plan: Arc<Prepared>,
    /// The edge's bands, from the session's route.
    bands: mpsc::Receiver<Incoming>,
    /// Where the robot's bands go (`None`: not to the edge).
    out: Option<tmpsc::UnboundedSender<Vec<u8>>>,
    /// The plan uses the link but the edge is out of reach: the robot runs it alone at once.
    alone: bool,
    /// Since when the edge has been silent, when that is why the robot runs alone.
    silent_since: Option<Instant>,
    /// Past the frame's deadline, the robot races the edge ([`run_side_racing`]).
    racing: bool,
    /// A hop's session state, where the edge's Forward of it lands.
    forwarded_here: Option<Arc<Mutex<Shared>>>,
}

impl RobotRun {
    /// Runs the robot's side on the model `g`: alone to the end when the edge is out of reach,
    /// else overlapped with the edge's, finished from what the robot holds if the edge fails.
    fn run(mut self, g: &Graph) -> Result<RobotSide> {
        lop::exec::check_inputs(g, &self.inputs)?;
        let mut exec = SideExec::new(g, Side::Robot);
        self.insert_inputs(&mut exec, g)?;
        if self.alone {
            let why = self.alone_reason();
            return Ok((finish_dilated(&mut exec, &self.config.stretch)?, SideStats::default(), Some(why), None));
        }
        let out = self.out.take();
        let mut last_sent = None;
        let mut send = |b: Vec<u8>| {
            let sent = out.as_ref().is_some_and(|o| o.send(b).is_ok());
            if sent {
                last_sent = Some(Instant::now());
            }
            sent
        };
        let run = if self.racing { run_side_racing } else { run_side };
        let (stop, stats) = run(&mut exec, &self.meta, &self.plan.schedule, &self.config, &self.bands, &mut send)?;
        let (outputs, stats, reason) = self.ended(&mut exec, stop, stats)?;
        Ok((outputs, stats, reason, last_sent))
    }

    /// Puts the inputs into `exec` on the robot's device.
    fn insert_inputs(&mut self, exec: &mut SideExec<'_>, g: &Graph) -> Result<()> {
        for (&i, t) in g.inputs().iter().zip(std::mem::take(&mut self.inputs)) {
            let t = t.f_to_device(self.config.device).map_err(|e| Error::Executor(format!("input to device: {e}")))?;
            // A lossy codec replaces the frame's rows by their decoding: on a copy, never on
            // the caller's tensor.
            let t = if matches!(self.config.codec, lop::codec::FrameCodec::Jpeg { .. }) && !self.alone {
                t.f_empty_like()
                    .and_then(|mut c| c.f_copy_(&t).map(|_| c))
                    .map_err(|e| Error::Executor(format!("copying the input: {e}")))?
            } else {
                t
            };
            exec.insert(i, 0..g.nodes[i].info.rows(), t)?;
        }
        Ok(())
    }

    /// Why the robot runs alone though its plan uses the link.
    fn alone_reason(&self) -> String {
        match self.silent_since {
            Some(since) => {
                format!("edge silent for {:.1} s; trying it every {} ms", since.elapsed().as_secs_f64(), SILENT_EDGE_RETRY.as_millis())
            }
            None => "edge unreachable".into(),
        }
    }

    /// What the split run that stopped with `stop` hands back: the outputs (the robot finishes
    /// what the edge did not; none for a forwarded inference), the statistics, and why it ended
    /// without the edge's answer, if it did.
    fn ended(&self, exec: &mut SideExec<'_>, stop: Stopped, stats: SideStats) -> Result<(Vec<Tensor>, SideStats, Option<String>)> {
        Ok(match stop {
            // Past a binding deadline the robot computed the bands it would have waited for.
            Stopped::Finished if stats.stolen > 0 => {
                let why = format!("{RACE_WON}: {} of the edge's bands computed on the robot", stats.stolen);
                (outputs(exec)?, stats, Some(why))
            }
            Stopped::Finished => (outputs(exec)?, stats, None),
            Stopped::DeadlineExceeded => (finish_dilated(exec, &self.config.stretch)?, stats, Some(DEADLINE_EXCEEDED.into())),
            // Forwarded: the caller sends it to the other edge; nothing more to compute.
            Stopped::Aborted(_) if self.forwarded() => (Vec::new(), stats, Some(FORWARDED.into())),
            Stopped::Aborted(why) => (finish_dilated(exec, &self.config.stretch)?, stats, Some(why)),
        })
    }

    /// Whether the edge forwarded this inference (a hop's: its Forward is in the session).
    fn forwarded(&self) -> bool {
        self.forwarded_here.as_ref().is_some_and(|sh| lock(sh).forward.as_ref().is_some_and(|f| f.inference_id == self.id))
    }
}
