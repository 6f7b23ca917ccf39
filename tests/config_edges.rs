//! The edges of reading the configuration: the values Laravel's `env()`
//! reads, Redis URLs with a database where none is read, the ranges the
//! refusals state, and the spellings each variable takes or refuses.
//!
//! No test here sets a variable of its own process: each reads an `Env`
//! built from pairs.

#![cfg(feature = "redis")]

mod support;

use support::boot::{env, plan, refusal};
use support::redis::RedisServer;
use suprnova::bootstrap::{DriverChoice, bootstrap};
use suprnova::cache::CacheConfig;
use suprnova::config::Environment;
use suprnova::container::App;
use suprnova::http::TrustedProxies;
use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};
use suprnova::redis_client::RedisConfig;

// ---- the values Laravel's env() reads --------------------------------------------

/// Laravel's `env()` takes the quotes off a value wrapped in them (as a
/// Docker `--env-file` passes it), so a Laravel application sharing the
/// Redis counts under the prefix without them; the prefixes are documented
/// as read "as Laravel's `env()` reads them".
#[test]
fn a_quoted_prefix_in_the_environment_is_read_as_laravels_env_reads_it() {
    let config = CacheConfig::from_env(&env(&[
        ("CACHE_PREFIX", "\"shop_cache_\""),
        ("REDIS_PREFIX", "'shop_database_'"),
    ]))
    .unwrap();
    assert_eq!(config.key_prefix(), "shop_database_shop_cache_");
    // The words come before the quotes: a quoted word is the word itself.
    let config = CacheConfig::from_env(&env(&[("CACHE_PREFIX", "'empty'")])).unwrap();
    assert_eq!(config.cache_prefix, "empty");
}

/// Laravel's skeleton `.env` writes `REDIS_PASSWORD=null`, which its
/// `env()` reads as no password, and phpredis then sends no `AUTH` (nor for
/// `empty` or `false`). The migration guide maps `REDIS_PASSWORD` to "the
/// same": the value is no password here too.
#[test]
fn redis_password_null_as_laravels_skeleton_writes_it_is_no_password() {
    for none in ["null", "(null)", "NULL", "empty", "(empty)", "false"] {
        let config = CacheConfig::from_env(&env(&[
            ("CACHE_STORE", "redis"),
            ("REDIS_HOST", "cache.internal"),
            ("REDIS_PASSWORD", none),
        ]))
        .unwrap();
        assert_eq!(
            config.redis.unwrap().nodes(),
            ["redis://cache.internal:6379/1"],
            "REDIS_PASSWORD={none}"
        );
    }
}

/// Against a Redis that has no password, the Redis settings of a Laravel
/// skeleton's `.env` boot, as the Laravel application connects with them.
#[tokio::test]
async fn a_laravel_skeletons_redis_settings_boot_against_a_redis_without_a_password() {
    let server = RedisServer::start();
    let port = server.port().to_string();
    let app = App::new();
    let booted = app
        .scope(bootstrap(&env(&[
            ("APP_ENV", "local"),
            ("CACHE_STORE", "redis"),
            ("REDIS_HOST", "127.0.0.1"),
            ("REDIS_PASSWORD", "null"),
            ("REDIS_PORT", &port),
        ])))
        .await;
    assert!(booted.is_ok(), "{}", booted.unwrap_err());
}

/// Timeouts of any size a `u64` holds boot and decide requests: the
/// deadline of a call is their sum, which does not overflow.
#[tokio::test]
async fn the_largest_timeouts_boot_and_decide() {
    let server = RedisServer::start();
    let url = server.url();
    let most = u64::MAX.to_string();
    let app = App::new();
    let summary = app
        .scope(bootstrap(&env(&[
            ("APP_ENV", "local"),
            ("RATE_LIMIT_DRIVER", "redis"),
            ("RATE_LIMIT_REDIS_URL", &url),
            ("RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS", &most),
            ("RATE_LIMIT_REDIS_TIMEOUT_MS", &most),
            ("RATE_LIMIT_REDIS_PREFIX", "config-edges-timeouts:"),
        ])))
        .await
        .unwrap();
    assert_eq!(summary.redis_answered, Some(true));
    let driver = app.get::<dyn RateLimiterDriver>().unwrap();
    let cfg = SlidingWindowConfig::new(2, std::time::Duration::from_secs(60));
    let mut admitted = Vec::new();
    for _ in 0..3 {
        admitted.push(driver.try_acquire("k", &cfg).await.unwrap());
    }
    assert_eq!(admitted, [true, true, false]);
}

// ---- Redis URLs --------------------------------------------------------------------

/// The database of a TCP URL is `/N` after the host; `?db=N` is a socket's.
/// Written on a TCP URL it is not silently dropped for database 0 (the
/// driver's) or for `REDIS_CACHE_DB` (the cache store's): boot refuses it,
/// naming the variable and where the database goes. A pair a socket's URL
/// does not read is refused the same way.
#[test]
fn a_database_in_the_query_of_a_tcp_redis_url_is_not_silently_dropped() {
    let after_host = "is not read after a host; the database is /N after the host, as in redis://host:6379/3, and only ?protocol= is read";
    for (url, pair) in [
        ("redis://cache.internal:6379?db=3", "db"),
        ("redis://cache.internal:6379/?db=3", "db"),
        (
            "redis://u:s3cret@cache.internal:6379/2?database=3",
            "database",
        ),
        ("rediss://cache.internal:6380/?protocol=resp3&db=3", "db"),
    ] {
        for (variable, store) in [
            ("RATE_LIMIT_REDIS_URL", "RATE_LIMIT_DRIVER"),
            ("REDIS_URL", "CACHE_STORE"),
        ] {
            let refused = refusal(&[("APP_ENV", "staging"), (store, "redis"), (variable, url)]);
            assert!(
                refused.starts_with(&format!("{variable}=\""))
                    && refused.contains(&format!("?{pair}= {after_host}"))
                    && !refused.contains("s3cret"),
                "{refused}"
            );
        }
    }
    let refused = refusal(&[
        ("APP_ENV", "staging"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", "unix:///run/redis.sock?database=3"),
    ]);
    assert!(
        refused.contains("?database= is not read after a socket's path; only ?db=, ?user=, ?pass= and ?protocol= are"),
        "{refused}"
    );
    // What is read still boots, where it is written.
    let plan = plan(&[
        ("APP_ENV", "staging"),
        ("RATE_LIMIT_DRIVER", "redis"),
        (
            "RATE_LIMIT_REDIS_URL",
            "redis://cache.internal:6379/3?protocol=resp3",
        ),
        ("CACHE_STORE", "redis"),
        ("REDIS_URL", "unix:///run/redis.sock?db=3&pass=x"),
    ])
    .unwrap();
    match plan.driver {
        DriverChoice::Redis(redis) => assert_eq!(
            redis.config.nodes(),
            ["redis://cache.internal:6379/3?protocol=resp3"]
        ),
        other => panic!("{other:?}"),
    }
    assert!(plan.cache.redis.is_some());
}

/// A Redis Cluster has only database 0, and a cluster URL that names
/// another is refused. A `REDIS_CACHE_DB` the operator set beside a cluster
/// `REDIS_URL` names one just as well: it is refused naming the variable,
/// not dropped.
#[test]
fn a_cache_database_set_beside_a_cluster_url_is_not_silently_dropped() {
    let refused = refusal(&[
        ("APP_ENV", "staging"),
        ("CACHE_STORE", "redis"),
        ("REDIS_URL", "redis://10.0.0.1:7000,redis://10.0.0.2:7000"),
        ("REDIS_CACHE_DB", "3"),
    ]);
    assert!(refused.starts_with("REDIS_CACHE_DB="), "{refused}");
    // Unset, it is the cluster's only database.
    let plan = plan(&[
        ("APP_ENV", "staging"),
        ("CACHE_STORE", "redis"),
        ("REDIS_URL", "redis://10.0.0.1:7000,redis://10.0.0.2:7000"),
    ])
    .unwrap();
    assert!(plan.cache.redis.unwrap().is_cluster());
}

// ---- the ranges a refusal states -------------------------------------------------

/// Every refusal of `REDIS_CACHE_DB` states the range boot takes, 0 to
/// 2147483647 (as deployment.md gives it), not one it refuses in turn.
#[test]
fn every_refusal_of_redis_cache_db_states_the_range_that_boots() {
    for bad in ["-1", "4294967296", "2147483648", "one"] {
        let refused = refusal(&[
            ("APP_ENV", "staging"),
            ("CACHE_STORE", "redis"),
            ("REDIS_CACHE_DB", bad),
        ]);
        assert!(
            refused.starts_with(&format!("REDIS_CACHE_DB={bad:?} is invalid: "))
                && refused.contains("0 to 2147483647")
                && !refused.contains("4294967295"),
            "{refused}"
        );
    }
}

/// Every refusal of `REDIS_PORT` states the ports boot takes, 1 to 65535,
/// not a range holding 0, which it refuses.
#[test]
fn every_refusal_of_redis_port_states_the_range_that_boots() {
    for bad in ["-1", "65536", "0", "http"] {
        let refused = refusal(&[
            ("APP_ENV", "staging"),
            ("CACHE_STORE", "redis"),
            ("REDIS_PORT", bad),
        ]);
        assert!(
            refused.starts_with(&format!("REDIS_PORT={bad:?} is invalid: "))
                && refused.contains("1 to 65535")
                && !refused.contains("0 to 65535"),
            "{refused}"
        );
    }
}

// ---- spellings that are read, and those refused -------------------------------

#[test]
fn app_env_spellings() {
    for (value, environment) in [
        ("PRODUCTION", Environment::Production),
        (" Staging\t", Environment::Staging),
        ("testing", Environment::Testing),
        ("LOCAL", Environment::Local),
        ("Development", Environment::Development),
        ("", Environment::Production),
        ("  ", Environment::Production),
    ] {
        assert_eq!(
            Environment::from_env(&env(&[("APP_ENV", value)])).unwrap(),
            environment,
            "{value:?}"
        );
    }
    for bad in [
        "prod",
        "\"local\"",
        "dev",
        "lоcal",
        "local,staging",
        "ｌｏｃａｌ",
    ] {
        assert_eq!(
            Environment::from_env(&env(&[("APP_ENV", bad)]))
                .unwrap_err()
                .to_string(),
            format!(
                "APP_ENV={bad:?} is invalid: expected one of production, staging, testing, local or development"
            )
        );
    }
}

#[test]
fn override_and_driver_spellings() {
    for (value, allowed) in [
        (" TRUE ", true),
        ("On", true),
        ("YES", true),
        ("1", true),
        ("Off", false),
        ("0", false),
        ("", false),
    ] {
        let plan = plan(&[
            ("APP_ENV", "local"),
            ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", value),
        ])
        .unwrap();
        assert_eq!(plan.allow_memory_in_production, allowed, "{value:?}");
    }
    for bad in ["2", "-1", "y", "\"true\"", "enabled", "truе"] {
        assert_eq!(
            refusal(&[
                ("APP_ENV", "local"),
                ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", bad),
            ]),
            format!(
                "RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION={bad:?} is invalid: expected true or false (or 1 and 0, yes and no, on and off)"
            )
        );
    }
    // Spaces around the driver are trimmed; its name is matched exactly.
    let plan = plan(&[
        ("APP_ENV", "production"),
        ("RATE_LIMIT_DRIVER", " redis "),
        ("RATE_LIMIT_REDIS_URL", " redis://cache.internal:6379 "),
        ("CACHE_STORE", "redis"),
        ("REDIS_URL", "redis://cache.internal:6379"),
    ])
    .unwrap();
    assert_eq!(plan.driver.name(), "redis");
    for bad in ["REDIS", "\"redis\"", "redis,memory", "rediss"] {
        assert!(
            refusal(&[("APP_ENV", "production"), ("RATE_LIMIT_DRIVER", bad)]).starts_with(
                &format!(
                    "refusing to boot in production: RATE_LIMIT_DRIVER={bad:?} is not a driver"
                )
            ),
            "{bad}"
        );
    }
}

#[test]
fn timeouts_take_whole_milliseconds_above_zero_and_no_more_than_u64() {
    let base = [
        ("APP_ENV", "staging"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", "redis://cache.internal:6379"),
    ];
    for bad in ["18446744073709551616", "0x10", "1_000", "١٠٠", "00"] {
        let mut pairs = base.to_vec();
        pairs.push(("RATE_LIMIT_REDIS_TIMEOUT_MS", bad));
        assert_eq!(
            refusal(&pairs),
            format!(
                "RATE_LIMIT_REDIS_TIMEOUT_MS={bad:?} is invalid: expected a whole number of milliseconds above 0, such as 250"
            )
        );
    }
}

#[test]
fn trusted_proxy_entries_read_and_refused() {
    for (value, shown) in [
        ("10.0.0.5", "10.0.0.5"),
        ("10.0.0.5/32", "10.0.0.5"),
        ("::ffff:10.0.0.5", "10.0.0.5"),
        ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
        ("2001:DB8::/32", "2001:db8::/32"),
        ("\t10.0.0.5 ,\t::1 ", "10.0.0.5,::1"),
    ] {
        let proxies = TrustedProxies::from_env(&env(&[("APP_TRUSTED_PROXIES", value)])).unwrap();
        assert_eq!(proxies.to_string(), shown, "{value:?}");
    }
    for entry in [
        "*",
        "**",
        "[::1]",
        "10.0.0.5 10.0.0.6",
        "10.0.0.5;10.0.0.6",
        "10.0.0.0/-1",
        "2001:db8::/129",
        "fe80::1%eth0",
        "１０.0.0.5",
        "\"10.0.0.5\"",
        "localhost",
    ] {
        let value = format!("10.0.0.1,{entry}");
        assert_eq!(
            TrustedProxies::from_env(&env(&[("APP_TRUSTED_PROXIES", &value)]))
                .unwrap_err()
                .to_string(),
            format!(
                "APP_TRUSTED_PROXIES={value:?} is invalid: {entry:?} is neither an IP address nor a CIDR range (such as 10.0.0.5 or 10.0.0.0/8)"
            )
        );
    }
    for every in ["::ffff:10.0.0.5/96", "0.0.0.0/0", "10.0.0.0/0"] {
        let err = TrustedProxies::from_env(&env(&[("APP_TRUSTED_PROXIES", every)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("covers every address"), "{err}");
    }
}

#[test]
fn redis_url_refusals_name_the_variable_and_hide_the_password() {
    for bad in [
        "redis://cache.internal:65536",
        "redis://cache.internal:-1",
        "redis://::1:6379",
        "redis://[::1:6379",
        "REDIS://cache.internal:6379",
        "\"redis://cache.internal:6379\"",
        "redis://0.0.0.0:6379",
        "redis://cache.internal:6379/x",
        "rediss://cache.internal:6380/#verify",
        "redis://u:s3cret@cache.internal:6379/?protocol=resp9",
    ] {
        let refused = refusal(&[
            ("APP_ENV", "staging"),
            ("RATE_LIMIT_DRIVER", "redis"),
            ("RATE_LIMIT_REDIS_URL", bad),
        ]);
        assert!(
            refused.starts_with("RATE_LIMIT_REDIS_URL=\"") && !refused.contains("s3cret"),
            "{refused}"
        );
    }
    assert!(RedisConfig::from_url("redis://[::1]:6379/15").is_ok());
    assert!(RedisConfig::from_url("redis://u%40x:p%2Cw@cache.internal:6379").is_ok());
}
