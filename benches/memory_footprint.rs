//! Resident memory for 1,000,000 keys each holding 100 hits in the window:
//! the crate's in-memory driver beside a naive
//! `HashMap<String, VecDeque<u64>>` log (and governor's keyed limiter, which
//! keeps one GCRA cell per key and no log, for scale).
//!
//! ```text
//! cargo bench --bench memory_footprint
//! cargo bench --bench memory_footprint -- --keys 100000   # a quicker look
//! ```
//!
//! Each contender runs in a child process of its own, so one's freed memory
//! never counts for another. A child reads its resident set (`VmRSS` in
//! /proc/self/status) before it builds the limiter and after it has fed it:
//! one hit per key per round, 100 rounds, the clock 100 ms further each
//! round, so every key ends with 100 hits spread over 10 s of a 60 s window,
//! grown the way live traffic grows it. The difference, divided by the keys,
//! is the cost of a key. The key strings the bench passes in are built in a
//! reused buffer, so only the limiter's own copies count.

mod support;

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::num::NonZeroU32;
use std::process::Command;
use std::time::{Duration, Instant};

use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use suprnova::clock::{Clock, FakeClock};
use suprnova::rate_limit::SlidingWindowConfig;
use suprnova::rate_limit::memory::InMemoryRateLimiter;

const HITS: u32 = 100;
const WINDOW: Duration = Duration::from_secs(60);
const ROUND: Duration = Duration::from_millis(100);
const DEFAULT_KEYS: usize = 1_000_000;
const CONTENDERS: [&str; 3] = ["suprnova", "naive_log", "governor"];

/// The resident set and its peak, in bytes, from /proc/self/status.
fn resident() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Feeds `keys` keys `HITS` rounds of one hit each through `hit`, which must
/// admit every one of them; moves the clock with `tick` after each round.
fn feed(keys: usize, mut hit: impl FnMut(&str) -> bool, mut tick: impl FnMut()) {
    let mut key = String::with_capacity(32);
    for round in 0..HITS {
        for n in 0..keys {
            key.clear();
            let _ = write!(key, "user:{n}");
            assert!(hit(&key), "round {round}: key {key} was refused");
        }
        tick();
    }
    // Every key is now full: one more hit is refused.
    key.clear();
    let _ = write!(key, "user:{}", keys / 2);
    assert!(!hit(&key), "a full key admitted hit {}", HITS + 1);
}

/// Runs one contender in this process and prints `bytes_per_key peak_per_key`.
fn child(name: &str, keys: usize) {
    let (before, _) = resident();
    let start = Instant::now();
    let cfg = SlidingWindowConfig::new(HITS, WINDOW);
    // Every contender is kept alive until after the measurement.
    let held: Box<dyn std::any::Any> = match name {
        "suprnova" => {
            let clock = FakeClock::at_unix(1_700_000_000);
            let limiter = InMemoryRateLimiter::with_clock(clock.shared());
            feed(
                keys,
                |key| limiter.acquire_now(key, &cfg).unwrap().allowed,
                || clock.advance(ROUND),
            );
            assert_eq!(limiter.bucket_count(), keys);
            Box::new(limiter)
        }
        "naive_log" => {
            let clock = FakeClock::at_unix(1_700_000_000);
            let mut map: HashMap<String, VecDeque<u64>> = HashMap::new();
            let window = WINDOW.as_millis() as u64;
            feed(
                keys,
                |key| {
                    let now = clock.unix_millis();
                    let log = match map.get_mut(key) {
                        Some(log) => log,
                        None => map.entry(key.to_owned()).or_default(),
                    };
                    while log.front().is_some_and(|&t| t + window <= now) {
                        log.pop_front();
                    }
                    let admit = log.len() < HITS as usize;
                    if admit {
                        log.push_back(now);
                    }
                    admit
                },
                || clock.advance(ROUND),
            );
            Box::new(map)
        }
        "governor" => {
            let clock = FakeRelativeClock::default();
            let limiter = RateLimiter::dashmap_with_clock(
                Quota::with_period(WINDOW / HITS)
                    .unwrap()
                    .allow_burst(NonZeroU32::new(HITS).unwrap()),
                clock.clone(),
            );
            feed(
                keys,
                |key| limiter.check_key(&key.to_owned()).is_ok(),
                // Governor refills as time passes; a frozen clock keeps
                // its burst spent like a full window.
                || {},
            );
            drop(clock);
            Box::new(limiter)
        }
        other => panic!("no contender {other}"),
    };
    let elapsed = start.elapsed();
    let (after, peak) = resident();
    let per_key = (after.saturating_sub(before)) as f64 / keys as f64;
    let peak_per_key = (peak.saturating_sub(before)) as f64 / keys as f64;
    println!(
        "{per_key:.1} {peak_per_key:.1} {:.1}",
        elapsed.as_secs_f64()
    );
    drop(held);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let keys = arg("--keys")
        .map(|k| k.parse::<usize>().expect("--keys takes a number"))
        .unwrap_or(DEFAULT_KEYS);
    if let Some(name) = arg("--child") {
        child(&name, keys);
        return;
    }

    println!("== memory_footprint: {keys} keys x {HITS} hits in a {WINDOW:?} window ==");
    println!("machine: {}", support::machine::describe());
    println!(
        "{:<12} {:>14} {:>16} {:>10}",
        "contender", "bytes per key", "peak per key", "load (s)"
    );
    let exe = std::env::current_exe().expect("the bench's own path");
    let mut per_key = HashMap::new();
    for name in CONTENDERS {
        let out = Command::new(&exe)
            .args(["--child", name, "--keys", &keys.to_string()])
            .output()
            .expect("run a contender");
        assert!(
            out.status.success(),
            "{name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8_lossy(&out.stdout);
        let fields: Vec<f64> = line
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let [bytes, peak, secs] = fields[..] else {
            panic!("{name} printed {line:?}");
        };
        println!("{name:<12} {bytes:>14.1} {peak:>16.1} {secs:>10.1}");
        per_key.insert(name, bytes);
    }
    let (ours, naive) = (per_key["suprnova"], per_key["naive_log"]);
    println!("suprnova / naive_log = {:.3}", ours / naive);
    support::targets::check(
        "memory per key at 100 hits, memory driver / naive log",
        ours / naive,
        support::targets::Bound::AtMost(1.0 / 3.0),
        support::targets::Unit::Plain,
    );
}
