//! The injected clock: frozen and advanced, never slept on.

mod support;

use std::time::Duration;

use suprnova::clock::{Clock, FakeClock};

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

#[test]
fn advancing_past_the_end_of_the_clock_stays_at_the_end() {
    let clock = FakeClock::at_unix(1_000);
    clock.advance(Duration::MAX);
    assert_eq!(clock.unix_nanos(), u64::MAX);
    clock.advance(Duration::from_secs(1));
    assert_eq!(clock.unix_nanos(), u64::MAX);
    assert!(clock.unix_seconds() > 1_000);
}

#[test]
fn setting_past_2262_or_before_1970_saturates() {
    use suprnova::chrono::{TimeZone, Utc};

    // Past what i64 nanoseconds hold (2262), within what the clock holds.
    let clock = FakeClock::at_unix(1_000);
    clock.set(Utc.with_ymd_and_hms(2300, 1, 1, 0, 0, 0).unwrap());
    assert_eq!(clock.unix_seconds(), 10_413_792_000);
    // Past what the clock holds (2554): its last instant.
    clock.set(Utc.with_ymd_and_hms(3000, 1, 1, 0, 0, 0).unwrap());
    assert_eq!(clock.unix_nanos(), u64::MAX);
    // Before the epoch: the epoch.
    clock.set(Utc.with_ymd_and_hms(1969, 12, 31, 23, 59, 59).unwrap());
    assert_eq!(clock.unix_nanos(), 0);
}
