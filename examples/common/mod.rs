//! What the examples share: `.env`, and their log output.

#![allow(dead_code)]

use std::io::IsTerminal;

use suprnova::config::{ConfigError, load_dotenv};
use tracing_subscriber::EnvFilter;

/// Loads `.env` (when present), then logs to stdout, a server's log, at the
/// level `RUST_LOG` sets (`info` by default), `.env`'s included. The log is
/// set up whether `.env` loaded or not; a refusal is returned for the
/// example to report.
pub fn load_dotenv_and_log() -> Result<(), ConfigError> {
    let loaded = load_dotenv().map(drop);
    tracing_subscriber::fmt()
        .with_env_filter(filter())
        // Colour codes only on a terminal, so that logs piped to a file or
        // a collector stay plain text.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    loaded
}

/// [`load_dotenv_and_log`], logging to stderr, leaving stdout to what an
/// example that runs its own steps prints of them.
pub fn load_dotenv_and_log_to_stderr() -> Result<(), ConfigError> {
    let loaded = load_dotenv().map(drop);
    tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    loaded
}

fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}
