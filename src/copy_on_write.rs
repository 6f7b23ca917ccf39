//! `CopyOnWrite`: a value read on every request and changed at boot.
//!
//! The service container and the registry of named limiters are looked up
//! by every request and changed a handful of times when the application
//! starts. A lock, even a read lock nobody waits for, writes its own word on
//! every read, and two cores reading at once pass that cache line between
//! them (a container lookup under a read lock took 24 ns on one thread and
//! about 100 ns on each of two, docs/performance-history.md). Here a change copies
//! the value, changes the copy and publishes it whole; a read loads the
//! current one through `arc-swap`, whose readers write only a slot of their
//! own thread.

use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, Guard};

/// A value readers load without a lock and changes replace whole.
#[derive(Default)]
pub(crate) struct CopyOnWrite<T> {
    /// The current value.
    current: ArcSwap<T>,
    /// Held while a change builds the next value, so that two changes at
    /// once do not lose one.
    changing: Mutex<()>,
}

impl<T: Clone> CopyOnWrite<T> {
    /// The current value, for as long as the guard is held.
    pub(crate) fn load(&self) -> Guard<Arc<T>> {
        self.current.load()
    }

    /// Applies `change` to a copy of the value and makes the copy current:
    /// readers see the value before or after, never one being changed.
    pub(crate) fn change<R>(&self, change: impl FnOnce(&mut T) -> R) -> R {
        let _changing = self.changing.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = T::clone(&self.current.load());
        let result = change(&mut next);
        self.current.store(Arc::new(next));
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loaded_value_stays_as_it_was_while_a_change_lands() {
        let value: CopyOnWrite<Vec<u32>> = CopyOnWrite::default();
        value.change(|v| v.push(1));
        let before = value.load();
        assert_eq!(value.change(|v| v.len()), 1);
        value.change(|v| v.push(2));
        assert_eq!(**before, [1]);
        assert_eq!(**value.load(), [1, 2]);
    }

    #[test]
    fn changes_at_once_are_all_kept() {
        let value: CopyOnWrite<Vec<u32>> = CopyOnWrite::default();
        std::thread::scope(|s| {
            for n in 0..8 {
                let value = &value;
                s.spawn(move || value.change(|v| v.push(n)));
            }
        });
        let mut seen = value.load().to_vec();
        seen.sort_unstable();
        assert_eq!(seen, (0..8).collect::<Vec<_>>());
    }
}
