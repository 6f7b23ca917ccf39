//! The edges of reading the configuration: the values Laravel's `env()`
//! reads, Redis URLs with a database where none is read, the ranges the
//! refusals state, the spellings each variable takes or refuses, the cache
//! store's credentials and database as a Laravel application gives them,
//! and a default given to one variable beside the others.
//!
//! No test here sets a variable of its own process: each reads an `Env`
//! built from pairs, or runs an example with the variables it is given.

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
    // A scheme is read in any case (RFC 3986, 3.1).
    assert!(RedisConfig::from_url("REDIS://cache.internal:6379").is_ok());
}

// ---- the cache store's credentials, and Laravel's words for its prefixes ----------

/// `REDIS_PASSWORD` is a password, written as the Redis `requirepass` is:
/// a `%` in it is a `%`. Boot builds the cache store's URL from
/// `REDIS_HOST`, `REDIS_PORT` and `REDIS_PASSWORD`, and the Redis client
/// reads the password of a URL percent-decoded, so the `%` has to reach it
/// encoded, or `p%41ss` is sent as `pAss` and a Redis that takes the
/// password refuses it (and boot with it).
#[tokio::test]
async fn a_percent_sign_in_redis_password_reaches_redis_as_written() {
    let server = RedisServer::start();
    let reply = server.command("CONFIG SET requirepass p%41ss");
    assert!(reply.starts_with("+OK"), "{reply}");
    let port = server.port().to_string();
    let app = App::new();
    let booted = app
        .scope(bootstrap(&env(&[
            ("APP_ENV", "local"),
            ("CACHE_STORE", "redis"),
            ("REDIS_HOST", "127.0.0.1"),
            ("REDIS_PORT", &port),
            ("REDIS_PASSWORD", "p%41ss"),
        ])))
        .await;
    let summary = booted.unwrap_or_else(|refused| panic!("{refused}"));
    assert_eq!(summary.cache_store, "redis");
}

/// `Env::with_default` documents "this source, with `value` for `name` when
/// the source leaves it unset": the other variables read as the source
/// gives them. `CACHE_PREFIX` and `REDIS_PREFIX` set blank are no prefix,
/// as in Laravel (docs/deployment.md, `.env.example`), and are told from
/// unset ones by `laravel_text`; a default given for `APP_ENV` must not make
/// them unset, and so the default prefixes.
#[test]
fn a_default_for_one_variable_leaves_a_blank_prefix_no_prefix() {
    let source = env(&[("CACHE_PREFIX", ""), ("REDIS_PREFIX", "")]);
    assert_eq!(
        CacheConfig::from_env(&source).unwrap().key_prefix(),
        "",
        "without a default"
    );
    let with_default = source.with_default("APP_ENV", "local");
    assert_eq!(
        with_default
            .laravel_text("CACHE_PREFIX")
            .unwrap()
            .as_deref(),
        Some("")
    );
    assert_eq!(
        CacheConfig::from_env(&with_default).unwrap().key_prefix(),
        ""
    );
}

/// The laravel_migration example is the one that shares Laravel's counters
/// in its Redis, and its doc comment says `CACHE_PREFIX` / `REDIS_PREFIX`
/// match an application whose prefixes differ from Laravel's defaults. An
/// application whose `.env` sets both blank (no prefix, in Laravel and in
/// `.env.example`'s words) keeps its counters under the bare key; the
/// example reads its variables through `Env::with_default`, and counts
/// under `laravel-database-laravel-cache-<key>` instead: the two
/// applications then count in two buckets, each up to the limit.
#[tokio::test]
async fn the_laravel_migration_example_keeps_blank_prefixes_as_no_prefix() {
    let redis = RedisServer::start();
    let url = redis.url();
    let app = support::examples::Running::start(
        "laravel_migration",
        &[
            ("REDIS_URL", url.as_str()),
            ("CACHE_PREFIX", ""),
            ("REDIS_PREFIX", ""),
        ],
    );
    let export = app.get("/export").await;
    assert_eq!(export.status, 200, "{}", export.body);
    let key = "ip:127.0.0.1:path:/export";
    let cache = support::redis::connect(&format!("{url}/1"));
    let bare: Option<String> = cache.query(redis::cmd("GET").arg(key)).await.unwrap();
    let prefixed: Option<String> = cache
        .query(redis::cmd("GET").arg(format!("laravel-database-laravel-cache-{key}")))
        .await
        .unwrap();
    assert_eq!(
        (bare.as_deref(), prefixed.as_deref()),
        (Some("1"), None),
        "{}",
        app.log()
    );
}

/// Laravel derives the default prefixes from `env('APP_NAME', 'laravel')`,
/// and its `env()` reads `null`, `(null)`, `empty`, `(empty)` and `false`
/// as null, the empty string and false, which its `Str::slug` makes the
/// empty slug, and `true` as true, `1` (the documented default prefix is
/// `<slug of APP_NAME>-cache-`; LARAVEL.md: "`APP_NAME` changes both"). A
/// blank `APP_NAME=` is the empty string too, not unset. A Laravel
/// application with such an `APP_NAME` counts under `-database--cache-`; so
/// must this crate, or the two keep two buckets.
#[test]
fn app_name_is_read_as_laravels_env_reads_it() {
    for (app_name, slug) in [
        ("null", ""),
        ("(null)", ""),
        ("empty", ""),
        ("(empty)", ""),
        ("false", ""),
        ("true", "1"),
        ("", ""),
    ] {
        let config = CacheConfig::from_env(&env(&[("APP_NAME", app_name)])).unwrap();
        assert_eq!(
            (config.cache_prefix.as_str(), config.redis_prefix.as_str()),
            (
                format!("{slug}-cache-").as_str(),
                format!("{slug}-database-").as_str()
            ),
            "APP_NAME={app_name:?}"
        );
    }
}

/// Laravel's `redis` cache store counts on the Redis connection
/// `REDIS_CACHE_CONNECTION` names (`cache`, database `REDIS_CACHE_DB`, by
/// default; LARAVEL.md section 5). An application that sets it to `default`
/// keeps its counters in database `REDIS_DB` (0 by default). Reading the
/// cache's database as 1 there, without a word, counts in a database the
/// Laravel application never reads: the two count apart. Either the
/// database of the connection named, or a refusal naming the variable.
#[test]
fn a_laravel_cache_on_its_default_redis_connection_is_not_read_in_database_1() {
    for (pairs, database) in [
        (vec![("REDIS_CACHE_CONNECTION", "default")], 0),
        (
            vec![("REDIS_CACHE_CONNECTION", "default"), ("REDIS_DB", "3")],
            3,
        ),
    ] {
        let mut all = vec![("CACHE_STORE", "redis"), ("REDIS_HOST", "cache.internal")];
        all.extend(pairs.iter().copied());
        match CacheConfig::from_env(&env(&all)) {
            Ok(config) => assert_eq!(
                config.redis.unwrap().nodes(),
                [format!("redis://cache.internal:6379/{database}")],
                "{pairs:?}"
            ),
            Err(refused) => assert!(
                refused.to_string().contains("REDIS_CACHE_CONNECTION"),
                "{refused}"
            ),
        }
    }
}
