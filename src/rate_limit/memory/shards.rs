//! `Shards`: the buckets of every key, split over many locks.
//!
//! One lock for the whole map would put every call of every core in one
//! queue. Here a key's hash picks one of many shards, each a small map behind
//! its own mutex, so calls on different keys rarely wait for each other, and
//! calls on one key are serialised, which is what makes a decision exact.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};

use foldhash::fast::RandomState;

use super::bucket::Bucket;

/// The buckets of one shard, by key.
pub(super) type ShardMap = HashMap<Box<str>, Bucket, RandomState>;

/// One shard, on a cache line of its own so two cores working on
/// neighbouring shards do not fight over one line.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Shard(Mutex<ShardMap>);

/// The buckets of every key.
#[derive(Debug)]
pub(super) struct Shards {
    shards: Box<[Shard]>,
    /// Picks the shard. Seeded apart from the maps' own hashers: with one
    /// seed, every key of a shard would share the low hash bits the map
    /// indexes by, and crowd into a few of its slots.
    picker: RandomState,
}

impl Shards {
    /// `count` shards, rounded up to a power of two.
    pub(super) fn new(count: usize) -> Self {
        let count = count.max(1).next_power_of_two();
        Self {
            shards: (0..count).map(|_| Shard::default()).collect(),
            picker: RandomState::default(),
        }
    }

    /// The number of shards.
    pub(super) fn len(&self) -> usize {
        self.shards.len()
    }

    /// Locks the shard that holds `key`.
    pub(super) fn lock_for(&self, key: &str) -> MutexGuard<'_, ShardMap> {
        let hash = self.picker.hash_one(key);
        // The high bits are the best mixed; the count is a power of two.
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        lock(&self.shards[index])
    }

    /// How many buckets all shards hold.
    pub(super) fn bucket_count(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).len()).sum()
    }

    /// Drops every bucket that holds nothing at `now_ms`, trims the others,
    /// and releases spare room. Locks one shard at a time, so calls on other
    /// shards go on while it runs.
    pub(super) fn sweep(&self, now_ms: u64) {
        for shard in self.shards.iter() {
            let mut map = lock(shard);
            map.retain(|_, bucket| !bucket.sweep(now_ms));
            // A flood of keys leaves a large, empty table behind; give the
            // room back once three quarters of it are unused.
            let len = map.len();
            if map.capacity() > 64 && len * 4 < map.capacity() {
                map.shrink_to(len * 2);
            }
        }
    }
}

/// Locks a shard. No code panics while holding the lock, and a bucket is
/// consistent after every statement, so a poisoned lock is still usable.
fn lock(shard: &Shard) -> MutexGuard<'_, ShardMap> {
    shard.0.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The budget of a key that holds 100 hits: a few hundred bytes all told,
    // against about 1,245 for a `HashMap<String, VecDeque<u64>>`.
    #[test]
    fn a_key_with_100_hits_costs_under_400_bytes() {
        let shards = Shards::new(64);
        let keys = 20_000;
        for k in 0..keys {
            let key = format!("user:{k:06}");
            let mut map = shards.lock_for(&key);
            let mut bucket = Bucket::new(0, 60_000);
            for t in 1..100 {
                bucket.push(t * 13, 99);
            }
            map.insert(key.into(), bucket);
        }
        // Each heap block also costs the allocator a header of about 16
        // bytes and rounds up to 16.
        let block = |n: usize| (n + 16).div_ceil(16) * 16;
        let mut bytes = 0;
        for shard in shards.shards.iter() {
            let map = lock(shard);
            bytes += map.capacity() * (size_of::<(Box<str>, Bucket)>() + 1);
            for (key, bucket) in map.iter() {
                bytes += block(key.len()) + block(bucket.heap_bytes());
            }
        }
        let per_key = bytes / keys;
        assert!(per_key <= 400, "{per_key} bytes a key");
    }
}
