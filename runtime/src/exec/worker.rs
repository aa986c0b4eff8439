//! A dedicated thread that owns one loaded copy of a model (libtorch tensors are not shared
//! between threads) and runs jobs on it: a warm model replica. Async code hands it closures and
//! awaits their results without blocking the executor.

use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use lop::graph::Graph;
use tokio::sync::oneshot;

use super::wire::GraphMeta;
use crate::error::{Error, Result};

type Job = Box<dyn FnOnce(&mut Graph) + Send>;

/// What a worker reports once its model is loaded.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The model's name.
    pub name: String,
    /// [`Graph::content_hash`].
    pub hash: String,
    /// Shapes, dtypes and row axes of every value.
    pub meta: GraphMeta,
}

/// A thread with a model, running one job at a time. Clones share the thread and its one copy
/// of the model (a fleet robot's sessions with every edge use one worker); dropping the last
/// clone lets the queued jobs finish and joins the thread.
#[derive(Debug, Clone)]
pub struct Worker {
    thread: Arc<WorkerThread>,
}

#[derive(Debug)]
struct WorkerThread {
    tx: Option<mpsc::Sender<Job>>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts a thread named `name`, loads the model there with `load`, and reports it.
    ///
    /// # Errors
    /// [`Error::Engine`] when loading fails; [`Error::Executor`] when the thread cannot start.
    pub async fn spawn(name: &str, load: impl FnOnce() -> lop::Result<Graph> + Send + 'static) -> Result<(Worker, Loaded)> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = oneshot::channel();
        // libtorch's intra-op thread count is per thread: carry the caller's over.
        let threads = tch::get_num_threads();
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                tch::set_num_threads(threads);
                let loaded = load().and_then(|g| {
                    let hash = g.content_hash()?;
                    Ok((Loaded { name: g.name.clone(), hash, meta: GraphMeta::of(&g) }, g))
                });
                let mut graph = match loaded {
                    Ok((info, g)) => {
                        let _ = ready_tx.send(Ok(info));
                        g
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                while let Ok(job) = rx.recv() {
                    job(&mut graph);
                }
            })
            .map_err(|e| Error::Executor(format!("starting worker thread '{name}': {e}")))?;
        let loaded = ready_rx.await.map_err(|_| Error::Executor(format!("worker '{name}' died while loading")))?.map_err(Error::Engine)?;
        Ok((Worker { thread: Arc::new(WorkerThread { tx: Some(tx), handle: Some(handle) }) }, loaded))
    }

    /// Queues `job`; its result comes through the returned receiver (which errors if the job
    /// panicked or the worker is gone).
    pub fn run<R: Send + 'static>(&self, job: impl FnOnce(&mut Graph) -> R + Send + 'static) -> oneshot::Receiver<R> {
        let (tx, rx) = oneshot::channel();
        if let Some(q) = &self.thread.tx {
            let _ = q.send(Box::new(move |g: &mut Graph| {
                let _ = tx.send(job(g));
            }));
        }
        rx
    }

    /// Runs `job` and awaits its result.
    ///
    /// # Errors
    /// [`Error::Executor`] when the worker is gone or the job panicked.
    pub async fn call<R: Send + 'static>(&self, job: impl FnOnce(&mut Graph) -> R + Send + 'static) -> Result<R> {
        self.run(job).await.map_err(|_| Error::Executor("the worker thread is gone (a job panicked?)".into()))
    }
}

impl Drop for WorkerThread {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
