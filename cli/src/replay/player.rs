//! Plays a recording's frames into `lop_robot` and writes what it answers ([`Player`]).
//!
//! A frame is published at its recorded time (the recorder's log time, from the first frame's),
//! or, as fast as answered, once the frame before it is resolved. Results are matched to the
//! frames by the header stamp `lop_robot` copies into them (the oldest frame still waiting with
//! that stamp, so recordings with repeated stamps still pair in order). A frame is resolved when
//! its result comes, or when its timeout passes without one; its line is written once it and
//! every frame before it are, so the lines come in the recording's order, one per frame.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lop_msgs::ros::msg::InferenceResult;

use super::ReplayError;
use super::line::{Answer, Line, Stamp};
use super::ros::{FramePub, Heard};
use crate::bag::Message;

/// When the next frame is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// At the recorded rate.
    Recorded,
    /// Once the frame before it is answered (or its timeout passed).
    AsAnswered,
}

/// How a replay runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// When frames are published.
    pub pace: Pace,
    /// How long a frame waits for its result.
    pub timeout: Duration,
    /// Whether the lines carry the outputs' values.
    pub outputs: bool,
    /// How often progress is printed (stderr).
    pub progress: Duration,
    /// The topic the frames go to, and the results' topic (named in errors and progress).
    pub topics: (String, String),
}

/// What a replay did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Frames published.
    pub published: usize,
    /// Frames answered within their timeout.
    pub answered: usize,
    /// Frames whose timeout passed without a result.
    pub unanswered: usize,
    /// Results that matched no frame waiting (late answers, or frames of someone else).
    pub unmatched: usize,
}

/// A published frame waiting for its result.
struct Pending {
    line: Line,
    stamp: Stamp,
    published: Instant,
    result: Option<Heard>,
}

/// Plays frames into `lop_robot` and writes a line per frame to `out`.
pub struct Player<W: Write> {
    publisher: FramePub,
    results: mpsc::Receiver<Heard>,
    settings: Settings,
    out: W,
    pending: VecDeque<Pending>,
    /// The first publication, and the first frame's log time.
    clock: Option<(Instant, u64)>,
    counts: Counts,
    last_progress: Instant,
}

impl<W: Write> Player<W> {
    /// A player publishing with `publisher`, hearing results on `results`.
    pub fn new(publisher: FramePub, results: mpsc::Receiver<Heard>, settings: Settings, out: W) -> Player<W> {
        let now = Instant::now();
        Player { publisher, results, settings, out, pending: VecDeque::new(), clock: None, counts: Counts::default(), last_progress: now }
    }

    /// Publishes frame `m` when its time comes, and, as fast as answered, waits for its result.
    ///
    /// # Errors
    /// A publication Zenoh refuses, a line that cannot be written, or a robot that never
    /// answered ([`ReplayError::NeverAnswered`]).
    pub fn play(&mut self, m: Message) -> Result<(), ReplayError> {
        if let (Pace::Recorded, Some((first, first_log))) = (self.settings.pace, self.clock) {
            let due = first + Duration::from_nanos(m.log_time_ns.saturating_sub(first_log));
            self.collect_until(due)?;
        }
        let published = Instant::now();
        let (first, _) = *self.clock.get_or_insert((published, m.log_time_ns));
        let stamp = Stamp::from_ns(m.stamp_ns);
        let line = Line {
            frame: m.index,
            topic: m.topic,
            stamp,
            stamp_ns: m.stamp_ns,
            frame_id: m.frame_id,
            log_time_ns: m.log_time_ns,
            published_s: published.duration_since(first).as_secs_f64(),
            answered: false,
            answer_s: None,
            result: None,
        };
        self.publisher.publish(m.cdr)?;
        self.counts.published += 1;
        self.pending.push_back(Pending { line, stamp, published, result: None });
        if self.settings.pace == Pace::AsAnswered {
            let until = published + self.settings.timeout;
            while self.pending.back().is_some_and(|p| p.result.is_none()) && Instant::now() < until {
                self.collect_until_one(until);
            }
        }
        self.flush()?;
        self.progress();
        Ok(())
    }

    /// Waits for the frames still waiting (each up to its timeout), writes their lines, and
    /// returns what the replay did.
    ///
    /// # Errors
    /// As [`Player::play`].
    pub fn finish(mut self) -> Result<Counts, ReplayError> {
        // Each turn resolves the first waiting frame (its answer, or its timeout): bounded by
        // the frames' count, each by its timeout.
        while let Some(front) = self.pending.front() {
            let until = front.published + self.settings.timeout;
            if front.result.is_none() && Instant::now() < until {
                self.collect_until_one(until);
            }
            self.flush()?;
        }
        self.out.flush().map_err(ReplayError::Write)?;
        Ok(self.counts)
    }

    /// Takes the results that come until `due`, writing the lines resolved meanwhile.
    fn collect_until(&mut self, due: Instant) -> Result<(), ReplayError> {
        while Instant::now() < due {
            self.collect_until_one(due);
            self.flush()?;
            self.progress();
        }
        Ok(())
    }

    /// Waits until `until` at most for one result, and takes it.
    fn collect_until_one(&mut self, until: Instant) {
        let left = until.saturating_duration_since(Instant::now());
        if let Ok(heard) = self.results.recv_timeout(left) {
            self.take(heard);
        }
        while let Ok(heard) = self.results.try_recv() {
            self.take(heard);
        }
    }

    /// Gives a result to the oldest frame waiting with its stamp.
    fn take(&mut self, (at, r): Heard) {
        let stamp = Stamp { sec: r.header.stamp.sec, nanosec: r.header.stamp.nanosec };
        match self.pending.iter_mut().find(|p| p.result.is_none() && p.stamp == stamp) {
            Some(p) => p.result = Some((at, r)),
            None => {
                self.counts.unmatched += 1;
                tracing::debug!(sec = stamp.sec, nanosec = stamp.nanosec, inference = r.inference_id, "a result for no frame waiting");
            }
        }
    }

    /// Writes the lines of the resolved frames at the front, in order.
    fn flush(&mut self) -> Result<(), ReplayError> {
        let now = Instant::now();
        while let Some(front) = self.pending.front() {
            let expired = now >= front.published + self.settings.timeout;
            if front.result.is_none() && !expired {
                break;
            }
            let Some(Pending { mut line, published, result, .. }) = self.pending.pop_front() else { break };
            match result {
                Some((at, r)) => self.answered(&mut line, published, at, r),
                None if self.counts.answered == 0 => return Err(self.never_answered(&line)),
                None => self.counts.unanswered += 1,
            }
            serde_json::to_writer(&mut self.out, &line).map_err(|e| ReplayError::Write(e.into()))?;
            self.out.write_all(b"\n").map_err(ReplayError::Write)?;
        }
        Ok(())
    }

    /// Fills in `line` with result `r`, heard at `at`.
    fn answered(&mut self, line: &mut Line, published: Instant, at: Instant, r: InferenceResult) {
        self.counts.answered += 1;
        line.answered = true;
        line.answer_s = Some(at.saturating_duration_since(published).as_secs_f64());
        line.result = Some(Answer::new(r, self.settings.outputs));
    }

    /// The error for a robot that let the first frames' timeout pass without answering any.
    fn never_answered(&self, line: &Line) -> ReplayError {
        let (to, results) = self.settings.topics.clone();
        ReplayError::NeverAnswered { results, timeout_s: self.settings.timeout.as_secs_f64(), frame: line.frame, stamp: line.stamp, to }
    }

    /// Prints the replay's progress (stderr) every `settings.progress`.
    fn progress(&mut self) {
        if self.last_progress.elapsed() < self.settings.progress {
            return;
        }
        self.last_progress = Instant::now();
        let c = self.counts;
        let elapsed = self.clock.map_or(0.0, |(first, _)| first.elapsed().as_secs_f64());
        let waiting = self.pending.len();
        eprintln!(
            "replay: {} frame(s) published to {}, {} answered, {} unanswered, {waiting} waiting, {elapsed:.1} s",
            c.published, self.settings.topics.0, c.answered, c.unanswered
        );
        // Progress is for people watching a long replay: the lines written so far go out too.
        let _ = self.out.flush();
    }
}
