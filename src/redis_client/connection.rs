//! One handle over a Redis node or a Redis Cluster, with bounded waits.

use std::fmt;
use std::sync::{Arc, Once, RwLock};
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::{ClusterClient, ClusterClientBuilder};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, ErrorKind, FromRedisValue, RedisFuture, RedisResult, ServerErrorKind, Value};

use super::{RedisConfig, ScriptCall};

/// A Redis call that failed or did not answer in time.
#[derive(Debug, thiserror::Error)]
pub enum RedisBackendError {
    /// Redis answered with an error, or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] ::redis::RedisError),
    /// Redis did not answer within the configured timeouts.
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
/// request.
#[derive(Clone)]
pub struct RedisConnection {
    inner: Inner,
    config: Arc<RedisConfig>,
}

#[derive(Clone)]
enum Inner {
    Single(ConnectionManager),
    Cluster(Arc<LazyCluster>),
}

struct LazyCluster {
    client: ClusterClient,
    connected: RwLock<Option<ClusterConnection>>,
    connecting: tokio::sync::Mutex<()>,
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
                connecting: tokio::sync::Mutex::new(()),
            }))
        } else {
            let client = ::redis::Client::open(config.nodes()[0].as_str())?;
            let manager_config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                .set_response_timeout(Some(config.response_timeout))
                .set_number_of_retries(2)
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(config.connect_timeout);
            Inner::Single(ConnectionManager::new_lazy_with_config(
                client,
                manager_config,
            )?)
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
        self.config.connect_timeout + self.config.response_timeout
    }

    /// Sends `PING` (to a random node of a cluster).
    pub async fn ping(&self) -> Result<(), RedisBackendError> {
        self.query::<String>(&::redis::cmd("PING")).await.map(drop)
    }

    /// Runs one command.
    pub async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisBackendError> {
        let mut conn = self.clone();
        self.bounded(async move { cmd.query_async(&mut conn).await })
            .await
    }

    /// Runs one of the crate's script calls with `EVALSHA`, loading the
    /// script when Redis answers `NOSCRIPT` (after a restart or `SCRIPT
    /// FLUSH`) and calling again: one round trip while Redis has the script.
    pub(crate) async fn call_script<T: FromRedisValue>(
        &self,
        call: &ScriptCall<'_>,
    ) -> Result<T, RedisBackendError> {
        let mut conn = self.clone();
        self.bounded(async move {
            match call.command().query_async(&mut conn).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    call.script().load_async(&mut conn).await?;
                    call.command().query_async(&mut conn).await
                }
                answered => answered,
            }
        })
        .await
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, RedisBackendError> {
        let deadline = self.deadline();
        match tokio::time::timeout(deadline, call).await {
            // The connection's own response timeout can fire before ours:
            // report both as a timeout.
            Ok(Err(e)) if e.is_timeout() => Err(RedisBackendError::Timeout(deadline)),
            Ok(result) => result.map_err(RedisBackendError::from),
            Err(_) => Err(RedisBackendError::Timeout(deadline)),
        }
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.inner {
            Inner::Single(manager) => manager.req_packed_command(cmd),
            Inner::Cluster(cluster) => {
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
        match &mut self.inner {
            Inner::Single(manager) => manager.req_packed_commands(pipeline, offset, count),
            Inner::Cluster(cluster) => {
                let cluster = cluster.clone();
                Box::pin(async move {
                    let mut conn = cluster.connection().await?;
                    conn.req_packed_commands(pipeline, offset, count).await
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Inner::Single(manager) => manager.get_db(),
            Inner::Cluster(_) => 0,
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
