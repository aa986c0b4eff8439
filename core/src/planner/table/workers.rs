//! Work spread over threads, each with its own copy of the model: how a table's buckets are
//! planned, and their bounds computed, in parallel.

use super::TableModel;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `work` on the calling thread with `graph` and on `threads - 1` more threads (fewer when
/// there are fewer `items`), each with its own [`TableModel::share`] copy made before it starts (a
/// graph serves one thread at a time; the copy shares its weights). Every call takes item
/// indices from one shared counter through its `next` argument until that returns `None`, so
/// each item is taken exactly once, by whichever thread is free. Returns each thread's result,
/// the calling thread's first; `None` for a thread that panicked.
pub(super) fn on_shared_copies<G: TableModel, R: Send>(
    graph: &G,
    threads: usize,
    items: usize,
    work: impl Fn(&G, &dyn Fn() -> Option<usize>) -> R + Sync,
) -> Vec<Option<R>> {
    let copies: Vec<G> = (1..threads.clamp(1, items.max(1))).map(|_| graph.share()).collect();
    let counter = AtomicUsize::new(0);
    let next = || {
        let i = counter.fetch_add(1, Ordering::Relaxed);
        (i < items).then_some(i)
    };
    std::thread::scope(|scope| {
        let (work, next) = (&work, &next);
        let handles: Vec<_> = copies.into_iter().map(|g| scope.spawn(move || work(&g, next))).collect();
        let mut out = vec![Some(work(graph, next))];
        out.extend(handles.into_iter().map(|h| h.join().ok()));
        out
    })
}
