//! Where a sharded map's slots lie, and what a walk over 100,000 keys costs
//! with each layout: the measurement behind "what would close it" for the
//! memory driver's walk in first-seen order (docs/performance.md).
//!
//! ```text
//! cargo bench --bench slot_layout
//! ```
//!
//! The memory driver's map keeps each shard's slots in an array of the
//! shard's own, in the order the shard's keys came, so a walk over keys in
//! the order they were first seen reads 64 ordered streams of slots at
//! once, which some processors' prefetching follows and others' does not.
//! One array of slots shared by all the shards, in the order keys came to
//! any of them, makes that walk one stream whatever the count of shards. In
//! safe Rust such an array is written under each shard's lock through
//! atomics: a load or a store of an `AtomicU64` with `Relaxed` ordering is
//! a plain move on x86-64 and on AArch64, and the shard's lock orders it.
//!
//! The layouts here do the same work as the driver's decision on a
//! full key: a hash, the shard's lock, a lookup in the shard's index (a
//! slot number a key), the key compared in the slot, and the slot's oldest
//! hit and count read and compared. Nothing else of the driver is in it,
//! so the table compares the layouts, not the limiters. Every key is
//! first filled to its limit, in first-seen order; then, in turns, 21
//! rounds of 200,000 decisions by each layout, on one thread and on two,
//! over the keys walked in first-seen and in shuffled order, the median
//! reported:
//!
//! - `own arrays, 64 shards`: the driver's layout;
//! - `one array, 64 shards`: one shared array of atomic slots, grown by
//!   segments;
//! - `own arrays, 1 shard`: one ordered stream, one lock (one thread only);
//! - `whole array, 64 shards`: the shared array allocated whole for the
//!   100,000 keys, which a map that grows cannot do: what of the shared
//!   array's cost is the segments' extra step.

mod support;

use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use foldhash::fast::FixedState;
use hashbrown::HashTable;
use parking_lot::Mutex;

/// Keys, as the memory driver bench's: `user:0` to `user:99999`.
const KEYS: usize = 100_000;
/// Hits a key holds when full, and the window they are in.
const LIMIT: u32 = 100;
const WINDOW_MS: u64 = 60_000;
/// The frozen time of every decision.
const NOW_MS: u64 = 1_700_000_000_000;
const ROUNDS: usize = 21;
const DECISIONS: u64 = 200_000;

/// A key of up to 24 bytes as three words and its length.
#[derive(Clone, Copy, PartialEq, Eq)]
struct KeyWords {
    words: [u64; 3],
    len: u64,
}

impl KeyWords {
    fn of(key: &str) -> Self {
        let bytes = key.as_bytes();
        assert!(bytes.len() <= 24, "a key here fits in 24 bytes");
        let mut padded = [0_u8; 24];
        padded[..bytes.len()].copy_from_slice(bytes);
        let word = |i: usize| {
            u64::from_le_bytes(padded[8 * i..8 * i + 8].try_into().expect("eight bytes"))
        };
        Self {
            words: [word(0), word(1), word(2)],
            len: bytes.len() as u64,
        }
    }
}

/// A slot of a shard's own array: the key and its hits' summary on one
/// cache line, as the driver's slot.
#[repr(align(64))]
struct Slot {
    key: KeyWords,
    oldest: u64,
    newest: u64,
    count: u32,
}

/// A slot of the shared array, written under its shard's lock.
#[repr(align(64))]
#[derive(Default)]
struct AtomicSlot {
    key: [AtomicU64; 3],
    len: AtomicU64,
    oldest: AtomicU64,
    newest: AtomicU64,
    count: AtomicU64,
}

impl AtomicSlot {
    fn key(&self) -> KeyWords {
        KeyWords {
            words: [0, 1, 2].map(|i| self.key[i].load(Ordering::Relaxed)),
            len: self.len.load(Ordering::Relaxed),
        }
    }
}

/// Whether a key holding `count` hits, the oldest at `oldest`, admits one
/// more now (it never does once the keys are full: the measured calls are
/// refusals, as the driver's flood on a frozen clock).
fn admits(oldest: u64, count: u32) -> bool {
    count < LIMIT || oldest + WINDOW_MS <= NOW_MS
}

struct OwnArray {
    index: HashTable<u32>,
    slots: Vec<Slot>,
}

/// One of the two layouts behind `shards` locks.
enum Layout {
    /// Each shard its index and its own array of slots.
    OwnArrays(Box<[Padded<OwnArray>]>),
    /// Each shard its index into one array of slots they share.
    OneArray {
        indexes: Box<[Padded<HashTable<u32>>]>,
        slots: Shared,
        next: AtomicU32,
    },
}

/// The array the shards share: grown by segments, or allocated whole.
enum Shared {
    Segments(Segments),
    Whole(Box<[AtomicSlot]>),
}

impl Shared {
    /// Slot `n`, taken (its segment allocated if need be).
    fn take(&self, n: u32) -> &AtomicSlot {
        match self {
            Self::Segments(segments) => segments.take(n),
            Self::Whole(slots) => &slots[n as usize],
        }
    }
}

impl std::ops::Index<usize> for Shared {
    type Output = AtomicSlot;

    /// Slot `n`, which must have been taken.
    fn index(&self, n: usize) -> &AtomicSlot {
        match self {
            Self::Segments(segments) => &segments[n],
            Self::Whole(slots) => &slots[n],
        }
    }
}

/// The shared array as a map that grows would keep it, without moving a
/// slot and without `unsafe`: segments of 1,024, 2,048, 4,096... slots,
/// each allocated when the first slot in it is taken, so that slot `n` is
/// found with a count of leading zeros and one more load.
struct Segments(Box<[OnceLock<Box<[AtomicSlot]>>]>);

/// Slots in the first segment: a power of two.
const FIRST_SEGMENT: usize = 1024;

/// Segments for 1,024 x (2^22 - 1) slots, all but the last 1,024 numbers a
/// `u32` holds.
const SEGMENTS: usize = 22;

impl Segments {
    fn new() -> Self {
        Self((0..SEGMENTS).map(|_| OnceLock::new()).collect())
    }

    /// The segment and the place in it of slot `n`.
    fn locate(n: u32) -> (usize, usize) {
        let biased = n as usize + FIRST_SEGMENT;
        let top = usize::BITS - 1 - biased.leading_zeros();
        let segment = top as usize - FIRST_SEGMENT.trailing_zeros() as usize;
        (segment, biased - (1 << top))
    }

    /// Slot `n`, taken (its segment allocated if need be).
    fn take(&self, n: u32) -> &AtomicSlot {
        let (segment, at) = Self::locate(n);
        &self.0[segment].get_or_init(|| {
            (0..FIRST_SEGMENT << segment)
                .map(|_| AtomicSlot::default())
                .collect()
        })[at]
    }
}

impl std::ops::Index<usize> for Segments {
    type Output = AtomicSlot;

    /// Slot `n`, which must have been taken.
    fn index(&self, n: usize) -> &AtomicSlot {
        let (segment, at) = Self::locate(n as u32);
        &self.0[segment]
            .get()
            .expect("a slot in the index was taken")[at]
    }
}

struct Map {
    name: &'static str,
    layout: Layout,
    hasher: FixedState,
    /// Where the next one-thread run starts in the walk.
    cursor: AtomicUsize,
}

impl Map {
    fn own_arrays(name: &'static str, shards: usize) -> Self {
        let shards = (0..shards)
            .map(|_| {
                Padded::new(OwnArray {
                    index: HashTable::new(),
                    slots: Vec::new(),
                })
            })
            .collect();
        Self::new(name, Layout::OwnArrays(shards))
    }

    fn one_array(name: &'static str, shards: usize, slots: Shared) -> Self {
        Self::new(
            name,
            Layout::OneArray {
                indexes: (0..shards).map(|_| Padded::new(HashTable::new())).collect(),
                slots,
                next: AtomicU32::new(0),
            },
        )
    }

    fn new(name: &'static str, layout: Layout) -> Self {
        Self {
            name,
            layout,
            hasher: FixedState::with_seed(7),
            cursor: AtomicUsize::new(0),
        }
    }

    /// One decision on `key`: `true` when it admits (and records) a hit.
    fn decide(&self, key: &str) -> bool {
        let hash = self.hasher.hash_one(key);
        let words = KeyWords::of(key);
        match &self.layout {
            Layout::OwnArrays(shards) => {
                let mut shard = shards[shard_of(hash, shards.len())].0.lock();
                let OwnArray { index, slots } = &mut *shard;
                match index.find(hash, |&at| slots[at as usize].key == words) {
                    Some(&at) => {
                        let slot = &mut slots[at as usize];
                        if !admits(slot.oldest, slot.count) {
                            return false;
                        }
                        slot.newest = NOW_MS;
                        slot.count += 1;
                    }
                    None => {
                        let at = slots.len() as u32;
                        slots.push(Slot {
                            key: words,
                            oldest: NOW_MS,
                            newest: NOW_MS,
                            count: 1,
                        });
                        let slots = &*slots;
                        index.insert_unique(hash, at, |&at| {
                            self.hasher.hash_one(key_text(&slots[at as usize].key))
                        });
                    }
                }
                true
            }
            Layout::OneArray {
                indexes,
                slots,
                next,
            } => {
                let mut index = indexes[shard_of(hash, indexes.len())].0.lock();
                match index.find(hash, |&at| slots[at as usize].key() == words) {
                    Some(&at) => {
                        let slot = &slots[at as usize];
                        let count = slot.count.load(Ordering::Relaxed) as u32;
                        if !admits(slot.oldest.load(Ordering::Relaxed), count) {
                            return false;
                        }
                        slot.newest.store(NOW_MS, Ordering::Relaxed);
                        slot.count.store(u64::from(count + 1), Ordering::Relaxed);
                    }
                    None => {
                        let at = next.fetch_add(1, Ordering::Relaxed);
                        let slot = slots.take(at);
                        for (word, value) in slot.key.iter().zip(words.words) {
                            word.store(value, Ordering::Relaxed);
                        }
                        slot.len.store(words.len, Ordering::Relaxed);
                        slot.oldest.store(NOW_MS, Ordering::Relaxed);
                        slot.newest.store(NOW_MS, Ordering::Relaxed);
                        slot.count.store(1, Ordering::Relaxed);
                        index.insert_unique(hash, at, |&at| {
                            self.hasher.hash_one(key_text(&slots[at as usize].key()))
                        });
                    }
                }
                true
            }
        }
    }

    /// `iters` decisions over `walk` from `start`, wrapping; where the next
    /// run starts.
    fn run(&self, walk: &[String], start: usize, iters: u64) -> usize {
        let mut at = start;
        for _ in 0..iters {
            black_box(self.decide(&walk[at]));
            at += 1;
            if at == walk.len() {
                at = 0;
            }
        }
        at
    }

    /// `iters` decisions in all on `threads` threads, each starting at its
    /// own part of the walk; how long they took together.
    fn run_threads(&self, walk: &[String], threads: usize, iters: u64) -> Duration {
        support::walks::on_threads(
            walk.len(),
            threads,
            iters,
            &self.cursor,
            |_, start, count| self.run(walk, start, count),
        )
    }
}

/// The shard of a hash, as the driver's map picks it (a power of two).
fn shard_of(hash: u64, shards: usize) -> usize {
    (hash >> 32) as usize & (shards - 1)
}

/// A shard's lock on a cache line of its own, as the driver's.
#[repr(align(64))]
struct Padded<T>(Mutex<T>);

impl<T> Padded<T> {
    fn new(value: T) -> Self {
        Self(Mutex::new(value))
    }
}

/// The key a slot holds, as text again (for the index's rehash).
fn key_text(key: &KeyWords) -> String {
    let bytes: Vec<u8> = key
        .words
        .iter()
        .flat_map(|word| word.to_le_bytes())
        .take(key.len as usize)
        .collect();
    String::from_utf8(bytes).expect("keys are ASCII")
}

fn main() {
    // The segments' boundaries: 1,024 slots, then 2,048 from slot 1,024.
    for (n, place) in [
        (0, (0, 0)),
        (1023, (0, 1023)),
        (1024, (1, 0)),
        (3071, (1, 2047)),
        (3072, (2, 0)),
    ] {
        assert_eq!(Segments::locate(n), place, "slot {n}");
    }
    let first_seen: Vec<String> = (0..KEYS).map(|n| format!("user:{n}")).collect();
    let maps = [
        Map::own_arrays("own arrays, 64 shards", 64),
        Map::one_array(
            "one array, 64 shards",
            64,
            Shared::Segments(Segments::new()),
        ),
        Map::own_arrays("own arrays, 1 shard", 1),
        Map::one_array(
            "whole array, 64 shards",
            64,
            Shared::Whole((0..KEYS).map(|_| AtomicSlot::default()).collect()),
        ),
    ];
    for map in &maps {
        for _ in 0..LIMIT {
            for key in &first_seen {
                map.decide(key);
            }
        }
        assert!(
            first_seen.iter().all(|key| !map.decide(key)),
            "{}: every key is full",
            map.name
        );
    }
    println!(
        "== slot_layout: {KEYS} full keys, {ROUNDS} rounds of {DECISIONS} decisions a run, in turns, median ns per decision =="
    );
    println!("machine: {}", support::machine::describe());
    // Each layout on one thread and on two; the one-lock layout on one.
    let runs: Vec<(&Map, usize)> = vec![
        (&maps[0], 1),
        (&maps[1], 1),
        (&maps[2], 1),
        (&maps[3], 1),
        (&maps[0], 2),
        (&maps[1], 2),
        (&maps[3], 2),
    ];
    print!("{:<12}", "walk");
    for (map, threads) in &runs {
        print!(" {:>26}", format!("{}, {threads}t", map.name));
    }
    println!();
    let mut ratios = Vec::new();
    for (name, walk) in [
        ("first-seen", first_seen.clone()),
        ("shuffled", support::walks::shuffled(&first_seen)),
    ] {
        let samples = support::walks::in_turns(runs.len(), ROUNDS, |run| {
            let (map, threads) = runs[run];
            // One untimed pass first, which brings the run's data back into
            // the caches.
            map.run_threads(&walk, threads, walk.len() as u64);
            let elapsed = map.run_threads(&walk, threads, DECISIONS);
            elapsed.as_nanos() as f64 / DECISIONS as f64
        });
        let medians: Vec<f64> = samples.iter().map(|ns| support::median(ns)).collect();
        print!("{name:<12}");
        for ns in &medians {
            print!(" {ns:>26.1}");
        }
        println!();
        ratios.push(format!(
            "{name}: one array / own arrays, 64 shards: {:.2}x on one thread, {:.2}x on two",
            medians[1] / medians[0],
            medians[5] / medians[4]
        ));
        ratios.push(format!(
            "{name}: whole array / own arrays, 64 shards: {:.2}x on one thread, {:.2}x on two",
            medians[3] / medians[0],
            medians[6] / medians[4]
        ));
    }
    for line in ratios {
        println!("{line}");
    }
}
