//! `RedisStore`: the cache in Redis, with the key and value layout of
//! Laravel's Redis cache store.

use std::sync::LazyLock;
use std::time::Duration;

use ::redis::cmd;
use async_trait::async_trait;

use super::store::{
    CacheError, IncrementOutcome, Store, WindowIncrement, add_then_increment_if_below,
    count_then_read_window_end,
};
use crate::redis_client::{
    LuaScript, RedisBackendError, RedisConnection, ScriptCall, reply_numbers,
};

/// The conditional increment, and with a timer key the window's timer too.
static INCREMENT_IF_BELOW: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("increment_if_below.lua")));

/// A count in no window ([`Store::increment_in_open_window`]).
static INCREMENT_IN_OPEN_WINDOW: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("increment_in_open_window.lua")));

/// At least a time to live for a key ([`Store::expire_at_least`]).
static LIVE_AT_LEAST: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("live_at_least.lua")));

/// A cache store in Redis (one node or a Redis Cluster), laid out as
/// Laravel's Redis cache store lays it out, so that a Laravel application
/// and this crate on one Redis read and write the same entries.
///
/// # Layout
///
/// - **Keys.** Every key is `<prefix><key>`. Laravel 11 and later compose
///   the prefix as `<Redis connection prefix><cache prefix>`, with nothing
///   between them or before the key. [`RedisStore::new`] uses Laravel 13's
///   defaults, [`DEFAULT_PREFIX`](RedisStore::DEFAULT_PREFIX)
///   (`laravel-database-laravel-cache-`); set
///   [`with_prefix`](RedisStore::with_prefix) to match another application:
///
///   | Laravel application | prefix |
///   | --- | --- |
///   | framework 13 defaults, skeleton 12.x since v12.1.0 (`REDIS_PREFIX` `laravel-database-`, `CACHE_PREFIX` `laravel-cache-`) | `laravel-database-laravel-cache-` |
///   | skeletons 11.x, 12.0.x (`laravel_database_`, `laravel_cache_`) | `laravel_database_laravel_cache_` |
///   | Laravel 10 and earlier, whose store appends `:` to the cache prefix | `laravel_database_laravel_cache_:` |
///   | an app that sets `REDIS_PREFIX` / `CACHE_PREFIX` | the two values, concatenated |
///
///   The prefixes derive from `APP_NAME` when they are not set; see
///   [`CacheConfig`](super::CacheConfig), which reads all of this from the
///   environment. Laravel keeps its cache in the database of its `cache`
///   Redis connection, `REDIS_CACHE_DB`, which is 1 by default: point the
///   connection at the same database.
/// - **Values.** Integers are stored as plain decimal strings (`"2"`), as
///   Laravel stores numbers; the facade's timer is a decimal Unix time.
///   Reading a timer also accepts the `i:<n>;` form that a Laravel
///   application configured with a phpredis serializer writes. Other
///   values are stored and read as given, where Laravel stores them
///   PHP-serialized (`s:5:"hello";`): the two share the rate limiter's
///   counters and timers, not text put through `Cache::put`.
/// - **Times to live** are whole seconds (`EX`), at least 1 and at most
///   [`RedisStore::MAX_TTL_SECONDS`] (about 31.7 million years): Redis refuses an
///   expiry whose time in milliseconds would not fit in 64 bits, and a
///   window longer than that (`Limit::new(2, Duration::MAX)`) would have
///   failed every count, where the memory store keeps it for ever.
///
/// # Commands
///
/// Every operation is one command or one script on one key, so it runs on a
/// Redis Cluster, where a key and its `:timer` live in different slots:
/// `get` is `GET`, `put` is `SETEX`, `add` is `SET NX EX` (the effect of
/// Laravel's `EXISTS`-then-`SETEX` script, in one native command),
/// `increment` and `decrement` are `INCRBY` and
/// `DECRBY`, `increment_if_below` is one script, `forget` is `DEL`, `ttl` is
/// `PTTL`. The one call on two keys, `increment_in_window` (the throttle's
/// count of a request: a window's timer written when missing, then the
/// conditional increment), is the same script given both keys on one node,
/// one command per request; on a cluster it is `SET NX EX` and the script
/// sent at once, in one round trip, and for the call that opens a window
/// and counts a second round trip, which gives the counter at least the
/// window's time to live. So is `increment_in_open_window` (a count in no
/// window, which counts only while a window is open on the key): one
/// script given both keys on one node; on a cluster the script on the
/// counter, and, for a counter missing or at 0, the timer's `PTTL` and the
/// script again. Every call is bounded by the
/// connection's timeouts and then fails with [`CacheError::Timeout`]; a
/// read (`get`, `ttl`) or a count that finds its connection dropped is
/// sent once more, as [`RedisConnection`] says.
///
/// ```no_run
/// use suprnova::cache::{RedisStore, Store};
/// use suprnova::redis_client::{RedisConfig, RedisConnection};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// // The cache database of a Laravel skeleton is 1.
/// let conn = RedisConnection::new(RedisConfig::from_url("redis://127.0.0.1:6379/1")?)?;
/// // A Laravel 11 application with the skeleton's defaults.
/// let store = RedisStore::new(conn).with_prefix("laravel_database_laravel_cache_");
/// let hits = store.increment("login:203.0.113.5", 1).await?;
/// # let _ = hits;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RedisStore {
    conn: RedisConnection,
    prefix: String,
}

impl RedisStore {
    /// Laravel 13's default Redis connection prefix, `REDIS_PREFIX`
    /// (`Str::slug(APP_NAME).'-database-'` with `APP_NAME=Laravel`).
    pub const LARAVEL_REDIS_PREFIX: &'static str = "laravel-database-";
    /// Laravel 13's default cache prefix, `CACHE_PREFIX`
    /// (`Str::slug(APP_NAME).'-cache-'`).
    pub const LARAVEL_CACHE_PREFIX: &'static str = "laravel-cache-";
    /// The prefix [`RedisStore::new`] uses: the two above, concatenated.
    pub const DEFAULT_PREFIX: &'static str = "laravel-database-laravel-cache-";
    /// The longest time to live, in seconds, the store gives a key: 10^15
    /// seconds, far inside the about 9.2 * 10^15 past which Redis refuses
    /// an expiry (`invalid expire time`: its absolute time in milliseconds
    /// must fit in 64 bits), and past any window a limit means.
    pub const MAX_TTL_SECONDS: i64 = 1_000_000_000_000_000;

    /// A store on `conn` with [`RedisStore::DEFAULT_PREFIX`].
    pub fn new(conn: RedisConnection) -> Self {
        Self {
            conn,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
        }
    }

    /// Puts `prefix` (the whole of it: the Redis prefix and the cache prefix
    /// together) before every key. An empty prefix stores keys as given.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The prefix before every key.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The connection.
    pub fn connection(&self) -> &RedisConnection {
        &self.conn
    }

    /// Runs the conditional increment on `key` as `call` sets it up.
    async fn count_below(
        &self,
        key: &str,
        call: &ScriptCall<'_>,
    ) -> Result<IncrementOutcome, CacheError> {
        let reply: Vec<u8> = self
            .integer_answer(key, self.conn.call_script(call).await)
            .await?;
        let [counted, count] = reply_numbers::<i64, 2>(&reply)?;
        Ok(IncrementOutcome {
            counted: counted == 1,
            count,
        })
    }

    /// Runs the count in no window on `key` as `call` sets it up: 1 when
    /// the counter holds the count, 0 when nothing was stored (the count is
    /// the amount), 2 when the script needs the timer's time to live; and
    /// the count.
    async fn count_in_open_window(
        &self,
        key: &str,
        call: &ScriptCall<'_>,
    ) -> Result<[i64; 2], CacheError> {
        let reply: Vec<u8> = self
            .integer_answer(key, self.conn.call_script(call).await)
            .await?;
        Ok(reply_numbers::<i64, 2>(&reply)?)
    }

    /// The answer to an integer operation on `key`, its error as
    /// [`integer_error`] reports it; a value refused as not an integer is
    /// read, to be named in the error as the memory store names it (Redis's
    /// refusal does not say it).
    async fn integer_answer<T>(
        &self,
        key: &str,
        answer: Result<T, RedisBackendError>,
    ) -> Result<T, CacheError> {
        match answer.map_err(|e| integer_error(key, e)) {
            Err(CacheError::NotAnInteger { key, value }) => {
                let found = self.get(&key).await.ok().flatten();
                Err(CacheError::NotAnInteger {
                    value: found.unwrap_or(value),
                    key,
                })
            }
            other => other,
        }
    }

    fn full_key(&self, key: &str) -> String {
        let mut full = String::with_capacity(self.prefix.len() + key.len());
        full.push_str(&self.prefix);
        full.push_str(key);
        full
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn get(&self, key: &str) -> Result<Option<String>, CacheError> {
        Ok(self.conn.read(cmd("GET").arg(self.full_key(key))).await?)
    }

    async fn put(&self, key: &str, value: &str, ttl: Duration) -> Result<(), CacheError> {
        let mut setex = cmd("SETEX");
        setex
            .arg(self.full_key(key))
            .arg(ttl_seconds(ttl))
            .arg(value);
        Ok(self.conn.query(&setex).await?)
    }

    async fn add(&self, key: &str, value: &str, ttl: Duration) -> Result<bool, CacheError> {
        // `SET NX EX` is Laravel's EXISTS-then-SETEX script in one native
        // command: atomic the same way, and cheaper for Redis to run than a
        // script (the throttle writes a window's timer this way on every
        // counted request).
        let stored: Option<String> = self
            .conn
            .query(
                cmd("SET")
                    .arg(self.full_key(key))
                    .arg(value)
                    .arg("EX")
                    .arg(ttl_seconds(ttl))
                    .arg("NX"),
            )
            .await?;
        Ok(stored.is_some())
    }

    async fn increment(&self, key: &str, by: i64) -> Result<i64, CacheError> {
        let answer = self
            .conn
            .query(cmd("INCRBY").arg(self.full_key(key)).arg(by))
            .await;
        self.integer_answer(key, answer).await
    }

    async fn decrement(&self, key: &str, by: i64) -> Result<i64, CacheError> {
        let answer = self
            .conn
            .query(cmd("DECRBY").arg(self.full_key(key)).arg(by))
            .await;
        self.integer_answer(key, answer).await
    }

    async fn increment_if_below(
        &self,
        key: &str,
        decay_seconds: i64,
        amount: i64,
        ceiling: i64,
    ) -> Result<IncrementOutcome, CacheError> {
        let mut call = ScriptCall::new(&INCREMENT_IF_BELOW, 1);
        call.key(&self.prefix, key)
            .arg(expiry_seconds(decay_seconds))
            .arg(amount)
            .arg(room(amount, ceiling))
            // A second run of a count that adds can only add again.
            .repeatable(amount >= 0);
        self.count_below(key, &call).await
    }

    /// On one node, one script reads the counter and the timer and counts.
    /// On a cluster, where the two keys live in different slots, the
    /// script on the counter alone counts in a count other than 0 at once
    /// and leaves a missing counter, or one at 0, untouched; for that one
    /// the timer's time to live is read and the script asked again with
    /// it (counting in the counter if another call counted meanwhile).
    async fn increment_in_open_window(
        &self,
        key: &str,
        timer_key: &str,
        amount: i64,
    ) -> Result<i64, CacheError> {
        let cluster = self.conn.config().is_cluster();
        let mut call = ScriptCall::new(&INCREMENT_IN_OPEN_WINDOW, if cluster { 1 } else { 2 });
        call.key(&self.prefix, key);
        if !cluster {
            call.key(&self.prefix, timer_key);
        }
        call.arg(amount);
        let [kept, count] = self.count_in_open_window(key, &call).await?;
        if kept != 2 {
            return Ok(count);
        }
        let left: i64 = self
            .conn
            .read(cmd("PTTL").arg(self.full_key(timer_key)))
            .await?;
        let mut call = ScriptCall::new(&INCREMENT_IN_OPEN_WINDOW, 1);
        call.key(&self.prefix, key).arg(amount).arg(left);
        let [_, count] = self.count_in_open_window(key, &call).await?;
        Ok(count)
    }

    /// On one node, the timer's `SET NX EX` and the conditional increment
    /// in one script call; on a cluster, where the two keys live in
    /// different slots, the two calls at once, and, from the call that
    /// opened the window and counted, a third once both have answered: the counter
    /// gets at least the window's time to live, as one node's script gives
    /// it. Written apart, on two masters, the counter could otherwise end
    /// before the timer (one an earlier window left with less time, or one
    /// whose master answered before the timer's did), and the window would
    /// count from 0 again before it ends.
    async fn increment_in_window(
        &self,
        count: WindowIncrement<'_>,
    ) -> Result<IncrementOutcome, CacheError> {
        if self.conn.config().is_cluster() {
            return add_then_increment_if_below(self, count).await;
        }
        Ok(self.increment_in_window_or_window_end(count).await?.0)
    }

    async fn increment_in_window_or_window_end(
        &self,
        count: WindowIncrement<'_>,
    ) -> Result<(IncrementOutcome, Option<i64>), CacheError> {
        if self.conn.config().is_cluster() {
            // The timer lives in another slot: read apart when the call did
            // not count.
            return count_then_read_window_end(self, count).await;
        }
        // One script: the timer opened, the count, and for a call that did
        // not count the timer's value, in one round trip.
        let mut call = ScriptCall::new(&INCREMENT_IF_BELOW, 2);
        call.key(&self.prefix, count.key)
            .key(&self.prefix, count.timer_key)
            .arg(expiry_seconds(count.decay_seconds))
            .arg(count.amount)
            .arg(room(count.amount, count.ceiling))
            .arg(count.ends_at)
            .repeatable(count.amount >= 0);
        let reply: Vec<u8> = self
            .integer_answer(count.key, self.conn.call_script(&call).await)
            .await?;
        let [counted, count, ends_at] = reply_numbers::<i64, 3>(&reply)?;
        let outcome = IncrementOutcome {
            counted: counted == 1,
            count,
        };
        let ends_at = (!outcome.counted && ends_at != 0).then_some(ends_at);
        Ok((outcome, ends_at))
    }

    async fn expire_at_least(&self, key: &str, ttl: Duration) -> Result<(), CacheError> {
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let mut call = ScriptCall::new(&LIVE_AT_LEAST, 1);
        call.key(&self.prefix, key)
            .arg(millis.clamp(1, RedisStore::MAX_TTL_SECONDS.unsigned_abs() * 1000))
            .repeatable(true);
        let _: i64 = self.conn.call_script(&call).await?;
        Ok(())
    }

    async fn forget(&self, key: &str) -> Result<bool, CacheError> {
        let removed: i64 = self.conn.query(cmd("DEL").arg(self.full_key(key))).await?;
        Ok(removed > 0)
    }

    async fn ttl(&self, key: &str) -> Result<Option<Duration>, CacheError> {
        // PTTL answers -2 for a missing key and -1 for one without expiry.
        let millis: i64 = self.conn.read(cmd("PTTL").arg(self.full_key(key))).await?;
        Ok(u64::try_from(millis).ok().map(Duration::from_millis))
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}

/// A time to live as whole seconds, at least 1 (Laravel's `max(1, $seconds)`)
/// and at most [`RedisStore::MAX_TTL_SECONDS`].
fn ttl_seconds(ttl: Duration) -> i64 {
    expiry_seconds(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX))
}

/// What the increment-if-below script compares a count with: the ceiling
/// less the amount, exactly (it may lie past a 64-bit integer either way).
fn room(amount: i64, ceiling: i64) -> i128 {
    i128::from(ceiling) - i128::from(amount)
}

/// A window of `decay_seconds` as the time to live the store sends Redis:
/// at least 1, at most [`RedisStore::MAX_TTL_SECONDS`].
fn expiry_seconds(decay_seconds: i64) -> i64 {
    decay_seconds.clamp(1, RedisStore::MAX_TTL_SECONDS)
}

/// `error`, from an integer operation on `key`, as the store reports it:
/// Redis's refusal of a value that is not an integer, or of a count past a
/// 64-bit integer, is the value's fault ([`CacheError::NotAnInteger`],
/// [`CacheError::Overflow`]), as the memory store reports it, not a
/// backend failure.
fn integer_error(key: &str, error: RedisBackendError) -> CacheError {
    if let RedisBackendError::Redis(said) = &error {
        let said = said.to_string();
        if said.contains("not an integer") {
            return CacheError::NotAnInteger {
                key: key.to_owned(),
                value: "(a value Redis refused as not an integer)".to_owned(),
            };
        }
        if said.contains("would overflow") {
            return CacheError::Overflow {
                key: key.to_owned(),
            };
        }
    }
    error.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_is_whole_seconds_and_at_least_one() {
        assert_eq!(ttl_seconds(Duration::ZERO), 1);
        assert_eq!(ttl_seconds(Duration::from_millis(2900)), 2);
        assert_eq!(ttl_seconds(Duration::MAX), RedisStore::MAX_TTL_SECONDS);
        assert_eq!(expiry_seconds(i64::MAX), RedisStore::MAX_TTL_SECONDS);
        assert_eq!(expiry_seconds(-5), 1);
    }
}
