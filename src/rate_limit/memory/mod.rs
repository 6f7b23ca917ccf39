//! The in-memory sliding-window driver: buckets in this process's heap,
//! sharded over many locks, a few bytes a hit, swept by the calls
//! themselves.
//!
//! See [`InMemoryRateLimiter`].

mod bucket;
mod full_notes;
mod gap_ring;
mod limiter;
mod shards;

pub use limiter::InMemoryRateLimiter;
