//! What the examples share: their log output.

#![allow(dead_code)]

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Logs to stdout, a server's log, at the level `RUST_LOG` sets (`info`
/// by default).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(filter())
        // Colour codes only on a terminal, so that logs piped to a file or
        // a collector stay plain text.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
}

/// Logs to stderr, at the level `RUST_LOG` sets (`info` by default),
/// leaving stdout to what an example that runs its own steps prints of
/// them.
pub fn init_logging_to_stderr() {
    tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}
