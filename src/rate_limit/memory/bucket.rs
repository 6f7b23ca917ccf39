//! `Bucket`: the admitted hits of one key, stored compactly.
//!
//! A naive log keeps one `u64` per hit in a `VecDeque<u64>` (8 bytes a hit,
//! and up to twice that after the deque doubles). A bucket here keeps the
//! oldest and the newest hit as absolute milliseconds and every hit after the
//! oldest as the gap to the hit before it, in a `u16`: 2 bytes a hit. A gap
//! of 65,535 ms or more is written as the escape word `u16::MAX` followed by
//! the gap in four words, so any gap is exact and sparse traffic in a long
//! window costs 10 bytes a hit at worst.

use super::gap_ring::GapRing;

/// The word that announces a gap too long for one word.
const ESCAPE: u16 = u16::MAX;
/// Words after [`ESCAPE`] that hold the long gap, low word first.
const LONG_GAP_WORDS: usize = 4;
/// The smallest allocation a growing bucket makes.
const MIN_GROWTH: usize = 4;

/// The admitted hits of one key, oldest first, at millisecond resolution.
///
/// Never empty: a bucket that would hold no hit is dropped by its owner.
#[derive(Debug, Clone)]
pub(super) struct Bucket {
    /// The oldest hit, in milliseconds since the Unix epoch.
    oldest: u64,
    /// The newest hit, in milliseconds since the Unix epoch.
    newest: u64,
    /// The window of the last call, packed by [`pack_window`], kept so the
    /// sweep can tell when the bucket holds nothing any more without being
    /// told the window.
    window: u32,
    /// How many hits the bucket holds.
    count: u32,
    /// The gap from each hit to the next, encoded as the module docs say.
    gaps: GapRing,
}

impl Bucket {
    /// A bucket holding one hit at `now_ms`.
    pub(super) fn new(now_ms: u64, window_ms: u64) -> Self {
        Self {
            oldest: now_ms,
            newest: now_ms,
            window: pack_window(window_ms),
            count: 1,
            gaps: GapRing::default(),
        }
    }

    /// Forgets every hit and holds one at `now_ms`, keeping the allocation.
    pub(super) fn restart(&mut self, now_ms: u64, window_ms: u64) {
        self.oldest = now_ms;
        self.newest = now_ms;
        self.window = pack_window(window_ms);
        self.count = 1;
        self.gaps.clear();
    }

    /// How many hits the bucket holds.
    pub(super) fn len(&self) -> u32 {
        self.count
    }

    /// Moves every hit back by the same amount, when the newest is later
    /// than `stamp_ms` (a wall clock stepped back since it was stamped), so
    /// that the newest is `stamp_ms`: their order, spacing and count are
    /// kept, and no hit holds a place longer than one window from now.
    ///
    /// A hit is moved back by no more than the clock stepped (the newest
    /// was stamped at or before the step), so each hit stays at or after
    /// the time it was really made, read on the new clock: the limit holds
    /// over every span of real time.
    ///
    /// One comparison on every call; the move itself is two writes, the
    /// gaps being relative.
    #[inline(always)]
    pub(super) fn catch_up(&mut self, stamp_ms: u64) {
        if self.newest > stamp_ms {
            self.step_back(stamp_ms);
        }
    }

    /// [`catch_up`](Self::catch_up) once the newest hit is later than
    /// `stamp_ms`.
    #[cold]
    fn step_back(&mut self, stamp_ms: u64) {
        let span = self.newest - self.oldest;
        // Saturating only for a clock that reads less than the span of the
        // hits, that is within a window of 1970: the hits then stay as
        // late as they can go, in order.
        self.oldest = stamp_ms.saturating_sub(span);
        self.newest = self.oldest + span;
    }

    /// Drops the hits that have left the window (`now - window`, `now`]: a
    /// hit stamped exactly `window_ms` ago is out. Returns `true` when
    /// nothing is left, and the owner must then drop or restart the bucket.
    ///
    /// Inlined down to the check that the oldest hit is still in, which is
    /// all a call on a busy key does: every decision runs it after reading
    /// its slot.
    #[inline(always)]
    pub(super) fn trim(&mut self, now_ms: u64, window_ms: u64) -> bool {
        let packed = pack_window(window_ms);
        // Written only when it changes, so a refused call on a full bucket
        // reads the entry and writes nothing to it.
        if self.window != packed {
            self.window = packed;
        }
        if self.oldest.saturating_add(window_ms) > now_ms {
            // The oldest hit is in, so every hit is.
            return false;
        }
        self.drop_expired(now_ms, window_ms)
    }

    /// [`trim`](Self::trim) once the oldest hit is out.
    fn drop_expired(&mut self, now_ms: u64, window_ms: u64) -> bool {
        if self.newest.saturating_add(window_ms) <= now_ms {
            // Every hit is out: skip decoding them one by one.
            self.count = 0;
            self.gaps.clear();
            return true;
        }
        while self.oldest.saturating_add(window_ms) <= now_ms {
            self.pop_oldest();
        }
        false
    }

    /// Records a hit at `now_ms`. `gap_capacity_hint` is how many gaps the
    /// bucket holds when it is full (the limit minus one), so that growth
    /// stops there instead of doubling past it.
    pub(super) fn push(&mut self, now_ms: u64, gap_capacity_hint: usize) {
        // The caller has moved the hits back to `now_ms` after a clock
        // stepped back (`catch_up`), so the newest is at most `now_ms`: the
        // `max` only keeps a negative gap from being written should a clock
        // read less than the span of the hits (`step_back`).
        let stamp = now_ms.max(self.newest);
        let gap = stamp - self.newest;
        let words = if gap < u64::from(ESCAPE) {
            1
        } else {
            1 + LONG_GAP_WORDS
        };
        self.reserve(words, gap_capacity_hint);
        if words == 1 {
            self.gaps.push_back(gap as u16);
        } else {
            self.gaps.push_back(ESCAPE);
            for i in 0..LONG_GAP_WORDS {
                self.gaps.push_back((gap >> (16 * i)) as u16);
            }
        }
        self.newest = stamp;
        self.count += 1;
    }

    /// The time of hit `index`, oldest first (0 is the oldest). An index
    /// past the newest hit gives the newest.
    ///
    /// The oldest hit, which a full bucket at its limit asks for, is read
    /// without a call.
    #[inline(always)]
    pub(super) fn nth(&self, index: u32) -> u64 {
        if index == 0 {
            return self.oldest;
        }
        self.decode_nth(index)
    }

    /// [`nth`](Self::nth) past the oldest hit, decoding the gaps.
    fn decode_nth(&self, index: u32) -> u64 {
        let mut at = self.oldest;
        let mut words = self.gaps.iter();
        for _ in 0..index.min(self.count.saturating_sub(1)) {
            at += decode_gap(&mut words);
        }
        at
    }

    /// Trims the bucket to the window of its last call and, when that
    /// dropped hits, releases spare room. Returns `true` when nothing is
    /// left.
    ///
    /// A bucket the sweep drops no hit from is not looked at further: the
    /// room it has is in its heap block, and reading the block of every
    /// bucket made a sweep over 100,000 buckets fifteen times slower. A
    /// bucket kept trimmed by its own calls keeps the room of its busiest
    /// window (at most two bytes a hit of its limit) until its traffic
    /// stops and a sweep finds hits to drop.
    pub(super) fn sweep(&mut self, now_ms: u64) -> bool {
        let held = self.count;
        if self.trim(now_ms, unpack_window(self.window)) {
            return true;
        }
        if self.count < held {
            self.shrink_spare();
        }
        false
    }

    /// Releases spare room once the bucket has shrunk to a quarter of it.
    fn shrink_spare(&mut self) {
        let len = self.gaps.len();
        if self.gaps.capacity() > MIN_GROWTH && len * 4 < self.gaps.capacity() {
            self.gaps.shrink_to(len * 2);
        }
    }

    /// The bytes this bucket has on the heap (the gap log).
    #[cfg(test)]
    pub(super) fn heap_bytes(&self) -> usize {
        self.gaps.heap_bytes()
    }

    fn pop_oldest(&mut self) {
        if self.count <= 1 {
            self.count = 0;
            self.gaps.clear();
            return;
        }
        let first = self.gaps.pop_front().unwrap_or(0);
        let gap = if first == ESCAPE {
            let mut gap = 0_u64;
            for i in 0..LONG_GAP_WORDS {
                gap |= u64::from(self.gaps.pop_front().unwrap_or(0)) << (16 * i);
            }
            gap
        } else {
            u64::from(first)
        };
        self.oldest += gap;
        self.count -= 1;
    }

    /// Makes room for `words` more words. Grows by doubling up to the size
    /// of a full bucket, and by exactly what is needed past it, so that a
    /// bucket at its limit wastes no half-empty doubling.
    fn reserve(&mut self, words: usize, gap_capacity_hint: usize) {
        let len = self.gaps.len();
        let wanted = len + words;
        let capacity = self.gaps.capacity();
        if wanted <= capacity {
            return;
        }
        let doubled = (capacity * 2).max(MIN_GROWTH);
        let target = doubled.min(gap_capacity_hint).max(wanted);
        self.gaps.reserve_exact(target - len);
    }
}

/// Windows up to this many milliseconds (about 24.8 days) are kept exact.
const EXACT_WINDOW_MS: u64 = 1 << 31;
/// Marks a window kept in whole seconds.
const IN_SECONDS: u32 = 1 << 31;

/// Packs a window into 32 bits, for the sweep: exact to the millisecond up to
/// about 24.8 days, rounded up to whole seconds above, up to about 68 years;
/// a longer window packs as [`NEVER_SWEPT`], which the sweep reads back as no
/// end at all. Rounding up means a sweep drops a bucket at most a second
/// late, never early; the calls themselves trim with the exact window they
/// are given. Eight bytes less in each bucket lets a key and its bucket
/// share one 64-byte slot: one cache line.
fn pack_window(window_ms: u64) -> u32 {
    if window_ms < EXACT_WINDOW_MS {
        window_ms as u32
    } else {
        IN_SECONDS | window_ms.div_ceil(1_000).min(u64::from(IN_SECONDS - 1)) as u32
    }
}

/// A window too long for [`pack_window`]'s seconds (about 68 years or
/// more): the sweep never drops such a bucket's hits, its own calls do.
const NEVER_SWEPT: u32 = u32::MAX;

/// The window [`pack_window`] packed, in milliseconds: at least the window
/// that was packed, and no end at all for [`NEVER_SWEPT`].
fn unpack_window(packed: u32) -> u64 {
    if packed == NEVER_SWEPT {
        u64::MAX
    } else if packed & IN_SECONDS == 0 {
        u64::from(packed)
    } else {
        u64::from(packed & !IN_SECONDS) * 1_000
    }
}

/// Reads one gap from the front of `words`.
fn decode_gap(words: &mut impl Iterator<Item = u16>) -> u64 {
    match words.next() {
        Some(ESCAPE) => (0..LONG_GAP_WORDS).fold(0, |gap, i| {
            gap | (u64::from(words.next().unwrap_or(0)) << (16 * i))
        }),
        Some(word) => u64::from(word),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(bucket: &Bucket) -> Vec<u64> {
        (0..bucket.len()).map(|i| bucket.nth(i)).collect()
    }

    #[test]
    fn keeps_exact_times_across_short_and_long_gaps() {
        let hits = [
            1_000,
            1_000,
            1_001,
            66_535,
            66_536,
            66_536 + 65_535,
            5_000_000_000_000,
        ];
        let mut bucket = Bucket::new(hits[0], u64::MAX / 2);
        for &t in &hits[1..] {
            bucket.push(t, 100);
        }
        assert_eq!(times(&bucket), hits);
        assert_eq!(bucket.len(), 7);
    }

    #[test]
    fn window_is_half_open() {
        let mut bucket = Bucket::new(0, 1_000);
        bucket.push(500, 10);
        assert!(!bucket.trim(999, 1_000));
        assert_eq!(bucket.len(), 2);
        // The hit at 0 is exactly one window old at 1,000: out.
        assert!(!bucket.trim(1_000, 1_000));
        assert_eq!(times(&bucket), [500]);
        assert!(bucket.trim(1_500, 1_000));
    }

    #[test]
    fn trims_through_long_gaps() {
        let mut bucket = Bucket::new(0, 200_000);
        bucket.push(100_000, 10);
        bucket.push(100_001, 10);
        assert!(!bucket.trim(200_000, 200_000));
        assert_eq!(times(&bucket), [100_000, 100_001]);
    }

    #[test]
    fn clock_stepping_back_keeps_order() {
        let mut bucket = Bucket::new(5_000, 1_000);
        bucket.push(4_000, 10);
        assert_eq!(times(&bucket), [5_000, 5_000]);
    }

    // Hits at 100 s, 100.2 s and 165 s (a long gap) with the clock stepped
    // back to 70 s: all move back 95 s, the newest to 70 s, spacing kept; a
    // bucket whose newest hit is at or before the clock is left alone. A
    // clock that reads less than the span of the hits puts the oldest at 0.
    #[test]
    fn catching_up_with_a_clock_stepped_back_moves_every_hit_alike() {
        let mut bucket = Bucket::new(100_000, 100_000);
        bucket.push(100_200, 10);
        bucket.push(165_000, 10);
        bucket.catch_up(165_000);
        assert_eq!(times(&bucket), [100_000, 100_200, 165_000]);
        bucket.catch_up(70_000);
        assert_eq!(times(&bucket), [5_000, 5_200, 70_000]);
        bucket.push(70_000, 10);
        assert_eq!(times(&bucket), [5_000, 5_200, 70_000, 70_000]);
        assert!(!bucket.trim(105_000, 100_000));
        assert_eq!(times(&bucket), [5_200, 70_000, 70_000]);
        bucket.catch_up(1_000);
        assert_eq!(times(&bucket), [0, 64_800, 64_800]);
    }

    #[test]
    fn a_full_bucket_of_100_costs_two_bytes_a_hit() {
        let mut bucket = Bucket::new(0, 60_000);
        for t in 1..100 {
            bucket.push(t * 7, 99);
        }
        assert_eq!(bucket.len(), 100);
        // The words and the block's header of 16 bytes.
        assert_eq!(bucket.heap_bytes(), 16 + 99 * 2);
    }

    // The bucket sits in every slot of a shard table, beside the key, and
    // the two share one cache line: its size is paid once per key, in the
    // table.
    #[test]
    fn a_bucket_takes_40_bytes_in_its_table_slot() {
        assert_eq!(size_of::<Bucket>(), 40);
    }

    #[test]
    fn windows_pack_exactly_up_to_24_days_and_never_shorter_above() {
        for ms in [1, 60_000, 86_400_000, (1 << 31) - 1] {
            assert_eq!(unpack_window(pack_window(ms)), ms);
        }
        let thirty_days = 30 * 86_400_000;
        assert_eq!(unpack_window(pack_window(thirty_days)), thirty_days);
        assert_eq!(
            unpack_window(pack_window(thirty_days + 1)),
            thirty_days + 1_000
        );
        // The longest window seconds hold, and any longer: never swept.
        let most = u64::from(IN_SECONDS - 2) * 1_000;
        assert_eq!(unpack_window(pack_window(most)), most);
        for beyond in [most + 1, 100 * 365 * 86_400_000, u64::MAX] {
            assert_eq!(pack_window(beyond), NEVER_SWEPT);
            assert_eq!(unpack_window(pack_window(beyond)), u64::MAX);
        }
    }

    // A hit 69 years into a 100-year window is still in: the sweep keeps it.
    #[test]
    fn the_sweep_never_drops_a_window_longer_than_seconds_pack() {
        let year = 365 * 86_400_000;
        let mut bucket = Bucket::new(0, 100 * year);
        assert!(!bucket.sweep(69 * year));
        assert_eq!(bucket.len(), 1);
    }

    // A bucket of a 30-day window, idle for 29 days, is still held by the
    // sweep; one idle for the whole window is dropped.
    #[test]
    fn the_sweep_reads_a_long_window_back() {
        let day = 86_400_000;
        let mut bucket = Bucket::new(0, 30 * day);
        bucket.push(day, 10);
        assert!(!bucket.sweep(30 * day));
        assert_eq!(bucket.len(), 1);
        assert!(bucket.sweep(31 * day));
    }

    #[test]
    fn shrinks_after_draining() {
        let mut bucket = Bucket::new(0, 1_000);
        for t in 1..1_000 {
            bucket.push(t, 999);
        }
        assert!(!bucket.sweep(1_990));
        assert_eq!(bucket.len(), 9);
        assert!(
            bucket.heap_bytes() <= 16 + 16 * 2,
            "{}",
            bucket.heap_bytes()
        );
        assert_eq!(times(&bucket), (991..1_000).collect::<Vec<_>>());
    }
}
