//! Configuration: the application environment, typed readers over the
//! process environment, and the errors that refuse a bad configuration at
//! boot.
//!
//! Every error names the variable, the value it refused and what to do.

pub(crate) mod credentials;
mod dotenv;
mod env;
mod environment;

pub use dotenv::load_dotenv;
pub use env::Env;
pub use environment::Environment;

/// A configuration that the crate refuses to boot with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A variable holds a value that does not parse or is not allowed.
    #[error("{variable}={value:?} is invalid: {reason}")]
    Invalid {
        /// The variable that holds the value.
        variable: String,
        /// The value as it was read.
        value: String,
        /// Why it was refused and how to fix it.
        reason: String,
    },
    /// A variable that the chosen configuration needs is unset.
    #[error("{variable} is unset: {reason}")]
    Missing {
        /// The variable that is unset.
        variable: String,
        /// Why it is needed and how to set it.
        reason: String,
    },
    /// The configuration parses but is refused as a whole, for example the
    /// in-memory limiter in production. The message is complete.
    #[error("{0}")]
    Refused(String),
    /// `.env` exists but could not be read, or a line of it does not parse;
    /// the message names the line and the variable, never a value.
    #[error("could not load .env: {0}")]
    DotEnv(String),
}
