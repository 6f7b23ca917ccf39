//! A one-line description of the machine a bench ran on, printed beside its
//! numbers so a table can say where it came from.

use std::process::Command;

/// CPU model, cores, kernel, rustc, and the load average at the start, as
/// one line.
pub fn describe() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|model| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = cpus();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_owned())
        .unwrap_or_default();
    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("--version")
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_default();
    format!(
        "{cpu}, {cores} cores, kernel {kernel}, {rustc}, load average {}",
        load_average()
    )
}

/// What entering the kernel costs this machine, as one line: the median time
/// of a system call that does nothing (`getpid`, which the C library does not
/// cache), and the kernel's mitigations of the processor's flaws that apply
/// here (every line of `/sys/devices/system/cpu/vulnerabilities` but those
/// that say "Not affected"), some of which make each entry and return dearer.
/// A request over loopback enters the kernel several times on each side.
pub fn kernel_entry() -> String {
    const ROUNDS: usize = 21;
    const CALLS: u32 = 20_000;
    let per_call: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = std::time::Instant::now();
            for _ in 0..CALLS {
                std::hint::black_box(std::process::id());
            }
            start.elapsed().as_nanos() as f64 / f64::from(CALLS)
        })
        .collect();
    let mut flaws: Vec<String> = std::fs::read_dir("/sys/devices/system/cpu/vulnerabilities")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let state = std::fs::read_to_string(entry.path()).ok()?;
            let state = state.trim();
            (state != "Not affected")
                .then(|| format!("{}: {state}", entry.file_name().to_string_lossy()))
        })
        .collect();
    flaws.sort();
    format!(
        "a system call {:.0} ns (getpid, median of {ROUNDS} rounds of {CALLS}); {}",
        super::median(&per_call),
        if flaws.is_empty() {
            "no mitigations listed".to_owned()
        } else {
            flaws.join("; ")
        }
    )
}

/// The machine's CPUs, from /proc/cpuinfo: all of them, also when this
/// process is pinned to some (as `available_parallelism` would count).
pub fn cpus() -> usize {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|info| {
            info.lines()
                .filter(|line| line.starts_with("processor"))
                .count()
        })
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The 1-minute load average; above about 1 on this 2-core machine the
/// numbers of a run are noisy.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// The CPU time counters of `/proc/stat` (all CPUs), in clock ticks.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTicks {
    /// Time the CPUs had nothing to run (idle and waiting for I/O).
    idle: u64,
    /// Time the virtual CPUs were ready to run and the host ran something
    /// else (the hypervisor's steal counter).
    steal: u64,
    /// Every counter together.
    total: u64,
}

/// The counters now; zero outside Linux.
pub fn cpu_ticks() -> CpuTicks {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal ...
    CpuTicks {
        idle: field(3) + field(4),
        steal: field(7),
        total: fields.iter().take(8).sum(),
    }
}

impl CpuTicks {
    /// The share of all CPU time between `self` and `later` that the host
    /// took, in percent.
    pub fn steal_percent_until(self, later: CpuTicks) -> f64 {
        self.percent_until(later, |t| t.steal)
    }

    /// The share of all CPU time between `self` and `later` that the CPUs
    /// were idle, in percent: above a few percent, what ran was not using
    /// the whole machine (a load generator that waits on one thread, say).
    pub fn idle_percent_until(self, later: CpuTicks) -> f64 {
        self.percent_until(later, |t| t.idle)
    }

    fn percent_until(self, later: CpuTicks, counter: impl Fn(&CpuTicks) -> u64) -> f64 {
        let total = later.total.saturating_sub(self.total);
        if total == 0 {
            return 0.0;
        }
        100.0 * counter(&later).saturating_sub(counter(&self)) as f64 / total as f64
    }
}

/// How long a cache line written by one core takes to reach another, now:
/// two threads hand a counter back and forth `HANDOFFS` times, each waiting
/// for the other's write before it writes, and the time is divided by the
/// handoffs. On a virtual machine the host moves the two vCPUs between
/// physical cores, so this moves too, by an order of magnitude within a
/// minute on some machines; what a limiter shared by two threads pays for
/// the lock lines its cores pass to each other moves with it. `None` when
/// this process may run on one CPU only: there the two threads would take
/// turns on it, and a handoff would wait for the scheduler.
pub fn core_to_core_ns() -> Option<f64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    const HANDOFFS: u64 = 100_000;
    /// The counter, on a line of its own.
    #[repr(align(128))]
    struct Line(AtomicU64);

    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return None;
    }
    let line = Line(AtomicU64::new(0));
    let wait_for = |count: u64| {
        while line.0.load(Ordering::Acquire) != count {
            std::hint::spin_loop();
        }
    };
    // Each side waits for the count it may answer and writes the next one:
    // even counts are this thread's turn, odd ones the other thread's.
    let take_turns = |odd: u64| {
        for turn in 0..HANDOFFS / 2 {
            let mine = 2 * turn + odd;
            wait_for(mine);
            line.0.store(mine + 1, Ordering::Release);
        }
    };
    Some(std::thread::scope(|scope| {
        scope.spawn(|| take_turns(1));
        let start = Instant::now();
        take_turns(0);
        wait_for(HANDOFFS);
        start.elapsed().as_nanos() as f64 / HANDOFFS as f64
    }))
}
