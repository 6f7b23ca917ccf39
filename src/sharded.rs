//! `ShardedMap`: a map split over many locks, shared by the in-memory
//! limiter and the in-memory cache store.
//!
//! One lock for a whole map would put every call of every core in one queue.
//! Here a key's hash picks one of many shards, each a small map behind its
//! own mutex, so calls on different keys rarely wait for each other, and
//! calls on one key are serialised, which is what makes a decision on that
//! key exact.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};

use compact_str::CompactString;
use foldhash::fast::RandomState;

/// The entries of one shard, by key. A key of up to 24 bytes (an address
/// key, `user:<id>`) lives inside the table entry itself, so a lookup reads
/// no second block of memory to compare it.
pub(crate) type Shard<V> = HashMap<Key, V, RandomState>;

/// A key as the shards store it.
pub(crate) type Key = CompactString;

/// One shard, on a cache line of its own so two cores working on
/// neighbouring shards do not fight over one line.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Padded<V>(Mutex<Shard<V>>);

/// A map from string keys to `V`, split over a power-of-two number of
/// mutex-guarded shards.
#[derive(Debug)]
pub(crate) struct ShardedMap<V> {
    shards: Box<[Padded<V>]>,
    /// Picks the shard. Seeded apart from the maps' own hashers: with one
    /// seed, every key of a shard would share the hash bits the map indexes
    /// by, and crowd into a few of its slots.
    picker: RandomState,
}

impl<V> ShardedMap<V> {
    /// `count` shards, rounded up to a power of two (at least one).
    pub(crate) fn new(count: usize) -> Self {
        let count = count.max(1).next_power_of_two();
        Self {
            shards: (0..count)
                .map(|_| Padded(Mutex::new(HashMap::with_hasher(RandomState::default()))))
                .collect(),
            picker: RandomState::default(),
        }
    }

    /// The number of shards.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Locks the shard that holds `key`.
    pub(crate) fn lock_for(&self, key: &str) -> MutexGuard<'_, Shard<V>> {
        let hash = self.picker.hash_one(key);
        // The high bits are the best mixed; the count is a power of two.
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        lock(&self.shards[index])
    }

    /// How many entries all shards hold.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).len()).sum()
    }

    /// Keeps the entries for which `keep` returns true and gives back the
    /// room of a table that a flood of keys left mostly empty. Locks one
    /// shard at a time, so calls on other shards go on while it runs.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&str, &mut V) -> bool) {
        for shard in self.shards.iter() {
            let mut map = lock(shard);
            map.retain(|key, value| keep(key, value));
            let len = map.len();
            if map.capacity() > 64 && len * 4 < map.capacity() {
                map.shrink_to(len * 2);
            }
        }
    }

    /// Runs `f` on every shard in turn, for measurements and tests.
    #[cfg(test)]
    pub(crate) fn for_each_shard(&self, mut f: impl FnMut(&Shard<V>)) {
        for shard in self.shards.iter() {
            f(&lock(shard));
        }
    }
}

/// Locks a shard. The code that holds a shard lock does not panic halfway
/// through a change, so a poisoned lock still guards consistent entries.
fn lock<V>(shard: &Padded<V>) -> MutexGuard<'_, Shard<V>> {
    shard.0.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_land_in_one_shard_each_and_retain_drops() {
        let map: ShardedMap<u32> = ShardedMap::new(5);
        assert_eq!(map.shard_count(), 8);
        for k in 0..1_000_u32 {
            map.lock_for(&format!("k{k}"))
                .insert(format!("k{k}").into(), k);
        }
        assert_eq!(map.len(), 1_000);
        assert_eq!(map.lock_for("k7").get("k7"), Some(&7));
        map.retain(|_, v| *v % 2 == 0);
        assert_eq!(map.len(), 500);
    }
}
