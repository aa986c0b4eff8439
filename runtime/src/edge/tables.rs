//! Plan books: the schedule table of each model, robot profile and input wire, with every
//! method's plan prepared. A book is loaded from the table cache or planned once, in the
//! background on the model's first replica, and shared by every session that needs it; a failed
//! build is forgotten so that a later Hello tries again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lop::plan::Side;
use lop::planner::table::load_or_build;
use lop::profile::Profile;
use tokio::sync::watch;

use super::state::{BookResult, BookSlot, EdgeService, Inner};
use crate::error::{Error, Result};
use crate::exec::InputWire;
use crate::plans::PlanBook;

impl Inner {
    /// Schedule tables being loaded or planned now.
    pub(super) fn builds_in_progress(&self) -> usize {
        let books = self.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        books.values().filter(|slot| matches!(slot, BookSlot::Building(..))).count()
    }

    /// The plan book for a model and robot profile: ready, being built, or started now in the
    /// background (loaded from the table cache or planned). The channel holds its result once
    /// there is one; a failed build is forgotten, so that a later Hello tries again.
    pub(super) fn book(this: &Arc<Inner>, mi: usize, robot: Profile, input_wire: InputWire) -> watch::Receiver<Option<BookResult>> {
        let key = (mi, robot.hash(), input_wire);
        let mut books = this.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match books.get(&key) {
            Some(BookSlot::Ready(b)) => return watch::channel(Some(Ok(b.clone()))).1,
            Some(BookSlot::Building(rx, _)) => return rx.clone(),
            None => {}
        }
        let (tx, rx) = watch::channel(None);
        books.insert(key.clone(), BookSlot::Building(rx.clone(), Instant::now()));
        drop(books);
        let inner = this.clone();
        tokio::spawn(async move {
            let result = inner.build_book(mi, robot, input_wire).await.map_err(|e| e.to_string());
            let mut books = inner.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match &result {
                // A book for a profile forgotten while it was built is not kept.
                Ok(b) if inner.knows_profile(&key.1) => {
                    books.insert(key, BookSlot::Ready(b.clone()));
                }
                Ok(_) => {
                    books.remove(&key);
                }
                Err(e) => {
                    tracing::warn!(model = %inner.models[mi].id, error = %e, "the schedule table could not be built");
                    books.remove(&key);
                }
            }
            let _ = tx.send(Some(result));
        });
        rx
    }

    /// Loads the schedule table from the cache or plans it (on the model's first replica), then
    /// prepares its plans.
    async fn build_book(&self, mi: usize, robot: Profile, input_wire: InputWire) -> Result<Arc<PlanBook>> {
        let model = &self.models[mi];
        let (server, spec, dir) = (model.server_profile.clone(), self.opts.spec.clone(), self.opts.cache_dir.clone());
        let replicas = model.replicas();
        let worker = &replicas.first().ok_or_else(|| Error::InvalidConfig { what: format!("model '{}' is not loaded", model.id) })?.worker;
        let started = Instant::now();
        tracing::info!(model = %model.id, robot_profile = %robot.hash(), buckets = spec.buckets.len(), "schedule table: loading from the cache or planning");
        // A coded frame is priced by both profiles' measured costs of the codec.
        let spec = spec.clone().with_frame_codec(spec.frame.codec, &robot, &server)?;
        let (table, _, cache) = worker.call(move |g| load_or_build(&dir, g, &robot, &server, &spec, 1)).await??;
        tracing::info!(model = %model.id, ?cache, seconds = started.elapsed().as_secs_f64(), "schedule table ready");
        Ok(Arc::new(PlanBook::prepare(worker, &model.meta, Arc::new(table), input_wire).await?))
    }
}

impl EdgeService {
    /// Schedule tables being loaded or planned now, and how long the oldest has taken so far.
    pub fn tables_building(&self) -> (usize, Duration) {
        let books = self.inner.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        books.values().fold((0, Duration::ZERO), |(n, oldest), slot| match slot {
            BookSlot::Building(_, since) => (n + 1, oldest.max(since.elapsed())),
            BookSlot::Ready(_) => (n, oldest),
        })
    }

    /// Plans (or loads from the cache) the schedule tables of the robot profiles in the
    /// configured profiles folder, for each model whose profile they are, and waits for them;
    /// returns how many are ready. A table that fails is logged and not counted.
    pub async fn prepare_tables(&self) -> usize {
        let Some(dir) = self.inner.opts.profiles_dir.clone() else { return 0 };
        let Ok(entries) = std::fs::read_dir(&dir) else { return 0 };
        let mut waits = Vec::new();
        for path in entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")) {
            let Ok(p) = Profile::load(&path) else { continue };
            if p.role != Side::Robot {
                continue;
            }
            for (mi, m) in self.inner.models.iter().enumerate() {
                if p.model_hash == m.server_profile.model_hash && !m.replicas().is_empty() {
                    tracing::info!(model = %m.id, profile = %path.display(), "preparing the schedule table of a configured robot profile");
                    waits.push(Inner::book(&self.inner, mi, p.clone(), InputWire::Native));
                }
            }
        }
        let mut ready = 0;
        for mut rx in waits {
            if let Ok(r) = rx.wait_for(Option::is_some).await
                && matches!(&*r, Some(Ok(_)))
            {
                ready += 1;
            }
        }
        ready
    }
}
