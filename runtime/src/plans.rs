//! Plans both sides can execute: every method's plan of every bucket of a schedule table, with
//! its schedule and the bands it expects, found by method and bandwidth (robot) or by plan hash
//! (edge). Both sides derive the same book from the same table, which the session handshake
//! checks by hash.

use std::collections::HashMap;
use std::sync::Arc;

use lop::planner::table::ScheduleTable;
use lop::sim::Schedule;
use lop_msgs::Digest;

use crate::error::{Error, Result};
use crate::exec::{Expected, GraphMeta, InputWire, Worker};

/// The methods a book holds, by their table names.
pub const METHODS: [&str; 4] = ["robot-only", "server-only", "layer-partition", "lop"];

/// Key of an expected band: (towards the server, tensor id, row start, row end).
pub type BandKey = (bool, u32, u32, u32);

/// One executable plan.
#[derive(Debug)]
pub struct Prepared {
    /// Index of its bucket in the table.
    pub bucket: u32,
    /// The bucket, MB/s.
    pub bucket_mb_s: f64,
    /// The plan's content hash.
    pub plan_hash: Digest,
    /// Its task graph.
    pub schedule: Schedule,
    /// Every band it sends, by key.
    pub expect: HashMap<BandKey, Expected>,
    /// The simulator's makespan for it in its bucket, seconds.
    pub predicted_s: Option<f64>,
}

impl Prepared {
    /// Whether it moves anything over the link (robot-only plans do not).
    pub fn uses_link(&self) -> bool {
        !self.schedule.transfers.is_empty()
    }
}

/// Every method's plan for every bucket of one table.
#[derive(Debug)]
pub struct PlanBook {
    /// The table's content hash.
    pub table_hash: Digest,
    /// The table.
    pub table: Arc<ScheduleTable>,
    by_method: HashMap<String, Vec<(u32, Arc<Prepared>)>>,
    by_hash: HashMap<Digest, Arc<Prepared>>,
}

/// A hex content hash as a [`Digest`].
///
/// # Errors
/// [`Error::Protocol`] when it is not 64 hex digits.
pub fn digest(hex: &str) -> Result<Digest> {
    Digest::from_hex(hex).map_err(|e| Error::Protocol(format!("bad content hash '{hex}': {e}")))
}

impl PlanBook {
    /// Derives every plan's schedule (on `worker`, which holds the model).
    ///
    /// # Errors
    /// A plan that does not fit the model; a bad hash in the table.
    pub async fn prepare(worker: &Worker, meta: &GraphMeta, table: Arc<ScheduleTable>, input: InputWire) -> Result<PlanBook> {
        let bounds = table.spec.chunk_bounds;
        let codec = table.spec.frame.codec;
        let mut plans = Vec::new();
        for (b, e) in table.entries.iter().enumerate() {
            for m in METHODS {
                if let Some(p) = e.plan_of(m) {
                    plans.push((m.to_string(), b as u32, e.bucket_mb_s, p.clone(), e.makespan_of(m)));
                }
            }
        }
        let hashes: Vec<String> = plans.iter().map(|p| p.3.hash()).collect();
        // Derive each distinct plan once, on the worker thread; a plan that does not fit names
        // the first bucket and method that use it.
        let mut distinct: Vec<(String, lop::plan::Plan, String)> = Vec::new();
        for (h, p) in hashes.iter().zip(&plans) {
            if !distinct.iter().any(|(d, _, _)| d == h) {
                distinct.push((h.clone(), p.3.clone(), format!("bucket {} ({} MB/s), {}", p.1, p.2, p.0)));
            }
        }
        let derived = worker
            .call(move |g| {
                distinct
                    .into_iter()
                    .map(|(h, p, at)| {
                        Schedule::derive(g, &p, bounds, codec).map(|s| (h, s)).map_err(|e| match lop::Error::from(e) {
                            lop::Error::Plan(m) => lop::Error::Plan(format!("{at}: {m}")),
                            e => e,
                        })
                    })
                    .collect::<lop::Result<Vec<_>>>()
            })
            .await??;
        let schedules: HashMap<String, Schedule> = derived.into_iter().collect();
        let mut by_method: HashMap<String, Vec<(u32, Arc<Prepared>)>> = HashMap::new();
        let mut by_hash = HashMap::new();
        for ((method, bucket, bucket_mb_s, _, predicted_s), h) in plans.into_iter().zip(hashes) {
            let schedule = schedules.get(&h).cloned().unwrap_or_default();
            let expect = meta.expectations(&schedule, input, codec)?;
            let plan_hash = digest(&h)?;
            let p = Arc::new(Prepared { bucket, bucket_mb_s, plan_hash, schedule, expect, predicted_s });
            by_hash.entry(plan_hash).or_insert_with(|| p.clone());
            by_method.entry(method).or_default().push((bucket, p));
        }
        Ok(PlanBook { table_hash: digest(&table.hash)?, table, by_method, by_hash })
    }

    /// The plan of `method` for a link of `mb_s` MB/s (in bucket units: the highest bucket not
    /// above it, or the lowest bucket).
    pub fn get(&self, method: &str, mb_s: f64) -> Option<Arc<Prepared>> {
        let list = self.by_method.get(method)?;
        let entries = &self.table.entries;
        list.iter().rfind(|(b, _)| entries[*b as usize].bucket_mb_s <= mb_s).or(list.first()).map(|(_, p)| p.clone())
    }

    /// The plan with content hash `hash`, of any method and bucket.
    pub fn by_hash(&self, hash: &Digest) -> Option<Arc<Prepared>> {
        self.by_hash.get(hash).cloned()
    }
}
