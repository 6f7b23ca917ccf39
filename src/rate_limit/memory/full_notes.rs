//! `FullNotes`: for each shard, the key last refused there while calls were
//! contending for the shard, and when it next has a place, so that a key
//! many cores call at once is refused by reading, without the shard's lock.
//!
//! A refusal changes nothing: a full bucket stays full, with the same hit
//! holding the place, until that hit leaves the window or the bucket
//! changes. So once a refusal has read when the place frees, the next calls
//! with the same limit can be refused by reading that answer again. A lock,
//! even uncontended, is an atomic write to the shard's cache line; when two
//! cores call on one key, each write takes the line from the other core, and
//! a refusal on a hot key costs what those transfers cost. A note is written
//! once and then only read, so both cores keep its line and refuse at once.
//!
//! A note is exact because every call that takes a shard's lock without
//! writing a note forgets the note of that shard: a note lives from the
//! refusal that wrote it to the next locked call on its shard, and in that
//! time nothing changes the shard's buckets but the sweep, which drops only
//! hits that have left the window of the noted bucket (the noting refusal
//! was the last call to set it), so never the hit the note waits for. Each
//! note is read under a version count (a sequence lock), so a reader that
//! overlaps a change of the note sees the change and takes the lock instead.
//! Notes are written only while contending calls wait for a shard (an
//! uncontended call reads its shard's note once before the lock and once
//! under it, to see there is none to forget), and only for keys of up to 32
//! bytes.

use std::sync::atomic::{AtomicU64, Ordering, fence};

/// The words of a noted key: keys of up to `8 * KEY_WORDS` bytes are noted.
const KEY_WORDS: usize = 4;

/// One shard's note, on a cache line of its own.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Note {
    /// Odd while the note is being changed; raised by every change.
    version: AtomicU64,
    /// The key's length in the low byte and the limit above it; 0 for no
    /// note.
    length_and_limit: AtomicU64,
    /// The window of the noted limit, in milliseconds.
    window_ms: AtomicU64,
    /// When the noted key next has a place, in Unix milliseconds.
    frees_at_ms: AtomicU64,
    /// The key's bytes, in little-endian words, the last one padded with
    /// zeros.
    key: [AtomicU64; KEY_WORDS],
}

impl Note {
    /// When the noted key next has a place, if the note is of `key` under
    /// `head` (its length and limit) and `window_ms`, and still running at
    /// `now_ms`; read between two reads of the version.
    fn frees_at(&self, head: u64, key: &str, window_ms: u64, now_ms: u64) -> Option<u64> {
        let version = self.version.load(Ordering::Acquire);
        if version & 1 == 1 || self.length_and_limit.load(Ordering::Relaxed) != head {
            return None;
        }
        let window = self.window_ms.load(Ordering::Relaxed);
        let frees_at = self.frees_at_ms.load(Ordering::Relaxed);
        let same_key = (0..words(key))
            .all(|i| self.key[i].load(Ordering::Relaxed) == key_word(key.as_bytes(), i));
        // The reads above happen before the version is read again: a
        // change that overlapped them has raised it.
        fence(Ordering::Acquire);
        let unchanged = self.version.load(Ordering::Relaxed) == version;
        (unchanged && same_key && window == window_ms && frees_at > now_ms).then_some(frees_at)
    }
}

/// One note per shard.
#[derive(Debug)]
pub(super) struct FullNotes(Box<[Note]>);

impl FullNotes {
    /// Notes for `shards` shards, none written.
    pub(super) fn new(shards: usize) -> Self {
        Self((0..shards).map(|_| Note::default()).collect())
    }

    /// When `key` next has a place under `max` hits per `window_ms`, if
    /// shard `shard` holds a note of it that is still running at `now_ms`.
    #[inline]
    pub(super) fn frees_at(
        &self,
        shard: usize,
        key: &str,
        max: u32,
        window_ms: u64,
        now_ms: u64,
    ) -> Option<u64> {
        let head = length_and_limit(key, max)?;
        let note = &self.0[shard];
        // Most calls find no note of a key of their length and limit: one
        // read tells them.
        if note.length_and_limit.load(Ordering::Relaxed) != head {
            return None;
        }
        note.frees_at(head, key, window_ms, now_ms)
    }

    /// Notes that `key` is full under `max` hits per `window_ms` until
    /// `frees_at_ms`. The caller holds the shard's lock; a key too long
    /// to note leaves the note as it was.
    pub(super) fn write(
        &self,
        shard: usize,
        key: &str,
        max: u32,
        window_ms: u64,
        frees_at_ms: u64,
    ) {
        let Some(head) = length_and_limit(key, max) else {
            return;
        };
        self.change(shard, |note| {
            note.length_and_limit.store(head, Ordering::Relaxed);
            note.window_ms.store(window_ms, Ordering::Relaxed);
            note.frees_at_ms.store(frees_at_ms, Ordering::Relaxed);
            for (i, word) in note.key.iter().enumerate() {
                word.store(key_word(key.as_bytes(), i), Ordering::Relaxed);
            }
        });
    }

    /// Forgets the note of shard `shard`, if it has one. The caller holds
    /// the shard's lock.
    #[inline]
    pub(super) fn forget(&self, shard: usize) {
        // Only a holder of the shard's lock writes the note, so this read
        // sees the last write.
        if self.0[shard].length_and_limit.load(Ordering::Relaxed) != 0 {
            self.change(shard, |note| {
                note.length_and_limit.store(0, Ordering::Relaxed);
            });
        }
    }

    /// Runs `write` on the note of `shard` between two raises of its
    /// version: odd before the writes, even again after them.
    fn change(&self, shard: usize, write: impl FnOnce(&Note)) {
        let note = &self.0[shard];
        let version = note.version.load(Ordering::Relaxed);
        note.version
            .store(version.wrapping_add(1), Ordering::Relaxed);
        // The odd version is seen before any of the writes.
        fence(Ordering::Release);
        write(note);
        note.version
            .store(version.wrapping_add(2), Ordering::Release);
    }
}

/// The first word of a note for `key` under `max`; `None` for a key that
/// cannot be noted (empty, or longer than the note holds).
#[inline]
fn length_and_limit(key: &str, max: u32) -> Option<u64> {
    (1..=KEY_WORDS * 8)
        .contains(&key.len())
        .then(|| key.len() as u64 | u64::from(max) << 8)
}

/// The words a key fills.
fn words(key: &str) -> usize {
    key.len().div_ceil(8)
}

/// The `i`th word of `key`'s bytes, little-endian, padded with zeros.
fn key_word(key: &[u8], i: usize) -> u64 {
    let mut word = [0; 8];
    let start = (i * 8).min(key.len());
    let bytes = &key[start..(start + 8).min(key.len())];
    word[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_answers_for_its_key_and_limit_until_the_place_frees() {
        let notes = FullNotes::new(2);
        let key = "ip:203.0.113.7";
        assert_eq!(notes.frees_at(1, key, 100, 60_000, 1_000), None);
        notes.write(1, key, 100, 60_000, 61_000);
        assert_eq!(notes.frees_at(1, key, 100, 60_000, 1_000), Some(61_000));
        assert_eq!(notes.frees_at(1, key, 100, 60_000, 60_999), Some(61_000));
        // Not once the place has freed, nor for another shard, key, limit
        // or window.
        assert_eq!(notes.frees_at(1, key, 100, 60_000, 61_000), None);
        assert_eq!(notes.frees_at(0, key, 100, 60_000, 1_000), None);
        assert_eq!(
            notes.frees_at(1, "ip:203.0.113.8", 100, 60_000, 1_000),
            None
        );
        assert_eq!(
            notes.frees_at(1, "ip:203.0.113.70", 100, 60_000, 1_000),
            None
        );
        assert_eq!(notes.frees_at(1, "ip:203.0.113", 100, 60_000, 1_000), None);
        assert_eq!(notes.frees_at(1, key, 101, 60_000, 1_000), None);
        assert_eq!(notes.frees_at(1, key, 100, 59_000, 1_000), None);
        notes.forget(1);
        assert_eq!(notes.frees_at(1, key, 100, 60_000, 1_000), None);
    }

    #[test]
    fn keys_of_every_length_up_to_32_bytes_are_noted_and_longer_ones_not() {
        let notes = FullNotes::new(1);
        let long = "k".repeat(40);
        for len in 1..=40 {
            let key = &long[..len];
            // A key one byte shorter, noted first, is not taken for it.
            notes.write(0, &long[..len - 1], 7, 1_000, 5_000);
            notes.write(0, key, 7, 1_000, 5_000);
            let expected = (len <= 32).then_some(5_000);
            assert_eq!(notes.frees_at(0, key, 7, 1_000, 0), expected, "{len}");
            notes.forget(0);
        }
        assert_eq!(notes.frees_at(0, "", 7, 1_000, 0), None);
    }

    #[test]
    fn a_key_too_long_to_note_leaves_the_note_of_another() {
        let notes = FullNotes::new(1);
        notes.write(0, "user:1", 10, 1_000, 9_000);
        notes.write(0, &"u".repeat(33), 10, 1_000, 9_000);
        assert_eq!(notes.frees_at(0, "user:1", 10, 1_000, 0), Some(9_000));
    }

    #[test]
    fn a_reader_never_sees_half_of_a_change() {
        // One writer switches the note between two keys with different
        // times; readers must see each key with its own time or nothing.
        let notes = FullNotes::new(1);
        let (a, b) = (
            "key:aaaaaaaaaaaaaaaaaaaaaaaa",
            "key:bbbbbbbbbbbbbbbbbbbbbbbb",
        );
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for i in 0..200_000_u64 {
                    if i % 2 == 0 {
                        notes.write(0, a, 5, 1_000, 10_000);
                    } else {
                        notes.write(0, b, 5, 1_000, 20_000);
                    }
                }
                done.store(true, Ordering::Release);
            });
            while !done.load(Ordering::Acquire) {
                for (key, at) in [(a, 10_000), (b, 20_000)] {
                    if let Some(seen) = notes.frees_at(0, key, 5, 1_000, 0) {
                        assert_eq!(seen, at, "{key}");
                    }
                }
            }
        });
    }
}
