//! The decision cost of the in-memory sliding-window driver, side by side
//! with `governor`'s keyed limiter (`DefaultKeyedRateLimiter<String>`) and a
//! naive `Mutex<HashMap<String, VecDeque<u64>>>` log, in one run.
//!
//! ```text
//! cargo bench --bench memory_driver
//! ```
//!
//! Every contender decides `"user:N"` keys, limit 100 per 60 s, on one hot
//! key and on 100,000 keys, walked in the order the limiters first saw them;
//! the 100,000 keys are also walked in a shuffled order (flood only), as
//! calls from many clients arrive. Three scenarios:
//!
//! - **flood** (1 and 2 OS threads): each contender reads its production
//!   clock (the driver and the naive log the system clock, governor its
//!   default `quanta` clock). Before measuring, every key is driven to its
//!   limit and refused once, so the measured calls are what an over-limit
//!   client costs: the steady state of any key called faster than its
//!   limit, and of the hot key after its first 100 calls. Without the fill,
//!   the 100,000-key case would drift from admitting to refusing during the
//!   measurement.
//! - **flood_fake_clock** (1 and 2 OS threads): the same full windows, but
//!   every contender reads a frozen fake clock (one atomic load), so the
//!   numbers compare the limiters themselves without the cost of their
//!   clocks. Both production clocks read the processor's time-stamp
//!   counter through `quanta` (the driver's `SystemClock` anchors it to
//!   the wall time), which costs the driver about 40 of a decision's 378
//!   instructions (`benches/instructions.sh`).
//! - **sliding** (1 thread): fake clocks that move one window / limit
//!   (600 ms) between two calls on a key, so every call finds the oldest hit
//!   just out of the window, drops it and admits itself: the most work a
//!   sliding log does per decision. Moving the clock costs each contender
//!   one atomic add per call on the hot key, and one per pass over the
//!   100,000 keys. On fake clocks the driver's sweep is set an hour apart
//!   (fake time passes far faster than real time here); `memory_driver_sweep`
//!   measures one sweep over 100,000 full buckets on its own.
//!
//! At the end the bench prints the ratios the performance targets are
//! stated in (docs/performance.md), and then measures the flood cases once
//! more with the contenders taking turns in short runs, which a machine
//! whose speed drifts disturbs less (see `alternating`). After each of the
//! two, a `target:` line a target says whether this run met it. Then the
//! 100,000 keys once more on one fake clock, on one thread and on two, by
//! the driver's count of shards beside governor (`by_shard_count`): how
//! many ordered streams of slots this machine's prefetching follows, and
//! what fewer shards cost two cores. Last, two threads on one limiter
//! beside two on a limiter each, with the time a cache line takes from one
//! core to the other (`one_limiter_or_one_each`): what the second core
//! gives when the threads share no line, and what passing the lock lines
//! between the cores costs when they share a limiter.

mod support;

use std::collections::{HashMap, HashSet, VecDeque};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use criterion::{BenchmarkGroup, Criterion, Throughput, measurement::WallTime};
use futures_util::FutureExt;
use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use suprnova::clock::{self, FakeClock, SharedClock};
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};

const LIMIT: u32 = 100;
const WINDOW: Duration = Duration::from_secs(60);
const MANY_KEYS: usize = 100_000;
/// The gap between two calls on one key in the sliding scenario.
const SLIDE_STEP: Duration = Duration::from_millis(600);
const CFG: SlidingWindowConfig = SlidingWindowConfig::new(LIMIT, WINDOW);

/// The plain baseline: one mutex over one map of timestamp logs.
struct NaiveLog {
    map: Mutex<HashMap<String, VecDeque<u64>>>,
    clock: SharedClock,
}

impl NaiveLog {
    fn new(clock: SharedClock) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            clock,
        }
    }

    fn try_acquire(&self, key: &str) -> bool {
        let now = self.clock.unix_millis();
        let window = WINDOW.as_millis() as u64;
        let mut map = self.map.lock().unwrap();
        let log = match map.get_mut(key) {
            Some(log) => log,
            None => map.entry(key.to_owned()).or_default(),
        };
        while log.front().is_some_and(|&t| t + window <= now) {
            log.pop_front();
        }
        if log.len() < LIMIT as usize {
            log.push_back(now);
            true
        } else {
            false
        }
    }
}

type FakeGovernor =
    RateLimiter<String, DefaultKeyedStateStore<String>, FakeRelativeClock, NoOpMiddleware<Nanos>>;

/// One limiter under test.
enum Limiter {
    Suprnova(InMemoryRateLimiter),
    /// The driver through `Arc<dyn RateLimiterDriver>` and its async method,
    /// as the middleware calls it.
    SuprnovaDyn(Arc<dyn RateLimiterDriver>),
    Governor(DefaultKeyedRateLimiter<String>),
    FakeGovernor(FakeGovernor),
    Naive(NaiveLog),
}

impl Limiter {
    #[inline]
    fn decide(&self, key: &String) -> bool {
        match self {
            Self::Suprnova(limiter) => limiter.acquire_now(key, &CFG).unwrap().allowed,
            // The memory driver never waits, so the future is ready at once.
            Self::SuprnovaDyn(limiter) => limiter
                .try_acquire(key, &CFG)
                .now_or_never()
                .unwrap()
                .unwrap(),
            Self::Governor(limiter) => limiter.check_key(key).is_ok(),
            Self::FakeGovernor(limiter) => limiter.check_key(key).is_ok(),
            Self::Naive(log) => log.try_acquire(key),
        }
    }
}

/// The clock a contender's limiter reads, when the bench moves it.
enum Tick {
    Real,
    Ours(FakeClock),
    Governor(FakeRelativeClock),
}

impl Tick {
    #[inline]
    fn advance(&self, scenario: Scenario) {
        if scenario != Scenario::Sliding {
            return;
        }
        match self {
            Self::Real => {}
            Self::Ours(clock) => clock.advance(SLIDE_STEP),
            Self::Governor(clock) => clock.advance(SLIDE_STEP),
        }
    }
}

struct Contender {
    limiter: Limiter,
    tick: Tick,
    scenario: Scenario,
    /// Where the last single-thread run stopped, so the next one goes on
    /// from there and every key keeps its spacing in the sliding scenario.
    cursor: AtomicUsize,
}

#[derive(Clone, Copy, PartialEq)]
enum Scenario {
    /// Full windows, production clocks.
    Flood,
    /// Full windows, frozen fake clocks.
    FloodFakeClock,
    /// Every call drops the oldest hit and admits itself, fake clocks.
    Sliding,
}

impl Scenario {
    const ALL: [Scenario; 3] = [Self::Flood, Self::FloodFakeClock, Self::Sliding];

    fn name(self) -> &'static str {
        match self {
            Self::Flood => "flood",
            Self::FloodFakeClock => "flood_fake_clock",
            Self::Sliding => "sliding",
        }
    }

    fn fake_clock(self) -> bool {
        self != Self::Flood
    }
}

/// The driver on a fake clock. Fake time runs far faster than real time
/// here (600 ms a call on the hot key), so a sweep due once a second of
/// clock time would run every other call: the sweep is set an hour apart
/// and its own cost is measured by `memory_driver_sweep`.
fn driver_on(clock: &FakeClock) -> InMemoryRateLimiter {
    InMemoryRateLimiter::with_clock(clock.shared()).with_sweep_interval(Duration::from_secs(3600))
}

impl Contender {
    fn build(name: &str, scenario: Scenario) -> Self {
        let quota = Quota::per_minute(NonZeroU32::new(LIMIT).unwrap());
        let fake = FakeClock::at_unix(1_700_000_000);
        let fake_clock = scenario.fake_clock();
        let (limiter, tick) = match (name, fake_clock) {
            ("suprnova", false) => (Limiter::Suprnova(InMemoryRateLimiter::new()), Tick::Real),
            ("suprnova", true) => (Limiter::Suprnova(driver_on(&fake)), Tick::Ours(fake)),
            ("suprnova_dyn", false) => (
                Limiter::SuprnovaDyn(Arc::new(InMemoryRateLimiter::new())),
                Tick::Real,
            ),
            ("suprnova_dyn", true) => (
                Limiter::SuprnovaDyn(Arc::new(driver_on(&fake))),
                Tick::Ours(fake),
            ),
            ("governor", false) => (Limiter::Governor(RateLimiter::keyed(quota)), Tick::Real),
            ("governor", true) => {
                let clock = FakeRelativeClock::default();
                (
                    Limiter::FakeGovernor(RateLimiter::dashmap_with_clock(quota, clock.clone())),
                    Tick::Governor(clock),
                )
            }
            ("naive_log", false) => (Limiter::Naive(NaiveLog::new(clock::system())), Tick::Real),
            ("naive_log", true) => (
                Limiter::Naive(NaiveLog::new(fake.shared())),
                Tick::Ours(fake),
            ),
            (other, _) => unreachable!("no contender {other}"),
        };
        Self {
            limiter,
            tick,
            scenario,
            cursor: AtomicUsize::new(0),
        }
    }

    /// Brings every key to its steady state before anything is measured:
    /// a full window, and one call more, which the flood scenarios refuse
    /// (in the sliding one the clock has moved a window by then, and it is
    /// admitted). The driver notes a key when it first refuses it, in that
    /// order; refusing each key once here, in the order the keys were first
    /// seen, lays its notes out in the order of its slots. Were the first
    /// refusals those of the measured walk, the shuffled walk would read
    /// each shard's notes in the order they were written, an order no later
    /// calls follow, and which prefetching rewards the more, the fewer the
    /// shards.
    fn fill(&self, keys: &[String]) {
        for _ in 0..=LIMIT {
            self.run(keys, 0, keys.len() as u64);
        }
        self.cursor.store(0, Ordering::Relaxed);
    }

    /// Runs `iters` decisions on `keys`, starting at `offset` and walking
    /// on; the clock moves after each pass over the keys. Returns where it
    /// stopped.
    #[inline(never)]
    fn run(&self, keys: &[String], offset: usize, iters: u64) -> usize {
        let mut index = offset % keys.len();
        for _ in 0..iters {
            black_box(self.limiter.decide(&keys[index]));
            index += 1;
            if index == keys.len() {
                index = 0;
                self.tick.advance(self.scenario);
            }
        }
        index
    }

    /// `iters` decisions split over `threads` OS threads started together;
    /// the wall time they took, so criterion's time per iteration is the
    /// time per decision of the whole process.
    fn run_threads(&self, keys: &[String], threads: usize, iters: u64) -> Duration {
        support::walks::on_threads(
            keys.len(),
            threads,
            iters,
            &self.cursor,
            |_, start, count| self.run(keys, start, count),
        )
    }
}

const CONTENDERS: [&str; 4] = ["suprnova", "suprnova_dyn", "governor", "naive_log"];

/// The contenders the ratios compare, in the columns' order.
const COMPARED: [&str; 3] = ["suprnova", "governor", "naive_log"];

/// The keys of a case: the order the limiters first see them in (the fill)
/// and the order the measured calls walk them in.
struct KeySet {
    name: &'static str,
    first_seen: Vec<String>,
    walk: Vec<String>,
}

impl KeySet {
    fn in_order(name: &'static str, keys: Vec<String>) -> Self {
        Self {
            name,
            walk: keys.clone(),
            first_seen: keys,
        }
    }
}

/// The hot key; 100,000 keys walked in the order they were first seen (a
/// limiter that keeps each key in a heap block of its own then reads those
/// blocks one after the other, and the prefetcher hides them); and the
/// same keys walked in a shuffled order, as traffic from many clients
/// arrives. The walk's own strings are allocated in walk order, so reading
/// the caller's key stays cheap, as for a key a server has just built.
fn key_sets() -> [KeySet; 3] {
    let many: Vec<String> = (0..MANY_KEYS).map(|n| format!("user:{n}")).collect();
    [
        KeySet::in_order("hot_key", vec!["user:0".to_owned()]),
        KeySet::in_order("100k_keys", many.clone()),
        KeySet {
            name: "100k_keys_shuffled",
            walk: support::walks::shuffled(&many),
            first_seen: many,
        },
    ]
}

fn group_name(scenario: Scenario, keys: &str, threads: usize) -> String {
    let threads = if threads == 1 {
        "1_thread"
    } else {
        "2_threads"
    };
    format!("memory_driver_{}_{keys}_{threads}", scenario.name())
}

fn bench_group(
    group: &mut BenchmarkGroup<'_, WallTime>,
    scenario: Scenario,
    keys: &KeySet,
    threads: usize,
) {
    group.throughput(Throughput::Elements(1));
    for name in CONTENDERS {
        // The async path is measured on full windows, one thread.
        if name == "suprnova_dyn" && (threads > 1 || scenario == Scenario::Sliding) {
            continue;
        }
        // Built and filled inside the closure, which criterion calls only
        // for the benchmarks a filter selects.
        let mut contender = None;
        group.bench_function(name, |b| {
            let contender = contender.get_or_insert_with(|| {
                let contender = Contender::build(name, scenario);
                contender.fill(&keys.first_seen);
                contender
            });
            b.iter_custom(|iters| contender.run_threads(&keys.walk, threads, iters))
        });
    }
}

fn bench(c: &mut Criterion) {
    for keys in key_sets() {
        for (scenario, threads) in [
            (Scenario::Flood, 1),
            (Scenario::Flood, 2),
            (Scenario::FloodFakeClock, 1),
            (Scenario::FloodFakeClock, 2),
            (Scenario::Sliding, 1),
        ] {
            // The shuffled walk is measured as production runs: own clocks.
            if keys.name == "100k_keys_shuffled" && scenario != Scenario::Flood {
                continue;
            }
            let mut group = c.benchmark_group(group_name(scenario, keys.name, threads));
            bench_group(&mut group, scenario, &keys, threads);
            group.finish();
        }
    }
    bench_sweep(c);
}

/// One sweep over 100,000 full buckets, which the driver runs once per
/// sweep interval (a second by default) inside an ordinary call.
fn bench_sweep(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_driver_sweep");
    group.sample_size(10);
    let mut limiter = None;
    group.bench_function("100k_keys", |b| {
        let limiter = limiter.get_or_insert_with(|| {
            let clock = FakeClock::at_unix(1_700_000_000);
            let limiter = driver_on(&clock);
            let keys = &key_sets()[1].first_seen;
            for _ in 0..LIMIT {
                for key in keys {
                    limiter.acquire_now(key, &CFG).unwrap();
                }
                clock.advance(SLIDE_STEP);
            }
            limiter
        });
        b.iter(|| limiter.sweep())
    });
    group.finish();
}

/// Prints the ratios the targets are stated in, from this run's estimates.
fn report(since: SystemTime) {
    let ns = |scenario: Scenario, set: &str, threads: usize, id: &str| {
        support::estimates::nanos_per_iter(&group_name(scenario, set, threads), id, since)
    };
    println!("\n== memory_driver: ns per decision and ratios, this run ==");
    println!("machine: {}", support::machine::describe());
    print_ratio_header();
    // The flood rows of both thread counts, for the targets after the table.
    let mut targets = Vec::new();
    for scenario in Scenario::ALL {
        for set in key_sets().map(|keys| keys.name) {
            let per_thread = [1, 2].map(|threads| {
                let [ours, gov, naive] = COMPARED.map(|id| ns(scenario, set, threads, id));
                Some([ours?, gov?, naive?])
            });
            for (threads, row) in [1, 2].into_iter().zip(per_thread) {
                if let Some(row) = row {
                    print_ratio_row(&format!("{} {set} {threads}t", scenario.name()), row);
                }
            }
            if let (Scenario::Flood, [Some(one), Some(two)]) = (scenario, per_thread) {
                targets.push((set, [one, two]));
            }
        }
    }
    for scenario in [Scenario::Flood, Scenario::FloodFakeClock] {
        for set in ["hot_key", "100k_keys"] {
            if let (Some(via_dyn), Some(direct)) = (
                ns(scenario, set, 1, "suprnova_dyn"),
                ns(scenario, set, 1, "suprnova"),
            ) {
                println!(
                    "{} {set}: through Arc<dyn RateLimiterDriver> (async) {via_dyn:.1} ns, direct {direct:.1} ns",
                    scenario.name()
                );
            }
        }
    }
    for scenario in [Scenario::Flood, Scenario::FloodFakeClock] {
        for set in ["100k_keys", "100k_keys_shuffled"] {
            for id in COMPARED {
                if let (Some(one), Some(two)) = (ns(scenario, set, 1, id), ns(scenario, set, 2, id))
                {
                    println!(
                        "{}",
                        scaling_line(&format!("{} {set}", scenario.name()), id, one, two)
                    );
                }
            }
        }
    }
    for (set, per_thread) in targets {
        check_targets("criterion", set, per_thread);
    }
    if let Some(sweep) =
        support::estimates::nanos_per_iter("memory_driver_sweep", "100k_keys", since)
    {
        println!(
            "one sweep of 100,000 full buckets: {:.2} ms (run once a second by default)",
            sweep / 1e6
        );
    }
}

/// The head of the table of ns per decision and ratios.
fn print_ratio_header() {
    println!(
        "{:<30} {:>10} {:>10} {:>10} {:>13} {:>13}",
        "case", "suprnova", "governor", "naive_log", "ours/governor", "naive/ours"
    );
}

/// One row of that table: the ns per decision of suprnova, governor and
/// the naive log, and the ratios the targets are stated in.
fn print_ratio_row(case: &str, [ours, gov, naive]: [f64; 3]) {
    println!(
        "{case:<30} {ours:>10.1} {gov:>10.1} {naive:>10.1} {:>12.2}x {:>12.2}x",
        ours / gov,
        naive / ours
    );
}

/// Checks the targets of the flood case on `set`, from the ns per decision
/// of suprnova, governor and the naive log on one thread and on two:
/// suprnova at most 1.25x governor; over 100,000 keys, also at least 2x
/// faster than the naive log, and two threads at least 1.5x one.
fn check_targets(source: &str, set: &str, per_thread: [[f64; 3]; 2]) {
    use support::targets::{Bound, Unit, check};
    for (threads, [ours, gov, naive]) in [1, 2].into_iter().zip(per_thread) {
        let case = format!("flood {set} {threads}t, {source}");
        check(
            &format!("memory driver / governor, {case}"),
            ours / gov,
            Bound::AtMost(1.25),
            Unit::Ratio,
        );
        if set != "hot_key" {
            check(
                &format!("naive log / memory driver, {case}"),
                naive / ours,
                Bound::AtLeast(2.0),
                Unit::Ratio,
            );
        }
    }
    if set != "hot_key" {
        check(
            &format!("memory driver, two threads / one, flood {set}, {source}"),
            per_thread[0][0] / per_thread[1][0],
            Bound::AtLeast(1.5),
            Unit::Ratio,
        );
    }
}

/// How much more one contender decides on two threads than on one, from
/// its ns per decision on each.
fn scaling_line(case: &str, contender: &str, one_thread: f64, two_threads: f64) -> String {
    format!(
        "{case}, throughput of 2 threads / 1 thread, {contender}: {:.2}x",
        one_thread / two_threads
    )
}

/// Rounds of the comparison in alternation.
const ALTERNATING_ROUNDS: usize = 21;
/// Decisions of one contender on one thread count in one round.
const ALTERNATING_DECISIONS: u64 = 200_000;

/// The flood cases once more, with the contenders taking turns: criterion
/// measures one contender for seconds and then the next, and on a shared
/// machine whose speed drifts from one second to the next, a ratio of two
/// such measurements carries the drift. Here every round runs each
/// contender on one and on two threads (the six runs starting one further
/// down the list each round), each run after an untimed pass over the keys
/// that brings its data back into the caches, and each run's median over
/// the rounds is reported: a drift slows every contender alike.
fn alternating() {
    println!(
        "\n== memory_driver, flood, in alternation: {ALTERNATING_ROUNDS} rounds of \
         {ALTERNATING_DECISIONS} decisions per contender and thread count, median ns per decision =="
    );
    print_ratio_header();
    let mut scaling = Vec::new();
    let mut targets = Vec::new();
    for keys in key_sets() {
        let contenders = COMPARED.map(|name| {
            let contender = Contender::build(name, Scenario::Flood);
            contender.fill(&keys.first_seen);
            contender
        });
        // Each contender on one thread and on two.
        let runs: Vec<(&Contender, usize)> = contenders
            .iter()
            .flat_map(|contender| [(contender, 1), (contender, 2)])
            .collect();
        let samples = in_turns(&runs, &keys.walk);
        let median_of = |contender: usize, threads: usize| {
            support::median(&samples[contender * 2 + threads - 1])
        };
        let per_thread = [1, 2].map(|threads| [0, 1, 2].map(|c| median_of(c, threads)));
        for (threads, ns) in [1, 2].into_iter().zip(per_thread) {
            print_ratio_row(&format!("flood {} {threads}t", keys.name), ns);
        }
        targets.push((keys.name, per_thread));
        for (c, name) in COMPARED.iter().enumerate() {
            let case = format!("flood {}", keys.name);
            scaling.push(scaling_line(&case, name, median_of(c, 1), median_of(c, 2)));
        }
    }
    for line in scaling {
        println!("{line}");
    }
    for (set, per_thread) in targets {
        check_targets("in alternation", set, per_thread);
    }
}

/// Runs each of `runs` (a contender and its count of threads) over `walk`
/// in [`ALTERNATING_ROUNDS`] rounds, the runs taking turns, each round
/// starting one further down the list; each run's ns per decision, a round.
fn in_turns(runs: &[(&Contender, usize)], walk: &[String]) -> Vec<Vec<f64>> {
    support::walks::in_turns(runs.len(), ALTERNATING_ROUNDS, |run| {
        let (contender, threads) = runs[run];
        // One pass over the keys first, untimed, so that the run finds its
        // data in the caches, as criterion's runs do, rather than where the
        // other contenders' runs left it.
        contender.run_threads(walk, threads, walk.len() as u64);
        let elapsed = contender.run_threads(walk, threads, ALTERNATING_DECISIONS);
        elapsed.as_nanos() as f64 / ALTERNATING_DECISIONS as f64
    })
}

/// The driver's shard counts [`by_shard_count`] measures; 64 is its default.
const SHARD_COUNTS: [usize; 5] = [1, 4, 8, 16, 64];

/// The 100,000 keys on one frozen fake clock, walked in first-seen and in
/// shuffled order, on one thread and on two, by the driver built on each of
/// [`SHARD_COUNTS`] shards and by governor, the contenders taking turns as
/// in [`alternating`]. A shard keeps its slots in the order its keys came,
/// so the first-seen walk reads one ordered stream of slots a shard: the
/// one-thread rows show how many such streams this processor's prefetching
/// follows, where the shuffled walk, which no prefetching helps, should not
/// move with the count; the two-thread rows show what fewer shards cost
/// when two cores meet on one lock. No target is checked here.
fn by_shard_count() {
    println!(
        "\n== memory_driver, flood_fake_clock, one and two threads, by the driver's shard count: \
         {ALTERNATING_ROUNDS} rounds of {ALTERNATING_DECISIONS} decisions per contender, \
         median ns per decision =="
    );
    print!("{:<40}", "case");
    for count in SHARD_COUNTS {
        let shards = if count == 1 { "shard" } else { "shards" };
        print!(" {:>10}", format!("{count} {shards}"));
    }
    println!(" {:>10}", "governor");
    for keys in key_sets().into_iter().filter(|keys| keys.name != "hot_key") {
        let clock = FakeClock::at_unix(1_700_000_000);
        let mut contenders: Vec<Contender> = SHARD_COUNTS
            .iter()
            .map(|&count| Contender {
                limiter: Limiter::Suprnova(driver_on(&clock).with_shards(count)),
                tick: Tick::Ours(clock.clone()),
                scenario: Scenario::FloodFakeClock,
                cursor: AtomicUsize::new(0),
            })
            .collect();
        contenders.push(Contender::build("governor", Scenario::FloodFakeClock));
        for contender in &contenders {
            contender.fill(&keys.first_seen);
        }
        for threads in [1, 2] {
            let runs: Vec<(&Contender, usize)> = contenders
                .iter()
                .map(|contender| (contender, threads))
                .collect();
            print!(
                "{:<40}",
                format!("flood_fake_clock {} {threads}t", keys.name)
            );
            for ns in in_turns(&runs, &keys.walk) {
                print!(" {:>10.1}", support::median(&ns));
            }
            println!();
        }
    }
}

/// Two threads deciding the 100,000 keys on one limiter, as the target
/// asks, and on a limiter each, each thread's limiter holding only the half
/// of the keys that thread calls, with the production clocks; beside them
/// one thread on the one limiter and one on a limiter of half the keys. The
/// runs and a [core-to-core handoff](support::machine::core_to_core_ns)
/// take turns as in [`alternating`]. Two cores that share a limiter pass
/// the cache line of each lock they take between them (the driver's shard
/// lock, and governor's), where limiters of their own share no line: the
/// second thread's gain on a limiter each is what the second core gives
/// when nothing passes between the cores, and the handoff's time is what
/// one pass cost on this machine meanwhile. No target is checked here.
fn one_limiter_or_one_each() {
    println!(
        "\n== memory_driver, flood, two threads on one limiter or on one each: \
         {ALTERNATING_ROUNDS} rounds of {ALTERNATING_DECISIONS} decisions per run, \
         median ns per decision =="
    );
    println!(
        "{:<36} {:>9} {:>9} {:>9} {:>9} {:>12} {:>12}",
        "case", "1 on one", "2 on one", "1 on half", "2 on each", "one: 2t/1t", "each: 2t/1t"
    );
    let mut handoffs = Vec::new();
    for keys in key_sets().into_iter().filter(|keys| keys.name != "hot_key") {
        // Each thread's half of the walk, and its keys in the order the
        // whole set was first seen, which its own limiter sees them in.
        let halves: [Vec<String>; 2] = [0, 1].map(|t| {
            let len = keys.walk.len() / 2;
            keys.walk[t * len..(t + 1) * len].to_vec()
        });
        let first_seen: [Vec<String>; 2] = halves.each_ref().map(|half| {
            let called: HashSet<&String> = half.iter().collect();
            keys.first_seen
                .iter()
                .filter(|key| called.contains(key))
                .cloned()
                .collect()
        });
        for name in ["suprnova", "governor"] {
            let one = Contender::build(name, Scenario::Flood);
            one.fill(&keys.first_seen);
            let each = first_seen.each_ref().map(|keys| {
                let contender = Contender::build(name, Scenario::Flood);
                contender.fill(keys);
                contender
            });
            // `threads` threads, thread `t` on `limiters[t]` over `walks[t]`:
            // an untimed pass over the keys first, as in `in_turns`, then
            // the measured decisions; ns a decision.
            let timed = |limiters: &[&Contender], walks: &[&[String]], threads: usize| {
                let decide = |decisions: u64| {
                    support::walks::on_threads(
                        walks[0].len(),
                        threads,
                        decisions,
                        &limiters[0].cursor,
                        |t, start, count| limiters[t].run(walks[t], start, count),
                    )
                };
                decide(walks.iter().map(|walk| walk.len() as u64).sum());
                decide(ALTERNATING_DECISIONS).as_nanos() as f64 / ALTERNATING_DECISIONS as f64
            };
            let walk = keys.walk.as_slice();
            let samples = support::walks::in_turns(5, ALTERNATING_ROUNDS, |run| match run {
                0 => timed(&[&one], &[walk], 1),
                1 => timed(&[&one, &one], &[walk, walk], 2),
                2 => timed(&[&each[0]], &[&halves[0]], 1),
                3 => timed(&[&each[0], &each[1]], &[&halves[0], &halves[1]], 2),
                // Not a number where the process has one CPU to run on.
                _ => support::machine::core_to_core_ns().unwrap_or(f64::NAN),
            });
            let [on_one, two_on_one, on_half, two_on_each] =
                [0, 1, 2, 3].map(|run| support::median(&samples[run]));
            println!(
                "{:<36} {on_one:>9.1} {two_on_one:>9.1} {on_half:>9.1} {two_on_each:>9.1} {:>11.2}x {:>11.2}x",
                format!("flood {} {name}", keys.name),
                on_one / two_on_one,
                on_half / two_on_each,
            );
            handoffs.extend(samples[4].iter().filter(|ns| !ns.is_nan()));
        }
    }
    handoffs.sort_by(f64::total_cmp);
    match (handoffs.first(), handoffs.last()) {
        (Some(least), Some(most)) => println!(
            "a cache line from one core to the other, in the rounds: median {:.1} ns, {least:.1} to {most:.1} ns",
            support::median(&handoffs)
        ),
        _ => println!(
            "a cache line from one core to the other: not measured, this process runs on one CPU"
        ),
    }
}

fn main() {
    let since = SystemTime::now();
    let mut criterion = support::criterion(Duration::from_secs(3));
    bench(&mut criterion);
    criterion.final_summary();
    report(since);
    alternating();
    by_shard_count();
    one_limiter_or_one_each();
}
