//! Booting from the environment: the plan and its exact refusals (no I/O),
//! and the drivers and proxies it installs into a container of the test's
//! own.

#![cfg(feature = "redis")]

mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use support::boot::{env, plan, refusal};
use support::http::TestServer;
use support::redis::{RedisCluster, RedisServer};
use suprnova::bootstrap::{BootPlan, DriverChoice, bootstrap};
use suprnova::config::{ConfigError, Env, Environment};
use suprnova::container::App;
use suprnova::http::TrustedProxies;
use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};
use suprnova::{HttpResponse, Request, Router};

/// The end of every production refusal: why, and the two ways out.
const WHY_AND_WAYS_OUT: &str = "Per-process buckets mean every configured quota is multiplied by your replica count and reset by every deploy: behind N replicas a limit of 5 attempts is really 5N, and nothing says so, because the requests succeed. Either point it at Redis with RATE_LIMIT_DRIVER=redis and RATE_LIMIT_REDIS_URL=redis://cache.internal:6379, or, if you genuinely run a single process, set RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION=true.";

const URL_FORMS: &str = "for example RATE_LIMIT_REDIS_URL=redis://cache.internal:6379 (rediss:// for TLS; unix:///path/to/redis.sock for a socket on this host; several comma-separated redis:// URLs, or redis+cluster://, for a Redis Cluster)";

fn unset_refusal() -> String {
    format!(
        "refusing to boot in production: RATE_LIMIT_DRIVER is unset, which defaults to the in-memory limiter. {WHY_AND_WAYS_OUT}"
    )
}

fn memory_refusal() -> String {
    format!(
        "refusing to boot in production: RATE_LIMIT_DRIVER=memory selects the in-memory limiter. {WHY_AND_WAYS_OUT}"
    )
}

fn unrecognised_refusal(value: &str, hint: &str) -> String {
    format!(
        "refusing to boot in production: RATE_LIMIT_DRIVER={value:?} is not a driver{hint}: the drivers are memory and redis, spelled exactly, and an unrecognised value falls back to the in-memory limiter. {WHY_AND_WAYS_OUT}"
    )
}

fn fallback_warning(value: &str, hint: &str) -> String {
    format!(
        "RATE_LIMIT_DRIVER={value:?} is not a driver{hint}: the drivers are memory and redis, spelled exactly; falling back to the in-memory limiter. Production refuses to boot on this value unless RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION=true."
    )
}

// ---- the production guard -------------------------------------------------

#[test]
fn unset_driver_in_production_is_refused_with_the_full_explanation() {
    assert_eq!(
        refusal(&[]),
        unset_refusal(),
        "APP_ENV unset means production"
    );
    assert_eq!(refusal(&[("APP_ENV", "production")]), unset_refusal());
    assert!(unset_refusal().starts_with(
        "refusing to boot in production: RATE_LIMIT_DRIVER is unset, which defaults to the in-memory limiter."
    ));
}

#[test]
fn blank_driver_counts_as_unset() {
    for blank in ["", "   ", "\t"] {
        assert_eq!(
            refusal(&[("APP_ENV", "production"), ("RATE_LIMIT_DRIVER", blank)]),
            unset_refusal(),
            "{blank:?}"
        );
    }
}

#[test]
fn memory_in_production_is_refused() {
    assert_eq!(
        refusal(&[("APP_ENV", "production"), ("RATE_LIMIT_DRIVER", "memory")]),
        memory_refusal()
    );
}

#[test]
fn capitalised_redis_in_production_names_the_value() {
    assert_eq!(
        refusal(&[
            ("APP_ENV", "production"),
            ("RATE_LIMIT_DRIVER", "Redis"),
            ("RATE_LIMIT_REDIS_URL", "redis://cache.internal:6379"),
        ]),
        unrecognised_refusal("Redis", " (did you mean redis?)")
    );
    assert_eq!(
        refusal(&[("RATE_LIMIT_DRIVER", "memcached")]),
        unrecognised_refusal("memcached", "")
    );
}

#[test]
fn the_override_lets_production_run_on_memory() {
    for driver in [None, Some("memory"), Some("Redis")] {
        let mut pairs = vec![
            ("APP_ENV", "production"),
            ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", "true"),
        ];
        pairs.extend(driver.map(|d| ("RATE_LIMIT_DRIVER", d)));
        let plan = plan(&pairs).unwrap();
        assert_eq!(plan.driver, DriverChoice::Memory, "{driver:?}");
        assert!(plan.allow_memory_in_production);
    }
}

#[test]
fn the_override_must_be_a_boolean() {
    for (value, allowed) in [("1", true), ("TRUE", true), ("false", false), ("no", false)] {
        let plan = plan(&[
            ("APP_ENV", "staging"),
            ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", value),
        ])
        .unwrap();
        assert_eq!(plan.allow_memory_in_production, allowed, "{value}");
    }
    // Refused in every environment, even where it is not needed yet.
    for app_env in ["production", "local"] {
        assert_eq!(
            refusal(&[
                ("APP_ENV", app_env),
                ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", "ture"),
            ]),
            "RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION=\"ture\" is invalid: expected true or false (or 1 and 0, yes and no, on and off)"
        );
    }
    assert_eq!(
        refusal(&[
            ("APP_ENV", "production"),
            ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", "false"),
        ]),
        unset_refusal()
    );
}

#[test]
fn staging_and_development_are_not_gated() {
    for app_env in ["staging", "testing", "local", "development"] {
        for driver in [None, Some("memory")] {
            let mut pairs = vec![("APP_ENV", app_env)];
            pairs.extend(driver.map(|d| ("RATE_LIMIT_DRIVER", d)));
            let plan = plan(&pairs).unwrap();
            assert_eq!(plan.driver, DriverChoice::Memory);
            assert!(
                plan.warnings.is_empty(),
                "{app_env} {driver:?}: {:?}",
                plan.warnings
            );
        }
    }
}

#[test]
fn an_unrecognised_value_outside_production_falls_back_to_memory_with_one_warning() {
    let plan = plan(&[("APP_ENV", "local"), ("RATE_LIMIT_DRIVER", "Redis")]).unwrap();
    assert_eq!(plan.driver, DriverChoice::Memory);
    assert_eq!(
        plan.warnings,
        vec![fallback_warning("Redis", " (did you mean redis?)")]
    );

    let plan = staging_plan("in-memory");
    assert_eq!(plan.warnings, vec![fallback_warning("in-memory", "")]);
}

fn staging_plan(driver: &str) -> BootPlan {
    plan(&[("APP_ENV", "staging"), ("RATE_LIMIT_DRIVER", driver)]).unwrap()
}

#[test]
fn an_unknown_app_env_is_refused() {
    assert_eq!(
        refusal(&[("APP_ENV", "prod"), ("RATE_LIMIT_DRIVER", "redis")]),
        "APP_ENV=\"prod\" is invalid: expected one of production, staging, testing, local or development"
    );
}

// ---- Redis settings -------------------------------------------------------

#[test]
fn redis_without_a_url_is_refused_in_every_environment() {
    for app_env in ["production", "staging", "testing", "local", "development"] {
        for url in [None, Some(""), Some("  ")] {
            let mut pairs = vec![("APP_ENV", app_env), ("RATE_LIMIT_DRIVER", "redis")];
            pairs.extend(url.map(|u| ("RATE_LIMIT_REDIS_URL", u)));
            assert_eq!(
                refusal(&pairs),
                format!(
                    "RATE_LIMIT_REDIS_URL is unset: RATE_LIMIT_DRIVER=redis needs the address of Redis, {URL_FORMS}"
                ),
                "{app_env} {url:?}"
            );
        }
    }
}

#[test]
fn a_malformed_redis_url_is_refused_naming_the_variable_and_value() {
    for app_env in ["production", "local"] {
        assert_eq!(
            refusal(&[
                ("APP_ENV", app_env),
                ("RATE_LIMIT_DRIVER", "redis"),
                ("RATE_LIMIT_REDIS_URL", "cache.internal:6379"),
            ]),
            format!(
                "RATE_LIMIT_REDIS_URL=\"cache.internal:6379\" is invalid: the scheme must be redis://, rediss://, unix://, redis+unix://, redis+cluster:// or rediss+cluster://; {URL_FORMS}"
            )
        );
    }
    for bad in [
        "http://cache:6379",
        "redis://",
        "redis://cache:port",
        "redis://a:1,b:2",
    ] {
        let err = refusal(&[
            ("RATE_LIMIT_DRIVER", "redis"),
            ("RATE_LIMIT_REDIS_URL", bad),
        ]);
        assert!(
            err.starts_with(&format!("RATE_LIMIT_REDIS_URL={bad:?} is invalid: ")),
            "{err}"
        );
        assert!(err.ends_with(URL_FORMS), "{err}");
    }
    assert_eq!(
        refusal(&[
            ("RATE_LIMIT_DRIVER", "redis"),
            ("RATE_LIMIT_REDIS_URL", "unix://redis.sock?pass=secret"),
        ]),
        format!(
            "RATE_LIMIT_REDIS_URL=\"unix://redis.sock?pass=***\" is invalid: a Unix socket is given by its absolute path, as in unix:///run/redis/redis.sock; {URL_FORMS}"
        )
    );
}

#[test]
fn a_cluster_url_naming_a_database_is_refused_at_boot() {
    // A cluster node refuses `SELECT 2`: booted, every call would fail and
    // the backend-error policy would decide every request.
    for url in [
        "redis+cluster://127.0.0.1:7000/2",
        "redis://127.0.0.1:7000/2,redis://127.0.0.1:7001/2",
    ] {
        let refused = refusal(&[
            ("APP_ENV", "production"),
            ("RATE_LIMIT_DRIVER", "redis"),
            ("RATE_LIMIT_REDIS_URL", url),
        ]);
        assert!(
            refused.starts_with(&format!("RATE_LIMIT_REDIS_URL={url:?} is invalid: ")),
            "{refused}"
        );
        assert!(
            refused.contains(
                "a Redis Cluster has only database 0; remove the database (/N) from the URL"
            ),
            "{refused}"
        );
    }
}

#[tokio::test]
async fn a_cache_url_whose_nodes_differ_in_protocol_is_refused_naming_redis_url() {
    // redis-rs asks every node of a cluster with the first one's protocol,
    // and refuses to build a client whose nodes differ in it: the plan
    // refuses the URL first, naming the cache's variable (the driver's,
    // RATE_LIMIT_REDIS_URL, is not even set).
    let url = "redis://127.0.0.1:7000/?protocol=resp3,redis://127.0.0.1:7001";
    let (app, refused) = boot(&[
        ("APP_ENV", "local"),
        ("CACHE_STORE", "redis"),
        ("REDIS_URL", url),
    ])
    .await;
    assert_eq!(
        refused.unwrap_err(),
        format!(
            "REDIS_URL={url:?} is invalid: every node of a Redis Cluster is asked in the same protocol: give the same ?protocol= on every URL, or on none"
        )
    );
    assert!(app.get::<dyn suprnova::cache::Store>().is_none());
}

#[test]
fn a_refused_redis_url_never_shows_its_password() {
    let err = refusal(&[
        ("RATE_LIMIT_DRIVER", "redis"),
        (
            "RATE_LIMIT_REDIS_URL",
            "redis://app:s3cret@a:7000,http://app:s3cret@b:7000",
        ),
    ]);
    assert!(!err.contains("s3cret"), "{err}");
    assert!(
        err.starts_with(
            "RATE_LIMIT_REDIS_URL=\"redis://***@a:7000,http://***@b:7000\" is invalid: \"http://***@b:7000\": the scheme must be"
        ),
        "{err}"
    );
}

/// Every refusal of a Redis URL, the driver's or the cache store's, hides
/// the password: one holding a comma, one the cache store built from
/// `REDIS_HOST` and `REDIS_PASSWORD`, and a plan printed whole.
#[test]
fn no_refusal_or_printed_plan_shows_a_redis_password() {
    let refusals = [
        refusal(&[
            ("RATE_LIMIT_DRIVER", "redis"),
            (
                "RATE_LIMIT_REDIS_URL",
                "redis://app:pa,s3cret@cache.internal:port",
            ),
        ]),
        refusal(&[
            ("RATE_LIMIT_DRIVER", "redis"),
            (
                "RATE_LIMIT_REDIS_URL",
                "redis+cluster://app:pa,s3cret@a:7000,b:x",
            ),
        ]),
        refusal(&[
            ("APP_ENV", "local"),
            ("CACHE_STORE", "redis"),
            ("REDIS_URL", "redis://app:s3cret@cache.internal:port"),
        ]),
        refusal(&[
            ("APP_ENV", "local"),
            ("CACHE_STORE", "redis"),
            ("REDIS_URL", "unix:///run/redis.sock?pass=s3cret&db=x"),
        ]),
    ];
    for err in &refusals {
        assert!(!err.contains("s3cret") && !err.contains("app:pa"), "{err}");
        assert!(err.contains("***"), "{err}");
    }
    // A host the URL cannot hold is refused as written, before the
    // password joins it.
    let host = refusal(&[
        ("APP_ENV", "local"),
        ("CACHE_STORE", "redis"),
        ("REDIS_HOST", "cache.internal/"),
        ("REDIS_PASSWORD", "s3cret"),
    ]);
    assert!(
        host.starts_with(
            "REDIS_HOST=\"cache.internal/\" is invalid: expected a host name or an address"
        ),
        "{host}"
    );
    assert!(!host.contains("s3cret"), "{host}");
    assert!(
        refusals[2].starts_with("REDIS_URL=\"redis://***@cache.internal:port\" is invalid: "),
        "{}",
        refusals[2]
    );

    let plan = plan(&[
        ("APP_ENV", "local"),
        ("RATE_LIMIT_DRIVER", "redis"),
        (
            "RATE_LIMIT_REDIS_URL",
            "redis://app:pa,s3cret@cache.internal:6379",
        ),
        ("CACHE_STORE", "redis"),
        ("REDIS_HOST", "cache.internal"),
        ("REDIS_PASSWORD", "s3cret"),
    ])
    .unwrap();
    let printed = format!("{plan:?}");
    assert!(!printed.contains("s3cret"), "{printed}");
    assert!(
        printed.contains("redis://***@cache.internal:6379"),
        "{printed}"
    );
}

fn redis_plan(extra: &[(&str, &str)]) -> suprnova::bootstrap::RedisPlan {
    let mut pairs = vec![("APP_ENV", "production"), ("RATE_LIMIT_DRIVER", "redis")];
    pairs.extend_from_slice(extra);
    match plan(&pairs).unwrap().driver {
        DriverChoice::Redis(redis) => redis,
        other => panic!("expected redis, got {other:?}"),
    }
}

#[test]
fn redis_url_forms() {
    let one = redis_plan(&[("RATE_LIMIT_REDIS_URL", "redis://cache.internal:6379/2")]);
    assert!(!one.config.is_cluster());
    assert_eq!(one.config.nodes(), ["redis://cache.internal:6379/2"]);

    let tls = redis_plan(&[(
        "RATE_LIMIT_REDIS_URL",
        "rediss://app:pw@cache.internal:6380",
    )]);
    assert!(tls.config.uses_tls());
    assert_eq!(tls.config.redacted(), "rediss://***@cache.internal:6380");

    let list = redis_plan(&[(
        "RATE_LIMIT_REDIS_URL",
        "redis://10.0.0.1:7000, redis://10.0.0.2:7000,redis://10.0.0.3:7000",
    )]);
    assert!(list.config.is_cluster());
    assert_eq!(list.config.nodes().len(), 3);

    let socket = redis_plan(&[("RATE_LIMIT_REDIS_URL", "unix:///run/redis/redis.sock")]);
    assert!(!socket.config.is_cluster());
    assert_eq!(socket.config.nodes(), ["unix:///run/redis/redis.sock"]);

    let seed = redis_plan(&[("RATE_LIMIT_REDIS_URL", "redis+cluster://10.0.0.1:7000")]);
    assert!(seed.config.is_cluster());
    assert_eq!(seed.config.nodes(), ["redis://10.0.0.1:7000"]);
}

#[test]
fn redis_timeouts_and_prefix() {
    let defaults = redis_plan(&[("RATE_LIMIT_REDIS_URL", "redis://c:6379")]);
    assert_eq!(defaults.config.connect_timeout, Duration::from_secs(1));
    assert_eq!(defaults.config.response_timeout, Duration::from_secs(1));
    assert_eq!(defaults.prefix, None);

    let set = redis_plan(&[
        ("RATE_LIMIT_REDIS_URL", "redis://c:6379"),
        ("RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS", "250"),
        ("RATE_LIMIT_REDIS_TIMEOUT_MS", " 75 "),
        ("RATE_LIMIT_REDIS_PREFIX", "shop:"),
    ]);
    assert_eq!(set.config.connect_timeout, Duration::from_millis(250));
    assert_eq!(set.config.response_timeout, Duration::from_millis(75));
    assert_eq!(set.prefix.as_deref(), Some("shop:"));
}

#[test]
fn redis_timeouts_must_be_positive_milliseconds() {
    for variable in [
        "RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS",
        "RATE_LIMIT_REDIS_TIMEOUT_MS",
    ] {
        for bad in ["0", "-5", "1s", "250ms", "1.5", "lots"] {
            assert_eq!(
                refusal(&[
                    ("RATE_LIMIT_DRIVER", "redis"),
                    ("RATE_LIMIT_REDIS_URL", "redis://c:6379"),
                    (variable, bad),
                ]),
                format!(
                    "{variable}={bad:?} is invalid: expected a whole number of milliseconds above 0, such as 250"
                )
            );
        }
    }
}

// ---- trusted proxies ------------------------------------------------------

fn staging_with_proxies(value: &str) -> Result<BootPlan, ConfigError> {
    plan(&[("APP_ENV", "staging"), ("APP_TRUSTED_PROXIES", value)])
}

#[test]
fn trusted_proxies_are_read_with_spaces_around_entries() {
    let plan = staging_with_proxies(" 10.0.0.5 , 173.245.48.0/20,2400:cb00::/32 ").unwrap();
    assert_eq!(
        plan.trusted_proxies.to_string(),
        "10.0.0.5,173.245.48.0/20,2400:cb00::/32"
    );
    assert!(
        plan.trusted_proxies
            .contains("173.245.63.255".parse().unwrap())
    );
    assert!(staging_plan("memory").trusted_proxies.is_empty());
}

#[test]
fn a_range_of_every_address_is_refused_naming_the_entry() {
    for entry in ["0.0.0.0/0", "::/0", "::ffff:0:0/96"] {
        let value = format!("10.0.0.5, {entry}");
        assert_eq!(
            staging_with_proxies(&value).unwrap_err().to_string(),
            format!(
                "APP_TRUSTED_PROXIES={value:?} is invalid: {entry:?} covers every address, so every client would be a trusted proxy and choose the address it is limited by; list only the addresses and ranges of your proxies"
            )
        );
    }
}

#[test]
fn a_junk_proxy_entry_is_refused_naming_the_entry() {
    for entry in ["nginx", "10.0.0.300", "10.0.0.0/33", "10.0.0.5:80", "*"] {
        let value = format!("10.0.0.5,{entry}");
        assert_eq!(
            staging_with_proxies(&value).unwrap_err().to_string(),
            format!(
                "APP_TRUSTED_PROXIES={value:?} is invalid: {entry:?} is neither an IP address nor a CIDR range (such as 10.0.0.5 or 10.0.0.0/8)"
            )
        );
    }
}

// ---- the throttle side's store in production ---------------------------------

#[test]
fn production_on_redis_with_an_in_memory_cache_warns_that_throttles_count_per_process() {
    let redis = [
        ("APP_ENV", "production"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", "redis://cache.internal:6379"),
    ];
    let warning = "RATE_LIMIT_DRIVER=redis shares the driver's counts, but the cache store is the in-memory one (CACHE_STORE unset, memory or array): throttle: routes, named limiters and the RateLimiter facade count per process, so behind N replicas their limit of 5 attempts is really 5N. Set CACHE_STORE=redis and REDIS_URL to share them; if no route uses them, this changes nothing.";
    for store in [None, Some("memory"), Some("array")] {
        let mut pairs = redis.to_vec();
        pairs.extend(store.map(|s| ("CACHE_STORE", s)));
        assert_eq!(plan(&pairs).unwrap().warnings, [warning], "{store:?}");
    }
    let mut shared = redis.to_vec();
    shared.extend([
        ("CACHE_STORE", "redis"),
        ("REDIS_URL", "redis://cache.internal:6379"),
    ]);
    assert!(plan(&shared).unwrap().warnings.is_empty());
    // Outside production, and on one process by choice, nothing to say.
    let mut staging = redis.to_vec();
    staging[0] = ("APP_ENV", "staging");
    assert!(plan(&staging).unwrap().warnings.is_empty());
    let one_process = [
        ("APP_ENV", "production"),
        ("RATE_LIMIT_DRIVER", "memory"),
        ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", "true"),
    ];
    assert!(plan(&one_process).unwrap().warnings.is_empty());
}

// ---- values that are not UTF-8 ----------------------------------------------

const NOT_UTF8: &str =
    "it holds bytes that are not UTF-8 (each shown as \u{FFFD}); write the value in UTF-8";

#[test]
fn a_value_that_is_not_utf8_is_refused_naming_its_variable() {
    // Each byte outside UTF-8 of the process environment reads as U+FFFD.
    let cases = [
        ("APP_ENV", "staging\u{FFFD}"),
        ("RATE_LIMIT_DRIVER", "redis\u{FFFD}"),
        ("APP_TRUSTED_PROXIES", "10.0.0.5,\u{FFFD}192.0.2.10"),
        ("RATE_LIMIT_REDIS_URL", "redis://127.0.0.1:6379/\u{FFFD}"),
        ("RATE_LIMIT_REDIS_PREFIX", "app\u{FFFD}:"),
        ("RATE_LIMIT_REDIS_TIMEOUT_MS", "25\u{FFFD}"),
        ("CACHE_STORE", "redis\u{FFFD}"),
        ("CACHE_PREFIX", "app\u{FFFD}"),
    ];
    for (variable, value) in cases {
        let mut pairs = vec![
            ("APP_ENV", "staging"),
            ("RATE_LIMIT_DRIVER", "redis"),
            ("RATE_LIMIT_REDIS_URL", "redis://127.0.0.1:6379"),
        ];
        pairs.retain(|(name, _)| *name != variable);
        pairs.push((variable, value));
        assert_eq!(
            refusal(&pairs),
            format!("{variable}={value:?} is invalid: {NOT_UTF8}")
        );
    }
    let password = [
        ("APP_ENV", "staging"),
        ("CACHE_STORE", "redis"),
        ("REDIS_PASSWORD", "s3cr\u{FFFD}t"),
    ];
    assert_eq!(
        refusal(&password),
        format!("REDIS_PASSWORD=\"(hidden)\" is invalid: {NOT_UTF8}")
    );
}

#[test]
fn a_redis_url_that_is_not_utf8_is_refused_without_its_password() {
    for (variable, store) in [
        ("RATE_LIMIT_REDIS_URL", ("RATE_LIMIT_DRIVER", "redis")),
        ("REDIS_URL", ("CACHE_STORE", "redis")),
    ] {
        let refused = refusal(&[
            ("APP_ENV", "staging"),
            store,
            (variable, "redis://app:hunter2\u{FFFD}@cache.internal:6379"),
        ]);
        assert_eq!(
            refused,
            format!("{variable}=\"redis://***@cache.internal:6379\" is invalid: {NOT_UTF8}")
        );
    }
}

#[cfg(unix)]
#[test]
fn a_process_variable_that_is_not_utf8_refuses_boot_rather_than_read_as_unset() {
    use std::os::unix::ffi::OsStrExt;
    const CHILD: &str = "SUPRNOVA_TEST_CHILD";
    let name = "a_process_variable_that_is_not_utf8_refuses_boot_rather_than_read_as_unset";
    if std::env::var_os(CHILD).is_some() {
        let refused = BootPlan::from_env(&Env::process()).unwrap_err().to_string();
        assert_eq!(
            refused,
            format!("APP_TRUSTED_PROXIES=\"10.0.0.5,\u{FFFD}192.0.2.10\" is invalid: {NOT_UTF8}")
        );
        return;
    }
    // This test again, in a process of its own whose environment holds the
    // byte 0xA0 (a no-break space in Latin-1).
    let run = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads=1"])
        .env_clear()
        .env(CHILD, "1")
        .env("APP_ENV", "staging")
        .env(
            "APP_TRUSTED_PROXIES",
            std::ffi::OsStr::from_bytes(b"10.0.0.5,\xa0192.0.2.10"),
        )
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.contains("1 passed"), "{out}");
}

// ---- .env.example -----------------------------------------------------------

#[test]
fn env_example_lists_every_variable_and_boots_as_written() {
    use suprnova::bootstrap::variables::*;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/.env.example");
    let pairs: Vec<(String, String)> = dotenvy::from_path_iter(path)
        .unwrap()
        .map(|item| item.unwrap())
        .collect();
    let names: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    for variable in [
        "APP_ENV",
        "APP_TRUSTED_PROXIES",
        RATE_LIMIT_DRIVER,
        RATE_LIMIT_REDIS_URL,
        RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS,
        RATE_LIMIT_REDIS_TIMEOUT_MS,
        RATE_LIMIT_REDIS_PREFIX,
        RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION,
    ] {
        assert!(
            names.contains(&variable),
            "{variable} is missing from .env.example"
        );
    }
    // The two prefixes are there, commented out: set blank they would be
    // no prefix, as in Laravel.
    let text = std::fs::read_to_string(path).unwrap();
    for commented in ["# CACHE_PREFIX=\n", "# REDIS_PREFIX=\n"] {
        assert!(text.contains(commented), "{commented:?}");
    }
    let cache = suprnova::cache::CacheConfig::from_env(&Env::from_pairs(pairs.clone())).unwrap();
    assert_eq!(cache.key_prefix(), "laravel-database-laravel-cache-");
    let plan = BootPlan::from_env(&Env::from_pairs(pairs)).unwrap();
    assert_eq!(plan.environment, Environment::Local);
    assert_eq!(plan.driver, DriverChoice::Memory);
    assert!(plan.warnings.is_empty());
}

// ---- installing -----------------------------------------------------------

/// Boots `pairs` into a container of the test's own.
async fn boot(pairs: &[(&str, &str)]) -> (App, Result<suprnova::bootstrap::BootSummary, String>) {
    let app = App::new();
    let result = app
        .scope(bootstrap(&env(pairs)))
        .await
        .map_err(|e| e.to_string());
    (app, result)
}

fn installed_driver(app: &App) -> std::sync::Arc<dyn RateLimiterDriver> {
    app.get::<dyn RateLimiterDriver>()
        .expect("no driver installed")
}

#[tokio::test]
async fn memory_and_proxies_are_installed_into_the_current_container() {
    let (app, summary) = boot(&[
        ("APP_ENV", "staging"),
        ("APP_TRUSTED_PROXIES", "10.0.0.0/8, 2400:cb00::/32"),
    ])
    .await;
    let summary = summary.unwrap();
    assert_eq!(
        summary.to_string(),
        "environment=staging driver=memory cache=memory trusted_proxies=10.0.0.0/8,2400:cb00::/32"
    );
    assert_eq!(summary.driver, "memory");
    assert_eq!(summary.redis, None);

    let driver = installed_driver(&app);
    assert_eq!(driver.name(), "memory");
    let cfg = SlidingWindowConfig::new(2, Duration::from_secs(60));
    let admitted: Vec<bool> = [
        driver.try_acquire("k", &cfg).await.unwrap(),
        driver.try_acquire("k", &cfg).await.unwrap(),
        driver.try_acquire("k", &cfg).await.unwrap(),
    ]
    .to_vec();
    assert_eq!(admitted, [true, true, false]);

    let proxies = app.get::<TrustedProxies>().expect("no proxies installed");
    assert_eq!(proxies.to_string(), "10.0.0.0/8,2400:cb00::/32");
}

#[tokio::test]
async fn the_override_installs_memory_in_production() {
    let (app, summary) = boot(&[
        ("APP_ENV", "production"),
        ("RATE_LIMIT_DRIVER", "memory"),
        ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", "true"),
    ])
    .await;
    assert_eq!(
        summary.unwrap().to_string(),
        "environment=production driver=memory cache=memory trusted_proxies=none"
    );
    assert_eq!(installed_driver(&app).name(), "memory");
}

#[tokio::test]
async fn an_unrecognised_value_outside_production_installs_memory_and_reports_the_warning() {
    let (app, summary) = boot(&[("APP_ENV", "development"), ("RATE_LIMIT_DRIVER", "Redis")]).await;
    let summary = summary.unwrap();
    assert_eq!(
        summary.warnings,
        vec![fallback_warning("Redis", " (did you mean redis?)")]
    );
    assert_eq!(
        summary.to_string(),
        "environment=development driver=memory cache=memory trusted_proxies=none warnings=1"
    );
    assert_eq!(installed_driver(&app).name(), "memory");
}

#[tokio::test]
async fn a_refused_boot_installs_nothing() {
    let every_address = "APP_TRUSTED_PROXIES=\"0.0.0.0/0\" is invalid: \"0.0.0.0/0\" covers every address, so every client would be a trusted proxy and choose the address it is limited by; list only the addresses and ranges of your proxies".to_owned();
    let no_url = format!(
        "RATE_LIMIT_REDIS_URL is unset: RATE_LIMIT_DRIVER=redis needs the address of Redis, {URL_FORMS}"
    );
    for (pairs, refusal) in [
        (vec![], unset_refusal()),
        (
            vec![("APP_ENV", "production"), ("RATE_LIMIT_DRIVER", "Redis")],
            unrecognised_refusal("Redis", " (did you mean redis?)"),
        ),
        (
            vec![("APP_ENV", "local"), ("APP_TRUSTED_PROXIES", "0.0.0.0/0")],
            every_address,
        ),
        (
            vec![("APP_ENV", "local"), ("RATE_LIMIT_DRIVER", "redis")],
            no_url,
        ),
    ] {
        let (app, result) = boot(&pairs).await;
        assert_eq!(result.unwrap_err(), refusal, "{pairs:?}");
        assert!(app.get::<dyn RateLimiterDriver>().is_none(), "{pairs:?}");
        assert!(app.get::<TrustedProxies>().is_none(), "{pairs:?}");
    }
    let (_, result) = boot(&[]).await;
    assert_eq!(result.unwrap_err(), unset_refusal());
}

#[tokio::test]
async fn installed_proxies_decide_the_client_address_through_the_server() {
    let app = App::new();
    app.scope(async {
        bootstrap(&env(&[
            ("APP_ENV", "testing"),
            ("APP_TRUSTED_PROXIES", "127.0.0.2"),
        ]))
        .await
        .unwrap();
        let router = Router::new().get("/ip", |req: Request| async move {
            HttpResponse::text(req.ip().unwrap_or_default())
        });
        let server = TestServer::start(router).await;
        let from = |ip: &str, xff: &str| {
            let request = http::Request::get(server.url("/ip"))
                .header("x-forwarded-for", xff)
                .body(Full::<Bytes>::default())
                .unwrap();
            server.send_from(ip.parse::<IpAddr>().unwrap(), request)
        };
        assert_eq!(from("127.0.0.2", "198.51.100.7").await.body, "198.51.100.7");
        assert_eq!(from("127.0.0.3", "198.51.100.7").await.body, "127.0.0.3");
        server.stop().await;
    })
    .await;
}

/// Every environment x every driver value x the override, booted into a
/// container of its own against a live Redis, checked against the rule:
/// `redis` installs Redis everywhere; in production anything else is refused
/// (and nothing is installed) unless the override is `true`; elsewhere it
/// installs memory, with one warning for an unrecognised value.
#[tokio::test]
async fn every_environment_driver_and_override_installs_the_right_driver() {
    let server = RedisServer::start();
    let url = server.url();
    let environments = [
        (None, Environment::Production),
        (Some("production"), Environment::Production),
        (Some("staging"), Environment::Staging),
        (Some("testing"), Environment::Testing),
        (Some("local"), Environment::Local),
        (Some("development"), Environment::Development),
    ];
    let drivers = [
        None,
        Some(""),
        Some("memory"),
        Some("redis"),
        Some("Redis"),
        Some("file"),
    ];
    let overrides = [None, Some("true"), Some("false")];
    let mut checked = 0;
    for (app_env, environment) in environments {
        for driver in drivers {
            for allow in overrides {
                let mut pairs = vec![("RATE_LIMIT_REDIS_URL", url.as_str())];
                pairs.extend(app_env.map(|v| ("APP_ENV", v)));
                pairs.extend(driver.map(|v| ("RATE_LIMIT_DRIVER", v)));
                pairs.extend(allow.map(|v| ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", v)));
                let case = format!("{pairs:?}");
                let (app, got) = boot(&pairs).await;
                let gated = environment.is_production() && allow != Some("true");
                match driver {
                    Some("redis") => {
                        let summary = got.expect(&case);
                        assert_eq!(summary.redis_answered, Some(true), "{case}");
                        // Only the cache store's warning: production on
                        // Redis with the throttle side in memory.
                        let warned = usize::from(environment.is_production());
                        assert_eq!(summary.warnings.len(), warned, "{case}");
                        assert_eq!(installed_driver(&app).name(), "redis", "{case}");
                    }
                    _ if gated => {
                        let expected = match driver {
                            None | Some("") => unset_refusal(),
                            Some("memory") => memory_refusal(),
                            Some("Redis") => {
                                unrecognised_refusal("Redis", " (did you mean redis?)")
                            }
                            Some(other) => unrecognised_refusal(other, ""),
                        };
                        assert_eq!(got.unwrap_err(), expected, "{case}");
                        assert!(app.get::<dyn RateLimiterDriver>().is_none(), "{case}");
                    }
                    _ => {
                        let summary = got.expect(&case);
                        assert_eq!(summary.environment, environment, "{case}");
                        let warnings = match driver {
                            Some("Redis") => {
                                vec![fallback_warning("Redis", " (did you mean redis?)")]
                            }
                            Some("file") => vec![fallback_warning("file", "")],
                            _ => vec![],
                        };
                        assert_eq!(summary.warnings, warnings, "{case}");
                        assert_eq!(installed_driver(&app).name(), "memory", "{case}");
                    }
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 6 * 6 * 3);
}

#[tokio::test]
async fn redis_is_installed_with_its_prefix_against_a_live_server() {
    let server = RedisServer::start();
    let url = server.url();
    let prefix = support::unique_prefix("boot");
    let (app, summary) = boot(&[
        ("APP_ENV", "production"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", &url),
        ("RATE_LIMIT_REDIS_PREFIX", &prefix),
        ("APP_TRUSTED_PROXIES", "10.0.0.5"),
    ])
    .await;
    assert_eq!(
        summary.unwrap().to_string(),
        format!(
            "environment=production driver=redis redis={url} (answering) cache=memory trusted_proxies=10.0.0.5 warnings=1"
        )
    );
    let driver = installed_driver(&app);
    assert_eq!(driver.name(), "redis");
    let cfg = SlidingWindowConfig::new(2, Duration::from_secs(2));
    let mut admitted = Vec::new();
    for _ in 0..3 {
        admitted.push(driver.try_acquire("login:203.0.113.7", &cfg).await.unwrap());
    }
    assert_eq!(admitted, [true, true, false]);
    let keys = server.command("KEYS *");
    assert!(
        keys.contains(&format!("{prefix}login:203.0.113.7")),
        "{keys}"
    );
}

#[tokio::test]
async fn redis_on_its_unix_socket_is_installed_and_shares_the_tcp_buckets() {
    let server = RedisServer::start();
    let url = format!("{}?pass=unused", server.socket_url());
    let prefix = support::unique_prefix("socket");
    let (app, summary) = boot(&[
        ("APP_ENV", "production"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", &server.socket_url()),
        ("RATE_LIMIT_REDIS_PREFIX", &prefix),
    ])
    .await;
    assert_eq!(
        summary.unwrap().to_string(),
        format!(
            "environment=production driver=redis redis={} (answering) cache=memory trusted_proxies=none warnings=1",
            server.socket_url()
        )
    );
    let driver = installed_driver(&app);
    let cfg = SlidingWindowConfig::new(3, Duration::from_secs(2));
    let mut admitted = Vec::new();
    for _ in 0..4 {
        admitted.push(driver.try_acquire("login:203.0.113.9", &cfg).await.unwrap());
    }
    assert_eq!(admitted, [true, true, true, false]);
    // The same server over TCP holds the three admitted hits.
    assert_eq!(
        server.command(&format!("ZCARD {prefix}login:203.0.113.9")),
        ":3\r\n"
    );
    // A password in a socket URL's query never reaches the summary.
    let plan = redis_plan(&[("RATE_LIMIT_REDIS_URL", &url)]);
    assert_eq!(
        plan.config.redacted(),
        format!("{}?pass=***", server.socket_url())
    );
}

#[tokio::test]
async fn a_redis_that_does_not_answer_yet_does_not_stop_boot() {
    let mut server = RedisServer::start();
    server.stop();
    let url = server.url();
    let started = Instant::now();
    let (app, summary) = boot(&[
        ("APP_ENV", "production"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", &url),
        ("RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS", "200"),
        ("RATE_LIMIT_REDIS_TIMEOUT_MS", "200"),
    ])
    .await;
    let summary = summary.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(summary.redis_answered, Some(false));
    assert_eq!(
        summary.to_string(),
        format!(
            "environment=production driver=redis redis={url} (not answering yet) cache=memory trusted_proxies=none warnings=1"
        )
    );

    // Until Redis answers, the driver reports a backend error, which the
    // middleware's backend-error policy turns into a response.
    let driver = installed_driver(&app);
    assert_eq!(driver.name(), "redis");
    let cfg = SlidingWindowConfig::new(5, Duration::from_secs(2));
    let err = driver.try_acquire("k", &cfg).await.unwrap_err();
    assert!(err.is_backend(), "{err}");

    // Once Redis is up, the same installed driver decides again.
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut answered = None;
    while Instant::now() < deadline {
        if let Ok(allowed) = driver.try_acquire("k", &cfg).await {
            answered = Some(allowed);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(answered, Some(true), "the driver never reconnected");
}

#[tokio::test]
async fn a_cluster_url_installs_redis_on_the_cluster() {
    let cluster = RedisCluster::start(3);
    for url in [
        cluster.url(),
        format!("redis+cluster://127.0.0.1:{}", cluster.ports()[0]),
    ] {
        let (app, summary) = boot(&[
            ("APP_ENV", "production"),
            ("RATE_LIMIT_DRIVER", "redis"),
            ("RATE_LIMIT_REDIS_URL", &url),
        ])
        .await;
        let summary = summary.unwrap();
        assert_eq!(summary.redis_answered, Some(true), "{url}");
        assert!(
            summary
                .redis
                .unwrap()
                .starts_with("cluster redis://127.0.0.1:")
        );
        let driver = installed_driver(&app);
        let cfg = SlidingWindowConfig::new(1, Duration::from_secs(2));
        // Keys spread over the slots of every node.
        let prefix = support::unique_prefix("cluster");
        for key in ["a", "b", "c", "d", "e", "f"] {
            let key = format!("{prefix}{key}");
            assert!(driver.try_acquire(&key, &cfg).await.unwrap(), "{url} {key}");
            assert!(
                !driver.try_acquire(&key, &cfg).await.unwrap(),
                "{url} {key}"
            );
        }
    }
}

#[tokio::test]
async fn one_node_of_a_cluster_given_as_one_url_refuses_boot() {
    let cluster = RedisCluster::start(3);
    let one = format!("redis://127.0.0.1:{}", cluster.ports()[0]);
    let why = "is one node of a Redis Cluster (its INFO says cluster_enabled:1), which answers only for its own slots: every other key would get MOVED and go to the backend-error policy. List the cluster's nodes, comma-separated redis:// URLs, or write redis+cluster://host:port";
    // With a database too: the node refuses to select it before the PING.
    for url in [one.clone(), format!("{one}/1")] {
        let (app, refused) = boot(&[
            ("APP_ENV", "production"),
            ("RATE_LIMIT_DRIVER", "redis"),
            ("RATE_LIMIT_REDIS_URL", &url),
        ])
        .await;
        assert_eq!(
            refused.unwrap_err(),
            format!("refusing to boot: RATE_LIMIT_REDIS_URL={url} {why}")
        );
        assert!(app.get::<dyn RateLimiterDriver>().is_none());
    }
    // The cache store's Redis the same way, on the database it would ask
    // for (REDIS_CACHE_DB, 1 by default) and on the one its URL names.
    let port = cluster.ports()[0].to_string();
    for (pairs, shown) in [
        (vec![("REDIS_URL", one.clone())], format!("{one}/1")),
        (vec![("REDIS_URL", format!("{one}/0"))], format!("{one}/0")),
        (
            vec![
                ("REDIS_HOST", "127.0.0.1".to_owned()),
                ("REDIS_PORT", port.clone()),
            ],
            format!("{one}/1"),
        ),
    ] {
        let mut env = vec![("APP_ENV", "staging"), ("CACHE_STORE", "redis")];
        env.extend(pairs.iter().map(|(name, value)| (*name, value.as_str())));
        let (app, refused) = boot(&env).await;
        assert_eq!(
            refused.unwrap_err(),
            format!(
                "refusing to boot: the cache store's Redis, {shown} (REDIS_URL, or REDIS_HOST and REDIS_PORT), {why}"
            ),
            "{pairs:?}"
        );
        assert!(app.get::<dyn RateLimiterDriver>().is_none());
    }
}

/// Boot waits for a Redis that does not answer once, not once for each of
/// its questions (the `PING`, then whether it is a cluster's node): the
/// cache store's Redis as the driver's.
#[tokio::test]
async fn boot_waits_one_deadline_on_a_redis_that_hangs() {
    let server = RedisServer::start();
    let reply = server.command("CLIENT PAUSE 10000 ALL");
    assert!(reply.contains("OK"), "{reply}");
    let url = server.url();
    let timeouts = [
        ("APP_ENV", "staging"),
        ("RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS", "500"),
        ("RATE_LIMIT_REDIS_TIMEOUT_MS", "500"),
    ];
    for store in [
        [
            ("RATE_LIMIT_DRIVER", "redis"),
            ("RATE_LIMIT_REDIS_URL", &url),
        ],
        [("CACHE_STORE", "redis"), ("REDIS_URL", &url)],
    ] {
        let mut pairs = timeouts.to_vec();
        pairs.extend(store);
        let started = Instant::now();
        let (_app, booted) = boot(&pairs).await;
        let waited = started.elapsed();
        booted.unwrap();
        // One wait: the connection's 500 ms and the call's 500 ms at most,
        // where two would be up to 2 s.
        assert!(
            waited < Duration::from_millis(1200),
            "{store:?}: boot waited {waited:?}"
        );
    }
}

/// Each case, in staging, refuses boot with a message that starts with
/// `variable=` and says `says`.
fn assert_refused_naming(cases: &[(&[(&str, &str)], &str)], says: &str) {
    for (pairs, variable) in cases {
        let mut all = vec![("APP_ENV", "staging")];
        all.extend_from_slice(pairs);
        let refused = refusal(&all);
        assert!(
            refused.starts_with(&format!("{variable}=")) && refused.contains(says),
            "{refused}"
        );
    }
}

/// A database past the last `SELECT` takes (2^31 - 1) is refused as the
/// configuration is read, naming the variable that holds it.
#[test]
fn a_database_past_selects_range_is_refused_naming_its_variable() {
    let past = "redis://127.0.0.1:6379/2147483648";
    assert_refused_naming(
        &[
            (
                &[
                    ("RATE_LIMIT_DRIVER", "redis"),
                    ("RATE_LIMIT_REDIS_URL", past),
                ],
                "RATE_LIMIT_REDIS_URL",
            ),
            (
                &[("CACHE_STORE", "redis"), ("REDIS_URL", past)],
                "REDIS_URL",
            ),
            (
                &[("CACHE_STORE", "redis"), ("REDIS_CACHE_DB", "3000000000")],
                "REDIS_CACHE_DB",
            ),
        ],
        "2147483647",
    );
    // The last one is taken.
    plan(&[
        ("APP_ENV", "staging"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", "redis://127.0.0.1:6379/2147483647"),
    ])
    .unwrap();
}

/// Port 0 is no port a Redis listens on: refused, naming the variable.
#[test]
fn port_0_is_refused_naming_its_variable() {
    assert_refused_naming(
        &[
            (
                &[
                    ("RATE_LIMIT_DRIVER", "redis"),
                    ("RATE_LIMIT_REDIS_URL", "redis://127.0.0.1:0"),
                ],
                "RATE_LIMIT_REDIS_URL",
            ),
            (
                &[
                    ("RATE_LIMIT_DRIVER", "redis"),
                    ("RATE_LIMIT_REDIS_URL", "redis://a:7000,redis://b:0"),
                ],
                "RATE_LIMIT_REDIS_URL",
            ),
            (
                &[("CACHE_STORE", "redis"), ("REDIS_PORT", "0")],
                "REDIS_PORT",
            ),
        ],
        "from 1 to 65535",
    );
}

/// `REDIS_HOST` holding an IPv6 address, as phpredis takes it (without
/// brackets), is that address.
#[test]
fn an_ipv6_redis_host_is_read_as_phpredis_reads_it() {
    for (host, node) in [
        ("::1", "redis://[::1]:6379/1"),
        ("2001:db8::7", "redis://[2001:db8::7]:6379/1"),
        ("tls://::1", "rediss://[::1]:6379/1"),
        ("[::1]", "redis://[::1]:6379/1"),
    ] {
        let env = Env::from_pairs([("CACHE_STORE", "redis"), ("REDIS_HOST", host)]);
        let config = suprnova::cache::CacheConfig::from_env(&env)
            .unwrap_or_else(|e| panic!("REDIS_HOST={host} refused: {e}"));
        assert_eq!(config.redis.unwrap().nodes(), [node], "{host}");
    }
}

/// How a refusal of the driver's credentials tells the operator to fix them.
const DRIVER_CREDENTIALS_FIX: &str = "Give the username and password Redis expects in the URL: redis://user:password@host:port, or redis://:password@host:port for a password only (?user=...&pass=... after a socket's path).";

/// How a refusal of the driver's database tells the operator to fix it.
const DRIVER_DATABASE_FIX: &str = "Name a database this Redis has: they are numbered from 0 to its `databases` setting less one (0 to 15 by default), as /N after the host or ?db=N after a socket's path.";

/// How a refusal of the cache store's credentials tells the operator to fix
/// them.
const CACHE_CREDENTIALS_FIX: &str = "Give the username and password Redis expects in REDIS_URL (redis://user:password@host:port), or in REDIS_USERNAME and REDIS_PASSWORD.";

/// How a refusal of the cache store's database tells the operator to fix it.
const CACHE_DATABASE_FIX: &str = "Name a database this Redis has: they are numbered from 0 to its `databases` setting less one (0 to 15 by default), in REDIS_CACHE_DB (in REDIS_DB with REDIS_CACHE_CONNECTION=default) or as the database REDIS_URL names (/N, or ?db=N after a socket's path).";

/// What redis-rs makes of a refused password sent with `AUTH`.
const AUTH_FAILED: &str = "Password authentication failed - AuthenticationFailed";

/// What redis-rs makes of a `SELECT` of a database past the last.
const DB_OUT_OF_RANGE: &str =
    "Redis server refused to switch database - Server(ResponseError): DB index is out of range";

/// The refusal of a Redis, named `subject`, that answers and refuses
/// `what_is_refused` (`credentials` or `database`), saying `said`.
fn refused_by_redis(subject: &str, what_is_refused: &str, said: &str, fix: &str) -> String {
    let refused = match what_is_refused {
        "credentials" => "the credentials given (none, or a username or password it does not take)",
        _ => "the database asked for",
    };
    format!("refusing to boot: {subject} answers but refuses {refused}: {said}. {fix}")
}

/// Boots the Redis driver on `url`, with short timeouts.
async fn boot_driver_on(url: &str) -> (App, Result<suprnova::bootstrap::BootSummary, String>) {
    boot(&[
        ("APP_ENV", "production"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", url),
        ("RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS", "300"),
        ("RATE_LIMIT_REDIS_TIMEOUT_MS", "300"),
    ])
    .await
}

/// Boots the Redis driver on each URL and asserts the refusal: `(url,
/// the URL as shown, what Redis refuses, what it said)`.
async fn driver_boot_is_refused(refusals: &[(String, String, &str, String)]) {
    for (url, shown, what_is_refused, said) in refusals {
        let (app, refused) = boot_driver_on(url).await;
        let fix = match *what_is_refused {
            "credentials" => DRIVER_CREDENTIALS_FIX,
            _ => DRIVER_DATABASE_FIX,
        };
        assert_eq!(
            refused.unwrap_err(),
            refused_by_redis(
                &format!("RATE_LIMIT_REDIS_URL={shown}"),
                what_is_refused,
                said,
                fix
            ),
            "{url}"
        );
        assert!(app.get::<dyn RateLimiterDriver>().is_none(), "{url}");
    }
}

#[tokio::test]
async fn a_redis_that_refuses_the_credentials_or_the_database_refuses_boot() {
    // Such an answer comes again on every connection until the
    // configuration changes: booted, every limited request would follow
    // the backend-error policy (FailOpen by default: no limit at all).
    let server = RedisServer::start();
    let port = server.port();
    let tcp = server.url();
    let socket = server.socket_url();
    let mut refusals = vec![
        (
            format!("{tcp}/99"),
            format!("{tcp}/99"),
            "database",
            DB_OUT_OF_RANGE.to_owned(),
        ),
        (
            format!("{socket}?db=99"),
            format!("{socket}?db=99"),
            "database",
            DB_OUT_OF_RANGE.to_owned(),
        ),
    ];
    driver_boot_is_refused(&refusals).await;
    let reply = server.command("CONFIG SET requirepass s3cret");
    assert!(reply.contains("OK"), "{reply}");
    let shown = format!("redis://***@127.0.0.1:{port}");
    refusals = vec![
        (format!("redis://:wrong@127.0.0.1:{port}"), shown.clone(), "credentials", AUTH_FAILED.to_owned()),
        // An ACL user Redis does not know.
        (
            format!("redis://nobody:s3cret@127.0.0.1:{port}"),
            shown.clone(),
            "credentials",
            AUTH_FAILED.to_owned(),
        ),
        (
            format!("{socket}?pass=wrong"),
            format!("{socket}?pass=***"),
            "credentials",
            AUTH_FAILED.to_owned(),
        ),
        // Sent with HELLO, in RESP3.
        (
            format!("redis://:wrong@127.0.0.1:{port}/?protocol=resp3"),
            format!("{shown}/?protocol=resp3"),
            "credentials",
            "\"WRONGPASS\": invalid username-password pair or user is disabled".to_owned(),
        ),
        // No password where one is required, without and with a database
        // to select first.
        (tcp.clone(), tcp.clone(), "credentials", "\"NOAUTH\": Authentication required".to_owned()),
        (
            format!("{tcp}/2"),
            format!("{tcp}/2"),
            "credentials",
            "Redis server refused to switch database - Server(ResponseError): Authentication required".to_owned(),
        ),
        (
            format!("redis://:s3cret@127.0.0.1:{port}/99"),
            format!("{shown}/99"),
            "database",
            DB_OUT_OF_RANGE.to_owned(),
        ),
    ];
    driver_boot_is_refused(&refusals).await;
    let (app, summary) = boot_driver_on(&format!("redis://:s3cret@127.0.0.1:{port}")).await;
    assert_eq!(
        summary.unwrap().to_string(),
        format!(
            "environment=production driver=redis redis={shown} (answering) cache=memory trusted_proxies=none warnings=1"
        )
    );
    assert_eq!(installed_driver(&app).name(), "redis");

    // A cluster whose nodes all refuse the password.
    let cluster = RedisCluster::start(3);
    for port in cluster.ports() {
        let reply = support::redis::raw_command(port, "CONFIG SET requirepass s3cret");
        assert!(reply.is_some_and(|r| r.contains("OK")));
    }
    let wrong = cluster.url().replace("redis://", "redis://:wrong@");
    let (app, refused) = boot_driver_on(&wrong).await;
    let shown = format!(
        "cluster {}",
        cluster.url().replace("redis://", "redis://***@")
    );
    assert_eq!(
        refused.unwrap_err(),
        refused_by_redis(
            &format!("RATE_LIMIT_REDIS_URL={shown}"),
            "credentials",
            &format!("Failed to create initial connections - Io: {AUTH_FAILED}"),
            DRIVER_CREDENTIALS_FIX
        )
    );
    assert!(app.get::<dyn RateLimiterDriver>().is_none());
}

#[tokio::test]
async fn a_cache_redis_that_refuses_the_credentials_or_the_database_refuses_boot() {
    use suprnova::cache::Store;

    let server = RedisServer::start();
    let port = server.port().to_string();
    let reply = server.command("CONFIG SET requirepass s3cret");
    assert!(reply.contains("OK"), "{reply}");
    let shown = format!("redis://***@127.0.0.1:{port}");
    let host = [("REDIS_HOST", "127.0.0.1"), ("REDIS_PORT", port.as_str())];
    let wrong_url = format!("redis://:wrong@127.0.0.1:{port}");
    let right_url_99 = format!("redis://:s3cret@127.0.0.1:{port}/99");
    for (pairs, shown, what_is_refused, said) in [
        (
            vec![("REDIS_URL", wrong_url.as_str())],
            format!("{shown}/1"),
            "credentials",
            AUTH_FAILED,
        ),
        (
            [&host[..], &[("REDIS_PASSWORD", "wrong")]].concat(),
            format!("{shown}/1"),
            "credentials",
            AUTH_FAILED,
        ),
        (
            vec![("REDIS_URL", right_url_99.as_str())],
            format!("{shown}/99"),
            "database",
            DB_OUT_OF_RANGE,
        ),
        (
            [
                &host[..],
                &[("REDIS_PASSWORD", "s3cret"), ("REDIS_CACHE_DB", "99")],
            ]
            .concat(),
            format!("{shown}/99"),
            "database",
            DB_OUT_OF_RANGE,
        ),
    ] {
        let mut env = vec![("APP_ENV", "local"), ("CACHE_STORE", "redis")];
        env.extend(pairs.iter().copied());
        let (app, refused) = boot(&env).await;
        let fix = match what_is_refused {
            "credentials" => CACHE_CREDENTIALS_FIX,
            _ => CACHE_DATABASE_FIX,
        };
        assert_eq!(
            refused.unwrap_err(),
            refused_by_redis(
                &format!(
                    "the cache store's Redis, {shown} (REDIS_URL, or REDIS_HOST and REDIS_PORT),"
                ),
                what_is_refused,
                said,
                fix
            ),
            "{pairs:?}"
        );
        assert!(app.get::<dyn Store>().is_none(), "{pairs:?}");
    }
    let mut env = vec![
        ("APP_ENV", "local"),
        ("CACHE_STORE", "redis"),
        ("REDIS_PASSWORD", "s3cret"),
    ];
    env.extend(host);
    let (app, summary) = boot(&env).await;
    assert_eq!(summary.unwrap().cache_store, "redis");
    assert_eq!(app.get::<dyn Store>().unwrap().name(), "redis");
}

/// Collects what a `fmt` subscriber writes.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_fallback_outside_production_logs_one_warning_naming_the_value() {
    use tracing::instrument::WithSubscriber;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .finish();
    let (_, summary) = boot(&[("APP_ENV", "local"), ("RATE_LIMIT_DRIVER", "Redis")])
        .with_subscriber(subscriber)
        .await;
    assert_eq!(summary.unwrap().driver, "memory");
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains(&fallback_warning("Redis", " (did you mean redis?)")),
        "{log}"
    );
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn the_cache_store_is_installed_from_cache_store_and_redis_url() {
    use suprnova::cache::Store;

    let server = RedisServer::start();
    let app = App::new();
    let env = Env::from_pairs([
        ("APP_ENV", "local"),
        ("CACHE_STORE", "redis"),
        ("REDIS_URL", server.url().as_str()),
    ]);
    let summary = app.scope(bootstrap(&env)).await.unwrap();
    assert_eq!(summary.cache_store, "redis");
    assert!(summary.to_string().contains(" cache=redis "), "{summary}");
    let store = app.get::<dyn Store>().unwrap();
    assert_eq!(store.name(), "redis");
    // The facade counts in that store, under Laravel's prefixes.
    let hits = app
        .scope(async { suprnova::RateLimiter::hit("boot-check", 60).await })
        .await
        .unwrap();
    assert_eq!(hits, 1);
    let reply = server.command("SELECT 1\r\nGET laravel-database-laravel-cache-boot-check");
    assert!(reply.contains("$1\r\n1"), "{reply:?}");
}
