//! `GapRing`: the queue of 16-bit words a bucket keeps its gaps in.
//!
//! A `VecDeque<u16>` would do, but it spends 32 bytes on its handle
//! (pointer, capacity, head, length, each a `usize`), and that handle sits
//! in every slot of the shard tables, next to the key, where a slot is one
//! cache line. This ring keeps its capacity in the heap block with the words
//! (a `ThinVec`, one pointer) and the head and length as `u32`: 16 bytes,
//! which lets a key, its bucket and the ring's handle share 64 bytes.

use thin_vec::ThinVec;

/// A first-in first-out queue of `u16` words in one heap block used as a
/// ring. It never holds more than `u32::MAX` words (8 GiB).
#[derive(Debug, Clone, Default)]
pub(super) struct GapRing {
    /// Every word of the block is in use as a ring slot: the vector's
    /// length is the ring's capacity.
    words: ThinVec<u16>,
    /// The index of the oldest word.
    head: u32,
    /// How many words the ring holds.
    len: u32,
}

impl GapRing {
    /// How many words the ring holds.
    pub(super) fn len(&self) -> usize {
        self.len as usize
    }

    /// How many words the ring holds without growing.
    pub(super) fn capacity(&self) -> usize {
        self.words.len()
    }

    /// The bytes of the heap block: the vector's header (its length and
    /// capacity) and the words; nothing before the first word is stored.
    #[cfg(test)]
    pub(super) fn heap_bytes(&self) -> usize {
        if self.capacity() == 0 {
            0
        } else {
            2 * size_of::<usize>() + self.capacity() * size_of::<u16>()
        }
    }

    /// Forgets every word and keeps the room.
    pub(super) fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// Appends `word` after the newest. The caller reserves first; a full
    /// ring grows by doubling.
    pub(super) fn push_back(&mut self, word: u16) {
        if self.len() == self.capacity() {
            self.resize((self.capacity() * 2).max(4));
        }
        let index = self.index(self.len());
        self.words[index] = word;
        self.len += 1;
    }

    /// Takes the oldest word.
    pub(super) fn pop_front(&mut self) -> Option<u16> {
        if self.len == 0 {
            return None;
        }
        let word = self.words[self.head as usize];
        self.head = u32::try_from(self.index(1)).unwrap_or(0);
        self.len -= 1;
        Some(word)
    }

    /// The words, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.len()).map(|i| self.words[self.index(i)])
    }

    /// Makes room for exactly `additional` more words, when there is not
    /// room for them already.
    pub(super) fn reserve_exact(&mut self, additional: usize) {
        let wanted = self.len() + additional;
        if wanted > self.capacity() {
            self.resize(wanted);
        }
    }

    /// Gives back room down to `capacity` words (never below the length).
    pub(super) fn shrink_to(&mut self, capacity: usize) {
        let capacity = capacity.max(self.len());
        if capacity < self.capacity() {
            self.resize(capacity);
        }
    }

    /// The slot of the word `offset` places after the oldest.
    fn index(&self, offset: usize) -> usize {
        let index = self.head as usize + offset;
        // One subtraction instead of a division: `offset` never exceeds the
        // capacity.
        if index >= self.capacity() {
            index - self.capacity()
        } else {
            index
        }
    }

    /// Moves the words into a slice of `capacity`, oldest first.
    fn resize(&mut self, capacity: usize) {
        assert!(
            capacity <= u32::MAX as usize,
            "a rate-limit bucket holds at most 2^32 - 1 words"
        );
        let mut words = ThinVec::with_capacity(capacity);
        words.extend(self.iter());
        words.resize(capacity, 0);
        self.words = words;
        self.head = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(ring: &GapRing) -> Vec<u16> {
        ring.iter().collect()
    }

    #[test]
    fn is_first_in_first_out_across_the_wrap() {
        let mut ring = GapRing::default();
        ring.reserve_exact(3);
        assert_eq!(ring.capacity(), 3);
        for w in [1, 2, 3] {
            ring.push_back(w);
        }
        assert_eq!(ring.pop_front(), Some(1));
        assert_eq!(ring.pop_front(), Some(2));
        // These two wrap around the end of the slice.
        ring.push_back(4);
        ring.push_back(5);
        assert_eq!(ring.capacity(), 3);
        assert_eq!(contents(&ring), [3, 4, 5]);
        // Full: growing keeps the order.
        ring.push_back(6);
        assert_eq!(contents(&ring), [3, 4, 5, 6]);
        assert_eq!(ring.capacity(), 6);
        let drained: Vec<_> = std::iter::from_fn(|| ring.pop_front()).collect();
        assert_eq!(drained, [3, 4, 5, 6]);
        assert_eq!(ring.len(), 0);
    }

    #[test]
    fn shrinks_to_its_length_at_least_and_keeps_order() {
        let mut ring = GapRing::default();
        ring.reserve_exact(16);
        for w in 0..16 {
            ring.push_back(w);
        }
        for _ in 0..13 {
            ring.pop_front();
        }
        ring.push_back(16);
        ring.shrink_to(2);
        assert_eq!(ring.capacity(), 4);
        assert_eq!(contents(&ring), [13, 14, 15, 16]);
        ring.clear();
        assert_eq!(ring.len(), 0);
        assert_eq!(ring.capacity(), 4);
        assert_eq!(ring.pop_front(), None);
    }

    #[test]
    fn an_empty_ring_allocates_nothing() {
        let ring = GapRing::default();
        assert_eq!(ring.capacity(), 0);
        assert_eq!(size_of::<GapRing>(), 16);
    }
}
