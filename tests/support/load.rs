//! A five-minute load of seven clients (four legitimate, three not), the
//! traffic that tests/five_minute_load.rs and tests/fixed_window_scenarios.rs
//! replay through the sliding window and the fixed window.

#![allow(dead_code)]

use std::time::Duration;

/// (from second, to second, requests per second)
pub type Profile = &'static [(u32, u32, u32)];

/// One client of the load.
pub struct Client {
    pub name: &'static str,
    pub legitimate: bool,
    pub profile: Profile,
}

/// The seven clients, in the order the counts are reported.
pub const CLIENTS: &[Client] = &[
    Client {
        name: "subscriber portal, steady",
        legitimate: true,
        profile: &[(0, 300, 4)],
    },
    Client {
        name: "field app, shift start",
        legitimate: true,
        profile: &[(0, 110, 2), (110, 150, 30), (150, 300, 2)],
    },
    Client {
        name: "billing period bulk query",
        legitimate: true,
        profile: &[(0, 45, 1), (45, 65, 40), (65, 300, 1)],
    },
    Client {
        name: "internal monitoring poll",
        legitimate: true,
        profile: &[(0, 300, 1)],
    },
    Client {
        name: "out-of-workflow bulk download",
        legitimate: false,
        profile: &[(0, 300, 9)],
    },
    Client {
        name: "page crawling scraper",
        legitimate: false,
        profile: &[(0, 300, 26)],
    },
    Client {
        name: "login attempt series",
        legitimate: false,
        profile: &[(40, 100, 18), (160, 220, 18)],
    },
];

/// Requests per second of `profile` in second `t`.
pub fn rate_at(profile: Profile, t: u32) -> u32 {
    profile
        .iter()
        .filter(|(from, to, _)| (*from..*to).contains(&t))
        .map(|p| p.2)
        .sum()
}

/// Every request a client sends in the five minutes.
pub fn total(client: &Client) -> u32 {
    (0..300).map(|t| rate_at(client.profile, t)).sum()
}

/// When each request of `profile` arrives, from the start of the load:
/// spread evenly inside each second, each at its own whole millisecond (the
/// resolution of the memory backends).
pub fn arrivals(profile: Profile) -> impl Iterator<Item = Duration> {
    (0..300_u32).flat_map(move |t| {
        let rate = rate_at(profile, t);
        (0..rate)
            .map(move |k| Duration::from_millis(u64::from(t) * 1_000 + u64::from(k * 1_000 / rate)))
    })
}

/// Every request of the five minutes, each with the index of its client in
/// [`CLIENTS`], in the order they arrive; a tie keeps the order of the
/// clients (the sort is stable).
pub fn every_arrival() -> Vec<(Duration, usize)> {
    let mut load: Vec<(Duration, usize)> = CLIENTS
        .iter()
        .enumerate()
        .flat_map(|(i, c)| arrivals(c.profile).map(move |at| (at, i)))
        .collect();
    load.sort_by_key(|&(at, _)| at);
    load
}
