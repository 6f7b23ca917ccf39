//! `Shards`: the buckets of every key, in the crate's sharded map: calls on
//! different keys rarely wait for each other, and calls that change one key
//! are serialised, which is what makes a decision exact. Beside the shards,
//! the note of every key found full ([`FullNotes`]), read without a lock.

use super::bucket::Bucket;
use super::full_notes::FullNotes;
use crate::sharded::{Locked, Place, ShardedMap};

/// The buckets of every key.
#[derive(Debug)]
pub(super) struct Shards {
    map: ShardedMap<Bucket>,
    full: FullNotes,
}

impl Shards {
    /// `count` shards, rounded up to a power of two.
    pub(super) fn new(count: usize) -> Self {
        let map = ShardedMap::new(count);
        let full = FullNotes::new(map.shard_count());
        Self { map, full }
    }

    /// The number of shards.
    pub(super) fn len(&self) -> usize {
        self.map.shard_count()
    }

    /// Where `key`'s bucket lives.
    #[inline]
    pub(super) fn place<'k>(&self, key: &'k str) -> Place<'k> {
        self.map.place(key)
    }

    /// When the key of `place` next has a place under `max` hits per
    /// `window_ms`, if its note says it is full at `now_ms`. Takes no lock.
    #[inline]
    pub(super) fn noted_full(
        &self,
        place: Place<'_>,
        max: u32,
        window_ms: u64,
        now_ms: u64,
    ) -> Option<u64> {
        self.full.frees_at(place, max, window_ms, now_ms)
    }

    /// Locks the shard of `place`. The caller then either
    /// [notes](Self::note_full) a refusal or [forgets](Self::forget_full)
    /// the key's note before it lets go.
    #[inline]
    pub(super) fn lock_place<'k>(&self, place: Place<'k>) -> Locked<'_, 'k, Bucket> {
        self.map.lock_place(place)
    }

    /// Notes, with the shard of `place` locked, that its key is full under
    /// `max` hits per `window_ms` until `frees_at_ms`.
    #[inline]
    pub(super) fn note_full(&self, place: Place<'_>, max: u32, window_ms: u64, frees_at_ms: u64) {
        self.full.write(place, max, window_ms, frees_at_ms);
    }

    /// Forgets, with the shard of `place` locked, that its key is full.
    #[inline]
    pub(super) fn forget_full(&self, place: Place<'_>) {
        self.full.forget(place);
    }

    /// Locks the shard that holds `key` and forgets its note, for work that
    /// may change that key's bucket.
    pub(super) fn lock<'k>(&self, key: &'k str) -> Locked<'_, 'k, Bucket> {
        let place = self.place(key);
        let locked = self.map.lock_place(place);
        self.forget_full(place);
        locked
    }

    /// Drops the bucket `locked` holds, the key of `place`'s, and frees its
    /// note, as the sweep does: a note left behind would hold its place in
    /// the shard's notes for the driver's life.
    pub(super) fn drop_bucket(&self, locked: &mut Locked<'_, '_, Bucket>, place: Place<'_>) {
        locked.remove();
        self.full.remove(place);
    }

    /// How many notes the shards hold.
    #[cfg(test)]
    pub(super) fn note_count(&self) -> usize {
        self.full.len()
    }

    /// How many buckets all shards hold.
    pub(super) fn bucket_count(&self) -> usize {
        self.map.len()
    }

    /// Drops every bucket that holds nothing at `now_ms` and trims the
    /// others, one shard lock at a time.
    pub(super) fn sweep(&self, now_ms: u64) {
        // A dropped bucket's note is freed; the others stay: a note's
        // bucket was last set by the call that wrote it, so the sweep drops
        // only hits older than the one the note waits for (see
        // `FullNotes`).
        self.map.retain_telling(
            |_, bucket| !bucket.sweep(now_ms),
            |place| self.full.remove(place),
        );
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
        shards.map.for_each_shard(|table| {
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

    // The sweep frees the note of each bucket it drops, and only those.
    #[test]
    fn the_sweep_frees_the_notes_of_the_buckets_it_drops() {
        let shards = Shards::new(4);
        for (key, at_ms) in [("gone:1", 0), ("gone:2", 0), ("kept", 50_000)] {
            let place = shards.place(key);
            shards.lock_place(place).insert(Bucket::new(at_ms, 60_000));
            shards.note_full(place, 1, 60_000, at_ms + 60_000);
        }
        assert_eq!(shards.full.len(), 3);
        // At 61 s the first two buckets hold nothing; the third a hit.
        shards.sweep(61_000);
        assert_eq!(shards.bucket_count(), 1);
        assert_eq!(shards.full.len(), 1);
        assert_eq!(
            shards.noted_full(shards.place("kept"), 1, 60_000, 61_000),
            Some(110_000)
        );
        assert_eq!(
            shards.noted_full(shards.place("gone:1"), 1, 60_000, 61_000),
            None
        );
    }
}
