//! Walks over a key set: the shuffled order the memory benches share, a
//! walk split over threads started together, and runs that take turns.

use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// `keys` in a fixed pseudo-random order (xorshift, Fisher-Yates), each
/// string allocated anew in that order.
pub fn shuffled(keys: &[String]) -> Vec<String> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order.iter().map(|&i| keys[i].clone()).collect()
}

/// `iters` calls of a walk over `len` keys split over `threads` OS threads
/// started together; the wall time they took, so a time per call is the
/// time per call of the whole process. `run(thread, start, count)` makes
/// `count` calls on thread number `thread` from place `start` on and
/// returns where it stopped. One thread goes on from where the last
/// one-thread walk stopped (`cursor`); of several, each starts at its own
/// part of the keys, so two threads on many keys rarely call on one key at
/// once.
pub fn on_threads(
    len: usize,
    threads: usize,
    iters: u64,
    cursor: &AtomicUsize,
    run: impl Fn(usize, usize, u64) -> usize + Sync,
) -> Duration {
    if threads == 1 {
        let start = Instant::now();
        let stop = run(0, cursor.load(Ordering::Relaxed), iters);
        let elapsed = start.elapsed();
        cursor.store(stop, Ordering::Relaxed);
        return elapsed;
    }
    let barrier = Barrier::new(threads + 1);
    let run = &run;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let barrier = &barrier;
            let offset = t * len / threads;
            scope.spawn(move || {
                barrier.wait();
                run(t, offset, iters / threads as u64);
            });
        }
        barrier.wait();
        // The scope joins the threads before it returns.
        Instant::now()
    })
    .elapsed()
}

/// `rounds` rounds of `runs` runs taking turns, each round starting one
/// further down the list, so that a machine whose speed drifts slows every
/// run alike; `time(run)` makes run number `run` once and returns its
/// figure. Each run's figures, a round.
pub fn in_turns(runs: usize, rounds: usize, mut time: impl FnMut(usize) -> f64) -> Vec<Vec<f64>> {
    let mut samples = vec![Vec::with_capacity(rounds); runs];
    for round in 0..rounds {
        for turn in 0..runs {
            let run = (round + turn) % runs;
            samples[run].push(time(run));
        }
    }
    samples
}
