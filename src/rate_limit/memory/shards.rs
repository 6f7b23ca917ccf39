//! `Shards`: the buckets of every key, in the crate's sharded map: calls on
//! different keys rarely wait for each other, and calls on one key are
//! serialised, which is what makes a decision exact.

use super::bucket::Bucket;
use crate::sharded::{Locked, ShardedMap};

/// The buckets of every key.
#[derive(Debug)]
pub(super) struct Shards(ShardedMap<Bucket>);

impl Shards {
    /// `count` shards, rounded up to a power of two.
    pub(super) fn new(count: usize) -> Self {
        Self(ShardedMap::new(count))
    }

    /// The number of shards.
    pub(super) fn len(&self) -> usize {
        self.0.shard_count()
    }

    /// Locks the shard that holds `key`, for work on that key's bucket.
    pub(super) fn lock<'k>(&self, key: &'k str) -> Locked<'_, 'k, Bucket> {
        self.0.lock(key)
    }

    /// How many buckets all shards hold.
    pub(super) fn bucket_count(&self) -> usize {
        self.0.len()
    }

    /// Drops every bucket that holds nothing at `now_ms` and trims the
    /// others, one shard lock at a time.
    pub(super) fn sweep(&self, now_ms: u64) {
        self.0.retain(|_, bucket| !bucket.sweep(now_ms));
    }
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
            let mut bucket = Bucket::new(0, 60_000);
            for t in 1..100 {
                bucket.push(t * 13, 99);
            }
            shards.lock(&key).insert(bucket);
        }
        // Each heap block also costs the allocator a header of about 16
        // bytes and rounds up to 16.
        let block = |n: usize| (n + 16).div_ceil(16) * 16;
        let mut bytes = 0;
        shards.0.for_each_shard(|table| {
            bytes += table.allocated_bytes();
            for slot in table.iter() {
                let key_heap = if slot.key.is_heap_allocated() {
                    block(slot.key.len())
                } else {
                    0
                };
                bytes += key_heap + block(slot.value.heap_bytes());
            }
        });
        let per_key = bytes / keys;
        assert!(per_key <= 400, "{per_key} bytes a key");
    }
}
