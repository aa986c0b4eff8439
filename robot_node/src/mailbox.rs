//! A one-slot mailbox (never a queue): by default the newest value replaces an unread one, so a
//! busy consumer always gets the latest frame; [`Mailbox::put_if_empty`] keeps the unread one
//! instead. Either way the producer (a subscription callback) never blocks.

use std::sync::{Mutex, PoisonError};

use tokio::sync::Notify;

/// Holds at most one value.
#[derive(Debug, Default)]
pub struct Mailbox<T> {
    slot: Mutex<Option<T>>,
    ready: Notify,
}

impl<T> Mailbox<T> {
    /// An empty mailbox.
    pub fn new() -> Mailbox<T> {
        Mailbox { slot: Mutex::new(None), ready: Notify::new() }
    }

    /// Puts `value` in, returning the unread value it replaced (dropped by the caller).
    pub fn put(&self, value: T) -> Option<T> {
        // A std mutex: held only to swap an Option, never across an await.
        let old = self.slot.lock().unwrap_or_else(PoisonError::into_inner).replace(value);
        self.ready.notify_one();
        old
    }

    /// Puts `value` in only if the mailbox is empty; otherwise hands `value` back (dropped by the
    /// caller) and the unread value stays.
    pub fn put_if_empty(&self, value: T) -> Option<T> {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_some() {
            return Some(value);
        }
        *slot = Some(value);
        drop(slot);
        self.ready.notify_one();
        None
    }

    /// Takes the value, if any, without waiting.
    pub fn try_take(&self) -> Option<T> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// Waits for a value and takes it.
    pub async fn take(&self) -> T {
        loop {
            if let Some(v) = self.try_take() {
                return v;
            }
            self.ready.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn newest_wins_and_take_waits() {
        let m = std::sync::Arc::new(Mailbox::new());
        assert_eq!(m.put(1), None);
        assert_eq!(m.put(2), Some(1), "an unread value is replaced and returned");
        assert_eq!(m.take().await, 2);
        assert_eq!(m.try_take(), None);
        assert_eq!(m.put_if_empty(7), None, "an empty mailbox takes the value");
        assert_eq!(m.put_if_empty(8), Some(8), "a full one hands the new value back");
        assert_eq!(m.take().await, 7, "and keeps the unread one");
        let m2 = m.clone();
        let waiter = tokio::spawn(async move { m2.take().await });
        tokio::task::yield_now().await;
        m.put(3);
        assert_eq!(tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.ok().and_then(Result::ok), Some(3));
    }
}
