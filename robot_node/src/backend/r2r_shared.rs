//! What the r2r backend's files share (feature `ros2`): a task aborted when dropped, and r2r
//! publisher handles made shareable across threads.

/// A task of the node's runtime, aborted when dropped.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An r2r publisher handle shared across threads.
pub(super) struct Shared<P>(pub(super) P);

// SAFETY: r2r's publishers are not Send/Sync only because they hold a `Weak` to rcl's publisher
// struct (raw pointers). We only call `publish`, which r2r implements with `rcl_publish`, documented
// thread-safe by rcl ("Thread-safe: Yes" for rcl_publish), while the node owns the publisher's
// lifetime; a publisher whose node is gone fails to upgrade and returns an error.
unsafe impl<P> Send for Shared<P> {}
// SAFETY: as above; `&Shared` only reaches `publish`.
unsafe impl<P> Sync for Shared<P> {}
