//! `FullNotes`: for every key found full, until when it stays full, in
//! lines that a call reads without any lock, so that a refusal writes
//! nothing a second core reads.
//!
//! A refusal changes nothing: a full bucket stays full, with the same hit
//! holding the place, until that hit leaves the window or the bucket
//! changes. So a refusal made under the shard's lock notes when the key's
//! next place frees, and the calls after it with the same limit are refused
//! by reading that note. A lock, even one no other call holds, is an atomic
//! write to the shard's cache line; when two cores call over the same keys,
//! each such write takes the line from the other core about two times in
//! three, whatever the count of shards, and over 100,000 keys that transfer was
//! most of what a second thread cost (docs/performance.md, the nineteenth
//! session). A note is written when the key's state changes and then only
//! read, so both cores keep its line. A key that is never refused gets no
//! note; one that is costs 64 bytes more while its bucket lives.
//!
//! A note is exact because every locked call on its key writes it again (a
//! refusal) or forgets it (an admission, or any other work that may change
//! the bucket), in the same hold of the shard's lock as the change: a note
//! lives from the call that wrote it to the next locked call on its key,
//! and in that time nothing changes the bucket but the sweep, which drops
//! only hits that have left the window of the noted bucket (the noting call
//! was the last to set it), so never the hit the note waits for. A wall
//! clock that steps back makes a note older than the clock: a note whose
//! place frees more than a window after now was written before such a step
//! and is passed over for the lock, where the bucket's hits are moved back
//! to the clock; one written before a smaller step (its hit already at or
//! before now) is still taken, and waits for its hit as it was stamped,
//! which is never more than a window. Each note
//! is read under a version count (a sequence lock), so a reader that
//! overlaps a change of the note sees the change and takes the lock
//! instead.
//!
//! Each shard's notes sit one after the other in the order their keys were
//! first noted, one cache line each, in blocks that double in size and are
//! never moved; an index of 4-byte entries (a tag of the key's hash and the
//! note's number), twice as long as the notes it finds, finds them. An
//! index that fills is replaced by one twice as long, the old one kept, so
//! a reader never reads freed memory; the index is only a hint, since a
//! reader takes a note only when the note's own key is the one asked for,
//! and an entry it misses sends it to the lock. A note is freed, and its
//! line reused, when the sweep drops its key's bucket. Keys of up to 32
//! bytes are noted, at most [`MAX_NOTES`] a shard; a longer key, or one
//! past that count, is decided under the lock every time. Blocks and
//! indexes are kept for the driver's life: the notes take 64 bytes and a
//! few bytes of index and hash for each key refused within one window at
//! the busiest time so far, and freed notes are handed out again. At
//! [`MAX_NOTES`] a shard that is about 5.7 MiB (4 MiB of notes, 1 MiB of
//! indexes, all kept, half a MiB of hashes and the free list), some 360
//! MiB over 64 shards (407 MiB of resident memory measured after four
//! million keys were refused within one window). Giving it back would need
//! the blocks swapped out under an epoch that lock-free readers hold, so
//! that none reads a block after it is freed.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

use parking_lot::Mutex;

use crate::sharded::Place;

/// The words of a noted key: keys of up to `8 * KEY_WORDS` bytes are noted.
const KEY_WORDS: usize = 4;
/// The notes of a shard's first block; block `b` holds `FIRST_BLOCK << b`.
const FIRST_BLOCK: usize = 16;
/// The blocks of a shard.
const BLOCKS: usize = 12;
/// The most notes a shard holds, all its blocks full: 65,520, so that an
/// index entry keeps a note's number in 16 bits.
pub(super) const MAX_NOTES: usize = FIRST_BLOCK * ((1 << BLOCKS) - 1);
/// Entries of a shard's first index; index `g` holds `FIRST_INDEX << g`.
const FIRST_INDEX: usize = 2 * FIRST_BLOCK;
/// Indexes enough for [`MAX_NOTES`] at most half full: `32 << 12`
/// entries.
const INDEXES: usize = 13;
const _: () = assert!(
    MAX_NOTES <= u16::MAX as usize && FIRST_INDEX << (INDEXES - 1) >= 2 * MAX_NOTES,
    "a note's number fits an index entry, and the last index holds every note"
);

/// One key's note, on a cache line of its own.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Note {
    /// Odd while the note is being changed; raised by every change.
    version: AtomicU64,
    /// The key's length in the low byte and the limit above it.
    length_and_limit: AtomicU64,
    /// The window of the noted limit, in milliseconds.
    window_ms: AtomicU64,
    /// When the key next has a place, in Unix milliseconds; 0 when it is
    /// not full.
    frees_at_ms: AtomicU64,
    /// The key's bytes, in little-endian words, the last one padded with
    /// zeros.
    key: [AtomicU64; KEY_WORDS],
}

/// What a reader saw of a note, between two equal reads of its version.
struct Seen {
    length_and_limit: u64,
    window_ms: u64,
    frees_at_ms: u64,
    same_key: bool,
}

impl Note {
    /// The note as one change left it, with whether it is of `key`; `None`
    /// while a change overlaps the reads.
    #[inline]
    fn read(&self, key: &NotedKey) -> Option<Seen> {
        let version = self.version.load(Ordering::Acquire);
        if version & 1 == 1 {
            return None;
        }
        let length_and_limit = self.length_and_limit.load(Ordering::Relaxed);
        let window_ms = self.window_ms.load(Ordering::Relaxed);
        let frees_at_ms = self.frees_at_ms.load(Ordering::Relaxed);
        let same_key = self.holds(key);
        // The reads above happen before the version is read again: a
        // change that overlapped them has raised it.
        fence(Ordering::Acquire);
        (self.version.load(Ordering::Relaxed) == version).then_some(Seen {
            length_and_limit,
            window_ms,
            frees_at_ms,
            same_key,
        })
    }

    /// Whether the note is of `key`: exact when no change overlaps it, as
    /// for the holder of the shard's lock, the only writer.
    #[inline(always)]
    fn holds(&self, key: &NotedKey) -> bool {
        // Every word is compared, the padding of a shorter key included:
        // four loads of one line, and no branch on the length.
        let words = self
            .key
            .iter()
            .zip(key.words)
            .fold(0, |differ, (word, expected)| {
                differ | (word.load(Ordering::Relaxed) ^ expected)
            });
        words == 0 && self.length_and_limit.load(Ordering::Relaxed) & 0xff == key.len
    }

    /// Runs `write` on the note between two raises of its version: odd
    /// before the writes, even again after them.
    fn change(&self, write: impl FnOnce(&Self)) {
        let version = self.version.load(Ordering::Relaxed);
        self.version
            .store(version.wrapping_add(1), Ordering::Relaxed);
        // The odd version is seen before any of the writes.
        fence(Ordering::Release);
        write(self);
        self.version
            .store(version.wrapping_add(2), Ordering::Release);
    }
}

/// What only the holder of the shard's lock reads and changes.
#[derive(Debug, Default)]
struct Writer {
    /// Notes freed by the sweep, to hand out again.
    free: Vec<u16>,
    /// The hash of each note's key, by note number, to fill a new index:
    /// one for every note handed out so far, freed ones included.
    hashes: Vec<u64>,
}

impl Writer {
    /// How many notes are in use.
    fn live(&self) -> usize {
        self.hashes.len() - self.free.len()
    }
}

/// The notes of one shard.
#[derive(Debug, Default)]
struct ShardNotes {
    /// Which of `indexes` is in use.
    current: AtomicUsize,
    /// Entries `tag << 16 | number + 1`, 0 for none; the tag is the top 16
    /// bits of the key's hash, the first place probed its low bits.
    indexes: [OnceLock<Box<[AtomicU32]>>; INDEXES],
    /// The notes, block `b` holding `FIRST_BLOCK << b` of them.
    blocks: [OnceLock<Box<[Note]>>; BLOCKS],
    /// Taken only by holders of the shard's lock, so never waited for.
    writer: Mutex<Writer>,
}

/// The block and the place in it of note `number`.
#[inline]
fn block_of(number: usize) -> (usize, usize) {
    let n = number + FIRST_BLOCK;
    let top = usize::BITS - 1 - n.leading_zeros();
    (
        top as usize - FIRST_BLOCK.trailing_zeros() as usize,
        n - (1 << top),
    )
}

/// The tag of an index entry for `hash`.
#[inline]
fn tag(hash: u64) -> u32 {
    (hash >> 48) as u32
}

impl ShardNotes {
    /// Note `number`, which has been handed out.
    #[inline]
    fn note(&self, number: usize) -> Option<&Note> {
        let (block, at) = block_of(number);
        self.blocks[block].get().map(|notes| &notes[at])
    }

    /// The index in use, if any note was ever written.
    #[inline]
    fn index(&self) -> Option<&[AtomicU32]> {
        self.indexes[self.current.load(Ordering::Acquire)]
            .get()
            .map(|index| &index[..])
    }

    /// The index place and the number of the note of the key of `hash`,
    /// with what `read` saw of it, probing from the place the hash picks:
    /// `read` tells whether a note with the hash's tag is of the key asked
    /// for, and other notes are passed over; the first empty entry ends
    /// the search with `None`, as does `read` giving `None` (a note being
    /// changed).
    #[inline(always)]
    fn search<T>(
        &self,
        hash: u64,
        mut read: impl FnMut(&Note) -> Option<(bool, T)>,
    ) -> Option<(usize, usize, T)> {
        let index = self.index()?;
        let mask = index.len() - 1;
        let tag = tag(hash);
        let mut at = hash as usize & mask;
        loop {
            let entry = index[at].load(Ordering::Acquire);
            if entry == 0 {
                return None;
            }
            if entry >> 16 == tag {
                let number = (entry & 0xffff) as usize - 1;
                let (same_key, seen) = read(self.note(number)?)?;
                if same_key {
                    return Some((at, number, seen));
                }
            }
            at = (at + 1) & mask;
        }
    }

    /// When `key` next has a place under `head` and `window_ms`, if its
    /// note says so at `now_ms`. Takes no lock.
    #[inline]
    fn frees_at(
        &self,
        hash: u64,
        key: &NotedKey,
        head: u64,
        window_ms: u64,
        now_ms: u64,
    ) -> Option<u64> {
        let (_, _, seen) = self.search(hash, |note| {
            let seen = note.read(key)?;
            Some((seen.same_key, seen))
        })?;
        // The place frees after `now_ms` (a forgotten note frees at 0), and
        // no later than a window after it. A note past that end was written
        // before the clock stepped back and is not taken: the call takes
        // the lock, where the bucket's hits are moved back to the clock.
        // (So is a note of a hit stamped in the current millisecond, which
        // a stamp rounded up puts a window and a millisecond ahead: for that
        // millisecond, the lock answers.) Compared without wrapping: a
        // window within `now_ms` of the largest `u64` would take a note
        // that frees at 0, or in the past, as one that frees within it.
        let frees_at_ms = seen.frees_at_ms;
        (seen.length_and_limit == head
            && seen.window_ms == window_ms
            && frees_at_ms > now_ms
            && frees_at_ms - now_ms <= window_ms)
            .then_some(frees_at_ms)
    }

    /// The index place and the number of `key`'s note, for the holder of
    /// the shard's lock.
    fn find(&self, hash: u64, key: &NotedKey) -> Option<(usize, usize)> {
        self.search(hash, |note| Some((note.holds(key), ())))
            .map(|(at, number, ())| (at, number))
    }

    /// Hands out a note for `key` and enters it in the index; `None` when
    /// the shard holds [`MAX_NOTES`].
    fn insert(&self, hash: u64, key: &NotedKey) -> Option<&Note> {
        let mut writer = self.writer.lock();
        let number = match writer.free.pop() {
            Some(number) => {
                let number = usize::from(number);
                writer.hashes[number] = hash;
                number
            }
            None if writer.hashes.len() < MAX_NOTES => {
                writer.hashes.push(hash);
                writer.hashes.len() - 1
            }
            None => return None,
        };
        let (block, at) = block_of(number);
        let note = &self.blocks[block]
            .get_or_init(|| (0..FIRST_BLOCK << block).map(|_| Note::default()).collect())[at];
        note.change(|note| {
            note.length_and_limit.store(key.len, Ordering::Relaxed);
            note.frees_at_ms.store(0, Ordering::Relaxed);
            for (word, value) in note.key.iter().zip(key.words) {
                word.store(value, Ordering::Relaxed);
            }
        });
        let live = writer.live();
        let current = self.current.load(Ordering::Relaxed);
        let full = self.indexes[current]
            .get()
            .is_none_or(|index| live * 2 > index.len());
        if full {
            self.grow(&writer, live);
        } else {
            self.enter(hash, number);
        }
        Some(note)
    }

    /// Puts in use an index at least twice as long as the `live` notes
    /// (the first, or one longer than the one in use), holding every one.
    fn grow(&self, writer: &Writer, live: usize) {
        let mut next = self.current.load(Ordering::Relaxed);
        while FIRST_INDEX << next < live * 2 || self.indexes[next].get().is_some() {
            next += 1;
        }
        let index = self.indexes[next].get_or_init(|| {
            (0..FIRST_INDEX << next)
                .map(|_| AtomicU32::new(0))
                .collect()
        });
        let mut freed = vec![false; writer.hashes.len()];
        for &number in &writer.free {
            freed[usize::from(number)] = true;
        }
        let mask = index.len() - 1;
        for (number, &hash) in writer.hashes.iter().enumerate() {
            if freed[number] {
                continue;
            }
            let mut at = hash as usize & mask;
            while index[at].load(Ordering::Relaxed) != 0 {
                at = (at + 1) & mask;
            }
            index[at].store(entry(hash, number), Ordering::Relaxed);
        }
        // A reader that sees the new index sees its entries.
        self.current.store(next, Ordering::Release);
    }

    /// Enters note `number` of `hash` in the index in use.
    fn enter(&self, hash: u64, number: usize) {
        let index = self
            .index()
            .expect("an index is in use once a note is handed out");
        let mask = index.len() - 1;
        let mut at = hash as usize & mask;
        while index[at].load(Ordering::Relaxed) != 0 {
            at = (at + 1) & mask;
        }
        index[at].store(entry(hash, number), Ordering::Release);
    }

    /// Takes the entry at `at` out of the index in use, moving back the
    /// entries after it that it kept from their first place, and frees
    /// note `number`.
    fn remove(&self, at: usize, number: usize) {
        let index = self.index().expect("an entry was found in it");
        let mask = index.len() - 1;
        let writer = &mut *self.writer.lock();
        let (mut hole, mut next) = (at, (at + 1) & mask);
        loop {
            let entry = index[next].load(Ordering::Relaxed);
            if entry == 0 {
                break;
            }
            let home = writer.hashes[(entry & 0xffff) as usize - 1] as usize & mask;
            // The entry may fill the hole when its first place is not
            // between the hole and it.
            if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
                index[hole].store(entry, Ordering::Release);
                hole = next;
            }
            next = (next + 1) & mask;
        }
        index[hole].store(0, Ordering::Release);
        writer.free.push(number as u16);
    }
}

/// The index entry of note `number` for a key of `hash`.
fn entry(hash: u64, number: usize) -> u32 {
    tag(hash) << 16 | (number as u32 + 1)
}

/// The notes of every shard.
#[derive(Debug)]
pub(super) struct FullNotes(Box<[ShardNotes]>);

impl FullNotes {
    /// Notes for `shards` shards, none written.
    pub(super) fn new(shards: usize) -> Self {
        Self((0..shards).map(|_| ShardNotes::default()).collect())
    }

    /// When the key of `place` next has a place under `max` hits per
    /// `window_ms`, if its note says it is full at `now_ms`. Takes no lock.
    #[inline]
    pub(super) fn frees_at(
        &self,
        place: Place<'_>,
        max: u32,
        window_ms: u64,
        now_ms: u64,
    ) -> Option<u64> {
        let shard = &self.0[place.shard()];
        // A shard that has refused nothing has no index: one read tells.
        shard.index()?;
        let key = NotedKey::of(place.key())?;
        shard.frees_at(place.hash(), &key, key.head(max), window_ms, now_ms)
    }

    /// Notes that the key of `place` is full under `max` hits per
    /// `window_ms` until `frees_at_ms`, or, with `frees_at_ms` 0, that it is
    /// not. The caller holds the shard's lock. Writes only what changes.
    #[inline]
    pub(super) fn write(&self, place: Place<'_>, max: u32, window_ms: u64, frees_at_ms: u64) {
        let shard = &self.0[place.shard()];
        if frees_at_ms == 0 && shard.index().is_none() {
            // Nothing to forget in a shard that has refused nothing.
            return;
        }
        let Some(key) = NotedKey::of(place.key()) else {
            return;
        };
        let note = match shard.find(place.hash(), &key) {
            Some((_, number)) => shard.note(number).expect("a found note was handed out"),
            None if frees_at_ms == 0 => return,
            None => match shard.insert(place.hash(), &key) {
                Some(note) => note,
                None => return,
            },
        };
        if frees_at_ms == 0 {
            if note.frees_at_ms.load(Ordering::Relaxed) != 0 {
                note.change(|note| note.frees_at_ms.store(0, Ordering::Relaxed));
            }
            return;
        }
        let head = key.head(max);
        let unchanged = note.frees_at_ms.load(Ordering::Relaxed) == frees_at_ms
            && note.length_and_limit.load(Ordering::Relaxed) == head
            && note.window_ms.load(Ordering::Relaxed) == window_ms;
        if !unchanged {
            note.change(|note| {
                note.length_and_limit.store(head, Ordering::Relaxed);
                note.window_ms.store(window_ms, Ordering::Relaxed);
                note.frees_at_ms.store(frees_at_ms, Ordering::Relaxed);
            });
        }
    }

    /// Forgets that the key of `place` is full. The caller holds the
    /// shard's lock.
    #[inline]
    pub(super) fn forget(&self, place: Place<'_>) {
        self.write(place, 0, 0, 0);
    }

    /// Frees the note of the key of `place`, whose bucket is dropped. The
    /// caller holds the shard's lock.
    pub(super) fn remove(&self, place: Place<'_>) {
        let shard = &self.0[place.shard()];
        // A shard that has refused nothing has no note to free.
        if shard.index().is_none() {
            return;
        }
        let Some(key) = NotedKey::of(place.key()) else {
            return;
        };
        if let Some((at, number)) = shard.find(place.hash(), &key) {
            let note = shard.note(number).expect("a found note was handed out");
            note.change(|note| note.frees_at_ms.store(0, Ordering::Relaxed));
            shard.remove(at, number);
        }
    }

    /// How many notes the shards hold.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.iter().map(|shard| shard.writer.lock().live()).sum()
    }
}

/// A key as a note holds it: its length and its bytes in little-endian
/// words, padded with zeros.
struct NotedKey {
    len: u64,
    words: [u64; KEY_WORDS],
}

impl NotedKey {
    /// `key` as a note holds it; `None` for a key that cannot be noted
    /// (empty, or longer than a note holds).
    #[inline(always)]
    fn of(key: &str) -> Option<Self> {
        let bytes = key.as_bytes();
        if !(1..=KEY_WORDS * 8).contains(&bytes.len()) {
            return None;
        }
        let mut padded = [0; KEY_WORDS * 8];
        padded[..bytes.len()].copy_from_slice(bytes);
        let words = std::array::from_fn(|i| {
            let mut word = [0; 8];
            word.copy_from_slice(&padded[i * 8..i * 8 + 8]);
            u64::from_le_bytes(word)
        });
        Some(Self {
            len: bytes.len() as u64,
            words,
        })
    }

    /// The second word of this key's note under `max`: the length in the
    /// low byte and the limit above it.
    #[inline(always)]
    fn head(&self, max: u32) -> u64 {
        self.len | u64::from(max) << 8
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::sharded::ShardedMap;

    /// A map that gives the keys their places, and notes for its shards.
    fn notes(shards: usize) -> (ShardedMap<u64>, FullNotes) {
        let map = ShardedMap::new(shards);
        let notes = FullNotes::new(map.shard_count());
        (map, notes)
    }

    #[test]
    fn a_note_answers_for_its_key_and_limit_until_the_place_frees() {
        let (map, notes) = notes(2);
        let at = |key| map.place(key);
        let key = "ip:203.0.113.7";
        assert_eq!(notes.frees_at(at(key), 100, 60_000, 1_000), None);
        notes.write(at(key), 100, 60_000, 61_000);
        assert_eq!(notes.frees_at(at(key), 100, 60_000, 1_000), Some(61_000));
        assert_eq!(notes.frees_at(at(key), 100, 60_000, 60_999), Some(61_000));
        // Not once the place has freed, nor for another key, limit or
        // window.
        assert_eq!(notes.frees_at(at(key), 100, 60_000, 61_000), None);
        // Nor before the clock it was written at was stepped back: a place
        // frees within a window of now, or the note is from before the
        // step.
        assert_eq!(notes.frees_at(at(key), 100, 60_000, 1_000), Some(61_000));
        assert_eq!(notes.frees_at(at(key), 100, 60_000, 999), None);
        assert_eq!(notes.frees_at(at(key), 100, 60_000, 0), None);
        for other in ["ip:203.0.113.8", "ip:203.0.113.70", "ip:203.0.113"] {
            assert_eq!(notes.frees_at(at(other), 100, 60_000, 1_000), None);
        }
        assert_eq!(notes.frees_at(at(key), 101, 60_000, 1_000), None);
        assert_eq!(notes.frees_at(at(key), 100, 59_000, 1_000), None);
        // A note that says the key is not full, then one forgotten.
        notes.write(at(key), 100, 60_000, 0);
        assert_eq!(notes.frees_at(at(key), 100, 60_000, 1_000), None);
        notes.write(at(key), 100, 60_000, 62_000);
        assert_eq!(notes.frees_at(at(key), 100, 60_000, 2_000), Some(62_000));
        notes.forget(at(key));
        assert_eq!(notes.frees_at(at(key), 100, 60_000, 2_000), None);
        assert_eq!(notes.len(), 1, "a forgotten note keeps its line");
        notes.remove(at(key));
        assert_eq!(notes.len(), 0);
    }

    #[test]
    fn keys_of_every_length_up_to_32_bytes_are_noted_and_longer_ones_not() {
        let (map, notes) = notes(1);
        let long = "k".repeat(40);
        for len in 1..=40 {
            let key = &long[..len];
            // A key one byte shorter, noted first, is not taken for it.
            notes.write(map.place(&long[..len - 1]), 7, 1_000, 4_000);
            notes.write(map.place(key), 7, 1_000, 5_000);
            let expected = (len <= 32).then_some(5_000);
            assert_eq!(
                notes.frees_at(map.place(key), 7, 1_000, 4_500),
                expected,
                "{len}"
            );
        }
        assert_eq!(notes.frees_at(map.place(""), 7, 1_000, 0), None);
        assert_eq!(notes.len(), 32);
    }

    #[test]
    fn the_notes_of_many_keys_in_one_shard_each_answer_for_their_own_key() {
        let (map, notes) = notes(1);
        let key = |k: u64| format!("user:{k}");
        for k in 0..5_000 {
            notes.write(map.place(&key(k)), 100, 60_000, 10_000 + k);
        }
        assert_eq!(notes.len(), 5_000);
        for k in 0..5_000 {
            assert_eq!(
                notes.frees_at(map.place(&key(k)), 100, 60_000, 0),
                Some(10_000 + k),
                "{k}"
            );
        }
        assert_eq!(notes.frees_at(map.place(&key(5_000)), 100, 60_000, 0), None);
    }

    #[test]
    fn notes_written_forgotten_and_freed_in_any_order_answer_as_a_plain_map_would() {
        let (map, notes) = notes(2);
        let mut expected: HashMap<String, u64> = HashMap::new();
        // A fixed pseudo-random walk over 3,000 keys: write, forget, free.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for step in 0..60_000_u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let key = format!("ip:10.0.{}.{}", state % 3_000 / 256, state % 3_000 % 256);
            let place = map.place(&key);
            match (state >> 32) % 4 {
                0 | 1 => {
                    notes.write(place, 60, 60_000, 1 + step);
                    expected.insert(key.clone(), 1 + step);
                }
                2 => {
                    notes.forget(place);
                    expected.remove(&key);
                }
                _ => {
                    notes.remove(place);
                    expected.remove(&key);
                }
            }
            assert_eq!(
                notes.frees_at(place, 60, 60_000, 0),
                expected.get(&key).copied(),
                "{key} at step {step}"
            );
        }
        for i in 0..3_000 {
            let key = format!("ip:10.0.{}.{}", i / 256, i % 256);
            let found = notes.frees_at(map.place(&key), 60, 60_000, 0);
            assert_eq!(found, expected.get(&key).copied(), "{key}");
        }
    }

    #[test]
    fn a_shard_notes_at_most_max_notes_keys_and_still_answers_for_them() {
        let (map, notes) = notes(1);
        for k in 0..=MAX_NOTES {
            notes.write(map.place(&format!("k{k}")), 1, 1_000, 5_000);
        }
        assert_eq!(notes.len(), MAX_NOTES);
        let last = format!("k{MAX_NOTES}");
        assert_eq!(notes.frees_at(map.place(&last), 1, 1_000, 4_500), None);
        assert_eq!(
            notes.frees_at(map.place("k0"), 1, 1_000, 4_500),
            Some(5_000)
        );
        // A freed line takes the next key.
        notes.remove(map.place("k0"));
        notes.write(map.place(&last), 1, 1_000, 6_000);
        assert_eq!(
            notes.frees_at(map.place(&last), 1, 1_000, 5_500),
            Some(6_000)
        );
        assert_eq!(notes.len(), MAX_NOTES);
    }

    #[test]
    fn a_reader_never_sees_half_of_a_change() {
        // One writer changes two keys' notes, frees them and notes them
        // again on the freed lines; readers must see each key with its own
        // time or nothing.
        let (map, notes) = notes(1);
        let (a, b) = (
            "key:aaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "key:bbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        );
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for i in 0..100_000_u64 {
                    match i % 4 {
                        0 => notes.write(map.place(a), 5, 60_000, 10_000),
                        1 => notes.write(map.place(b), 5, 60_000, 20_000),
                        2 => notes.remove(map.place(a)),
                        _ => notes.remove(map.place(b)),
                    }
                }
                done.store(true, Ordering::Release);
            });
            while !done.load(Ordering::Acquire) {
                for (key, at) in [(a, 10_000), (b, 20_000)] {
                    if let Some(seen) = notes.frees_at(map.place(key), 5, 60_000, 0) {
                        assert_eq!(seen, at, "{key}");
                    }
                }
            }
        });
    }
}
