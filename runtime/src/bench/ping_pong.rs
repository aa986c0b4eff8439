//! A Zenoh echo for the overhead measurement ([`PingPong`]): the edge's session answers every
//! `ping` of the input's size with a `pong` of the output's size, so that a round trip prices
//! moving the raw bytes over the same sessions the runtime uses. A leaf.

use std::time::{Duration, Instant};

use zenoh::qos::{CongestionControl, Priority as ZPriority};

use crate::error::{Error, Result};

/// A Zenoh echo: the edge side answers every `ping` with a `pong` of a fixed size.
pub(super) struct PingPong {
    ping: zenoh::pubsub::Publisher<'static>,
    pong: zenoh::pubsub::Subscriber<zenoh::handlers::FifoChannelHandler<zenoh::sample::Sample>>,
    responder: tokio::task::JoinHandle<()>,
    payload: Vec<u8>,
}

impl Drop for PingPong {
    fn drop(&mut self) {
        self.responder.abort();
    }
}

const PING_KEY: &str = "lop/bench/overhead/ping";
const PONG_KEY: &str = "lop/bench/overhead/pong";

async fn publisher(session: &zenoh::Session, key: &'static str) -> Result<zenoh::pubsub::Publisher<'static>> {
    session
        .declare_publisher(key)
        .priority(ZPriority::DataLow)
        .congestion_control(CongestionControl::Block)
        .express(true)
        .await
        .map_err(|e| Error::Zenoh(format!("declaring a publisher on {key}: {e}")))
}

impl PingPong {
    pub(super) async fn new(robot: &zenoh::Session, edge: &zenoh::Session, up_bytes: usize, down_bytes: usize) -> Result<PingPong> {
        let sub_err = |e: zenoh::Error| Error::Zenoh(format!("declaring a subscriber: {e}"));
        let ping_sub = edge.declare_subscriber(PING_KEY).await.map_err(sub_err)?;
        let pong_pub = publisher(edge, PONG_KEY).await?;
        let answer = vec![0x5a_u8; down_bytes];
        let responder = tokio::spawn(async move {
            while ping_sub.recv_async().await.is_ok() {
                if let Err(e) = pong_pub.put(answer.clone()).await {
                    tracing::warn!(error = %e, "overhead pong");
                    break;
                }
            }
        });
        let pong = robot.declare_subscriber(PONG_KEY).await.map_err(sub_err)?;
        let ping = publisher(robot, PING_KEY).await?;
        Ok(PingPong { ping, pong, responder, payload: vec![0xa5_u8; up_bytes] })
    }

    /// One round trip, seconds (None after 10 s without an answer).
    pub(super) async fn round_trip(&self) -> Result<f64> {
        let t = Instant::now();
        self.ping.put(self.payload.clone()).await.map_err(|e| Error::Zenoh(format!("overhead ping: {e}")))?;
        match tokio::time::timeout(Duration::from_secs(10), self.pong.recv_async()).await {
            Ok(Ok(_)) => Ok(t.elapsed().as_secs_f64()),
            Ok(Err(e)) => Err(Error::Zenoh(format!("overhead pong: {e}"))),
            Err(_) => Err(Error::Zenoh("no pong within 10 s".into())),
        }
    }
}
