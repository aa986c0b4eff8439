//! The robot's side: which edges are up and how loaded, from their liveliness tokens and load
//! reports alone (no edge address configured, only a Zenoh endpoint).
//!
//! An edge is in the view while its token is present and its last report is younger than the
//! view's staleness limit ([`STALE_AFTER`](super::STALE_AFTER) by default). A closed session
//! withdraws the token at once; a killed process or a cut link stops the reports, and the edge
//! leaves the view when its last report turns stale. Reports that are malformed, out of order,
//! or from an edge without a token are ignored and counted.
//!
//! At a large site a robot hears the site's digests instead ([`FleetView::site`]): one message
//! per period for each shard it listens to (`lop_fleet::shard`), published by the site's
//! aggregator ([`super::site`]). Then an edge is in the view while its shard's last digest lists
//! it with a report younger than the staleness limit (the aggregator lists only edges whose token
//! it sees).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use lop_fleet::EdgeSeen;
use lop_fleet::shard::{robot_hash, robot_shards};
use lop_msgs::key::{ALL_EDGE_LOADS, ALL_EDGE_TOKENS, edge_of, site_digest};
use lop_msgs::load::EdgeLoad;
use lop_msgs::site::LoadDigest;
use zenoh::sample::{Sample, SampleKind};

use crate::error::{Error, Result};

/// Reports received and ignored, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ViewCounts {
    /// Reports taken.
    pub reports: u64,
    /// Reports that did not decode, or whose edge id differs from their key's.
    pub malformed: u64,
    /// Reports older than one already taken from the same edge.
    pub out_of_order: u64,
    /// Reports from an edge whose liveliness token was not seen.
    pub unknown: u64,
    /// Edges that left (token withdrawn, or reports gone stale).
    pub departures: u64,
    /// Site digests taken (site view only).
    pub digests: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Liveliness tokens present per edge (an edge may hold several: its load reporter's and
    /// its session acceptor's share the key).
    tokens: HashMap<String, u32>,
    /// The last report taken per edge, and when it was made (as near as the view knows).
    last: HashMap<String, (EdgeLoad, Instant)>,
    counts: ViewCounts,
    /// Hearing the site's digests instead of every edge: which shards.
    site: Option<SiteHearing>,
}

/// What a site view listens to.
#[derive(Debug)]
struct SiteHearing {
    robot_hash: u64,
    heard: usize,
    /// The site's shard count, from the last digest (0: none heard yet).
    shards: usize,
    /// The shards to listen to: shard 0 until a digest gives the count.
    wanted: Vec<usize>,
    /// The edges each heard shard's last digest listed, and that digest's number.
    listed: HashMap<usize, (u64, Vec<String>)>,
    /// When a digest of a wanted shard last came (`None`: since the last fall-back).
    last_digest: Option<Instant>,
}

impl State {
    fn on_token(&mut self, edge: &str, kind: SampleKind) {
        match kind {
            SampleKind::Put => {
                let n = self.tokens.entry(edge.to_string()).or_default();
                *n += 1;
                if *n == 1 {
                    tracing::info!(edge, "fleet: edge up");
                }
            }
            SampleKind::Delete => {
                let Some(n) = self.tokens.get_mut(edge) else { return };
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.tokens.remove(edge);
                    if self.last.remove(edge).is_some() {
                        self.counts.departures += 1;
                        tracing::info!(edge, "fleet: edge gone (its liveliness token was withdrawn)");
                    }
                }
            }
        }
    }

    fn on_report(&mut self, key_edge: &str, payload: &[u8], now: Instant, stale_after: Duration) {
        let load = match EdgeLoad::decode(payload) {
            Ok(l) if l.edge == key_edge => l,
            Ok(l) => {
                self.counts.malformed += 1;
                tracing::debug!(key_edge, report_edge = %l.edge, "fleet: report names another edge than its key");
                return;
            }
            Err(e) => {
                self.counts.malformed += 1;
                tracing::debug!(key_edge, "fleet: malformed load report: {e}");
                return;
            }
        };
        if !self.tokens.contains_key(key_edge) {
            self.counts.unknown += 1;
            return;
        }
        // An older number from an edge heard from recently is out of order; after a silence
        // longer than the staleness limit it is a restarted edge counting from 1 again.
        if let Some((last, at)) = self.last.get(key_edge)
            && last.seq >= load.seq
            && now.saturating_duration_since(*at) <= stale_after
        {
            self.counts.out_of_order += 1;
            return;
        }
        if !self.last.contains_key(key_edge) {
            tracing::info!(edge = key_edge, models = load.models.len(), "fleet: edge reporting its load");
        }
        self.last.insert(key_edge.to_string(), (load, now));
        self.counts.reports += 1;
    }

    fn on_digest(&mut self, key_shard: usize, payload: &[u8], now: Instant, stale_after: Duration) {
        let Some(site) = self.site.as_mut() else { return };
        let digest = match LoadDigest::decode(payload) {
            Ok(d) if usize::from(d.shard) == key_shard => d,
            Ok(_) | Err(_) => {
                self.counts.malformed += 1;
                return;
            }
        };
        let shards = usize::from(digest.shards);
        if shards != site.shards {
            site.shards = shards;
            site.wanted = robot_shards(site.robot_hash, shards, site.heard);
            tracing::info!(shards, hearing = ?site.wanted, "fleet: the site has {shards} shards; hearing {:?}", site.wanted);
            let wanted = site.wanted.clone();
            let gone: Vec<String> = site.listed.iter().filter(|(s, _)| !wanted.contains(s)).flat_map(|(_, (_, e))| e.clone()).collect();
            site.listed.retain(|s, _| wanted.contains(s));
            for e in gone {
                if self.last.remove(&e).is_some() {
                    self.counts.departures += 1;
                }
            }
        }
        let Some(site) = self.site.as_mut() else { return };
        if !site.wanted.contains(&key_shard) {
            return;
        }
        // A digest older than the last one taken for this shard (from a second aggregator
        // behind the first, say) only adds reports newer than those held.
        let newest = site.listed.get(&key_shard).is_none_or(|(seq, _)| digest.seq > *seq);
        let ids: Vec<String> = digest.edges.iter().map(|(l, _)| l.edge.clone()).collect();
        if newest {
            let before = site.listed.insert(key_shard, (digest.seq, ids.clone())).map(|(_, e)| e).unwrap_or_default();
            for e in before.iter().filter(|e| !ids.contains(e)) {
                if self.last.remove(e).is_some() {
                    self.counts.departures += 1;
                    tracing::info!(edge = %e, "fleet: edge gone (no longer in its shard's digest)");
                }
            }
        }
        self.counts.digests += 1;
        site.last_digest = Some(now);
        for (load, age_ms) in digest.edges {
            let made = now.checked_sub(Duration::from_millis(u64::from(age_ms))).unwrap_or(now);
            if let Some((last, at)) = self.last.get(&load.edge)
                && last.seq >= load.seq
                && now.saturating_duration_since(*at) <= stale_after
            {
                continue;
            }
            if !self.last.contains_key(&load.edge) {
                tracing::info!(edge = %load.edge, shard = key_shard, "fleet: edge in the site digest");
            }
            self.counts.reports += 1;
            self.last.insert(load.edge.clone(), (load, made));
        }
    }

    /// A site view whose shards have gone silent for `silence` (the site shrank and they are
    /// gone, or the aggregator moved) listens to shard 0 again to learn the shard count; true
    /// when it fell back.
    fn fall_back_if_silent(&mut self, now: Instant, silence: Duration) -> bool {
        let Some(site) = self.site.as_mut() else { return false };
        let since = site.last_digest.map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        if site.wanted == [0] || since <= silence {
            return false;
        }
        tracing::warn!(shards = ?site.wanted, "fleet: no site digest for {} ms; listening to shard 0 again", since.as_millis());
        site.shards = 0;
        site.wanted = vec![0];
        site.last_digest = None;
        true
    }

    /// Whether `edge` counts as up: its token seen (direct view), or listed by a heard shard's
    /// digest (site view).
    fn up(&self, edge: &str) -> bool {
        match &self.site {
            None => self.tokens.contains_key(edge),
            Some(site) => site.listed.values().any(|(_, e)| e.iter().any(|x| x == edge)),
        }
    }

    fn expire(&mut self, now: Instant, stale_after: Duration) {
        let before = self.last.len();
        self.last.retain(|edge, (_, at)| {
            let fresh = now.saturating_duration_since(*at) <= stale_after;
            if !fresh {
                tracing::info!(edge, "fleet: edge gone (no load report for {} ms)", stale_after.as_millis());
            }
            fresh
        });
        self.counts.departures += (before - self.last.len()) as u64;
    }
}

/// The fleet as one robot sees it. Cheap to clone.
#[derive(Clone)]
pub struct FleetView {
    state: Arc<Mutex<State>>,
    stale_after: Duration,
    _subscribers: Arc<Vec<zenoh::pubsub::Subscriber<()>>>,
    /// The site view's task that follows the shards to hear (aborted with the last clone).
    _follow: Option<Arc<AbortOnDrop>>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for FleetView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetView").field("stale_after", &self.stale_after).finish_non_exhaustive()
    }
}

impl FleetView {
    /// Subscribes every edge's token (those already up included) and load reports.
    ///
    /// # Errors
    /// [`Error::Zenoh`] when a declaration fails.
    pub async fn new(session: &zenoh::Session, stale_after: Duration) -> Result<FleetView> {
        let state = Arc::new(Mutex::new(State::default()));
        let s = state.clone();
        let tokens = session
            .liveliness()
            .declare_subscriber(ALL_EDGE_TOKENS)
            .history(true)
            .callback(move |sample: Sample| {
                if let Some(edge) = edge_of(sample.key_expr().as_str(), "alive")
                    && let Ok(mut st) = s.lock()
                {
                    st.on_token(edge, sample.kind());
                }
            })
            .await
            .map_err(|e| Error::Zenoh(format!("subscribing liveliness {ALL_EDGE_TOKENS}: {e}")))?;
        let s = state.clone();
        let loads = session
            .declare_subscriber(ALL_EDGE_LOADS)
            .callback(move |sample: Sample| {
                let Ok(mut st) = s.lock() else { return };
                match edge_of(sample.key_expr().as_str(), "load") {
                    Some(edge) => st.on_report(edge, &sample.payload().to_bytes(), Instant::now(), stale_after),
                    None => st.counts.malformed += 1,
                }
            })
            .await
            .map_err(|e| Error::Zenoh(format!("subscribing {ALL_EDGE_LOADS}: {e}")))?;
        Ok(FleetView { state, stale_after, _subscribers: Arc::new(vec![tokens, loads]), _follow: None })
    }

    /// A view of a large site: the robot `robot_id` hears the digests of `heard` shards (chosen
    /// by its id, `lop_fleet::shard::robot_shards`) from the site's aggregator, one message per
    /// shard and period, instead of every edge's report. Until the first digest it listens to
    /// shard 0 to learn the shard count.
    ///
    /// # Errors
    /// [`Error::Zenoh`] when the first subscription fails; [`Error::InvalidConfig`] for no
    /// shard heard.
    pub async fn site(session: &zenoh::Session, robot_id: &str, heard: usize, stale_after: Duration) -> Result<FleetView> {
        if heard == 0 {
            return Err(Error::InvalidConfig { what: "a site view hears at least one shard".into() });
        }
        let site =
            SiteHearing { robot_hash: robot_hash(robot_id), heard, shards: 0, wanted: vec![0], listed: HashMap::new(), last_digest: None };
        let state = Arc::new(Mutex::new(State { site: Some(site), ..State::default() }));
        let mut current = vec![0usize];
        let first = subscribe_digests(session, &state, &current, stale_after).await?;
        let (st, session) = (state.clone(), session.clone());
        let follow = tokio::spawn(async move {
            // Held until replaced: dropping a subscriber undeclares it.
            let mut _subs = first;
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let wanted = st
                    .lock()
                    .map(|mut s| {
                        s.fall_back_if_silent(Instant::now(), stale_after * 4);
                        s.site.as_ref().map(|h| h.wanted.clone()).unwrap_or_default()
                    })
                    .unwrap_or_default();
                if wanted.is_empty() || wanted == current {
                    continue;
                }
                match subscribe_digests(&session, &st, &wanted, stale_after).await {
                    Ok(new) => {
                        _subs = new;
                        current = wanted;
                    }
                    Err(e) => tracing::warn!("fleet: following the site's shards: {e}"),
                }
            }
        });
        Ok(FleetView { state, stale_after, _subscribers: Arc::new(Vec::new()), _follow: Some(Arc::new(AbortOnDrop(follow))) })
    }

    /// How old a report may be before its edge leaves the view.
    pub fn stale_after(&self) -> Duration {
        self.stale_after
    }

    /// The shards a site view hears now (empty for a direct view).
    pub fn shards_heard(&self) -> Vec<usize> {
        self.state.lock().ok().and_then(|s| s.site.as_ref().map(|h| h.wanted.clone())).unwrap_or_default()
    }

    /// The edges up now, each with its last report, sorted by id.
    pub fn edges(&self) -> Vec<EdgeSeen> {
        let now = Instant::now();
        let Ok(mut st) = self.state.lock() else { return Vec::new() };
        st.expire(now, self.stale_after);
        let mut out: Vec<EdgeSeen> = st
            .last
            .iter()
            .filter(|(edge, _)| st.up(edge))
            .map(|(_, (l, at))| EdgeSeen { load: l.clone(), age: now.saturating_duration_since(*at) })
            .collect();
        out.sort_by(|a, b| a.load.edge.cmp(&b.load.edge));
        out
    }

    /// Counters so far.
    pub fn counts(&self) -> ViewCounts {
        self.state.lock().map(|s| s.counts).unwrap_or_default()
    }
}

/// Subscribes the digests of `shards`, each taken into `state`.
async fn subscribe_digests(
    session: &zenoh::Session,
    state: &Arc<Mutex<State>>,
    shards: &[usize],
    stale_after: Duration,
) -> Result<Vec<zenoh::pubsub::Subscriber<()>>> {
    let mut subs = Vec::new();
    for &shard in shards {
        let s = state.clone();
        let key = site_digest(shard);
        let sub = session
            .declare_subscriber(&key)
            .callback(move |sample: Sample| {
                if let Ok(mut st) = s.lock() {
                    st.on_digest(shard, &sample.payload().to_bytes(), Instant::now(), stale_after);
                }
            })
            .await
            .map_err(|e| Error::Zenoh(format!("subscribing {key}: {e}")))?;
        subs.push(sub);
    }
    Ok(subs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lop_msgs::load::ModelLoad;

    fn report(edge: &str, seq: u64) -> Vec<u8> {
        let m = ModelLoad { model: "m".into(), queued_s: 0.0, idle_goodput: 10.0, server_s: 0.1, in_flight: 0, warm: true };
        EdgeLoad { edge: edge.into(), seq, utilisation: 0.0, gpu_free_bytes: None, models: vec![m] }.encode().expect("encode")
    }

    #[test]
    fn reports_are_taken_in_order_from_known_edges_only() {
        let mut st = State::default();
        let t0 = Instant::now();
        let stale = Duration::from_millis(500);
        st.on_report("a", &report("a", 1), t0, stale);
        assert_eq!(st.counts.unknown, 1, "no token yet");
        st.on_token("a", SampleKind::Put);
        st.on_report("a", &report("a", 2), t0, stale);
        st.on_report("a", &report("a", 2), t0, stale);
        st.on_report("a", &report("a", 1), t0, stale);
        assert_eq!((st.counts.reports, st.counts.out_of_order), (1, 2));
        st.on_report("a", &report("b", 3), t0, stale);
        st.on_report("a", b"garbage", t0, stale);
        assert_eq!(st.counts.malformed, 2);
        // After a silence, a restarted edge counting from 1 again is taken.
        st.on_report("a", &report("a", 1), t0 + Duration::from_millis(600), stale);
        assert_eq!(st.counts.reports, 2);
    }

    fn digest(shard: u16, shards: u16, seq: u64, edges: &[&str]) -> Vec<u8> {
        let loads = edges.iter().map(|e| (EdgeLoad::decode(&report(e, seq)).expect("report"), 10)).collect();
        LoadDigest { shard, shards, seq, edges: loads }.encode().expect("digest")
    }

    #[test]
    fn a_site_view_follows_its_shard_and_falls_back_when_it_goes_silent() {
        let hash = robot_hash("r");
        let mut st = State {
            site: Some(SiteHearing { robot_hash: hash, heard: 1, shards: 0, wanted: vec![0], listed: HashMap::new(), last_digest: None }),
            ..State::default()
        };
        let (t0, stale) = (Instant::now(), Duration::from_millis(500));
        // Shard 0 of 3 tells the count; the view then wants its own shard.
        st.on_digest(0, &digest(0, 3, 1, &["a"]), t0, stale);
        let mine = robot_shards(hash, 3, 1);
        assert_eq!(st.site.as_ref().map(|s| s.wanted.clone()), Some(mine.clone()));
        let k = mine[0] as u16;
        st.on_digest(mine[0], &digest(k, 3, 2, &["b", "c"]), t0, stale);
        assert!(st.up("b") && st.up("c"));
        // An edge its shard's next digest omits is gone; a digest on the wrong key is malformed.
        st.on_digest(mine[0], &digest(k, 3, 3, &["c"]), t0, stale);
        assert!(!st.up("b") && st.up("c") && !st.last.contains_key("b"));
        st.on_digest(mine[0], &digest((k + 1) % 3, 3, 4, &["c"]), t0, stale);
        assert_eq!(st.counts.malformed, 1);
        // Silence (the site shrank: the shard is gone): back to shard 0, unless it was shard 0.
        assert!(!st.fall_back_if_silent(t0 + Duration::from_secs(1), Duration::from_secs(2)));
        let fell = st.fall_back_if_silent(t0 + Duration::from_secs(3), Duration::from_secs(2));
        assert_eq!(fell, mine != [0]);
        assert_eq!(st.site.as_ref().map(|s| s.wanted.clone()), Some(vec![0]));
    }

    #[test]
    fn an_edge_leaves_when_its_last_token_goes_or_its_reports_stop() {
        let mut st = State::default();
        let t0 = Instant::now();
        let stale = Duration::from_millis(500);
        for e in ["a", "b"] {
            st.on_token(e, SampleKind::Put);
            st.on_report(e, &report(e, 1), t0, stale);
        }
        // Two tokens (reporter and acceptor): the first withdrawn leaves the edge up.
        st.on_token("a", SampleKind::Put);
        st.on_token("a", SampleKind::Delete);
        assert!(st.last.contains_key("a"));
        st.on_token("a", SampleKind::Delete);
        assert!(!st.last.contains_key("a") && !st.tokens.contains_key("a"));
        st.expire(t0 + Duration::from_millis(400), stale);
        assert!(st.last.contains_key("b"));
        st.expire(t0 + Duration::from_millis(600), stale);
        assert!(!st.last.contains_key("b"));
        assert_eq!(st.counts.departures, 2);
        // Its token is still there: when its reports resume, it is back.
        st.on_report("b", &report("b", 9), t0 + Duration::from_millis(700), stale);
        assert!(st.last.contains_key("b"));
    }
}
