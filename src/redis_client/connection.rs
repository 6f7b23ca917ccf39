//! One handle over a Redis node or a Redis Cluster, with bounded waits.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError, RwLock};
use std::time::{Duration, Instant};

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::{ClusterClient, ClusterClientBuilder};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, ErrorKind, FromRedisValue, RedisFuture, RedisResult, ServerErrorKind, Value};
use arc_swap::ArcSwap;

use super::{RedisConfig, ScriptCall};

/// A Redis call that failed or did not answer in time.
#[derive(Debug, thiserror::Error)]
pub enum RedisBackendError {
    /// Redis answered with an error, or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] ::redis::RedisError),
    /// Redis did not answer in time: the time waited is the call's
    /// deadline (the connect and response timeouts together), or the
    /// connection's own response or connect timeout when that fired first.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
}

/// A cheap-to-clone handle over one Redis node or a Redis Cluster.
///
/// One node runs on redis-rs's `ConnectionManager`: one multiplexed
/// connection that reconnects in the background after a failure. A cluster
/// runs on the async cluster client, connected on first use and again after a
/// failed attempt.
///
/// Creating the handle never waits for Redis: a server that is not up yet
/// does not stop boot. Every call waits at most
/// `connect_timeout + response_timeout` and then fails with
/// [`RedisBackendError::Timeout`], so a dead or hung Redis never hangs a
/// request; one that gives up sooner, when the connection's own response
/// (or connect) timeout passes, reports that timeout.
///
/// A connection that cannot serve any more is replaced by a new one, which
/// the next call connects: after a call that found no answer in time (a
/// connection whose peer vanished without a word, as when a NAT or a load
/// balancer drops its flow, gets none until the kernel gives up on it, about
/// fifteen minutes later), after `READONLY` (the address now leads to a
/// replica: a failover behind one DNS name), after a refused password
/// (redis-rs would keep answering with that refusal), and, on one node,
/// after a refused connection (so the first call once Redis is back is
/// decided) and after a refused setup of a new connection (its password,
/// or its `SELECT` of the URL's database answered `BUSY` while another
/// client's script ran: redis-rs would answer every call with that
/// refusal for good), tried again every 250 ms while the calls in between
/// are answered the refusal at once. A cluster's new
/// connection is connected in the background while calls go on using the
/// old one, and taken once it connects: a timeout may be one hung master's,
/// whose keys wait while the other masters answer, and a new connection
/// that waits on that master would stop every key. A decision's script
/// call that finds its connection to one node dropped (Redis restarted, or
/// the peer reset it) is sent once more, on the connection redis-rs opens
/// again, within the same deadline: should Redis have run the first send,
/// the hit counts twice, which can refuse early and never admits more.
/// The cache store's reads (`GET`, `PTTL`) are sent once more the same
/// way: run twice, a read answers as once. Other commands are not sent
/// again on one node: a `DECRBY` run twice would take back too much. On a cluster, redis-rs's client sends a
/// command again by itself after a dropped connection, whatever the
/// command: a decrement whose answer was lost with its connection can be
/// taken back twice there.
#[derive(Clone)]
pub struct RedisConnection {
    inner: Inner,
    config: Arc<RedisConfig>,
}

#[derive(Clone)]
enum Inner {
    Single(Arc<SingleNode>),
    Cluster(Arc<LazyCluster>),
}

/// One node: the connection in use, and what builds the next one.
struct SingleNode {
    client: ::redis::Client,
    manager_config: ConnectionManagerConfig,
    current: ArcSwap<ConnectionManager>,
    /// The last refusal of a new connection's setup, and when it came (or
    /// when a new connection was last tried after it).
    refusal: Mutex<Option<(Instant, ::redis::RedisError)>>,
    /// Whether `refusal` holds one: read by every call, which takes the
    /// lock only then.
    refusing: AtomicBool,
}

/// The longest a call's deadline is waited for: about 30 years, as
/// `tokio::time::timeout` bounds a wait too long for an `Instant` (a
/// timeout given as `Duration::MAX`).
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// How often a connection whose setup Redis refused is tried again: the
/// calls in between are answered that refusal at once, so that a setup
/// Redis goes on refusing (a database it does not have, a password it no
/// longer takes) costs one call's wait and a few connections every 250 ms,
/// not each call's.
const SETUP_RETRY: Duration = Duration::from_millis(250);

impl SingleNode {
    /// The refusal to answer a call with while it is in force. Once
    /// [`SETUP_RETRY`] has passed, the call that finds it over makes a new
    /// connection and runs on it, while the calls beside it are still
    /// answered the refusal, until that connection serves or is refused.
    fn refusal_in_force(&self) -> Option<::redis::RedisError> {
        if !self.refusing.load(Ordering::Acquire) {
            return None;
        }
        let mut refusal = self.refusal.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, error) = refusal.as_mut()?;
        if at.elapsed() < SETUP_RETRY {
            return Some(error.clone());
        }
        *at = Instant::now();
        drop(refusal);
        self.replace(&self.current.load_full());
        None
    }

    /// Notes that Redis refused the setup of a new connection with `error`.
    fn refused(&self, error: &::redis::RedisError) {
        let mut refusal = self.refusal.lock().unwrap_or_else(PoisonError::into_inner);
        *refusal = Some((Instant::now(), error.clone()));
        self.refusing.store(true, Ordering::Release);
    }

    /// Notes that a connection served: a refusal is over.
    fn served(&self) {
        if self.refusing.load(Ordering::Acquire) {
            *self.refusal.lock().unwrap_or_else(PoisonError::into_inner) = None;
            self.refusing.store(false, Ordering::Release);
        }
    }

    /// Puts a new connection in place of `used`, unless another call
    /// replaced it first.
    fn replace(&self, used: &Arc<ConnectionManager>) {
        if !Arc::ptr_eq(&self.current.load(), used) {
            return;
        }
        match ConnectionManager::new_lazy_with_config(
            self.client.clone(),
            self.manager_config.clone(),
        ) {
            Ok(fresh) => {
                self.current.compare_and_swap(used, Arc::new(fresh));
            }
            Err(error) => tracing::warn!(%error, "could not replace the Redis connection"),
        }
    }
}

struct LazyCluster {
    client: ClusterClient,
    connected: RwLock<Option<ClusterConnection>>,
    /// The number of the connection in use: a call that fails replaces the
    /// connection only while this is still the number it started under.
    generation: AtomicU64,
    connecting: tokio::sync::Mutex<()>,
    /// Whether a replacement is being connected.
    replacing: AtomicBool,
    /// How long a replacement may take to connect.
    connect_within: Duration,
}

impl LazyCluster {
    async fn connection(&self) -> RedisResult<ClusterConnection> {
        if let Some(conn) = self.cached() {
            return Ok(conn);
        }
        let _single_flight = self.connecting.lock().await;
        if let Some(conn) = self.cached() {
            return Ok(conn);
        }
        let conn = self.client.get_async_connection().await?;
        *self.connected.write().unwrap_or_else(|e| e.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    fn cached(&self) -> Option<ClusterConnection> {
        self.connected
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Connects a new connection in the background and puts it in place of
    /// the one made under `generation`, which calls go on using until then:
    /// the old connection may fail on one node only (a hung master, while
    /// the others answer), and no call waits on the new one's connecting.
    /// A new connection that does not connect within `connect_within` is
    /// dropped, and the next failure tries again. One replacement at a
    /// time; a connection made since is kept. While a master hangs, each
    /// of its keys' timeouts may so start a new connection to the cluster,
    /// one at a time.
    fn replace(self: &Arc<Self>, generation: u64) {
        if self.generation.load(Ordering::Acquire) != generation
            || self.replacing.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let replacing = Replacing(Arc::clone(self));
        tokio::spawn(async move {
            let cluster = &replacing.0;
            let fresh = tokio::time::timeout(
                cluster.connect_within,
                cluster.client.get_async_connection(),
            )
            .await;
            match fresh {
                Ok(Ok(conn)) => {
                    let mut connected =
                        cluster.connected.write().unwrap_or_else(|e| e.into_inner());
                    if cluster
                        .generation
                        .compare_exchange(
                            generation,
                            generation + 1,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_ok()
                    {
                        *connected = Some(conn);
                    }
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "could not connect a new Redis Cluster connection; the one in use is kept");
                }
                Err(_) => {
                    tracing::warn!(
                        "a new Redis Cluster connection did not connect in time; the one in use is kept"
                    );
                }
            }
        });
    }
}

/// Clears [`LazyCluster::replacing`] when the replacement ends, or when its
/// task is dropped with its runtime.
struct Replacing(Arc<LazyCluster>);

impl Drop for Replacing {
    fn drop(&mut self) {
        self.0.replacing.store(false, Ordering::Release);
    }
}

/// The connection one call runs on.
enum Link {
    Single(ConnectionManager),
    Cluster(Arc<LazyCluster>),
}

/// What a call used, so that a failure replaces that connection and not a
/// newer one.
enum Used<'a> {
    Single(&'a SingleNode, Arc<ConnectionManager>),
    Cluster(&'a Arc<LazyCluster>, u64),
}

impl Used<'_> {
    fn link(&self) -> Link {
        match self {
            Used::Single(_, manager) => Link::Single(ConnectionManager::clone(manager)),
            Used::Cluster(cluster, _) => Link::Cluster(Arc::clone(cluster)),
        }
    }

    fn replace(&self) {
        match self {
            Used::Single(node, manager) => node.replace(manager),
            Used::Cluster(cluster, generation) => cluster.replace(*generation),
        }
    }
}

/// Whether `error` is Redis refusing a new connection's own setup: the
/// password (`AUTH` over RESP2, `HELLO` over RESP3: `WRONGPASS`), or the
/// `SELECT` of the URL's database (`BUSY` while another client's script
/// runs, `NOPERM` for a user not let select). redis-rs keeps such a
/// connection's error and answers every call with it: it connects again
/// only after an I/O error.
fn setup_refused(error: &::redis::RedisError) -> bool {
    match error.kind() {
        ErrorKind::AuthenticationFailed => true,
        // How redis-rs words a refused `SELECT`, whatever Redis answered.
        ErrorKind::Server(ServerErrorKind::ResponseError) => {
            error.to_string().contains("refused to switch database")
        }
        _ => matches!(error.code(), Some("WRONGPASS" | "NOAUTH")),
    }
}

/// Whether `error` says that the connection will not serve again, though
/// a new one may: the peer answers nothing, it is a replica now, or it
/// refused the password (which redis-rs would answer every call with).
fn needs_a_new_connection(error: &::redis::RedisError) -> bool {
    error.is_timeout()
        || matches!(
            error.kind(),
            ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::ReadOnly)
        )
}

/// Whether `error` ended a connection that was open: reset, closed or
/// broken, not refused (a call sent again on a Redis that is down would
/// only wait for a second refusal).
fn dropped_midway(error: &::redis::RedisError) -> bool {
    error.is_connection_dropped() && !error.is_connection_refusal()
}

/// Whether a Redis Cluster answered `MOVED` or `ASK`: the node did not run
/// the call, whose slot is served by another node (or moving to it).
fn redirected_away(error: &::redis::RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
    )
}

impl RedisConnection {
    /// Builds a handle without waiting for Redis. Must be called inside a
    /// tokio runtime.
    pub fn new(config: RedisConfig) -> Result<Self, RedisBackendError> {
        if config.uses_tls() {
            install_tls_provider();
        }
        let inner = if config.is_cluster() {
            let client = ClusterClientBuilder::new(config.nodes().to_vec())
                .connection_timeout(config.connect_timeout)
                .response_timeout(config.response_timeout)
                .retries(1)
                .build()?;
            Inner::Cluster(Arc::new(LazyCluster {
                client,
                connected: RwLock::new(None),
                generation: AtomicU64::new(0),
                connecting: tokio::sync::Mutex::new(()),
                replacing: AtomicBool::new(false),
                // Twice a call's deadline: with a hung node among the seeds,
                // redis-rs waits on it once to connect and once more to
                // read the slots, and no call waits on this.
                connect_within: config
                    .connect_timeout
                    .saturating_add(config.response_timeout)
                    .saturating_mul(2),
            }))
        } else {
            let client = ::redis::Client::open(config.nodes()[0].as_str())?;
            let manager_config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                .set_response_timeout(Some(config.response_timeout))
                .set_number_of_retries(2)
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(config.connect_timeout);
            let manager =
                ConnectionManager::new_lazy_with_config(client.clone(), manager_config.clone())?;
            Inner::Single(Arc::new(SingleNode {
                client,
                manager_config,
                current: ArcSwap::from_pointee(manager),
                refusal: Mutex::new(None),
                refusing: AtomicBool::new(false),
            }))
        };
        Ok(Self {
            inner,
            config: Arc::new(config),
        })
    }

    /// The configuration this handle was built from.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// The longest a call waits before it fails.
    pub fn deadline(&self) -> Duration {
        self.config
            .connect_timeout
            .saturating_add(self.config.response_timeout)
    }

    /// Sends `PING`; on a cluster to every master, each of which must
    /// answer.
    pub async fn ping(&self) -> Result<(), RedisBackendError> {
        self.query::<String>(&::redis::cmd("PING")).await.map(drop)
    }

    /// Whether the node answering is one of a Redis Cluster (its `INFO
    /// cluster` says `cluster_enabled:1`); `None` when it does not answer or
    /// refuses `INFO` (an ACL user without it).
    pub(crate) async fn is_cluster_node(&self) -> Option<bool> {
        let info: String = self.query(::redis::cmd("INFO").arg("cluster")).await.ok()?;
        Some(info.contains("cluster_enabled:1"))
    }

    /// Runs one command.
    pub async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisBackendError> {
        self.bounded(
            false,
            |mut link| async move { cmd.query_async(&mut link).await },
        )
        .await
    }

    /// Runs one command that only reads (`GET`, `PTTL`): sent once more,
    /// as a decision is, when it finds its connection to one node dropped
    /// (Redis restarted, or closed the connection idle), since a read run
    /// twice answers as once.
    pub(crate) async fn read<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisBackendError> {
        self.bounded(
            true,
            |mut link| async move { cmd.query_async(&mut link).await },
        )
        .await
    }

    /// Runs one of the crate's script calls with `EVALSHA`: one round trip
    /// while Redis has the script. A node that answers `NOSCRIPT` (after a
    /// restart or `SCRIPT FLUSH`, or a master new to the cluster that a
    /// key is redirected to) ran nothing, and gets the same call as `EVAL`
    /// of the script's source, which it runs, and keeps the script for the
    /// calls after.
    pub(crate) async fn call_script<T: FromRedisValue>(
        &self,
        call: &ScriptCall<'_>,
    ) -> Result<T, RedisBackendError> {
        self.bounded(call.is_repeatable(), |mut link| async move {
            match call.command().query_async(&mut link).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    call.eval_command().query_async(&mut link).await
                }
                answered => answered,
            }
        })
        .await
    }

    /// The timeout that a call which gave up on the connection's own
    /// timeout after `waited` waited out: the longest of the response and
    /// connect timeouts that `waited` covers (redis-rs gives up on an answer
    /// after the one, on a connect attempt after the other), or `waited`
    /// itself, in whole milliseconds, when it covers neither (a call that
    /// joined a connect already under way).
    fn waited_out(&self, waited: Duration) -> Duration {
        [self.config.response_timeout, self.config.connect_timeout]
            .into_iter()
            .filter(|timeout| *timeout <= waited)
            .max()
            .unwrap_or_else(|| Duration::from_millis(waited.as_millis() as u64))
    }

    /// What a call is about to use.
    fn in_use(&self) -> Used<'_> {
        match &self.inner {
            Inner::Single(node) => Used::Single(node, node.current.load_full()),
            Inner::Cluster(cluster) => {
                Used::Cluster(cluster, cluster.generation.load(Ordering::Acquire))
            }
        }
    }

    /// Runs `call` within the deadline, once more on one node when it found
    /// its connection dropped and `repeatable` allows it, and replaces a
    /// connection that will not serve again.
    async fn bounded<T, F, Fut>(&self, repeatable: bool, call: F) -> Result<T, RedisBackendError>
    where
        F: Fn(Link) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let deadline = self.deadline();
        if let Inner::Single(node) = &self.inner
            && let Some(refusal) = node.refusal_in_force()
        {
            return Err(RedisBackendError::from(refusal));
        }
        let used = self.in_use();
        // The start is read once, as `timeout` would read it: a call that
        // fails tells from it which timeout it waited out, and one that
        // succeeds pays nothing more.
        let started = tokio::time::Instant::now();
        let attempts = async {
            let mut redirected = 0_u32;
            loop {
                let answered = match call(used.link()).await {
                    // redis-rs connects again after a dropped connection;
                    // one node's call is sent again on that connection (a
                    // cluster's client retries by itself).
                    Err(e)
                        if repeatable && dropped_midway(&e) && matches!(used, Used::Single(..)) =>
                    {
                        call(self.in_use().link()).await
                    }
                    answered => answered,
                };
                match answered {
                    // A cluster's slot on the move: no node ran the call.
                    // redis-rs follows one redirection, and sends a
                    // redirection's ASKING apart from its command, so that
                    // a call beside it can take the ASKING and be told
                    // MOVED back to the node it left; the call is sent
                    // again, a little later each time, until the move is
                    // over or the deadline. (One node given by its URL
                    // that answers MOVED is a cluster's node: it would
                    // answer so again, and the answer is the error.)
                    Err(e) if redirected_away(&e) && matches!(used, Used::Cluster(..)) => {
                        let pause = Duration::from_millis(1 << redirected.min(4));
                        redirected += 1;
                        tokio::time::sleep(pause).await;
                    }
                    answered => return answered,
                }
            }
        };
        match tokio::time::timeout_at(started + deadline.min(FAR_FUTURE), attempts).await {
            Ok(Ok(answer)) => {
                if let Used::Single(node, _) = &used {
                    node.served();
                }
                Ok(answer)
            }
            // One node's connection that was refused: redis-rs keeps its
            // last failed reconnect's refusal and answers the next call
            // with it, though Redis may be back. (A cluster's client
            // connects again to a node by itself; a new cluster connection
            // for each refusal while a master is down would connect to
            // every other master each time.)
            Ok(Err(e)) if e.is_connection_refusal() && matches!(used, Used::Single(..)) => {
                used.replace();
                Err(RedisBackendError::from(e))
            }
            // (A cluster's client makes its node connections again by
            // itself.)
            Ok(Err(e)) if setup_refused(&e) && matches!(used, Used::Single(..)) => {
                // A refusal of a connection no longer in use (one replaced
                // while the call waited) says nothing of the current one.
                if let Used::Single(node, manager) = &used
                    && Arc::ptr_eq(&node.current.load(), manager)
                {
                    node.refused(&e);
                }
                Err(RedisBackendError::from(e))
            }
            Ok(Err(e)) if needs_a_new_connection(&e) => {
                used.replace();
                // The connection's own timeout fired before the deadline:
                // reported as a timeout too, of the time it waited.
                Err(if e.is_timeout() {
                    RedisBackendError::Timeout(self.waited_out(started.elapsed()))
                } else {
                    RedisBackendError::from(e)
                })
            }
            Ok(Err(e)) => {
                // An answer of Redis's own (an error reply to the call) is
                // a connection that serves: a refusal is over.
                if let Used::Single(node, _) = &used
                    && !e.is_io_error()
                    && !e.is_timeout()
                    && !e.is_connection_dropped()
                {
                    node.served();
                }
                Err(RedisBackendError::from(e))
            }
            Err(_) => {
                used.replace();
                Err(RedisBackendError::Timeout(deadline))
            }
        }
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Single(manager) => manager.req_packed_command(cmd),
            Link::Cluster(cluster) => {
                let cluster = cluster.clone();
                Box::pin(async move {
                    let mut conn = cluster.connection().await?;
                    conn.req_packed_command(cmd).await
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a ::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Single(manager) => manager.req_packed_commands(pipeline, offset, count),
            Link::Cluster(cluster) => {
                let cluster = cluster.clone();
                Box::pin(async move {
                    let mut conn = cluster.connection().await?;
                    conn.req_packed_commands(pipeline, offset, count).await
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Single(manager) => manager.get_db(),
            Link::Cluster(_) => 0,
        }
    }
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConnection")
            .field("url", &self.config.redacted())
            .finish()
    }
}

/// rustls needs a process-wide crypto provider before the first TLS
/// connection; install ring's unless the application installed one.
fn install_tls_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
