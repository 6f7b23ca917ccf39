//! `RedisRateLimiter`: the sliding-window driver on Redis or a Redis
//! Cluster, shared by every process that points at it.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;

use super::{RateLimitError, RateLimiterDriver, SlidingWindowConfig};
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::redis_client::{LuaScript, RedisConnection, ScriptCall, reply_numbers};

/// The decision script, hashed once; calls send only its SHA1.
static SLIDING_WINDOW: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("sliding_window.lua")));

/// The longest window the script keeps exact: its times are microseconds in
/// Lua doubles, which hold integers up to 2^53, and a time is about 2^51.
const MAX_WINDOW: Duration = Duration::from_micros(1 << 50);

/// A sliding-window limiter whose buckets live in Redis.
///
/// Each key is a sorted set of its admitted hits, stamped with Redis's own
/// `TIME` in microseconds, so application servers with skewed clocks agree
/// on one window. A decision is one Lua script, run atomically by Redis in
/// one round trip (`EVALSHA`, sent as `EVAL` of the script to a node that
/// answers `NOSCRIPT` after a restart or a `SCRIPT FLUSH`): it drops the
/// hits that have left the window (`now - window`, `now`], counts the rest,
/// records the call only when the count is below the limit, and sets the
/// key to expire when its newest hit leaves the window. So a limit of N
/// admits N across every process, task and connection that shares the Redis,
/// and a key that holds nothing costs nothing.
///
/// Every call touches one key, so the same driver runs on a Redis Cluster:
/// build the [`RedisConnection`] from a cluster URL. Keys are
/// `<prefix><key>`, with the prefix `suprnova_rate_limit:` unless
/// [`with_prefix`](Self::with_prefix) sets another, so they never meet the
/// cache facade's keys.
///
/// Each call waits at most the connection's
/// [`deadline`](RedisConnection::deadline); a dead or hung Redis gives a
/// [`RateLimitError::Timeout`] or [`RateLimitError::Backend`], which the
/// middleware's [`BackendErrorPolicy`](super::BackendErrorPolicy) turns into
/// a response.
///
/// `max_requests: 0` refuses every call without asking Redis; its
/// `retry_after` is the window length, since no place will ever free up.
/// Windows are rounded up to whole microseconds and may be up to about 35
/// years long.
///
/// Redis's `TIME` is a wall clock, which NTP or an operator may step. After
/// a step back, the first call on a key whose newest hit is later than
/// `TIME` moves every hit of the key back by the same amount, so that the
/// newest is now, and sets the key's expiry again: their count and spacing
/// are kept, a full key is refused for one window at most, never for the
/// step and a window, and the key decides as the memory driver's does
/// after the same step. A step forward ages every hit by the step, as the
/// window reads them. To see a step, every call on a key that holds hits
/// reads the newest: one command more in the script, in the same round
/// trip.
///
/// ```rust,no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use suprnova::rate_limit::redis::RedisRateLimiter;
/// use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};
/// use suprnova::redis_client::{RedisConfig, RedisConnection};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = RedisConfig::from_url("redis://127.0.0.1:6379")?
///     .with_timeouts(Duration::from_millis(300), Duration::from_millis(300));
/// let limiter: Arc<dyn RateLimiterDriver> =
///     Arc::new(RedisRateLimiter::new(RedisConnection::new(config)?).with_prefix("app:rl:"));
///
/// let cfg = SlidingWindowConfig::new(60, Duration::from_secs(60));
/// let decision = limiter.acquire("user:42", &cfg).await?;
/// if !decision.allowed {
///     println!("retry in {:?}", decision.retry_after);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RedisRateLimiter {
    conn: RedisConnection,
    prefix: String,
}

/// What the script did, in the units it works in.
struct Reply {
    admitted: bool,
    /// Hits in the window after the call.
    count: u64,
    /// The time (µs) of the hit whose leaving frees a place.
    gate_us: u64,
    /// Redis `TIME` (µs).
    now_us: u64,
}

impl RedisRateLimiter {
    /// The key prefix of a new limiter.
    pub const DEFAULT_PREFIX: &'static str = "suprnova_rate_limit:";

    /// A limiter on `conn` (one node or a cluster), with the default prefix.
    pub fn new(conn: RedisConnection) -> Self {
        Self {
            conn,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
        }
    }

    /// Stores each key as `<prefix><key>`.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The connection the limiter runs on.
    pub fn connection(&self) -> &RedisConnection {
        &self.conn
    }

    /// Runs the script on `key`: records the call when `admit` and there is
    /// room, else only reads.
    async fn run(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
        admit: bool,
    ) -> Result<Reply, RateLimitError> {
        let mut call = ScriptCall::new(&SLIDING_WINDOW, 1);
        call.key(&self.prefix, key)
            .arg(config.max_requests)
            .arg(window_micros(config))
            .arg(if admit { "1" } else { "0" })
            // A second run adds a second hit at most.
            .repeatable(true);
        let reply: Vec<u8> = self.conn.call_script(&call).await?;
        let [admitted, count, gate_us, now_us] = reply_numbers::<u64, 4>(&reply)?;
        Ok(Reply {
            admitted: admitted == 1,
            count,
            gate_us,
            now_us,
        })
    }
}

#[async_trait]
impl RateLimiterDriver for RedisRateLimiter {
    async fn acquire(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
    ) -> Result<Decision, RateLimitError> {
        validate(config)?;
        let max = u64::from(config.max_requests);
        if max == 0 {
            // No call to Redis: its clock is not read, the machine's is.
            let now = SystemClock.unix_nanos();
            return Ok(Decision::refused_under_zero(config.window, now));
        }
        let reply = self.run(key, config, true).await?;
        if reply.admitted {
            // The script skips the lookup of the oldest hit for a call it
            // admits: no reset time, which only a refusal reports.
            return Ok(Decision::allowed(max, max.saturating_sub(reply.count)));
        }
        let frees_at = reply.gate_us.saturating_add(window_micros(config));
        Ok(Decision::refused(max, micros_until(frees_at, reply.now_us))
            .with_reset_at(unix_secs_ceil(frees_at)))
    }

    async fn retry_after(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
    ) -> Result<Option<Duration>, RateLimitError> {
        validate(config)?;
        let max = u64::from(config.max_requests);
        if max == 0 {
            return Ok(Some(config.window));
        }
        let reply = self.run(key, config, false).await?;
        Ok((reply.count >= max).then(|| {
            let frees_at = reply.gate_us.saturating_add(window_micros(config));
            micros_until(frees_at, reply.now_us)
        }))
    }

    fn check_config(&self, config: &SlidingWindowConfig) -> Result<(), RateLimitError> {
        validate(config)
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}

/// The shared rules, and the longest window the script keeps exact.
fn validate(config: &SlidingWindowConfig) -> Result<(), RateLimitError> {
    config.validate()?;
    if config.window > MAX_WINDOW {
        return Err(RateLimitError::Config(format!(
            "the Redis driver takes windows up to {MAX_WINDOW:?}, got {:?}",
            config.window
        )));
    }
    Ok(())
}

/// The window in whole microseconds, rounded up so it is never shortened.
fn window_micros(config: &SlidingWindowConfig) -> u64 {
    u64::try_from(config.window.as_nanos().div_ceil(1_000)).unwrap_or(u64::MAX)
}

fn micros_until(at_us: u64, now_us: u64) -> Duration {
    Duration::from_micros(at_us.saturating_sub(now_us))
}

fn unix_secs_ceil(us: u64) -> i64 {
    i64::try_from(us.div_ceil(1_000_000)).unwrap_or(i64::MAX)
}
