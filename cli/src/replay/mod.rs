//! `lop replay BAG --topic T`: plays a rosbag2 recording's camera topic into a running
//! `lop_robot`, at the recorded rate or as fast as it answers, and writes what it answers for
//! each frame as a JSON line, for offline evaluation.
//!
//! - [`ros`]: the ROS side, a hiroz node on the robot's router (publisher of the recorded
//!   messages, subscription to the results, the ROS graph).
//! - [`player`]: pacing, matching results to frames by stamp, one line per frame in order.
//! - [`line`]: the JSON line.
//!
//! The recording is read by [`crate::bag`] (the reader of `lop bench --frames`), streamed: the
//! node connects when the first frame is read, so a missing or mistyped topic is said before
//! anything is published.

pub mod line;
pub mod player;
pub mod ros;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use hiroz::entity::EndpointKind;

use self::line::Stamp;
use self::player::{Counts, Pace, Player, Settings};
use self::ros::{Peer, ResultSub};
use crate::bag::{BagError, COMPRESSED_IMAGE, Message};

/// Arguments of `lop replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The recording: an MCAP file, or a rosbag2 folder of them.
    pub bag: PathBuf,
    /// The recorded camera topic (sensor_msgs/msg/Image or CompressedImage); default: the
    /// recording's one image topic.
    #[arg(long)]
    pub topic: Option<String>,
    /// The topic the frames are published on (default: the recorded topic's name). `lop_robot`
    /// takes raw frames on `topics.image`, compressed ones on `<topics.image>/compressed`.
    #[arg(long)]
    pub to: Option<String>,
    /// The topic of `lop_robot`'s results (its `topics.inference`).
    #[arg(long, default_value = "/lop/inference")]
    pub results_topic: String,
    /// The ROS router `lop_robot` is on (rmw_zenohd, or its embedded router): its
    /// `router_endpoint`.
    #[arg(long, default_value = "tcp/localhost:7447")]
    pub router: String,
    /// The ROS domain (default: ROS_DOMAIN_ID, else 0).
    #[arg(long)]
    pub domain_id: Option<usize>,
    /// Publish each frame once the one before it is answered (or its --timeout passed), rather
    /// than at the recorded rate (where frames the robot is too busy for are dropped by it, as a
    /// camera's would be).
    #[arg(long)]
    pub as_fast_as_answered: bool,
    /// Seconds a frame waits for its result.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Seconds to wait for `lop_robot` in the ROS graph: its subscription to the frames' topic
    /// and its results' publisher.
    #[arg(long, default_value_t = 30.0)]
    pub wait: f64,
    /// The JSON lines' file (default: stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Put the model outputs' values in the lines (their names and shapes are always there).
    #[arg(long)]
    pub outputs: bool,
}

/// Why a replay failed. Each says what it waited for, or which file or topic.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The recording.
    #[error(transparent)]
    Bag(#[from] BagError),
    /// The ROS router or node.
    #[error("ROS: {0}")]
    Ros(String),
    /// No node subscribes to the frames' topic.
    #[error(
        "no node subscribes to {to} on the ROS router at {router}: waited {waited_s:.1} s for lop_robot's camera subscription \
         (is lop_robot running on that router, in the same ROS domain, {hint}?)"
    )]
    NoSubscriber {
        /// The frames' topic.
        to: String,
        /// The router.
        router: String,
        /// How long it waited.
        waited_s: f64,
        /// Which parameters make `lop_robot` take that topic.
        hint: String,
    },
    /// No node publishes the results' topic.
    #[error(
        "no node publishes {results} on the ROS router at {router}: waited {waited_s:.1} s for lop_robot's results publisher (its topics.inference)"
    )]
    NoResults {
        /// The results' topic.
        results: String,
        /// The router.
        router: String,
        /// How long it waited.
        waited_s: f64,
    },
    /// The first frames' timeouts passed without one result.
    #[error(
        "lop_robot never answered: no result on {results} within {timeout_s:.1} s of frame {frame} (stamp {}.{:09}) published on {to} \
         (is lop_robot enabled, and does it take this frame's type and size? its log says why it drops a frame)",
        stamp.sec, stamp.nanosec
    )]
    NeverAnswered {
        /// The results' topic.
        results: String,
        /// The timeout.
        timeout_s: f64,
        /// The frame's place on its topic.
        frame: usize,
        /// Its stamp.
        stamp: Stamp,
        /// Where it was published.
        to: String,
    },
    /// The lines could not be written.
    #[error("writing the results: {0}")]
    Write(std::io::Error),
}

/// Which of `lop_robot`'s parameters make it take frames of `msg_type` on `to`.
fn hint(msg_type: &str, to: &str) -> String {
    match to.strip_suffix("/compressed").filter(|_| msg_type == COMPRESSED_IMAGE) {
        Some(base) => format!("with image.transport compressed and topics.image {base}"),
        None if msg_type == COMPRESSED_IMAGE => format!("compressed frames on {to}: lop_robot takes them on <topics.image>/compressed"),
        None => format!("with image.transport raw and topics.image {to}"),
    }
}

/// A connected replay: its node, the results' subscription (alive while it plays) and the player.
struct Session<W: Write> {
    _peer: Peer,
    _results: ResultSub,
    player: Player<W>,
}

/// Connects to the router and finds `lop_robot` for the first frame `m`'s topic and type.
fn connect<W: Write>(args: &ReplayArgs, m: &Message, out: W) -> Result<Session<W>, ReplayError> {
    let to = args.to.clone().unwrap_or_else(|| m.topic.clone());
    let peer = Peer::open(&args.router, args.domain_id)?;
    let publisher = peer.frames(&to, &m.msg_type)?;
    let (results_sub, results) = peer.results(&args.results_topic)?;
    let wait = Duration::from_secs_f64(args.wait);
    let router = args.router.clone();
    if !peer.wait_for(EndpointKind::Subscription, &to, wait) {
        return Err(ReplayError::NoSubscriber { to: to.clone(), router, waited_s: args.wait, hint: hint(&m.msg_type, &to) });
    }
    if !peer.wait_for(EndpointKind::Publisher, &args.results_topic, wait) {
        return Err(ReplayError::NoResults { results: args.results_topic.clone(), router, waited_s: args.wait });
    }
    let subscribers = peer.count(EndpointKind::Subscription, &to);
    eprintln!("replay: {} ({}) to {to}, {subscribers} subscriber(s); results from {}", m.topic, m.msg_type, args.results_topic);
    let settings = Settings {
        pace: if args.as_fast_as_answered { Pace::AsAnswered } else { Pace::Recorded },
        timeout: Duration::from_secs_f64(args.timeout),
        outputs: args.outputs,
        progress: Duration::from_secs(2),
        topics: (to, args.results_topic.clone()),
    };
    Ok(Session { _peer: peer, _results: results_sub, player: Player::new(publisher, results, settings, out) })
}

/// Plays the recording into `lop_robot`, the lines to `out`; what it did.
fn replay<W: Write>(args: &ReplayArgs, out: W) -> Result<(crate::bag::Recording, Counts), ReplayError> {
    let mut out = Some(out);
    let mut session: Option<Session<W>> = None;
    let recording = crate::bag::read_messages(&args.bag, args.topic.as_deref(), |m| {
        // Connected at the first frame (a failed connection ends the read).
        if session.is_none()
            && let Some(w) = out.take()
        {
            session = Some(connect(args, &m, w)?);
        }
        match session.as_mut() {
            Some(s) => s.player.play(m),
            None => Err(ReplayError::Ros("not connected".into())),
        }
    })?;
    let Some(s) = session else {
        return Err(BagError::EmptyTopic { topic: recording.topic.topic, msg_type: recording.topic.msg_type }.into());
    };
    let counts = s.player.finish()?;
    Ok((recording, counts))
}

/// Runs `lop replay`.
///
/// # Errors
/// Bad arguments, an unreadable recording or output file, a ROS router or `lop_robot` out of
/// reach, a robot that never answers.
pub fn run(args: &ReplayArgs) -> anyhow::Result<i32> {
    for (name, v) in [("--timeout", args.timeout), ("--wait", args.wait)] {
        anyhow::ensure!(v.is_finite() && v > 0.0 && v <= 86_400.0, "{name} {v}: seconds, more than 0 and at most a day");
    }
    let out: Box<dyn Write> = match &args.out {
        Some(path) => {
            let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
            Box::new(std::io::BufWriter::new(file))
        }
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    };
    let (recording, c) = replay(args, out).with_context(|| format!("replaying {}", args.bag.display()))?;
    eprintln!(
        "replay: {}; {} published, {} answered, {} unanswered (no result within {} s), {} result(s) matched no frame{}",
        recording.describe(),
        c.published,
        c.answered,
        c.unanswered,
        args.timeout,
        c.unmatched,
        args.out.as_ref().map(|p| format!("; lines in {}", p.display())).unwrap_or_default()
    );
    Ok(0)
}
