//! The injected clock: frozen and advanced, never slept on.

mod support;

use std::time::Duration;

use suprnova::clock::Clock;

#[test]
fn freeze_at_noon_and_advance_to_the_next_minute() {
    let clock = support::clock_at(12, 0, 0);
    assert_eq!(clock.now_utc().format("%H:%M:%S").to_string(), "12:00:00");
    let start = std::time::Instant::now();
    clock.advance(Duration::from_secs(59));
    assert_eq!(clock.now_utc().format("%H:%M:%S").to_string(), "12:00:59");
    clock.advance(Duration::from_secs(1));
    assert_eq!(clock.now_utc().format("%H:%M:%S").to_string(), "12:01:00");
    assert_eq!(clock.unix_seconds(), 1_767_268_860);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "the clock must not sleep"
    );
    // Frozen: reading again does not move it.
    assert_eq!(clock.now_utc().format("%H:%M:%S").to_string(), "12:01:00");
}
