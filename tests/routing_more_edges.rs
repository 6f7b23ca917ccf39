//! Routing, middleware aliases and their order, the container, and boot
//! from the environment: edge cases, in process and over 127.0.0.1.

mod support;
mod throttle_support;

use std::sync::Arc;

use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use support::boot::{plan, refusal};
use support::clock_at;
use support::http::TestServer;
use suprnova::cache::CacheConfig;
use suprnova::config::Env;
use suprnova::container::App;
use suprnova::middleware::{register_middleware_alias, register_middleware_alias_with_args};
use suprnova::server::handle_request_with_peer;
use suprnova::{
    HttpResponse, Middleware, Next, RateLimiter, Request, Response, Router, async_trait,
};
use throttle_support::{GUEST, memory_app, request_without_body as request, send_as_guest};

fn login() -> Router {
    Router::new().post("/login", |_req: Request| async { "welcome" })
}

/// Appends its name to `x-order` on the way in, so the handler's answer
/// says in which order the chain ran.
struct Tag(String);

#[async_trait]
impl Middleware for Tag {
    async fn handle(&self, mut request: Request, next: Next) -> Response {
        let seen = request
            .header("x-order")
            .map(str::to_owned)
            .unwrap_or_default();
        let seen = if seen.is_empty() {
            self.0.clone()
        } else {
            format!("{seen},{}", self.0)
        };
        request
            .headers_mut()
            .insert("x-order", http::HeaderValue::from_str(&seen).unwrap());
        next(request).await
    }
}

fn order_echo() -> impl Fn(Request) -> std::future::Ready<HttpResponse> + Send + Sync + 'static {
    |req: Request| {
        std::future::ready(HttpResponse::text(
            req.header("x-order").unwrap_or_default().to_owned(),
        ))
    }
}

// ---------------------------------------------------------------------------
// Aliases: refused at registration, with the documented reason.
// ---------------------------------------------------------------------------

/// Every refused `throttle` argument fails the route when it is registered,
/// naming the route, the spec and the reason; the router then serves
/// nothing but 500, and `serve` would refuse it.
#[tokio::test]
async fn refused_throttle_arguments_fail_at_registration_with_their_reason() {
    let app = memory_app(&clock_at(12, 0, 0));
    app.scope(async {
        for (spec, reason) in [
            ("throttle:0,1", "the limit of `throttle` must be at least 1, got `0`"),
            (
                "throttle:60,0",
                "the window of `throttle` must be at least 1 minute, got `0`",
            ),
            (
                "throttle:abc,1",
                "`throttle:abc` names a rate limiter, which takes no further arguments",
            ),
            (
                "throttle:60,1,extra,more",
                "`throttle` takes at most three arguments (limit, window in minutes, prefix), got 4",
            ),
            (
                "throttle:5|0,1",
                "the user limit of `throttle` must be at least 1, got `0`",
            ),
            (
                "throttle:0|5,1",
                "the guest limit of `throttle` must be at least 1, got `0`",
            ),
            (
                "throttle:60,x",
                "the window of `throttle` must be a whole number, got `x`",
            ),
            (
                "throttle:-1,1",
                "the limit of `throttle` must be a whole number, got `-1`",
            ),
            (
                "throttle:1.5,1",
                "the limit of `throttle` must be a whole number, got `1.5`",
            ),
            (
                "throttle:,1",
                "the limit of `throttle` must be a whole number, got ``",
            ),
            ("nosuch:1", "no middleware alias named `nosuch` is registered"),
        ] {
            let expected = format!("route POST /login: middleware `{spec}`: {reason}");
            let refused = login().try_middleware_named(spec).unwrap_err();
            assert_eq!(refused.to_string(), expected);
            let recorded = login().middleware_named(spec);
            assert_eq!(recorded.validate().unwrap_err().to_string(), expected);
            let answer = send_as_guest(&recorded, Method::POST, "/login").await;
            assert_eq!(answer.status_code(), 500, "{spec}");
        }
    })
    .await;
}

/// `throttle:abc` names a limiter, looked up per request: it registers,
/// and a request answers 503 naming the missing limiter until it is
/// defined. `throttle:60,1,extra` is a prefix.
#[tokio::test]
async fn a_limiter_name_resolves_per_request_and_a_third_argument_is_a_prefix() {
    let app = memory_app(&clock_at(12, 0, 0));
    app.scope(async {
        let named = login().try_middleware_named("throttle:abc").unwrap();
        let answer = send_as_guest(&named, Method::POST, "/login").await;
        assert_eq!(answer.status_code(), 503);
        assert_eq!(answer.body_text(), "Rate limiter [abc] is not defined.");

        let prefixed = login().try_middleware_named("throttle:2,1,extra").unwrap();
        for _ in 0..2 {
            assert_eq!(
                send_as_guest(&prefixed, Method::POST, "/login")
                    .await
                    .status_code(),
                200
            );
        }
        assert_eq!(
            send_as_guest(&prefixed, Method::POST, "/login")
                .await
                .status_code(),
            429
        );
        assert_eq!(
            RateLimiter::attempts("extra:ip:203.0.113.5:path:/login")
                .await
                .unwrap(),
            2
        );
    })
    .await;
}

/// An alias registered without arguments refuses them at registration.
#[tokio::test]
async fn an_alias_without_arguments_refuses_them_at_registration() {
    let app = App::new();
    app.scope(async {
        register_middleware_alias("tagged", Tag("t".into()));
        assert!(login().try_middleware_named("tagged").is_ok());
        for spec in ["tagged:1", "tagged:"] {
            let refused = login().try_middleware_named(spec).unwrap_err().to_string();
            assert!(
                refused.ends_with("the alias `tagged` takes no arguments"),
                "{refused}"
            );
        }
    })
    .await;
}

// ---------------------------------------------------------------------------
// Middleware order.
// ---------------------------------------------------------------------------

/// `.middleware` runs in the order added, `.wrap` before all of them, a
/// name given again inside is left out, and `wrap_named` moves a name the
/// route has to the front.
#[tokio::test]
async fn middleware_run_in_the_documented_order() {
    let app = App::new();
    app.scope(async {
        register_middleware_alias_with_args("tag", |args: &[&str]| match args {
            [name] => Ok(Tag((*name).to_owned())),
            _ => Err("one name"),
        });
        let router = Router::new()
            .get("/a", order_echo())
            .middleware(Tag("a".into()))
            .middleware_named("tag:n")
            .middleware(Tag("b".into()))
            .wrap(Tag("w".into()))
            .middleware_named("tag:n")
            .get("/b", order_echo())
            .middleware(Tag("c".into()));
        assert!(router.validate().is_ok());
        assert_eq!(
            send_as_guest(&router, Method::GET, "/a").await.body_text(),
            "w,a,n,b,c"
        );
        assert_eq!(
            send_as_guest(&router, Method::GET, "/b").await.body_text(),
            "c"
        );

        let moved = router.wrap_named("tag:n");
        assert_eq!(
            send_as_guest(&moved, Method::GET, "/a").await.body_text(),
            "n,w,a,b,c"
        );
        assert_eq!(
            send_as_guest(&moved, Method::GET, "/b").await.body_text(),
            "n,c"
        );
        let listed: Vec<Vec<String>> = moved.routes().into_iter().map(|r| r.middleware).collect();
        assert_eq!(
            listed,
            vec![vec!["tag:n".to_owned()], vec!["tag:n".to_owned()]]
        );
    })
    .await;
}

// ---------------------------------------------------------------------------
// Paths.
// ---------------------------------------------------------------------------

/// Odd request paths never panic: every answer is a route's, a 404 or a
/// 405, in process and over the wire, long paths included.
#[tokio::test]
async fn odd_and_long_paths_never_panic() {
    let routes = || {
        Router::new()
            .get("/files/{name}", |req: Request| async move {
                HttpResponse::text(format!("[{}]", req.param("name").unwrap_or("?")))
            })
            .post("/files/{name}/meta", |_req: Request| async { "meta" })
            .get("/", |_req: Request| async { "home" })
    };
    let router = routes();
    let pieces = [
        "", ".", "..", "%", "%2", "%2F", "%2e%2e", "%00", "%FF", "%C3%A9", "é", "~", "%25", "a;b",
        "{x}", "files", "meta", "*", "%20",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for _ in 0..2000 {
        let mut path = String::new();
        for _ in 0..=next(5) {
            path.push('/');
            path.push_str(pieces[next(pieces.len())]);
        }
        let Ok(uri) = path.parse::<http::Uri>() else {
            continue;
        };
        let method = [Method::GET, Method::POST, Method::HEAD, Method::DELETE][next(4)].clone();
        let answer = send_as_guest(&router, method, &uri.to_string()).await;
        assert!(
            [200, 404, 405].contains(&answer.status_code()),
            "{path}: {}",
            answer.status_code()
        );
    }
    let long = format!("/files/{}", "a".repeat(60_000));
    assert_eq!(
        send_as_guest(&router, Method::GET, &long)
            .await
            .status_code(),
        200
    );
    let deep = "/x".repeat(30_000);
    assert_eq!(
        send_as_guest(&router, Method::GET, &deep)
            .await
            .status_code(),
        404
    );

    let server = TestServer::start(routes()).await;
    let reply = server.get(&"/y".repeat(4_000)).await;
    assert_eq!(reply.status, 404);
    let reply = server.get(&format!("/files/{}", "b".repeat(8_000))).await;
    assert_eq!(reply.status, 200);
    let reply = server
        .send(request(Method::PUT, &server.url("/files/x/meta")))
        .await;
    assert_eq!((reply.status, reply.header("allow")), (405, Some("POST")));
    server.stop().await;
}

// ---------------------------------------------------------------------------
// The container.
// ---------------------------------------------------------------------------

trait Mailer: Send + Sync {
    fn name(&self) -> &'static str;
}

struct Smtp;
impl Mailer for Smtp {
    fn name(&self) -> &'static str {
        "smtp"
    }
}

struct Log;
impl Mailer for Log {
    fn name(&self) -> &'static str {
        "log"
    }
}

/// A binding is one shared value, replaced by the next binding; a missing
/// one is an error naming the type; a scope sees only its own container.
#[tokio::test]
async fn bindings_are_shared_replaced_and_missing_ones_named() {
    let app = App::new();
    app.scope(async {
        let missing = App::resolve_make::<dyn Mailer>().err().unwrap().to_string();
        assert!(missing.contains("Mailer"), "{missing}");
        App::bind::<dyn Mailer>(Arc::new(Smtp));
        let (a, b) = (
            App::resolve::<dyn Mailer>().unwrap(),
            App::resolve::<dyn Mailer>().unwrap(),
        );
        assert!(Arc::ptr_eq(&a, &b));
        App::bind::<dyn Mailer>(Arc::new(Log));
        assert_eq!(App::resolve_make::<dyn Mailer>().unwrap().name(), "log");
        App::singleton(7_u32);
        let (x, y) = (
            App::resolve::<u32>().unwrap(),
            App::resolve::<u32>().unwrap(),
        );
        assert!(Arc::ptr_eq(&x, &y));
        // A task spawned without the scope does not see it.
        let outside = tokio::spawn(async { App::resolve::<dyn Mailer>().map(|m| m.name()) })
            .await
            .unwrap();
        assert_ne!(outside, Some("log"));
    })
    .await;
}

// ---------------------------------------------------------------------------
// Boot from the environment.
// ---------------------------------------------------------------------------

/// Each variable, given a value it cannot use, refuses boot with a message
/// that names it.
#[test]
fn every_refused_value_names_its_variable() {
    let local = ("APP_ENV", "local");
    let redis_driver = [
        local,
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", "redis://127.0.0.1:6379"),
    ];
    let redis_cache = [local, ("CACHE_STORE", "redis")];
    let with = |base: &[(&'static str, &'static str)], extra: (&'static str, &'static str)| {
        let mut pairs = base.to_vec();
        pairs.push(extra);
        pairs
    };
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![("APP_ENV", "prod")], "APP_ENV"),
        (
            with(&[local], ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", "maybe")),
            "RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION",
        ),
        (
            with(&[local], ("APP_TRUSTED_PROXIES", "10.0.0.5,nope")),
            "APP_TRUSTED_PROXIES",
        ),
        (
            with(&[local], ("APP_TRUSTED_PROXIES", "0.0.0.0/0")),
            "APP_TRUSTED_PROXIES",
        ),
        (with(&[local], ("CACHE_STORE", "file")), "CACHE_STORE"),
        (with(&[local], ("CACHE_DRIVER", "file")), "CACHE_DRIVER"),
        (
            vec![local, ("RATE_LIMIT_DRIVER", "redis")],
            "RATE_LIMIT_REDIS_URL",
        ),
        (
            with(
                &[local, ("RATE_LIMIT_DRIVER", "redis")],
                ("RATE_LIMIT_REDIS_URL", "http://x"),
            ),
            "RATE_LIMIT_REDIS_URL",
        ),
        (
            with(&redis_driver, ("RATE_LIMIT_REDIS_TIMEOUT_MS", "1s")),
            "RATE_LIMIT_REDIS_TIMEOUT_MS",
        ),
        (
            with(&redis_driver, ("RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS", "0")),
            "RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS",
        ),
        (
            with(&redis_cache, ("RATE_LIMIT_REDIS_TIMEOUT_MS", "-5")),
            "RATE_LIMIT_REDIS_TIMEOUT_MS",
        ),
        (with(&redis_cache, ("REDIS_PORT", "0")), "REDIS_PORT"),
        (with(&redis_cache, ("REDIS_PORT", "65536")), "REDIS_PORT"),
        (
            with(&redis_cache, ("REDIS_CACHE_DB", "x")),
            "REDIS_CACHE_DB",
        ),
        (
            with(&redis_cache, ("REDIS_CACHE_CONNECTION", "queue")),
            "REDIS_CACHE_CONNECTION",
        ),
        (
            with(&redis_cache, ("REDIS_URL", "http://cache.internal")),
            "REDIS_URL",
        ),
        (
            vec![
                local,
                ("CACHE_STORE", "redis"),
                ("REDIS_CACHE_CONNECTION", "default"),
                ("REDIS_DB", "-1"),
            ],
            "REDIS_DB",
        ),
        (
            with(&redis_cache, ("REDIS_HOST", "cache internal")),
            "REDIS_HOST",
        ),
    ];
    for (pairs, variable) in cases {
        let refused = refusal(&pairs);
        assert!(refused.contains(variable), "{pairs:?}: {refused}");
    }
}

/// A `REDIS_HOST` that holds more than a host (a URL, a port, a path or a
/// query) is refused naming it, rather than read as another host or
/// another database.
#[test]
fn a_redis_host_that_is_not_a_host_is_refused() {
    for host in [
        "redis://cache.internal",
        "cache.internal:6380",
        "cache.internal/2",
        "cache.internal?db=2",
    ] {
        let refused = refusal(&[
            ("APP_ENV", "local"),
            ("CACHE_STORE", "redis"),
            ("REDIS_HOST", host),
        ]);
        assert!(refused.contains("REDIS_HOST"), "{host}: {refused}");
    }
    let read = CacheConfig::from_env(&Env::from_pairs([
        ("CACHE_STORE", "redis"),
        ("REDIS_HOST", "tls://cache.internal"),
    ]))
    .unwrap();
    assert_eq!(
        read.redis.unwrap().nodes(),
        ["rediss://cache.internal:6379/1"]
    );
}

#[test]
fn a_hash_in_redis_host_does_not_silently_drop_the_port_and_database() {
    use redis::IntoConnectionInfo;

    let pairs = [
        ("APP_ENV", "local"),
        ("CACHE_STORE", "redis"),
        ("REDIS_HOST", "cache.internal#x"),
        ("REDIS_PORT", "7000"),
        ("REDIS_CACHE_DB", "5"),
    ];
    let booted = match plan(&pairs) {
        Err(refused) => {
            assert!(refused.to_string().contains("REDIS_HOST"), "{refused}");
            return;
        }
        Ok(booted) => booted,
    };
    let node = booted.cache.redis.unwrap().nodes()[0].clone();
    let info = node.as_str().into_connection_info().unwrap();
    // What the client connects to is what the variables say, or boot is
    // refused.
    assert_eq!(
        (format!("{:?}", info.addr()), info.redis_settings().db()),
        (
            format!(
                "{:?}",
                redis::ConnectionAddr::Tcp("cache.internal".to_owned(), 7000)
            ),
            5
        ),
        "REDIS_HOST=cache.internal#x booted on {node}"
    );
}

// ---------------------------------------------------------------------------
// Panics and refusals to serve.
// ---------------------------------------------------------------------------

/// A handler whose future panics answers 500 inside its middleware: the
/// throttle counts it and reports its pair, and the next request is still
/// served; one that panics before it returns a future is answered 500.
#[tokio::test]
async fn a_panicking_handler_is_a_500_that_its_throttle_counts() {
    let app = memory_app(&clock_at(12, 0, 0));
    app.scope(async {
        let router = Router::new()
            .get("/boom", |_req: Request| async {
                if std::hint::black_box(true) {
                    panic!("handler failed");
                }
                "never"
            })
            .get(
                "/early",
                |_req: Request| -> std::future::Ready<&'static str> { panic!("before the future") },
            )
            .try_middleware_named("throttle:2,1")
            .unwrap();
        let first = send_as_guest(&router, Method::GET, "/boom").await;
        assert_eq!(first.status_code(), 500);
        assert_eq!(first.header_str("x-ratelimit-remaining"), Some("1"));
        let second = send_as_guest(&router, Method::GET, "/boom").await;
        assert_eq!(second.status_code(), 500);
        assert_eq!(second.header_str("x-ratelimit-remaining"), Some("0"));
        assert_eq!(
            send_as_guest(&router, Method::GET, "/boom")
                .await
                .status_code(),
            429
        );
        assert_eq!(
            send_as_guest(&router, Method::GET, "/early")
                .await
                .status_code(),
            500
        );
    })
    .await;
}

/// `serve` refuses a router with a registration error, naming it.
#[tokio::test]
async fn serve_refuses_a_router_with_a_registration_error() {
    let app = memory_app(&clock_at(12, 0, 0));
    app.scope(async {
        let broken = login().middleware_named("throttle:0,1");
        let server = suprnova::server::bind("127.0.0.1:0").await.unwrap();
        let refused = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            server.serve_with_shutdown(broken, std::future::pending()),
        )
        .await
        .expect("refused at once")
        .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "refusing to serve: route POST /login: middleware `throttle:0,1`: the limit of \
             `throttle` must be at least 1, got `0`"
        );
    })
    .await;
}

/// Every variable read, holding a byte outside UTF-8 (read as U+FFFD),
/// refuses boot naming it; a credential's value is not shown.
#[test]
fn a_value_that_is_not_utf8_is_refused_in_every_variable_read() {
    const NOT_UTF8: &str =
        "it holds bytes that are not UTF-8 (each shown as \u{FFFD}); write the value in UTF-8";
    let redis_cache = [("APP_ENV", "local"), ("CACHE_STORE", "redis")];
    // The variables beside it, the variable, its value, and the value shown.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str, Option<&'a str>);
    let cases: Vec<Case> = vec![
        (&[("APP_ENV", "local")], "APP_NAME", "Sh\u{FFFD}p", None),
        (&[("APP_ENV", "local")], "REDIS_PREFIX", "p\u{FFFD}", None),
        (
            &[("APP_ENV", "local")],
            "CACHE_DRIVER",
            "redis\u{FFFD}",
            None,
        ),
        (
            &[("APP_ENV", "local")],
            "RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION",
            "true\u{FFFD}",
            None,
        ),
        (&redis_cache, "REDIS_HOST", "cache\u{FFFD}", None),
        (&redis_cache, "REDIS_HOST", "/run/redis\u{FFFD}.sock", None),
        (&redis_cache, "REDIS_PORT", "63\u{FFFD}79", None),
        (&redis_cache, "REDIS_CACHE_DB", "1\u{FFFD}", None),
        (
            &redis_cache,
            "REDIS_CACHE_CONNECTION",
            "cache\u{FFFD}",
            None,
        ),
        (
            &redis_cache,
            "REDIS_USERNAME",
            "ad\u{FFFD}min",
            Some("(hidden)"),
        ),
        (
            &redis_cache,
            "RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS",
            "25\u{FFFD}",
            None,
        ),
    ];
    for (base, variable, value, shown) in cases {
        let mut pairs = base.to_vec();
        pairs.push((variable, value));
        let shown = shown.unwrap_or(value);
        assert_eq!(
            refusal(&pairs),
            format!("{variable}={shown:?} is invalid: {NOT_UTF8}"),
            "{pairs:?}"
        );
    }
    let url = refusal(&[
        ("APP_ENV", "local"),
        ("CACHE_STORE", "redis"),
        ("REDIS_URL", "redis://:s3cret@cache\u{FFFD}:6379"),
    ]);
    assert!(url.starts_with("REDIS_URL="), "{url}");
    assert!(url.ends_with(NOT_UTF8) && !url.contains("s3cret"), "{url}");
}

// ---------------------------------------------------------------------------
// Examples.
// ---------------------------------------------------------------------------

#[test]
fn the_login_protection_example_shows_the_warning_of_an_unrecognised_driver() {
    let exited = support::examples::run_to_exit(
        "login_protection",
        &[("APP_ENV", "local"), ("RATE_LIMIT_DRIVER", "Redis")],
        std::time::Duration::from_secs(60),
    );
    assert!(exited.status.success(), "{}", exited.stderr);
    let all = format!("{}\n{}", exited.stdout, exited.stderr);
    assert!(all.contains("warnings=1"), "{all}");
    assert!(
        all.contains("RATE_LIMIT_DRIVER=\"Redis\" is not a driver (did you mean redis?)"),
        "the boot warning is not shown:\n{all}"
    );
}

/// Two spellings of a path that the router reads as the same segments get
/// one `route_path`, the per-path throttle's key, and two it reads apart
/// get two: no spelling buys a bucket of its own, and no two paths share
/// one.
#[tokio::test]
async fn route_path_is_one_for_each_path_the_router_reads() {
    use std::collections::HashMap;

    let echo = |req: Request| {
        let params: Vec<String> = ["a", "b", "c"]
            .iter()
            .filter_map(|name| req.param(name).map(str::to_owned))
            .collect();
        std::future::ready(HttpResponse::text(format!(
            "{}\u{1}{}",
            params.join("\u{2}"),
            req.route_path()
        )))
    };
    let router = Router::new()
        .get("/{a}", echo)
        .get("/{a}/{b}", echo)
        .get("/{a}/{b}/{c}", echo);
    let pieces = [
        "a", "A", "%41", "%61", "%2F", "%2f", "%252F", "%25", "%", "%2", "%%", "%C3%A9", "é",
        "%c3%a9", "+", "%2B", "%20", " ", "..", "%2e", ".", "~", "%7E", "%3A", ":", "x%2Fy",
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut by_params: HashMap<String, (String, String)> = HashMap::new();
    let mut by_key: HashMap<String, (String, String)> = HashMap::new();
    for _ in 0..3000 {
        let mut path = String::new();
        for _ in 0..=next(3) {
            path.push_str(["/", "/", "//"][next(3)]);
            path.push_str(pieces[next(pieces.len())]);
        }
        if next(4) == 0 {
            path.push('/');
        }
        if path.parse::<http::Uri>().is_err() {
            continue;
        }
        let answer = send_as_guest(&router, Method::GET, &path).await;
        if answer.status_code() != 200 {
            continue;
        }
        let body = answer.body_text();
        let (params, key) = body.split_once('\u{1}').unwrap();
        let (params, key) = (params.to_owned(), key.to_owned());
        if let Some((other_path, other_key)) = by_params.get(&params) {
            assert_eq!(
                &key, other_key,
                "{path:?} and {other_path:?} read alike but key apart"
            );
        }
        if let Some((other_path, other_params)) = by_key.get(&key) {
            assert_eq!(
                &params, other_params,
                "{path:?} and {other_path:?} read apart but share the key {key:?}"
            );
        }
        by_params.insert(params.clone(), (path.clone(), key.clone()));
        by_key.insert(key, (path, params));
    }
    assert!(by_key.len() > 100, "{}", by_key.len());
}

/// A sign-in wrapped around merged groups runs before the groups' own
/// throttle, which then counts by user; added inside, after it, the
/// throttle has already counted by address.
#[tokio::test]
async fn a_wrapped_sign_in_runs_before_a_groups_throttle() {
    use throttle_support::SignIn;

    let app = memory_app(&clock_at(12, 0, 0));
    app.scope(async {
        let group = || login().middleware_named("throttle:2,1");
        async fn signed_in(router: &Router) -> HttpResponse {
            let request = http::Request::post("/login")
                .header("x-user", "42")
                .body(Full::<Bytes>::default())
                .unwrap();
            handle_request_with_peer(router, request, GUEST.parse().unwrap()).await
        }
        let wrapped = Router::new().merge(group()).wrap(SignIn);
        assert_eq!(signed_in(&wrapped).await.status_code(), 200);
        assert_eq!(
            RateLimiter::attempts("user:42:path:/login").await.unwrap(),
            1
        );
        let inside = Router::new().merge(group()).middleware(SignIn);
        assert_eq!(signed_in(&inside).await.status_code(), 200);
        assert_eq!(
            RateLimiter::attempts("ip:203.0.113.5:path:/login")
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            RateLimiter::attempts("user:42:path:/login").await.unwrap(),
            1
        );
    })
    .await;
}

/// Reads the body before the handler, as a signature check does.
struct ReadsBody;

#[async_trait]
impl Middleware for ReadsBody {
    async fn handle(&self, mut request: Request, next: Next) -> Response {
        if let Err(error) = request.body_bytes(1024).await {
            return Err(error.to_response());
        }
        next(request).await
    }
}

/// A router whose `POST /x` is capped at one open request per address,
/// its body read by a middleware, and its handler held until released.
fn capped_reading_router(
    gate: &support::held::Gate,
    cap: &suprnova::rate_limit::ConnectionsPerIp,
) -> Router {
    Router::new()
        .post("/x", gate.handler())
        .middleware(cap.clone())
        .middleware(ReadsBody)
}

fn post_x() -> http::Request<Full<Bytes>> {
    http::Request::post("/x")
        .body(Full::new(Bytes::from_static(b"payload")))
        .unwrap()
}

#[tokio::test]
async fn a_nested_router_keeps_the_connection_cap_while_its_middleware_reads_the_body() {
    use support::held::{Gate, entered};
    use suprnova::rate_limit::RateLimitMiddleware;

    let peer: std::net::IpAddr = "203.0.113.5".parse().unwrap();
    // Served itself: the place is held while the handler runs.
    let (gate, mut started) = Gate::new();
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let direct = Arc::new(capped_reading_router(&gate, &cap));
    let running = {
        let direct = direct.clone();
        tokio::spawn(async move {
            handle_request_with_peer(&direct, post_x(), GUEST.parse().unwrap()).await
        })
    };
    entered(&mut started).await;
    assert_eq!(cap.open_for(peer), 1);
    gate.release(1);
    assert_eq!(running.await.unwrap().status_code(), 200);

    // The same router, dispatched from an outer router's route.
    let (gate, mut started) = Gate::new();
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let inner = Arc::new(capped_reading_router(&gate, &cap));
    let outer = Arc::new(Router::new().post("/x", move |req: Request| {
        let inner = inner.clone();
        async move { inner.dispatch(req).await }
    }));
    let send_outer = || {
        let outer = outer.clone();
        tokio::spawn(async move {
            handle_request_with_peer(&outer, post_x(), GUEST.parse().unwrap()).await
        })
    };
    let first = send_outer();
    entered(&mut started).await;
    let open = cap.open_for(peer);
    // A second request while the first is held: the cap of 1 is full.
    let second = send_outer();
    let second_status = tokio::select! {
        answer = second => answer.unwrap().status_code(),
        _ = entered(&mut started) => {
            gate.release(2);
            200
        }
    };
    gate.release(2);
    assert_eq!(first.await.unwrap().status_code(), 200);
    assert_eq!(
        (open, second_status),
        (1, 429),
        "the cap's place was given back before the handler ran, and a second request got in"
    );
}
