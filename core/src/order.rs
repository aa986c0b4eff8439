//! Orderings for priority queues.

use std::cmp::Ordering;

/// An entry of a [`std::collections::BinaryHeap`] (a max-heap) that pops the smallest `key`
/// first ([`f64::total_cmp`]), ties by the smaller `tie` first: an event queue ordered by time
/// then by sequence number, or a ready list ordered by priority then by index.
///
/// Only `key` and `tie` take part in comparisons (and equality); `item` is carried along.
#[derive(Debug, Clone, Copy)]
pub struct Earliest<T> {
    /// The primary key, smallest first.
    pub key: f64,
    /// The tie-break between equal keys, smallest first.
    pub tie: u64,
    /// What the entry carries.
    pub item: T,
}

impl<T> Earliest<T> {
    /// An entry of `item` at `key`, ties broken by `tie`.
    pub fn new(key: f64, tie: u64, item: T) -> Self {
        Earliest { key, tie, item }
    }
}

impl<T> PartialEq for Earliest<T> {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl<T> Eq for Earliest<T> {}

impl<T> PartialOrd for Earliest<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl<T> Ord for Earliest<T> {
    /// Reversed: the smaller key (then the smaller tie) is the greater entry.
    fn cmp(&self, o: &Self) -> Ordering {
        o.key.total_cmp(&self.key).then(o.tie.cmp(&self.tie))
    }
}

#[cfg(test)]
mod tests {
    use super::Earliest;
    use std::collections::BinaryHeap;

    #[test]
    fn the_heap_pops_the_smallest_key_first_and_ties_by_the_smaller_tie() {
        let entries = [(2.0, 0, 'a'), (0.5, 7, 'b'), (1.0, 3, 'c'), (1.0, 1, 'd'), (-1.0, 9, 'e'), (0.5, 2, 'f')];
        let mut heap: BinaryHeap<Earliest<char>> = entries.iter().map(|&(k, t, c)| Earliest::new(k, t, c)).collect();
        let mut order = String::new();
        while let Some(e) = heap.pop() {
            order.push(e.item);
        }
        assert_eq!(order, "efbdca");
        // Equality ignores the item.
        assert_eq!(Earliest::new(1.0, 1, 'x'), Earliest::new(1.0, 1, 'y'));
        assert!(Earliest::new(1.0, 1, ()) > Earliest::new(1.0, 2, ()));
        assert!(Earliest::new(1.0, 9, ()) > Earliest::new(2.0, 0, ()));
    }
}
