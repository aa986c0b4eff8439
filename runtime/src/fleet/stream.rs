//! A stream spread over the fleet (EPARA's frequency-sensitive streams): a camera whose rate one
//! edge cannot hold keeps several frames in flight, each on its own lane (a [`FleetClient`] with
//! its own robot id, so each has its own sessions), routed independently; results leave in frame
//! order through a bounded reorder buffer, except that a frame past its deadline does not hold
//! the ones behind it: it leaves when it is done, flagged late.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tch::Tensor;
use tokio::task::JoinSet;

use super::client::{FleetClient, FleetInference};
use crate::error::{Error, Result};
use crate::exec::CameraJpeg;

/// One frame's result as the stream publishes it.
#[derive(Debug)]
pub struct StreamResult {
    /// The frame's number, as submitted.
    pub seq: u64,
    /// Whether it was published after its deadline (then possibly after frames behind it).
    pub late: bool,
    /// The inference, or why it failed.
    pub result: Result<FleetInference>,
}

type Finished = (u64, usize, FleetClient, Result<FleetInference>, Instant);

struct Pending {
    seq: u64,
    due: Instant,
    done: Option<(Result<FleetInference>, Instant)>,
}

/// What can leave now, in frame order: done frames leave; an unfinished frame past its deadline
/// is stepped over (it leaves when done, flagged late); the first unfinished frame still within
/// its deadline holds every frame behind it.
fn publishable(pending: &mut VecDeque<Pending>, now: Instant) -> Vec<StreamResult> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < pending.len() {
        let p = &pending[k];
        if p.done.is_some() {
            if let Some(Pending { seq, due, done: Some((result, at)) }) = pending.remove(k) {
                out.push(StreamResult { seq, late: at > due, result });
            }
        } else if now > p.due {
            k += 1;
        } else {
            break;
        }
    }
    out
}

/// Frames of one stream over several lanes.
pub struct FleetStream {
    lanes: Vec<Option<FleetClient>>,
    /// The method in force (set on each lane as it comes back free), once one was set.
    method: Option<String>,
    running: JoinSet<Finished>,
    pending: VecDeque<Pending>,
}

impl std::fmt::Debug for FleetStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetStream").field("lanes", &self.lanes.len()).field("pending", &self.pending.len()).finish()
    }
}

impl FleetStream {
    /// A stream over `lanes` (at most that many frames in flight, and in the reorder buffer).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] without a lane.
    pub fn new(lanes: Vec<FleetClient>) -> Result<FleetStream> {
        if lanes.is_empty() {
            return Err(Error::InvalidConfig { what: "a fleet stream needs at least one lane".into() });
        }
        Ok(FleetStream { lanes: lanes.into_iter().map(Some).collect(), method: None, running: JoinSet::new(), pending: VecDeque::new() })
    }

    /// Frames submitted and not yet published.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Switches every lane's method (`lop`, a baseline, `robot-only`): the free lanes now, the
    /// others as their frame ends.
    pub fn set_method(&mut self, method: &str) {
        self.method = Some(method.to_string());
        for c in self.lanes.iter_mut().flatten() {
            c.set_method(method);
        }
    }

    /// Whether a lane is free: [`FleetStream::submit`] would start the frame at once.
    pub fn has_free_lane(&self) -> bool {
        self.lanes.iter().any(Option::is_some)
    }

    /// The lanes (their fleet clients) not running a frame now.
    pub fn idle_lanes(&mut self) -> impl Iterator<Item = &mut FleetClient> {
        self.lanes.iter_mut().flatten()
    }

    /// Waits until a frame in flight finishes, or one still running passes its deadline (so the
    /// frames done behind it can leave), and returns what can leave then, in publication order
    /// (possibly nothing). Returns at once with nothing when no frame is in flight.
    ///
    /// # Errors
    /// A lane's task that panicked.
    pub async fn next_done(&mut self) -> Result<Vec<StreamResult>> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        let now = Instant::now();
        // The earliest deadline still ahead among the frames not done: the buffer may move then.
        let next_due = self.pending.iter().filter(|p| p.done.is_none() && p.due > now).map(|p| p.due).min();
        let finished = match next_due {
            Some(due) => tokio::time::timeout_at(due.into(), self.running.join_next()).await.ok().flatten(),
            None => self.running.join_next().await,
        };
        if let Some(f) = finished {
            self.record(f)?;
        }
        while let Some(f) = self.running.try_join_next() {
            self.record(f)?;
        }
        Ok(publishable(&mut self.pending, Instant::now()))
    }

    fn record(&mut self, finished: std::result::Result<Finished, tokio::task::JoinError>) -> Result<()> {
        let (seq, lane, mut client, result, at) =
            finished.map_err(|e| Error::InvalidConfig { what: format!("a stream lane's task failed: {e}") })?;
        if let Some(m) = &self.method {
            client.set_method(m);
        }
        self.lanes[lane] = Some(client);
        if let Some(p) = self.pending.iter_mut().find(|p| p.seq == seq) {
            p.done = Some((result, at));
        }
        Ok(())
    }

    /// Submits frame `seq`, due `deadline` from now; waits while every lane is busy. Returns
    /// the results that can leave meanwhile, in publication order.
    ///
    /// # Errors
    /// A lane's task that panicked.
    pub async fn submit(&mut self, seq: u64, inputs: Vec<Tensor>, bandwidth_mb_s: f64, deadline: Duration) -> Result<Vec<StreamResult>> {
        self.submit_camera(seq, inputs, None, bandwidth_mb_s, deadline).await
    }

    /// As [`FleetStream::submit`], with the camera's own JPEG of the frame
    /// ([`FleetClient::infer_camera`]).
    ///
    /// # Errors
    /// As [`FleetStream::submit`].
    pub async fn submit_camera(
        &mut self,
        seq: u64,
        inputs: Vec<Tensor>,
        camera: Option<CameraJpeg>,
        bandwidth_mb_s: f64,
        deadline: Duration,
    ) -> Result<Vec<StreamResult>> {
        let lane = loop {
            if let Some(i) = self.lanes.iter().position(Option::is_some) {
                break i;
            }
            match self.running.join_next().await {
                Some(finished) => self.record(finished)?,
                None => return Err(Error::InvalidConfig { what: "every lane is lost".into() }),
            }
        };
        let Some(mut client) = self.lanes[lane].take() else {
            return Err(Error::InvalidConfig { what: "no free lane".into() });
        };
        let due = Instant::now() + deadline;
        self.pending.push_back(Pending { seq, due, done: None });
        self.running.spawn(async move {
            let r = client.infer_camera(inputs, camera, bandwidth_mb_s, deadline).await;
            (seq, lane, client, r, Instant::now())
        });
        while let Some(finished) = self.running.try_join_next() {
            self.record(finished)?;
        }
        Ok(publishable(&mut self.pending, Instant::now()))
    }

    /// Waits for every frame in flight and returns the rest, in publication order.
    ///
    /// # Errors
    /// A lane's task that panicked.
    pub async fn drain(&mut self) -> Result<Vec<StreamResult>> {
        let mut out = Vec::new();
        while let Some(finished) = self.running.join_next().await {
            self.record(finished)?;
            out.extend(publishable(&mut self.pending, Instant::now()));
        }
        out.extend(publishable(&mut self.pending, Instant::now()));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, due: Instant, done: Option<Instant>) -> Pending {
        Pending { seq, due, done: done.map(|at| (Err(Error::InvalidConfig { what: format!("frame {seq}") }), at)) }
    }

    #[test]
    fn frames_leave_in_order_and_a_late_one_holds_nobody() {
        let t0 = Instant::now();
        let s = Duration::from_millis;
        // 0 done; 1 running (due at 100 ms); 2 and 3 done.
        let mut q: VecDeque<Pending> = [
            entry(0, t0 + s(100), Some(t0)),
            entry(1, t0 + s(100), None),
            entry(2, t0 + s(200), Some(t0)),
            entry(3, t0 + s(300), Some(t0)),
        ]
        .into_iter()
        .collect();
        let out = publishable(&mut q, t0 + s(50));
        assert_eq!(out.iter().map(|r| r.seq).collect::<Vec<_>>(), [0], "1 is not late yet: 2 and 3 wait for it");
        let out = publishable(&mut q, t0 + s(150));
        assert_eq!(out.iter().map(|r| r.seq).collect::<Vec<_>>(), [2, 3], "1 is late: the frames behind it leave");
        assert!(out.iter().all(|r| !r.late));
        assert_eq!(q.len(), 1);
        q[0].done = Some((Err(Error::InvalidConfig { what: "1".into() }), t0 + s(180)));
        let out = publishable(&mut q, t0 + s(180));
        assert_eq!(out.len(), 1);
        assert!(out[0].seq == 1 && out[0].late, "published when done, flagged late");
        assert!(q.is_empty());
    }
}
