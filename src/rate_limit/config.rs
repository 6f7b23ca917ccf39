//! `SlidingWindowConfig`: how many calls a key may make in how long.

use std::time::Duration;

use super::RateLimitError;

/// At most `max_requests` admitted calls in any span of `window`.
///
/// `max_requests: 0` refuses everything. A zero `window` is a configuration
/// error.
///
/// ```
/// use std::time::Duration;
/// use suprnova::rate_limit::SlidingWindowConfig;
///
/// let cfg = SlidingWindowConfig { max_requests: 60, window: Duration::from_secs(60) };
/// assert!(cfg.validate().is_ok());
/// assert!(SlidingWindowConfig { max_requests: 1, window: Duration::ZERO }.validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingWindowConfig {
    /// The most calls admitted in any span of `window`.
    pub max_requests: u32,
    /// The length of the window.
    pub window: Duration,
}

impl SlidingWindowConfig {
    /// `max_requests` per `window`.
    pub const fn new(max_requests: u32, window: Duration) -> Self {
        Self {
            max_requests,
            window,
        }
    }

    /// Refuses a window shorter than one millisecond, the resolution of the
    /// drivers.
    pub fn validate(&self) -> Result<(), RateLimitError> {
        if self.window < Duration::from_millis(1) {
            return Err(RateLimitError::Config(format!(
                "the window must be at least 1 ms, got {:?}",
                self.window
            )));
        }
        Ok(())
    }
}
