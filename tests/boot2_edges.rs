//! Boot and configuration: the values each variable is refused with, as
//! the refusal quotes them; the summary of the cache store's Redis; the
//! examples' log filter read from `.env`; and a few readings of odd
//! spellings.
//!
//! No test sets a variable of its own process: plans are read from pairs,
//! and the example runs in a process of its own.

#![cfg(feature = "redis")]

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::boot::{cache_nodes, env, plan, refusal};
use suprnova::bootstrap::bootstrap;
use suprnova::cache::CacheStoreKind;
use suprnova::container::App;

// ---- the value a refusal quotes ------------------------------------------

// A refused `REDIS_HOST` is quoted as the operator wrote it, as every other
// refusal quotes its value ("the value as it was read"): not with its
// `tls://` taken off (`tls://` alone is shown as an empty value, which no
// one wrote), nor in the IDNA form the crate made of it.

#[test]
fn a_refused_redis_host_is_quoted_as_written() {
    let hosts = ["tls://", "tls://cache.internal:6380", "bücher.example:6380"];
    let refusals: Vec<_> = hosts
        .iter()
        .map(|host| cache_nodes(&[("REDIS_HOST", host)]))
        .collect();
    let expected: Vec<_> = hosts
        .iter()
        .map(|host| {
            Err(format!(
                "REDIS_HOST={host:?} is invalid: expected a host name or an address"
            ))
        })
        .collect();
    assert_eq!(refusals, expected);
}

// A Redis URL with its password, written in the variable beside the one it
// belongs to (the driver's name, the cache store's name, the host), is
// refused, and the refusal shows the password: every refusal of a variable
// meant to hold such a URL hides it (`redis://***@...`), and "the summary
// never contains a Redis password", yet here the text goes to the log
// whole, and outside production the driver's goes into the summary's
// warnings and the `warn` log as well.

#[test]
fn a_redis_url_in_the_wrong_variable_does_not_show_its_password() {
    let url = "redis://app:hunter2@cache.internal:6379";
    let mut shown = Vec::new();
    for pairs in [
        vec![("APP_ENV", "production"), ("RATE_LIMIT_DRIVER", url)],
        vec![("APP_ENV", "local"), ("CACHE_STORE", url)],
        vec![
            ("APP_ENV", "local"),
            ("CACHE_STORE", "redis"),
            ("REDIS_HOST", url),
        ],
    ] {
        shown.push(refusal(&pairs));
    }
    let staging = plan(&[("APP_ENV", "staging"), ("RATE_LIMIT_DRIVER", url)]).unwrap();
    shown.extend(staging.warnings);
    let with_password: Vec<&String> = shown.iter().filter(|s| s.contains("hunter2")).collect();
    assert_eq!(with_password, Vec::<&String>::new());
}

// What is refused without a scheme or a conversion is quoted as written:
// the check above is about the two readings that change the text.
#[test]
fn a_refused_plain_redis_host_is_quoted_as_written() {
    for host in ["cache.internal:6380", "tcp://cache.internal"] {
        assert_eq!(
            cache_nodes(&[("REDIS_HOST", host)]),
            Err(format!(
                "REDIS_HOST={host:?} is invalid: expected a host name or an address"
            )),
            "{host}"
        );
    }
}

// A URL's scheme is case-insensitive (RFC 3986, 3.1), and the cache
// store's `REDIS_URL` takes `REDIS://`; the driver's `RATE_LIMIT_REDIS_URL`
// refuses the same URL as having no scheme it knows, so one value boots
// for one variable and refuses boot for the other.

#[test]
fn a_scheme_in_capitals_is_read_alike_by_both_url_variables() {
    let url = "REDIS://cache.internal:6379";
    assert_eq!(
        cache_nodes(&[("REDIS_URL", url)]),
        Ok(vec!["redis://cache.internal:6379/1".to_owned()])
    );
    let driver = plan(&[
        ("APP_ENV", "local"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", url),
    ]);
    assert_eq!(driver.err().map(|e| e.to_string()), None);
}

// ---- odd spellings that boot ---------------------------------------------

// `CACHE_STORE` set blank is unset, and `CACHE_DRIVER` is read; with
// `CACHE_STORE` set, `CACHE_DRIVER` is not read at all, even when it names
// a store that does not exist here.
#[test]
fn cache_driver_is_read_only_when_cache_store_is_unset_or_blank() {
    let local = ("APP_ENV", "local");
    let store = |pairs: &[(&str, &str)]| plan(pairs).map(|plan| plan.cache.store);
    assert_eq!(
        store(&[local, ("CACHE_STORE", " "), ("CACHE_DRIVER", "redis")]),
        Ok(CacheStoreKind::Redis)
    );
    assert_eq!(
        store(&[local, ("CACHE_STORE", "array"), ("CACHE_DRIVER", "file")]),
        Ok(CacheStoreKind::Memory)
    );
    assert_eq!(
        refusal(&[local, ("CACHE_STORE", ""), ("CACHE_DRIVER", "file")]),
        "CACHE_DRIVER=\"file\" is invalid: expected memory, array or redis, in lowercase (the \
         other Laravel stores are not available)"
    );
}

// In production on the Redis driver, a cache store chosen through the older
// `CACHE_DRIVER=redis` is shared: no warning that the throttle side counts
// per process.
#[test]
fn production_with_cache_driver_redis_has_no_per_process_warning() {
    let plan = plan(&[
        ("APP_ENV", "production"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", "redis://cache.internal:6379"),
        ("CACHE_DRIVER", "redis"),
    ])
    .unwrap();
    assert_eq!(plan.cache.store, CacheStoreKind::Redis);
    assert_eq!(plan.warnings, Vec::<String>::new());
}

// A driver's key prefix is taken as written (trimmed): it is this crate's
// own variable, not one Laravel's `env()` reads, so neither `null` nor a
// pair of quotes is read away.
#[test]
fn the_drivers_prefix_is_taken_as_written() {
    for (written, taken) in [(" app: ", "app:"), ("null", "null"), ("'x:'", "'x:'")] {
        let plan = plan(&[
            ("APP_ENV", "local"),
            ("RATE_LIMIT_DRIVER", "redis"),
            ("RATE_LIMIT_REDIS_URL", "redis://cache.internal:6379"),
            ("RATE_LIMIT_REDIS_PREFIX", written),
        ])
        .unwrap();
        match plan.driver {
            suprnova::bootstrap::DriverChoice::Redis(redis) => {
                assert_eq!(redis.prefix.as_deref(), Some(taken), "{written:?}")
            }
            other => panic!("{other:?}"),
        }
    }
}

// ---- the summary -----------------------------------------------------------

// The summary tells of the driver's Redis where it is and whether it
// answered (`redis=... (not answering yet)`); of the cache store's Redis,
// where `throttle:` routes, named limiters and the `RateLimiter` facade
// count, it says `cache=redis` and no more, even when that Redis did not
// answer at boot (a `warn` line is all): the one line an operator reads at
// start says nothing is wrong while every throttle follows its
// backend-error policy.

#[tokio::test]
async fn the_summary_says_when_the_cache_stores_redis_does_not_answer() {
    let url = format!("redis://127.0.0.1:{}", support::redis::free_port());
    let app = App::new();
    let summary = app
        .scope(bootstrap(&env(&[
            ("APP_ENV", "local"),
            ("CACHE_STORE", "redis"),
            ("REDIS_URL", &url),
            ("RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS", "200"),
            ("RATE_LIMIT_REDIS_TIMEOUT_MS", "200"),
        ])))
        .await
        .unwrap();
    let line = summary.to_string();
    assert!(
        line.contains("not answering"),
        "the summary says nothing of the cache store's Redis: {line}"
    );
}

// ---- the examples' log filter ------------------------------------------------

/// Kills the child when dropped, so that a failed test leaves none running.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// `.env.example` lists `RUST_LOG` among "every variable the crate reads",
// as the examples' log filter, and the quickstart reads `.env`: a
// `RUST_LOG=warn` written there keeps its `info` lines out of the log.
// The examples set up their log before they load `.env`, so the filter of
// `.env` is never read, and the quickstart logs at `info`.

#[test]
fn the_quickstart_reads_rust_log_from_env() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("suprnova-boot-edges-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(".env"),
        format!("APP_ENV=local\nRUST_LOG=warn\nPORT={port}\n"),
    )
    .unwrap();
    let child = Command::new(support::examples::binary("quickstart"))
        .env_clear()
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let stdout = support::examples::Pipe::read(child.0.stdout.take().unwrap());
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the quickstart did not listen: {}",
            stdout.text()
        );
        assert!(child.0.try_wait().unwrap().is_none(), "{}", stdout.text());
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
    let log = stdout.text();
    assert!(
        !log.contains(" INFO "),
        "logged at info under RUST_LOG=warn:\n{log}"
    );
}
