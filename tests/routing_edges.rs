//! Routing edges: odd paths, overlapping routes, 404/405/HEAD/OPTIONS, the
//! per-path throttle's key across spellings of one path, and named
//! middleware given more than once on a route; in process and over the
//! real server on 127.0.0.1.

mod support;
mod throttle_support;

use std::net::SocketAddr;

use http::Method;
use support::clock_at;
use support::http::TestServer;
use suprnova::{HttpResponse, RateLimiter, Request, Router};
use throttle_support::{
    memory_app as app_on, ok_routes, request_without_body as request, send_as_guest,
};

async fn get(router: &Router, uri: &str) -> HttpResponse {
    send_as_guest(router, Method::GET, uri).await
}

async fn attempts(key: &str) -> i64 {
    RateLimiter::attempts(key).await.unwrap()
}

/// A router whose `/a/{id}` answers the captured id.
fn echo_id() -> Router {
    Router::new().get("/a/{id}", |req: Request| async move {
        HttpResponse::text(format!("[{}]", req.param("id").unwrap_or("?")))
    })
}

/// Odd spellings of a path reach `/a/{id}` with the id decoded once, or get
/// a clean 404; none panics. Checked in process and over the wire.
#[tokio::test]
async fn odd_paths_reach_the_route_or_get_a_clean_404() {
    let cases: Vec<(String, u16, String)> = vec![
        ("/a/1".into(), 200, "[1]".into()),
        ("/a/1/".into(), 200, "[1]".into()),
        ("//a//1//".into(), 200, "[1]".into()),
        ("/a/x%2Fy".into(), 200, "[x/y]".into()),
        ("/a/%00".into(), 200, "[\0]".into()),
        ("/a/..".into(), 200, "[..]".into()),
        ("/a/%2E%2E".into(), 200, "[..]".into()),
        ("/a/%252F".into(), 200, "[%2F]".into()),
        ("/a/%FF".into(), 404, "404 Not Found".into()),
        ("/a/%C3".into(), 404, "404 Not Found".into()),
        ("/a".into(), 404, "404 Not Found".into()),
        ("/a/1/2".into(), 404, "404 Not Found".into()),
        ("/A/1".into(), 404, "404 Not Found".into()),
        (
            format!("/a/{}", "x".repeat(6000)),
            200,
            format!("[{}]", "x".repeat(6000)),
        ),
        (format!("/a/1{}", "/".repeat(3000)), 200, "[1]".into()),
        (
            format!("/a/{}", "%41".repeat(2000)),
            200,
            format!("[{}]", "A".repeat(2000)),
        ),
    ];
    let router = echo_id();
    for (path, status, body) in &cases {
        let r = get(&router, path).await;
        assert_eq!(
            (r.status_code(), r.body_text()),
            (*status, body.clone()),
            "{}",
            &path[..path.len().min(40)]
        );
    }
    let server = TestServer::start(echo_id()).await;
    for (path, status, body) in &cases {
        let reply = server.get(path).await;
        assert_eq!(
            (reply.status, reply.body.clone()),
            (*status, body.clone()),
            "{}",
            &path[..path.len().min(40)]
        );
    }
    server.stop().await;
}

/// A route of many parameters captures each one under its name.
#[tokio::test]
async fn a_route_of_many_parameters_captures_each() {
    let pattern: String = (0..200).map(|i| format!("/{{p{i}}}")).collect();
    let router = Router::new().get(&pattern, |req: Request| async move {
        HttpResponse::text(format!(
            "{} {} {}",
            req.param("p0").unwrap_or("?"),
            req.param("p100").unwrap_or("?"),
            req.param("p199").unwrap_or("?")
        ))
    });
    assert!(router.validate().is_ok());
    let path: String = (0..200).map(|i| format!("/v{i}")).collect();
    assert_eq!(get(&router, &path).await.body_text(), "v0 v100 v199");
    let short: String = (0..199).map(|i| format!("/v{i}")).collect();
    assert_eq!(get(&router, &short).await.status_code(), 404);
}

/// A route whose path names one parameter twice cannot give the handler
/// both values: `param("id")` reads the first, and the second is lost.
/// Laravel (Symfony's route compiler) refuses such a path when routes are
/// compiled; so does every Rust router that names parameters.
#[tokio::test]
async fn a_path_naming_one_parameter_twice_is_refused() {
    let router = Router::new().get("/pair/{id}/{id}", |req: Request| async move {
        HttpResponse::text(req.param("id").unwrap_or("?").to_owned())
    });
    assert!(
        router.validate().is_err(),
        "registered; GET /pair/1/2 answers {:?}",
        get(&router, "/pair/1/2").await.body_text()
    );
}

/// Where a literal route and a parameter route overlap, the one registered
/// first answers, as Laravel matches routes in the order they were added.
#[tokio::test]
async fn overlapping_routes_answer_in_registration_order() {
    let literal_first = Router::new()
        .get("/users/me", |_req: Request| async { "me" })
        .get("/users/{id}", |req: Request| async move {
            HttpResponse::text(format!("id {}", req.param("id").unwrap_or("?")))
        });
    assert!(literal_first.validate().is_ok());
    assert_eq!(get(&literal_first, "/users/me").await.body_text(), "me");
    assert_eq!(get(&literal_first, "/users/%6De").await.body_text(), "me");
    assert_eq!(get(&literal_first, "/users/7").await.body_text(), "id 7");

    let param_first = Router::new()
        .get("/users/{id}", |req: Request| async move {
            HttpResponse::text(format!("id {}", req.param("id").unwrap_or("?")))
        })
        .get("/users/me", |_req: Request| async { "me" });
    assert!(param_first.validate().is_ok());
    assert_eq!(get(&param_first, "/users/me").await.body_text(), "id me");
}

/// 405 lists every method the path has, GET with HEAD, each once; HEAD is
/// answered by the GET route (no body over the wire).
#[tokio::test]
async fn method_not_allowed_lists_every_method_and_head_follows_get() {
    let routes = || {
        Router::new()
            .post("/x/{id}", |_req: Request| async { "post" })
            .get("/x/{id}", |_req: Request| async { "get" })
            .delete("/x/1", |_req: Request| async { "delete one" })
            .route(Method::HEAD, "/x/1", |_req: Request| async {
                HttpResponse::new().header("x-own-head", "yes")
            })
    };
    let router = routes();
    let r = send_as_guest(&router, Method::PUT, "/x/2").await;
    assert_eq!(r.status_code(), 405);
    assert_eq!(r.header_str("allow"), Some("POST, GET, HEAD"));
    let r = send_as_guest(&router, Method::PUT, "/x/1/").await;
    assert_eq!(r.status_code(), 405);
    assert_eq!(r.header_str("allow"), Some("POST, GET, DELETE, HEAD"));
    // HEAD: the own route for /x/1, the GET route for /x/2.
    let r = send_as_guest(&router, Method::HEAD, "/x/1").await;
    assert_eq!(r.header_str("x-own-head"), Some("yes"));
    // In process as over the wire: the GET's length, no content.
    let r = send_as_guest(&router, Method::HEAD, "/x/2").await;
    assert_eq!(
        (
            r.status_code(),
            r.header_str("content-length"),
            r.body_text().as_str()
        ),
        (200, Some("3"), "")
    );
    assert_eq!(
        send_as_guest(&router, Method::DELETE, "//x/1/")
            .await
            .body_text(),
        "delete one"
    );
    assert_eq!(
        send_as_guest(&router, Method::PUT, "/y")
            .await
            .status_code(),
        404
    );

    let server = TestServer::start(routes()).await;
    let reply = server
        .send(request(Method::HEAD, &server.url("/x/2")))
        .await;
    assert_eq!((reply.status, reply.body.as_str()), (200, ""));
    assert_eq!(reply.header("content-length"), Some("3"));
    let reply = server
        .send(request(Method::PATCH, &server.url("/x/1")))
        .await;
    assert_eq!(reply.status, 405);
    assert_eq!(reply.header("allow"), Some("POST, GET, DELETE, HEAD"));
    server.stop().await;
}

/// `throttle:2,1` counts one path in one bucket whatever its spelling
/// (escapes, slashes, query string, HEAD or GET), and another value of the
/// parameter apart, as the docs say ("the path as the router matches it").
#[tokio::test]
async fn the_per_path_key_joins_every_spelling_of_one_path() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = Router::new()
                .get("/abc/{id}", |_req: Request| async { "ok" })
                .middleware_named("throttle:2,1");
            let r = get(&router, "/abc/1?x=1").await;
            assert_eq!(r.status_code(), 200);
            let r = send_as_guest(&router, Method::HEAD, "/a%62c/%31/").await;
            assert_eq!(r.status_code(), 200);
            for spelling in ["/abc/1?x=2", "//%61bc//1", "/ab%63/1", "/abc/%31"] {
                let r = get(&router, spelling).await;
                assert_eq!(r.status_code(), 429, "{spelling}");
            }
            let r = send_as_guest(&router, Method::HEAD, "/abc/1").await;
            assert_eq!(r.status_code(), 429);
            assert_eq!(attempts("ip:203.0.113.5:path:/abc/1").await, 2);
            // Another value of the parameter is another path.
            assert_eq!(get(&router, "/abc/2").await.status_code(), 200);
            // An escaped slash in a value is not a slash of the path.
            assert_eq!(get(&router, "/abc/1%2F").await.status_code(), 200);
            assert_eq!(get(&router, "/abc/1%2f").await.status_code(), 200);
            assert_eq!(get(&router, "/abc/1%2F").await.status_code(), 429);
            assert_eq!(attempts("ip:203.0.113.5:path:/abc/1%2F").await, 2);
        })
        .await;
}

/// The same over the real server: respelt paths from one client share the
/// bucket; another client has its own.
#[tokio::test]
async fn respelling_the_path_over_the_wire_buys_no_fresh_bucket() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    let router = {
        let _current = app.enter();
        Router::new()
            .post("/login", |_req: Request| async { "welcome" })
            .middleware_named("throttle:3,1")
    };
    let server = app.scope(TestServer::start(router)).await;
    let client: std::net::IpAddr = "127.0.0.9".parse().unwrap();
    let mut statuses = Vec::new();
    for path in [
        "/login",
        "/l%6Fgin",
        "/login/?next=/",
        "/%6c%6f%67%69%6e",
        "//login",
    ] {
        let reply = server
            .send_from(client, request(Method::POST, &server.url(path)))
            .await;
        statuses.push(reply.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let other = server
        .send_from(
            "127.0.0.10".parse().unwrap(),
            request(Method::POST, &server.url("/login")),
        )
        .await;
    assert_eq!(other.status, 200);
    server.stop().await;
}

/// A group's `throttle:60,1` (given with `wrap_named`, as Laravel runs a
/// group's middleware first) and the login route's own `throttle:5,1`
/// count under the one key the API reference spells for both,
/// `ip:<address>:path:/login`, as Laravel's two throttles count under one
/// key: each request counts twice in the bucket, and the route's 5 a
/// minute refuses the third attempt. With a prefix on the group's
/// (`throttle:60,1,api`, as rate-limiting.md says) the two count apart,
/// and the client gets its 5 attempts.
#[tokio::test]
async fn a_group_throttle_and_a_route_throttle_count_apart_given_a_prefix() {
    for (group_throttle, expected) in [
        ("throttle:60,1", [200, 200, 429, 429, 429, 429]),
        ("throttle:60,1,api", [200, 200, 200, 200, 200, 429]),
    ] {
        let clock = clock_at(12, 0, 0);
        app_on(&clock)
            .scope(async {
                let login = Router::new()
                    .post("/login", |_req: Request| async { "welcome" })
                    .middleware_named("throttle:5,1");
                let group = Router::new()
                    .get("/api/items", |_req: Request| async { "items" })
                    .merge(login)
                    .wrap_named(group_throttle);
                assert!(group.validate().is_ok());
                let mut statuses = Vec::new();
                for _ in 0..6 {
                    statuses.push(
                        send_as_guest(&group, Method::POST, "/login")
                            .await
                            .status_code(),
                    );
                }
                assert_eq!(statuses, expected, "{group_throttle}");
            })
            .await;
    }
}

/// The same name with the same arguments given twice runs once (the
/// router's docs: "A route that already has the same name with the same
/// arguments does not get it again"), and arguments are "split on `,` and
/// trimmed": `throttle:2, 1` has the arguments of `throttle:2,1`. Compared
/// as written, both run and each request counts twice in the one bucket.
#[tokio::test]
async fn the_same_throttle_spelt_with_a_blank_runs_once() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = ok_routes(&["/x"])
                .middleware_named("throttle:2,1")
                .wrap_named("throttle:2, 1");
            let mut statuses = Vec::new();
            for _ in 0..3 {
                statuses.push(get(&router, "/x").await.status_code());
            }
            assert_eq!(
                (statuses, attempts("ip:203.0.113.5:path:/x").await),
                (vec![200, 200, 429], 2),
                "{:?}",
                router.routes()[0].middleware
            );
        })
        .await;
}

/// Middleware named on a merged router wraps the routes of both parts; a
/// route that already has the name keeps one copy; an unknown alias or bad
/// arguments fail the router, which then answers 500 and refuses to serve.
#[tokio::test]
async fn named_middleware_on_a_merged_router_and_its_refusals() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let a = ok_routes(&["/a"]).middleware_named("throttle:1,1");
            let b = ok_routes(&["/b"]);
            let merged = a.merge(b).middleware_named("throttle:1,1");
            let names: Vec<Vec<String>> =
                merged.routes().into_iter().map(|r| r.middleware).collect();
            assert_eq!(names, [vec!["throttle:1,1".to_owned()], vec!["throttle:1,1".to_owned()]]);
            assert_eq!(get(&merged, "/a").await.status_code(), 200);
            assert_eq!(get(&merged, "/a").await.status_code(), 429);
            assert_eq!(get(&merged, "/b").await.status_code(), 200);
            assert_eq!(get(&merged, "/b").await.status_code(), 429);

            let unknown = ok_routes(&["/c"]).middleware_named("thrrottle:1,1");
            let error = unknown.validate().unwrap_err().to_string();
            assert_eq!(
                error,
                "route GET /c: middleware `thrrottle:1,1`: no middleware alias named `thrrottle` is registered"
            );
            assert_eq!(get(&unknown, "/c").await.status_code(), 500);

            let bad = ok_routes(&["/d"]).middleware_named("throttle:api,1");
            assert_eq!(
                bad.validate().unwrap_err().to_string(),
                "route GET /d: middleware `throttle:api,1`: `throttle:api` names a rate limiter, which takes no further arguments"
            );
            let server = suprnova::server::bind("127.0.0.1:0").await.unwrap();
            assert!(server.serve_with_shutdown(bad, async {}).await.is_err());
        })
        .await;
}

/// A limiter named at boot but defined after it is found per request: 503
/// with Laravel's text before, counted after.
#[tokio::test]
async fn a_named_limiter_is_looked_up_per_request_over_the_wire() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    let router = {
        let _current = app.enter();
        ok_routes(&["/api"]).middleware_named("throttle:later")
    };
    let server = app.scope(TestServer::start(router)).await;
    let reply = server.get("/api").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (503, "Rate limiter [later] is not defined.")
    );
    {
        let _current = app.enter();
        RateLimiter::define("later", |_req| suprnova::Limit::per_minute(1).into());
    }
    assert_eq!(server.get("/api").await.status, 200);
    assert_eq!(server.get("/api").await.status, 429);
    server.stop().await;
}

/// The alias takes any whole positive window: the largest ones still
/// admit, then refuse with a 429 carrying its headers, and never panic.
#[tokio::test]
async fn the_largest_windows_and_limits_the_alias_takes_still_answer() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            for (spec, admitted) in [
                ("throttle:2,153722867280912930", 2),
                ("throttle:2,9223372036854775807", 2),
                ("throttle:9223372036854775807,1", 5),
            ] {
                let router = ok_routes(&["/w"]).middleware_named(spec);
                assert!(router.validate().is_ok(), "{spec}");
                let mut statuses = Vec::new();
                for _ in 0..5 {
                    statuses.push(get(&router, "/w").await.status_code());
                }
                let expected: Vec<u16> = (0..5)
                    .map(|i| if i < admitted { 200 } else { 429 })
                    .collect();
                assert_eq!(statuses, expected, "{spec}");
                RateLimiter::clear("ip:203.0.113.5:path:/w").await.unwrap();
            }
        })
        .await;
}

/// A group's throttle given with `wrap_named` runs before the route's own:
/// a request it refuses never reaches (nor counts in) the route's; a
/// request the route's refuses was counted by the group's first.
#[tokio::test]
async fn a_group_throttle_counts_before_the_routes_own() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let route = ok_routes(&["/x"]).middleware_named("throttle:2,1,route");
            let group = Router::new().merge(route).wrap_named("throttle:3,1,group");
            assert_eq!(
                group.routes()[0].middleware,
                ["throttle:3,1,group", "throttle:2,1,route"]
            );
            let mut statuses = Vec::new();
            for _ in 0..4 {
                statuses.push(get(&group, "/x").await.status_code());
            }
            assert_eq!(statuses, [200, 200, 429, 429]);
            assert_eq!(attempts("group:ip:203.0.113.5:path:/x").await, 3);
            assert_eq!(attempts("route:ip:203.0.113.5:path:/x").await, 2);
        })
        .await;
}

async fn raw(addr: SocketAddr, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut out),
    )
    .await;
    String::from_utf8_lossy(&out).into_owned()
}

/// `OPTIONS *` (RFC 9110, 9.3.7) asks about the server as a whole, not a
/// resource; the server lets it through, and the router reads `*` as a
/// one-segment path, so a `/{id}` route's handler runs with the id `*` and
/// a path that does not start with `/`.
#[tokio::test]
async fn options_asterisk_is_not_a_request_for_a_route() {
    let router = Router::new()
        .route(Method::OPTIONS, "/{id}", |req: Request| async move {
            HttpResponse::text(format!(
                "route [{}] {}",
                req.param("id").unwrap_or("?"),
                req.path()
            ))
        })
        .get("/{id}", |_req: Request| async { "page" });
    let server = TestServer::start(router).await;
    let reply = raw(
        server.addr(),
        "OPTIONS * HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 "), "{reply}");
    assert!(!reply.contains("route [*]"), "{reply}");
    server.stop().await;
}
