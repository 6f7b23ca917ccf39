//! The Redis connection both sides of the crate share: URLs (one node or a
//! cluster), connect and response timeouts, reconnects, and scripts run with
//! `EVALSHA`, and with `EVAL` on a node that answers `NOSCRIPT`.
//!
//! The sliding-window script touches one key, so it runs the same on a
//! single node and on a Redis Cluster. The cache store's count touches the
//! counter and its timer in one script on a single node; on a cluster,
//! where the two keys live in different slots, it sends the timer's
//! `SET NX` on its own and the script on the counter alone.

mod config;
mod connection;
mod reply;
mod script_call;

pub(crate) use config::MAX_DATABASE;
pub use config::{RedisConfig, RedisUrlError};
pub(crate) use config::{is_socket_scheme, node_urls, redact_credentials, url_text};
pub use connection::{RedisBackendError, RedisConnection};
pub(crate) use reply::reply_numbers;
pub(crate) use script_call::{LuaScript, ScriptCall};
