//! `ShardedMap`: a map split over many locks, shared by the in-memory
//! limiter and the in-memory cache store.
//!
//! One lock for a whole map would put every call of every core in one queue.
//! Here a key's hash picks one of many shards, each a small table behind its
//! own mutex, so calls on different keys rarely wait for each other, and
//! calls on one key are serialised, which is what makes a decision on that
//! key exact.
//!
//! The mutex is `parking_lot`'s. When two cores call on one hot key, one
//! waits for the other for the few nanoseconds a decision holds the lock;
//! `parking_lot` spins, then yields, before it parks the waiter, where the
//! standard mutex parks it in the kernel after a shorter spin, and a parked
//! waiter costs a system call on each side. With two threads deciding one
//! key (the memory driver bench, eight measurements of each, taken in turn)
//! it measured 0.95x to 1.24x governor's keyed limiter, against 0.95x to
//! 1.86x with the standard mutex, and with no poisoning to check a decision
//! takes a few instructions fewer.
//!
//! A lookup on a large map misses the caches, and what it costs is how many
//! cache lines it touches. So a key is hashed once, for both the shard and
//! its place in the shard's table, and each slot is one cache line of its
//! own holding the key (up to 24 bytes inline) and its value side by side.
//! A shard's slots sit one after the other in the order their keys came,
//! and a small index (a control byte and a 4-byte slot number a key) finds
//! them: a lookup reads the index, which stays in the caches far longer
//! than the slots would, and one slot's line. Keys of one shard that came
//! together sit together, so a run of calls over them reads memory in
//! order, which the processor fetches ahead; and the slots fill their
//! allocation, where a table of whole slots keeps up to half of them
//! empty. Over 100,000 keys called in the order they came, a decision took
//! about a third less time than with the slots in the hash table itself,
//! in any other order about the same, and a key at 100 hits takes 299
//! bytes instead of 361 (the memory driver and memory footprint benches,
//! docs/performance-history.md). Such a run reads one order a shard, 64
//! at once, which some processors follow and others do not; a heap block
//! a slot, which makes it one order whatever the shard, cost more on calls
//! in no order than it saved (docs/performance.md, the thirteenth
//! session). One array of slots of atomic words shared by the shards makes
//! it one order too; `benches/slot_layout.rs` measures that layout beside
//! this one: on one processor it halved the walk in the order keys came
//! and cost calls in no order a tenth more, on another it saved a fifth
//! and cost a third (docs/performance.md, the fourteenth and fifteenth
//! sessions).
//!
//! What a call does once it has its slot counts as well: while a core waits
//! for one slot's line, the instructions queued behind the miss keep it
//! from reaching the next call's lookup. On the processor where the walk
//! in the order keys came was slowest, a memory-driver decision cut from
//! 475 instructions to 378 (the key compared a word at a time here, by
//! [`same_key`], among them) went from 1.5x to 1.8x of governor's time on
//! that walk to parity (docs/performance.md, the sixteenth session).

use std::cell::Cell;
use std::hash::BuildHasher;

use compact_str::CompactString;
use foldhash::fast::RandomState;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use parking_lot::{Mutex, MutexGuard};

/// A key as the shards store it. A key of up to 24 bytes (an address key,
/// `user:<id>`) lives inside the slot itself.
pub(crate) type Key = CompactString;

/// One entry of a shard's table: a key and its value on one cache line.
///
/// The line holds 64 bytes, so a value fits in 40; [`ShardedMap::new`]
/// refuses to compile for a bigger one.
#[repr(align(64))]
#[derive(Debug)]
pub(crate) struct Slot<V> {
    pub(crate) key: Key,
    pub(crate) value: V,
}

/// The slots of one shard, in the order their keys came (a removal moves
/// the last slot into the hole), and an index from a key's hash to its slot.
#[derive(Debug)]
pub(crate) struct Table<V> {
    index: HashTable<u32>,
    slots: Vec<Slot<V>>,
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Self {
            index: HashTable::new(),
            slots: Vec::new(),
        }
    }
}

impl<V> Table<V> {
    /// How many entries the table holds.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The entries, in no promised order.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Slot<V>> {
        self.slots.iter()
    }

    /// The bytes the table has allocated.
    #[cfg(test)]
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.slots.capacity() * size_of::<Slot<V>>()
            + self.index.capacity() * 8 / 7 * (size_of::<u32>() + 1)
    }

    fn position(&self, hash: u64, key: &str) -> Option<usize> {
        let slots = &self.slots;
        self.index
            .find(hash, |&i| same_key(&slots[i as usize].key, key))
            .map(|&i| i as usize)
    }

    /// Gives `key` `value`; the key's slot.
    fn insert(&mut self, hash: u64, key: &str, value: V, hasher: &RandomState) -> usize {
        let slots = &mut self.slots;
        match self.index.entry(
            hash,
            |&i| same_key(&slots[i as usize].key, key),
            |&i| hasher.hash_one(slots[i as usize].key.as_str()),
        ) {
            Entry::Occupied(at) => {
                let at = *at.get() as usize;
                slots[at].value = value;
                at
            }
            Entry::Vacant(place) => {
                place.insert(u32::try_from(slots.len()).expect("a shard holds under 2^32 keys"));
                slots.push(Slot {
                    key: key.into(),
                    value,
                });
                slots.len() - 1
            }
        }
    }

    fn remove(&mut self, hash: u64, key: &str, hasher: &RandomState) -> Option<V> {
        let slots = &self.slots;
        let (at, _) = self
            .index
            .find_entry(hash, |&i| same_key(&slots[i as usize].key, key))
            .ok()?
            .remove();
        Some(self.take(at as usize, hasher))
    }

    /// Takes the slot at `at` out, its index entry already gone: the last
    /// slot moves into its place.
    fn take(&mut self, at: usize, hasher: &RandomState) -> V {
        let last = self.slots.len() - 1;
        if at != last {
            let moved = hasher.hash_one(self.slots[last].key.as_str());
            *self
                .index
                .find_mut(moved, |&i| i as usize == last)
                .expect("every slot has its index entry") = at as u32;
        }
        self.slots.swap_remove(at).value
    }

    /// Keeps the entries `keep` says to keep, and tells `dropped` the key
    /// and hash of each one it drops.
    fn retain(
        &mut self,
        mut keep: impl FnMut(&str, &mut V) -> bool,
        mut dropped: impl FnMut(&str, u64),
        hasher: &RandomState,
    ) {
        let mut at = 0;
        while at < self.slots.len() {
            let slot = &mut self.slots[at];
            if keep(&slot.key, &mut slot.value) {
                at += 1;
                continue;
            }
            let hash = hasher.hash_one(slot.key.as_str());
            dropped(&slot.key, hash);
            self.index
                .find_entry(hash, |&i| i as usize == at)
                .expect("every slot has its index entry")
                .remove();
            self.take(at, hasher);
        }
        let len = self.slots.len();
        if self.slots.capacity() > 64 && len * 4 < self.slots.capacity() {
            self.slots.shrink_to(len * 2);
            let slots = &self.slots;
            self.index.shrink_to(len * 2, |&i| {
                hasher.hash_one(slots[i as usize].key.as_str())
            });
        }
    }
}

/// One shard, on a cache line of its own so two cores working on
/// neighbouring shards do not fight over one line.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Padded<V>(Mutex<Table<V>>);

/// A map from string keys to `V`, split over a power-of-two number of
/// mutex-guarded shards.
#[derive(Debug)]
pub(crate) struct ShardedMap<V> {
    shards: Box<[Padded<V>]>,
    /// Hashes a key once for both the shard (bits 32 and up) and the slot
    /// (the table indexes by the low bits and tags by the top seven).
    hasher: RandomState,
}

impl<V> ShardedMap<V> {
    /// `count` shards, rounded up to a power of two (at least one).
    pub(crate) fn new(count: usize) -> Self {
        const {
            assert!(
                size_of::<Slot<V>>() == 64,
                "a sharded map's value must fit in 40 bytes, beside its key on one cache line"
            )
        };
        let count = count.max(1).next_power_of_two();
        Self {
            shards: (0..count)
                .map(|_| Padded(Mutex::new(Table::default())))
                .collect(),
            hasher: RandomState::default(),
        }
    }

    /// The number of shards.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Locks the shard that holds `key`, for work on that key.
    pub(crate) fn lock<'k>(&self, key: &'k str) -> Locked<'_, 'k, V> {
        self.lock_place(self.place(key))
    }

    /// Locks the shard of `place`, for work on its key.
    pub(crate) fn lock_place<'k>(&self, place: Place<'k>) -> Locked<'_, 'k, V> {
        self.locked(lock(&self.shards[place.shard]), place)
    }

    /// Where `key` lives: its hash and its shard, for callers that keep
    /// something of their own for each shard.
    #[inline]
    pub(crate) fn place<'k>(&self, key: &'k str) -> Place<'k> {
        let hash = self.hasher.hash_one(key);
        // The count is a power of two.
        let shard = (hash >> 32) as usize & (self.shards.len() - 1);
        Place { key, hash, shard }
    }

    /// The locked shard `table` of `place`, for work on its key.
    fn locked<'m, 'k>(
        &'m self,
        table: MutexGuard<'m, Table<V>>,
        place: Place<'k>,
    ) -> Locked<'m, 'k, V> {
        Locked {
            table,
            hasher: &self.hasher,
            hash: place.hash,
            key: place.key,
            slot: Cell::new(None),
        }
    }

    /// How many entries all shards hold.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).len()).sum()
    }

    /// Keeps the entries for which `keep` returns true and gives back the
    /// room of a table that a flood of keys left mostly empty. Locks one
    /// shard at a time, so calls on other shards go on while it runs.
    pub(crate) fn retain(&self, keep: impl FnMut(&str, &mut V) -> bool) {
        self.retain_telling(keep, |_| {});
    }

    /// [`retain`](Self::retain), telling `dropped` the place of each entry
    /// it drops while that entry's shard is still locked, for callers that
    /// keep something of their own for each key.
    pub(crate) fn retain_telling(
        &self,
        mut keep: impl FnMut(&str, &mut V) -> bool,
        mut dropped: impl FnMut(Place<'_>),
    ) {
        for (shard, table) in self.shards.iter().enumerate() {
            lock(table).retain(
                &mut keep,
                |key, hash| dropped(Place { key, hash, shard }),
                &self.hasher,
            );
        }
    }

    /// Runs `f` on every shard's table in turn, for measurements and tests.
    #[cfg(test)]
    pub(crate) fn for_each_shard(&self, mut f: impl FnMut(&Table<V>)) {
        for shard in self.shards.iter() {
            f(&lock(shard));
        }
    }
}

/// A key, its hash, and the number of the shard that holds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'k> {
    key: &'k str,
    hash: u64,
    shard: usize,
}

impl<'k> Place<'k> {
    /// The key.
    pub(crate) fn key(&self) -> &'k str {
        self.key
    }

    /// The key's hash, which picked its shard.
    pub(crate) fn hash(&self) -> u64 {
        self.hash
    }

    /// The number of the key's shard, below [`ShardedMap::shard_count`].
    pub(crate) fn shard(&self) -> usize {
        self.shard
    }
}

/// The shard of one key, locked: what a call reads and changes of that key.
/// The key's hash is kept, so no step hashes it again.
pub(crate) struct Locked<'m, 'k, V> {
    table: MutexGuard<'m, Table<V>>,
    hasher: &'m RandomState,
    hash: u64,
    key: &'k str,
    /// The key's slot once looked up (`Some(None)`: it has none), so that
    /// the calls of one locked piece of work look the key up once: nothing
    /// else changes the table while it is locked.
    slot: Cell<Option<Option<usize>>>,
}

impl<V> Locked<'_, '_, V> {
    /// The key's value, if it has one.
    pub(crate) fn get(&self) -> Option<&V> {
        let at = self.slot()?;
        Some(&self.table.slots[at].value)
    }

    /// The key's value to change, if it has one.
    #[inline]
    pub(crate) fn get_mut(&mut self) -> Option<&mut V> {
        let at = self.slot()?;
        Some(&mut self.table.slots[at].value)
    }

    /// Gives the key `value`, in place of the one it had.
    pub(crate) fn insert(&mut self, value: V) {
        let at = self.table.insert(self.hash, self.key, value, self.hasher);
        self.slot.set(Some(Some(at)));
    }

    /// Takes the key's value out of the map.
    pub(crate) fn remove(&mut self) -> Option<V> {
        self.slot.set(Some(None));
        self.table.remove(self.hash, self.key, self.hasher)
    }

    /// The key's slot, looked up on the first call.
    fn slot(&self) -> Option<usize> {
        if let Some(slot) = self.slot.get() {
            return slot;
        }
        let slot = self.table.position(self.hash, self.key);
        self.slot.set(Some(slot));
        slot
    }
}

/// Whether the stored key `stored` is `key`.
///
/// A key of 4 to 24 bytes (an address key, `user:<id>`) is compared in two
/// or three loads of a word a side, overlapping where the length is not a
/// multiple of the word, where the slices' own comparison calls `memcmp`:
/// every lookup compares the key it finds, and the call and its dispatch on
/// the length cost a decision about thirty instructions.
#[inline]
fn same_key(stored: &Key, key: &str) -> bool {
    let (a, b) = (stored.as_bytes(), key.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        17..=24 => {
            word8(a, 0) == word8(b, 0)
                && word8(a, 8) == word8(b, 8)
                && word8(a, n - 8) == word8(b, n - 8)
        }
        _ => a == b,
    }
}

/// The four bytes of `bytes` from `at`, as one word.
#[inline(always)]
fn word4(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_ne_bytes(word)
}

/// The eight bytes of `bytes` from `at`, as one word.
#[inline(always)]
fn word8(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_ne_bytes(word)
}

/// Locks a shard. A panic while a shard is locked does not poison it: the
/// code that holds a shard lock does not panic halfway through a change.
fn lock<V>(shard: &Padded<V>) -> MutexGuard<'_, Table<V>> {
    shard.0.lock()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every length the word comparison covers and some past it: a key is
    // itself, and not a key that differs from it in any one byte, nor one
    // a byte shorter or longer.
    #[test]
    fn a_key_matches_itself_and_nothing_that_differs_in_one_byte() {
        for len in 0..=40 {
            let text: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            let stored = Key::from(text.as_str());
            assert!(same_key(&stored, &text), "length {len}");
            for at in 0..len {
                let mut other = text.clone().into_bytes();
                other[at] = b'Z';
                let other = String::from_utf8(other).unwrap();
                assert!(!same_key(&stored, &other), "length {len}, byte {at}");
            }
            assert!(!same_key(&stored, &format!("{text}a")), "length {len}");
            if len > 0 {
                assert!(!same_key(&stored, &text[1..]), "length {len}");
            }
        }
    }

    #[test]
    fn a_key_has_one_shard_and_calls_on_it_are_serialised() {
        let map: ShardedMap<u32> = ShardedMap::new(4);
        let place = map.place("k");
        assert!(place.shard() < map.shard_count());
        assert_eq!(map.place("k").shard(), place.shard(), "one key, one shard");
        assert_eq!(map.place("k").hash(), place.hash());
        map.lock_place(place).insert(0);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    for _ in 0..10_000 {
                        *map.lock_place(map.place("k")).get_mut().unwrap() += 1;
                    }
                });
            }
        });
        assert_eq!(map.lock("k").get(), Some(&20_000));
    }

    #[test]
    fn one_locked_key_sees_its_own_inserts_and_removals() {
        let map: ShardedMap<u32> = ShardedMap::new(1);
        for k in 0..10 {
            map.lock(&format!("other{k}")).insert(k);
        }
        let mut locked = map.lock("k");
        assert_eq!(locked.get(), None);
        locked.insert(1);
        assert_eq!(locked.get(), Some(&1));
        *locked.get_mut().unwrap() += 1;
        locked.insert(5);
        assert_eq!(locked.get(), Some(&5));
        assert_eq!(locked.remove(), Some(5));
        assert_eq!(locked.get(), None);
        assert_eq!(locked.remove(), None);
        locked.insert(7);
        assert_eq!(locked.get_mut().map(|v| *v), Some(7));
        drop(locked);
        assert_eq!(map.lock("k").get(), Some(&7));
        assert_eq!(map.len(), 11);
        for k in 0..10 {
            assert_eq!(map.lock(&format!("other{k}")).get(), Some(&k));
        }
    }

    #[test]
    fn keys_land_in_one_shard_each_and_retain_drops() {
        let map: ShardedMap<u32> = ShardedMap::new(5);
        assert_eq!(map.shard_count(), 8);
        for k in 0..1_000_u32 {
            map.lock(&format!("k{k}")).insert(k);
        }
        assert_eq!(map.len(), 1_000);
        assert_eq!(map.lock("k7").get(), Some(&7));
        map.retain(|_, v| *v % 2 == 0);
        assert_eq!(map.len(), 500);
        assert_eq!(map.lock("k7").get(), None);
        assert_eq!(map.lock("k8").get(), Some(&8));
    }

    #[test]
    fn retain_telling_gives_the_place_of_each_dropped_key() {
        let map: ShardedMap<u32> = ShardedMap::new(8);
        for k in 0..1_000_u32 {
            map.lock(&format!("k{k}")).insert(k);
        }
        let mut dropped = Vec::new();
        map.retain_telling(
            |_, v| *v % 3 != 0,
            |place| {
                let expected = map.place(place.key());
                assert_eq!(
                    (place.hash(), place.shard()),
                    (expected.hash(), expected.shard())
                );
                dropped.push(place.key().to_owned());
            },
        );
        dropped.sort_by_key(|key| key[1..].parse::<u32>().unwrap());
        let expected: Vec<String> = (0..1_000).step_by(3).map(|k| format!("k{k}")).collect();
        assert_eq!(dropped, expected);
        assert_eq!(map.len(), 1_000 - 334);
    }

    #[test]
    fn a_removal_moves_the_last_slot_and_every_key_is_still_found() {
        let map: ShardedMap<u32> = ShardedMap::new(1);
        for k in 0..10_u32 {
            map.lock(&format!("k{k}")).insert(k);
        }
        // k0's slot takes k9, the last; k5's takes k8.
        assert_eq!(map.lock("k0").remove(), Some(0));
        assert_eq!(map.lock("k5").remove(), Some(5));
        map.retain(|_, v| *v != 9);
        assert_eq!(map.len(), 7);
        for k in [1_u32, 2, 3, 4, 6, 7, 8] {
            assert_eq!(map.lock(&format!("k{k}")).get(), Some(&k), "k{k}");
        }
        for gone in ["k0", "k5", "k9"] {
            assert_eq!(map.lock(gone).get(), None, "{gone}");
        }
        map.lock("k10").insert(10);
        assert_eq!(map.lock("k10").get(), Some(&10));
        assert_eq!(map.len(), 8);
    }

    #[test]
    fn insert_replaces_and_remove_takes_out() {
        let map: ShardedMap<String> = ShardedMap::new(4);
        map.lock("a-key-longer-than-twenty-four-bytes")
            .insert("one".to_owned());
        map.lock("a-key-longer-than-twenty-four-bytes")
            .insert("two".to_owned());
        assert_eq!(map.len(), 1);
        let mut locked = map.lock("a-key-longer-than-twenty-four-bytes");
        assert_eq!(locked.get_mut().map(|v| v.as_str()), Some("two"));
        assert_eq!(locked.remove().as_deref(), Some("two"));
        assert_eq!(locked.remove(), None);
        drop(locked);
        assert_eq!(map.len(), 0);
    }

    proptest::proptest! {
        // Against a plain HashMap, on any sequence of inserts, removals,
        // lookups and retains, over short keys (inside the slot) and long
        // ones (on the heap), the map holds the same entries.
        #[test]
        fn agrees_with_a_hash_map(
            ops in proptest::collection::vec((0_u8..4, 0_u16..300, proptest::bool::ANY), 1..400),
        ) {
            let map: ShardedMap<u16> = ShardedMap::new(4);
            let mut model = std::collections::HashMap::new();
            for (op, n, long) in ops {
                let key = if long {
                    format!("a-key-longer-than-the-slot-holds-{n}")
                } else {
                    format!("k{n}")
                };
                match op {
                    0 => {
                        map.lock(&key).insert(n);
                        model.insert(key, n);
                    }
                    1 => proptest::prop_assert_eq!(map.lock(&key).remove(), model.remove(&key)),
                    2 => proptest::prop_assert_eq!(map.lock(&key).get().copied(), model.get(&key).copied()),
                    _ => {
                        map.retain(|_, v| *v % 3 != n % 3);
                        model.retain(|_, v| *v % 3 != n % 3);
                    }
                }
                proptest::prop_assert_eq!(map.len(), model.len());
            }
            for (key, value) in &model {
                proptest::prop_assert_eq!(map.lock(key).get().copied(), Some(*value));
            }
        }
    }

    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(size_of::<Slot<u64>>(), 64);
        assert_eq!(align_of::<Slot<u64>>(), 64);
    }
}
