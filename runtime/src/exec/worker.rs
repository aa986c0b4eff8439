//! A dedicated thread that owns one loaded copy of a model (a libtorch tensor is `Send` but not
//! `Sync`: one graph serves one thread at a time) and runs jobs on it: a warm model replica.
//! Async code hands it closures and awaits their results without blocking the executor. Another
//! thread can run the same model beside it without a second copy of the weights
//! ([`Worker::share`]: its graph's weights share storage with this one's).

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
        // libtorch's intra-op thread count is per thread: carry the caller's over.
        Self::spawn_with(name, tch::get_num_threads(), load).await
    }

    /// As [`Worker::spawn`], its thread running libtorch on `threads` intra-op threads.
    async fn spawn_with(name: &str, threads: i32, load: impl FnOnce() -> lop::Result<Graph> + Send + 'static) -> Result<(Worker, Loaded)> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = oneshot::channel();
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

    /// Starts another thread named `name` whose model is a copy of this worker's sharing its
    /// weights' storage ([`Graph::share`]): the two run jobs at the same time (a robot's cameras'
    /// inferences, each waiting on the edge while the other computes) with the weights, their
    /// packed copies and oneDNN primitives in memory once. It runs libtorch on as many intra-op
    /// threads as this one. A layout changed on one copy later (`Graph::set_layout`) replaces
    /// that copy's handles only.
    ///
    /// # Errors
    /// [`Error::Executor`] when this worker is gone or the thread cannot start.
    pub async fn share(&self, name: &str) -> Result<Worker> {
        let (graph, threads) = self.call(|g| (g.share(), tch::get_num_threads())).await?;
        let (worker, _) = Worker::spawn_with(name, threads, move || Ok(graph)).await?;
        Ok(worker)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::mpsc;
    use std::time::Duration;

    use super::Worker;

    /// The address of the first weight of `g`'s model.
    fn first_weight(g: &mut lop::graph::Graph) -> usize {
        g.nodes.iter().flat_map(|n| n.op.weights()).next().map_or(0, |t| t.data_ptr() as usize)
    }

    /// A shared worker runs its jobs at the same time as the original (each job waits until the
    /// other has started: on one thread the first would wait in vain) on the same weights.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shared_worker_runs_beside_the_original_on_the_same_weights() {
        let (first, _) = Worker::spawn("share-a", || lop::zoo::build("resnet18")).await.unwrap();
        let second = first.share("share-b").await.unwrap();
        let (a, b) = (first.call(first_weight).await.unwrap(), second.call(first_weight).await.unwrap());
        assert!(a != 0 && a == b, "the shared worker holds a weight of its own: {a:#x} vs {b:#x}");
        let ((tx_a, rx_a), (tx_b, rx_b)) = (mpsc::channel::<()>(), mpsc::channel::<()>());
        let meet = |tx: mpsc::Sender<()>, rx: mpsc::Receiver<()>| {
            move |_: &mut lop::graph::Graph| {
                let _ = tx.send(());
                rx.recv_timeout(Duration::from_secs(10)).is_ok()
            }
        };
        let (one, two) = (first.run(meet(tx_a, rx_b)), second.run(meet(tx_b, rx_a)));
        assert_eq!((one.await.unwrap(), two.await.unwrap()), (true, true), "the two workers' jobs did not run at once");
    }
}
