//! The Redis connection both sides of the crate share: URLs (one node or a
//! cluster), connect and response timeouts, reconnects, and scripts run with
//! `EVALSHA`, and with `EVAL` on a node that answers `NOSCRIPT`.
//!
//! Every script of the crate touches one key (or keys that share a
//! `{hash tag}`), so the same code runs on a single node and on a Redis
//! Cluster.

mod config;
mod connection;
mod reply;
mod script_call;

pub use config::{RedisConfig, RedisUrlError};
pub(crate) use config::{is_socket_scheme, redact_credentials, url_text};
pub use connection::{RedisBackendError, RedisConnection};
pub(crate) use reply::reply_numbers;
pub(crate) use script_call::{LuaScript, ScriptCall};
