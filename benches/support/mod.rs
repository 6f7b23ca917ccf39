//! Helpers shared by the benches: the machine they ran on, and the ratios
//! between contenders measured in one run.

#![allow(dead_code)]

pub mod estimates;
pub mod loopback;
pub mod machine;
pub mod redis;
pub mod servers;
pub mod targets;
pub mod walks;

/// A tokio runtime of two workers, as a server on a two-core machine runs.
pub fn two_worker_runtime() -> tokio::runtime::Runtime {
    multi_thread_runtime(2)
}

/// A tokio runtime of `workers` workers with its timers and I/O.
pub fn multi_thread_runtime(workers: usize) -> tokio::runtime::Runtime {
    named_runtime(workers, "tokio-runtime-worker")
}

/// [`multi_thread_runtime`] with its workers named `name`, by which a bench
/// can tell their CPU time from its other threads'.
pub fn named_runtime(workers: usize, name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A current-thread tokio runtime with its timers and I/O, as the in-process
/// benches and the HTTP bench's client run.
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The middle value of `values` (the upper of the two middle ones when
/// their count is even): the median round or run the benches report.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// The number in the environment variable `name`, or `default`.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
        .unwrap_or(default)
}

/// Criterion as the benches run it: a second of warm-up, then
/// `measurement` of samples, and what the command line adds.
pub fn criterion(measurement: std::time::Duration) -> criterion::Criterion {
    criterion::Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(measurement)
        .configure_from_args()
}
