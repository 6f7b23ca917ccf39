//! A five-minute load of seven clients (four legitimate, three not),
//! replayed through the real sliding-window limiter on the test clock at a
//! nominal limit of 600 requests a minute, and at the limits an operator
//! would try next. The counts are the ones docs/algorithms.md quotes.

mod support;

use std::time::Duration;

use support::load::{CLIENTS, Client, arrivals, total};
use suprnova::clock::{Clock, FakeClock};
use suprnova::rate_limit::SlidingWindowConfig;
use suprnova::rate_limit::memory::InMemoryRateLimiter;

/// Requests of `client` the limiter cuts at `limit` per 60 s.
fn cut(client: &Client, limit: u32) -> u32 {
    let clock = FakeClock::at_unix(1_800_000_000);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared());
    let cfg = SlidingWindowConfig::new(limit, Duration::from_secs(60));
    let start = clock.now_utc();
    let mut refused = 0;
    for at in arrivals(client.profile) {
        clock.set(start + at);
        if !limiter.acquire_now(client.name, &cfg).unwrap().allowed {
            refused += 1;
        }
    }
    refused
}

/// (caught, missed, falsely blocked) at `limit`.
fn counts(limit: u32) -> (u32, u32, u32) {
    let (mut caught, mut missed, mut falsely) = (0, 0, 0);
    for client in CLIENTS {
        let refused = cut(client, limit);
        if client.legitimate {
            falsely += refused;
        } else {
            caught += refused;
            missed += total(client) - refused;
        }
    }
    (caught, missed, falsely)
}

#[test]
fn the_load_has_16960_requests() {
    let all: u32 = CLIENTS.iter().map(total).sum();
    let bad: u32 = CLIENTS.iter().filter(|c| !c.legitimate).map(total).sum();
    assert_eq!((all, bad, all - bad), (16_960, 12_660, 4_300));
}

#[test]
fn sliding_window_cuts_per_client_at_600_a_minute() {
    let cuts: Vec<u32> = CLIENTS.iter().map(|c| cut(c, 600)).collect();
    assert_eq!(cuts, vec![0, 640, 240, 0, 0, 4_800, 960]);
    assert_eq!(counts(600), (5_760, 6_900, 880));
}

#[test]
fn raising_the_sliding_limit_lets_the_attack_peak_through() {
    let login = &CLIENTS[6];
    let rows: Vec<(u32, u32, u32, u32)> = [600, 800, 1_000, 1_240, 1_500]
        .into_iter()
        .map(|limit| {
            let (caught, missed, falsely) = counts(limit);
            (falsely, caught, missed, total(login) - cut(login, limit))
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (880, 5_760, 6_900, 1_200),
            (480, 4_360, 8_300, 1_600),
            (240, 2_960, 9_700, 2_000),
            (0, 1_600, 11_060, 2_160),
            (0, 300, 12_360, 2_160),
        ]
    );
}

#[test]
fn lowering_the_limit_to_see_the_bulk_download_cuts_a_quarter_of_the_work() {
    let download = &CLIENTS[4];
    let rows: Vec<(u32, u32)> = [600, 540, 480, 360]
        .into_iter()
        .map(|limit| {
            let legit: u32 = CLIENTS
                .iter()
                .filter(|c| c.legitimate)
                .map(|c| cut(c, limit))
                .sum();
            (cut(download, limit), legit)
        })
        .collect();
    assert_eq!(rows, vec![(0, 880), (0, 1_000), (300, 1_120), (900, 1_360)]);
}
