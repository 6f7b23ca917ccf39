//! The HTTP core end to end: the router and middleware chain through the
//! real hyper server on a loopback port, and in process through
//! `handle_request_with_peer`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use support::http::{BIG, TestServer, TimedServer};
use suprnova::container::App;
use suprnova::middleware::{register_middleware_alias, register_middleware_alias_with_args};
use suprnova::server::{handle_request, handle_request_with_peer};
use suprnova::{HttpResponse, Middleware, Next, Request, Response, Router, async_trait};

/// Refuses every request with 403 unless it carries `x-pass`.
struct Gate;

#[async_trait]
impl Middleware for Gate {
    async fn handle(&self, request: Request, next: Next) -> Response {
        if request.header("x-pass").is_none() {
            return Err(HttpResponse::text("gate closed")
                .status(403)
                .header("X-Gate", "closed"));
        }
        let mut response = next(request).await?;
        response.set_header("X-Gate", "open");
        Ok(response)
    }
}

/// Appends its tag to `X-Order` on the way out.
struct Tag(&'static str);

#[async_trait]
impl Middleware for Tag {
    async fn handle(&self, request: Request, next: Next) -> Response {
        let mut response = next(request).await?;
        let order = response.header_str("x-order").unwrap_or("").to_owned();
        response.set_header("X-Order", format!("{order}{}", self.0));
        Ok(response)
    }
}

fn counting_router(calls: Arc<AtomicUsize>) -> Router {
    let handled = calls.clone();
    Router::new()
        .get("/guarded", move |_req: Request| {
            let handled = handled.clone();
            async move {
                handled.fetch_add(1, Ordering::SeqCst);
                HttpResponse::text("inside")
            }
        })
        .middleware(Gate)
        .get("/users/{id}", |req: Request| async move {
            HttpResponse::json(serde_json::json!({ "id": req.param("id") }))
        })
        .post("/echo", |mut req: Request| async move {
            match req.body_bytes(16).await {
                Ok(body) => Ok(HttpResponse::bytes(body)),
                Err(e) => Err(e.into()),
            }
        })
        .get("/ip", |req: Request| async move {
            HttpResponse::text(req.ip().unwrap_or_default())
        })
        .get("/panic", |_req: Request| async move {
            if true {
                panic!("handler bug");
            }
            HttpResponse::new()
        })
        .get(
            "/panic-before-its-future",
            |_req: Request| -> std::future::Ready<HttpResponse> {
                panic!("handler bug before its future")
            },
        )
}

fn get(path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(path).body(Full::default()).unwrap()
}

#[tokio::test]
async fn in_process_short_circuit_skips_the_handler() {
    let calls = Arc::new(AtomicUsize::new(0));
    let router = counting_router(calls.clone());
    let peer = "192.0.2.1:4000".parse().unwrap();

    let refused = handle_request_with_peer(&router, get("/guarded"), peer).await;
    assert_eq!(refused.status_code(), 403);
    assert_eq!(refused.header_str("x-gate"), Some("closed"));
    assert_eq!(refused.body_text(), "gate closed");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the handler ran after a short-circuit"
    );

    let passed = handle_request_with_peer(
        &router,
        http::Request::get("/guarded")
            .header("x-pass", "1")
            .body(Full::default())
            .unwrap(),
        peer,
    )
    .await;
    assert_eq!(passed.status_code(), 200);
    assert_eq!(passed.header_str("x-gate"), Some("open"));
    assert_eq!(passed.body_text(), "inside");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn in_process_routing_answers() {
    let router = counting_router(Arc::new(AtomicUsize::new(0)));
    let peer = "192.0.2.1:4000".parse().unwrap();

    let user = handle_request_with_peer(&router, get("/users/42"), peer).await;
    assert_eq!(user.status_code(), 200);
    assert_eq!(user.body_text(), r#"{"id":"42"}"#);

    let missing = handle_request_with_peer(&router, get("/nope"), peer).await;
    assert_eq!(missing.status_code(), 404);

    let wrong_method = handle_request_with_peer(
        &router,
        http::Request::delete("/users/42")
            .body(Full::default())
            .unwrap(),
        peer,
    )
    .await;
    assert_eq!(wrong_method.status_code(), 405);
    assert_eq!(wrong_method.header_str("allow"), Some("GET, HEAD"));

    let ip = handle_request_with_peer(&router, get("/ip"), peer).await;
    assert_eq!(ip.body_text(), "192.0.2.1");
    let no_peer = handle_request(&router, get("/ip")).await;
    assert_eq!(
        no_peer.body_text(),
        "",
        "a request without a peer has no address"
    );

    let panicked = handle_request_with_peer(&router, get("/panic"), peer).await;
    assert_eq!(panicked.status_code(), 500);
    // A handler that panics before it returns its future is answered the same.
    let early = handle_request_with_peer(&router, get("/panic-before-its-future"), peer).await;
    assert_eq!(early.status_code(), 500);
}

#[tokio::test]
async fn in_process_body_cap_gives_413() {
    let router = counting_router(Arc::new(AtomicUsize::new(0)));
    let peer = "192.0.2.1:4000".parse().unwrap();
    let small = handle_request_with_peer(
        &router,
        http::Request::post("/echo")
            .body(Full::new(Bytes::from("hello")))
            .unwrap(),
        peer,
    )
    .await;
    assert_eq!(small.status_code(), 200);
    assert_eq!(small.body_text(), "hello");
    let large = handle_request_with_peer(
        &router,
        http::Request::post("/echo")
            .body(Full::new(Bytes::from("x".repeat(17))))
            .unwrap(),
        peer,
    )
    .await;
    assert_eq!(large.status_code(), 413);
}

#[tokio::test]
async fn real_server_runs_the_chain() {
    let calls = Arc::new(AtomicUsize::new(0));
    let server = TestServer::start(counting_router(calls.clone())).await;

    let refused = server.get("/guarded").await;
    assert_eq!(refused.status, 403);
    assert_eq!(refused.header("x-gate"), Some("closed"));
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let passed = server
        .send(
            http::Request::get(server.url("/guarded"))
                .header("x-pass", "yes")
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(passed.status, 200);
    assert_eq!(passed.body, "inside");
    assert_eq!(passed.header("x-gate"), Some("open"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    assert_eq!(server.get("/users/7").await.body, r#"{"id":"7"}"#);
    assert_eq!(server.get("/ip").await.body, "127.0.0.1");
    assert_eq!(server.get("/missing").await.status, 404);
    assert_eq!(server.get("/panic").await.status, 500);
    assert_eq!(server.get("/panic-before-its-future").await.status, 500);

    let from_other = server
        .send_from("127.0.0.2".parse().unwrap(), get(&server.url("/ip")))
        .await;
    assert_eq!(from_other.body, "127.0.0.2");

    let echo = server
        .send(
            http::Request::post(server.url("/echo"))
                .body(Full::new(Bytes::from("x".repeat(100))))
                .unwrap(),
        )
        .await;
    assert_eq!(echo.status, 413);
    server.stop().await;
}

#[tokio::test]
async fn middleware_runs_in_the_order_it_was_added() {
    let router = Router::new()
        .get("/", |_req: Request| async { HttpResponse::text("x") })
        .middleware(Tag("first;"))
        .middleware(Tag("second;"));
    let r = handle_request(&router, get("/")).await;
    // The first added runs first (outermost), so it sees the response last.
    assert_eq!(r.header_str("x-order"), Some("second;first;"));
}

/// `wrap` puts a middleware outside what the routes have, as a Laravel
/// group's runs before its routes'; a name a route has already runs once,
/// where its first copy stands, as Laravel's `uniqueMiddleware` keeps the
/// first: a group's copy, added outside, takes the route's copy's place.
#[tokio::test]
async fn a_wrapped_middleware_runs_first_and_a_name_given_twice_runs_once_where_first() {
    let app = App::new();
    app.scope(async {
        register_middleware_alias_with_args("tag", |args: &[&str]| match args {
            ["t"] => Ok(Tag("t;")),
            _ => Err(format!("expected `t`, got {args:?}")),
        });
        let route = || {
            Router::new()
                .get("/", |_req: Request| async { HttpResponse::text("x") })
                .middleware(Tag("signin;"))
                .middleware_named("tag:t")
        };
        // Inside: the route's own copy stays where it is.
        let inside = route().middleware_named("tag:t").middleware(Tag("in;"));
        assert_eq!(
            handle_request(&inside, get("/"))
                .await
                .header_str("x-order"),
            Some("in;t;signin;")
        );
        // Outside: the group's copy runs first, once.
        let outside = Router::new()
            .merge(route())
            .wrap_named("tag:t")
            .wrap(Tag("group;"));
        assert_eq!(
            handle_request(&outside, get("/"))
                .await
                .header_str("x-order"),
            Some("signin;t;group;")
        );
        assert_eq!(outside.routes()[0].middleware, vec!["tag:t"]);
    })
    .await;
}

#[tokio::test]
async fn routes_after_a_middleware_are_not_wrapped() {
    let router = Router::new()
        .get("/a", |_req: Request| async { HttpResponse::text("a") })
        .middleware(Gate)
        .get("/b", |_req: Request| async { HttpResponse::text("b") });
    assert_eq!(handle_request(&router, get("/a")).await.status_code(), 403);
    assert_eq!(handle_request(&router, get("/b")).await.status_code(), 200);
}

#[tokio::test]
async fn aliases_resolve_and_misspellings_fail_registration() {
    let app = App::new();
    app.scope(async {
        register_middleware_alias("gate", Gate);
        register_middleware_alias_with_args("tag", |args: &[&str]| match args {
            ["in"] => Ok(Tag("in;")),
            ["out"] => Ok(Tag("out;")),
            _ => Err(format!("expected `in` or `out`, got {args:?}")),
        });

        let ok = Router::new()
            .get("/", |_req: Request| async { HttpResponse::text("x") })
            .middleware_named("tag:in");
        assert!(ok.validate().is_ok());
        assert_eq!(ok.routes()[0].middleware, vec!["tag:in".to_owned()]);
        assert_eq!(
            handle_request(&ok, get("/")).await.header_str("x-order"),
            Some("in;")
        );

        // Added before any route, a name that resolves is refused with the
        // reason `.middleware(...)` gives, not an empty one.
        let early = Router::new()
            .middleware_named("tag:in")
            .get("/", |_req: Request| async { HttpResponse::text("x") });
        assert_eq!(
            early.validate().unwrap_err().to_string(),
            "middleware `tag:in` was added before any route: middleware wraps the routes \
             registered before it; add it after them"
        );

        let misspelt = Router::new()
            .get("/", |_req: Request| async { HttpResponse::text("x") })
            .middleware_named("gaet");
        let err = misspelt.validate().unwrap_err().to_string();
        assert!(
            err.contains("gaet") && err.contains("no middleware alias"),
            "{err}"
        );

        let refused = Router::new()
            .get("/", |_req: Request| async { HttpResponse::text("x") })
            .try_middleware_named("tag:sideways")
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("tag:sideways") && refused.contains("expected `in` or `out`"),
            "{refused}"
        );

        let args_on_plain = Router::new()
            .get("/", |_req: Request| async { HttpResponse::text("x") })
            .try_middleware_named("gate:1")
            .unwrap_err()
            .to_string();
        assert!(
            args_on_plain.contains("takes no arguments"),
            "{args_on_plain}"
        );

        // A router with a registration error is refused before it serves.
        let server = suprnova::server::bind("127.0.0.1:0").await.unwrap();
        let refused_to_serve = server
            .serve_with_shutdown(misspelt, async {})
            .await
            .unwrap_err()
            .to_string();
        assert!(refused_to_serve.contains("gaet"), "{refused_to_serve}");
    })
    .await;
}

#[tokio::test]
async fn aliases_of_one_container_are_invisible_to_another() {
    let first = App::new();
    first
        .scope(async { register_middleware_alias("only_in_first", Gate) })
        .await;
    let second = App::new();
    let err = second
        .scope(async {
            Router::new()
                .get("/", |_req: Request| async { HttpResponse::text("x") })
                .try_middleware_named("only_in_first")
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("only_in_first"));
}

/// The server runs every request inside the container that was current when
/// it started, with the route's whole chain, over HTTP/1.1 and over HTTP/2
/// (whose streams hyper runs as tasks of their own).
#[tokio::test]
async fn real_server_runs_requests_in_its_container_over_http1_and_http2() {
    let app = App::new();
    app.install(Arc::new(String::from("the server's container")));
    app.scope(async {
        let router = Router::new()
            .get("/container", |_req: Request| async {
                let seen = App::resolve::<String>().map(|s| (*s).clone());
                HttpResponse::text(seen.unwrap_or_else(|| "none".to_owned()))
            })
            .middleware(Tag("first;"))
            .middleware(Tag("second;"))
            .get("/panic", |_req: Request| async move {
                if true {
                    panic!("handler bug");
                }
                HttpResponse::new()
            });
        let server = TestServer::start(router).await;
        for round in 0..3 {
            for reply in [
                server.get("/container").await,
                server.send_h2(get(&server.url("/container"))).await,
            ] {
                assert_eq!(reply.status, 200, "round {round}");
                assert_eq!(reply.body, "the server's container", "round {round}");
                assert_eq!(reply.header("x-order"), Some("second;first;"));
            }
        }
        assert_eq!(server.send_h2(get(&server.url("/panic"))).await.status, 500);
        assert_eq!(
            server.send_h2(get(&server.url("/missing"))).await.status,
            404
        );
        let post = http::Request::post(server.url("/container"))
            .body(Full::default())
            .unwrap();
        let refused = server.send_h2(post).await;
        assert_eq!(refused.status, 405);
        assert_eq!(refused.header("allow"), Some("GET, HEAD"));
        server.stop().await;
    })
    .await;
}

/// The answer to HEAD carries no content on either protocol, with the
/// Content-Length a GET's would have (hyper leaves the content out over
/// HTTP/1 but sent it over HTTP/2, where the client reset the stream); and
/// a handler's Content-Length on an answer with no content does not go out
/// over HTTP/2, where no content following it is a malformed answer that
/// the client reset.
#[tokio::test]
async fn head_and_empty_answers_are_well_formed_over_http1_and_http2() {
    let router = Router::new()
        .get("/hi", |_req: Request| async { HttpResponse::text("hi") })
        .get("/sized", |_req: Request| async {
            HttpResponse::new().header("Content-Length", "5")
        });
    let server = TestServer::start(router).await;
    let head = || {
        http::Request::head(server.url("/hi"))
            .body(Full::default())
            .unwrap()
    };
    for reply in [server.send(head()).await, server.send_h2(head()).await] {
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("content-length"), Some("2"));
        assert_eq!(reply.body, "");
    }
    // Refused before routing (a Host that is no host), a HEAD gets its 400
    // without content too.
    let bad_host = || {
        http::Request::head(server.url("/hi"))
            .header("host", "a/b")
            .body(Full::default())
            .unwrap()
    };
    for reply in [
        server.send(bad_host()).await,
        server.send_h2(bad_host()).await,
    ] {
        assert_eq!(reply.status, 400);
        assert_eq!(reply.body, "");
    }
    for reply in [
        server.send(get(&server.url("/sized"))).await,
        server.send_h2(get(&server.url("/sized"))).await,
    ] {
        assert_eq!(reply.status, 200);
        assert_ne!(reply.header("content-length"), Some("5"));
        assert_eq!(reply.body, "");
    }
    server.stop().await;
}

/// The server's queue holds a burst of connections that arrive before it
/// accepts any: three hundred clients connecting at once to a bound server
/// that has not started serving all get through the handshake at once. A
/// queue of 128 (the standard library's) would leave the rest to send their
/// first packet again a second later.
#[tokio::test]
async fn the_listen_queue_holds_a_burst_of_three_hundred_connections() {
    // Linux caps every queue at net.core.somaxconn (4096 since kernel 5.4,
    // 128 before): the burst is no larger than the kernel lets a queue be.
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(300);
    let burst = somaxconn.min(300);
    let server = suprnova::server::bind("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr().unwrap();
    let connects = (0..burst).map(|_| {
        tokio::time::timeout(
            std::time::Duration::from_millis(700),
            tokio::net::TcpStream::connect(addr),
        )
    });
    let connected = futures_util::future::join_all(connects).await;
    let held = connected.iter().filter(|c| matches!(c, Ok(Ok(_)))).count();
    assert_eq!(held, burst, "net.core.somaxconn={somaxconn}");
    // The port is taken while the server holds it.
    match suprnova::server::bind(addr).await {
        Err(suprnova::server::ServerError::Io(error)) => {
            assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse);
        }
        other => panic!("a second bind of {addr}: {other:?}"),
    }
    drop(server);
}

/// A client that sends no whole request head within the header read
/// timeout (nothing at all, the start of HTTP/2, an HTTP/1 head a part at a
/// time) is disconnected, and a graceful shutdown does not wait for it; a
/// client that sends its request whole is served.
#[tokio::test]
async fn a_connection_without_a_first_request_is_closed_after_the_header_read_timeout() {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn closed_within(addr: std::net::SocketAddr, sent: &[u8], wait: Duration) -> bool {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(sent).await.unwrap();
        let mut buf = vec![0_u8; 4096];
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                // An HTTP/2 server's SETTINGS frame: read on.
                Ok(Ok(_)) => {}
            }
        }
    }

    let server = TimedServer::hi(Duration::from_millis(300)).await;
    let addr = server.addr;
    let wait = Duration::from_secs(5);
    let closed = tokio::join!(
        closed_within(addr, b"", wait),
        closed_within(addr, b"PRI * HTTP/2.0\r\n", wait),
        closed_within(addr, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", wait),
        closed_within(addr, b"GET / HTTP/1.1\r\nHost: x\r\n", wait),
    );
    assert_eq!(
        closed,
        (true, true, true, true),
        "closed within {wait:?} of a 300 ms header read timeout: (no byte, part of the HTTP/2 preface, the preface and no request, part of an HTTP/1 head)"
    );
    // A client that sends its request is served on a connection as before.
    let mut whole = tokio::net::TcpStream::connect(addr).await.unwrap();
    whole
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    whole.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("hi"), "{answer}");
    server.stop().await;
}

/// A header read timeout of zero is none, as `None` is: a client that sends
/// its request a little after connecting is served (taken as a period of
/// zero, it was dropped unanswered).
#[tokio::test]
async fn a_zero_header_read_timeout_is_no_timeout() {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server = TimedServer::hi(Duration::ZERO).await;
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer)).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer:?}");
    server.stop().await;
}

/// A handler's own `Content-Length` that is not its body's, or a
/// `Transfer-Encoding`, does not reach the wire: the response carries its
/// body's length, and the next response on the connection reads whole.
#[tokio::test]
async fn a_handlers_wrong_content_length_does_not_break_the_connection() {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let router = Router::new()
        .get("/sized", |_req: Request| async {
            HttpResponse::text("hello world")
                .header("Content-Length", "5")
                .header("Transfer-Encoding", "chunked")
        })
        .get("/hello", |_req: Request| async {
            HttpResponse::text("hello")
        });
    let server = TestServer::start(router).await;
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    stream
        .write_all(
            b"GET /sized HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer))
        .await
        .expect("both answers within 5 s")
        .unwrap();
    let answers: Vec<&str> = answer
        .split("HTTP/1.1 ")
        .filter(|a| !a.is_empty())
        .collect();
    assert_eq!(answers.len(), 2, "{answer:?}");
    assert!(answers[0].starts_with("200 OK"), "{answer:?}");
    assert!(answers[0].contains("content-length: 11\r\n"), "{answer:?}");
    assert!(!answers[0].contains("transfer-encoding"), "{answer:?}");
    assert!(answers[0].ends_with("\r\n\r\nhello world"), "{answer:?}");
    assert!(answers[1].starts_with("200 OK"), "{answer:?}");
    assert!(answers[1].ends_with("\r\n\r\nhello"), "{answer:?}");
    server.stop().await;
}

/// Paths are percent-decoded once before they are matched, as Laravel
/// decodes them: a handler reads `john doe` for `john%20doe`, and the
/// literal route `/café` answers `/caf%C3%A9`, in process and over HTTP.
#[tokio::test]
async fn path_segments_are_percent_decoded_before_they_are_matched() {
    let router = Router::new()
        .get("/users/{name}", |req: Request| async move {
            HttpResponse::text(req.param("name").unwrap_or("?").to_owned())
        })
        .get("/café", |_req: Request| async {
            HttpResponse::text("menu")
        });
    let peer: std::net::SocketAddr = "203.0.113.5:4000".parse().unwrap();
    let cases = [
        ("/users/%34%32", 200, "42"),
        ("/users/john%20doe", 200, "john doe"),
        ("/users/caf%C3%A9", 200, "café"),
        ("/caf%C3%A9", 200, "menu"),
        ("/users/%FF", 404, "404 Not Found"),
    ];
    for (path, status, body) in cases {
        let r = handle_request_with_peer(&router, get(path), peer).await;
        assert_eq!(
            (r.status_code(), r.body_text().as_str()),
            (status, body),
            "{path}"
        );
    }
    let server = TestServer::start(router).await;
    for (path, status, body) in cases {
        let request = http::Request::get(server.url(path))
            .body(Full::default())
            .unwrap();
        let reply = server.send(request).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (status, body),
            "{path}"
        );
    }
    server.stop().await;
}

/// The server answers 400 to an HTTP/1.1 request without `Host`, to any
/// request with two, and to a `Host` that is not a host and port, as RFC
/// 9112 asks; the handler never runs. HTTP/1.0 needs none.
#[tokio::test]
async fn the_server_refuses_a_missing_duplicate_or_invalid_host() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let served = Arc::new(AtomicUsize::new(0));
    let counter = served.clone();
    let router = Router::new().get("/", move |_req: Request| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { HttpResponse::text("hi") }
    });
    let server = TestServer::start(router).await;
    let addr = server.addr();
    let answer = |head: &'static str| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer))
            .await
            .expect("an answer within 5 s")
            .unwrap();
        answer
    };
    for (head, body) in [
        (
            "GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
            "Host header required\n",
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\nConnection: close\r\n\r\n",
            "more than one Host header\n",
        ),
        (
            "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
            "more than one Host header\n",
        ),
        (
            "GET / HTTP/1.1\r\nHost: user@a\r\nConnection: close\r\n\r\n",
            "invalid Host header\n",
        ),
        // A target in authority form names no path: it is for CONNECT.
        (
            "GET example.com:80 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            "the request target must be a path (or an absolute URI)\n",
        ),
        (
            "GET login HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            "the request target must be a path (or an absolute URI)\n",
        ),
        // The asterisk form is for a server-wide OPTIONS alone.
        (
            "GET * HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            "the request target must be a path (or an absolute URI)\n",
        ),
    ] {
        let answer = answer(head).await;
        assert!(
            answer.contains(" 400 Bad Request\r\n"),
            "{head:?}: {answer:?}"
        );
        assert!(
            answer.ends_with(&format!("\r\n\r\n{body}")),
            "{head:?}: {answer:?}"
        );
    }
    assert_eq!(served.load(Ordering::SeqCst), 0);
    for head in [
        "GET / HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:80\r\nConnection: close\r\n\r\n",
        "GET http://a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    ] {
        let answer = answer(head).await;
        assert!(answer.contains(" 200 OK\r\n"), "{head:?}: {answer:?}");
        assert!(answer.ends_with("\r\n\r\nhi"), "{head:?}: {answer:?}");
    }
    assert_eq!(served.load(Ordering::SeqCst), 3);
    server.stop().await;
}

/// An HTTP/2 connection that stays without a request for the header read
/// timeout is closed (GOAWAY, then the end of the connection), between one
/// and two timeouts after its last answer; one that keeps asking more
/// often stays open and is served throughout.
#[tokio::test]
async fn an_idle_http2_connection_is_closed_and_a_busy_one_is_kept() {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use std::time::{Duration, Instant};

    let period = Duration::from_millis(300);
    let server = TimedServer::hi(period).await;
    let addr = server.addr;
    let open = || async {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        (sender, tokio::spawn(connection))
    };
    let ask = |sender: &mut hyper::client::conn::http2::SendRequest<Full<Bytes>>| {
        let request = http::Request::get(format!("http://{addr}/"))
            .body(Full::default())
            .unwrap();
        sender.send_request(request)
    };

    // Busy: a request every 100 ms for 1.2 s, four timeouts, on one
    // connection.
    let (mut busy, busy_connection) = open().await;
    for _ in 0..12 {
        let reply = ask(&mut busy).await.expect("the busy connection serves");
        assert_eq!(reply.status(), 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!busy_connection.is_finished());

    // Idle: one request, then nothing.
    let (mut idle, idle_connection) = open().await;
    assert_eq!(ask(&mut idle).await.unwrap().status(), 200);
    let answered = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(5), idle_connection).await;
    let after = answered.elapsed();
    assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
    support::http::assert_closed_one_to_two_periods_after(after, period, "idle");
    server.stop().await;
}

/// A shutdown does not wait on an HTTP/2 peer that sent its preface and
/// settings, no request, and reads nothing (a graceful HTTP/2 close waits
/// for the peer to acknowledge it): the server returns and the socket is
/// closed within a period of the header read timeout.
#[tokio::test]
async fn a_shutdown_drops_a_silent_http2_peer_within_a_period() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server = TimedServer::hi(Duration::from_millis(300)).await;
    let addr = server.addr;
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    silent
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let asked = Instant::now();
    server.stop().await;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    // Whatever the server wrote (its settings, a GOAWAY), then the end.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), silent.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(_)) | Ok(Err(_))),
        "the socket stayed open"
    );
}

/// An answer that takes many header read timeouts to reach a client that
/// reads it slowly arrives whole, over HTTP/1 and HTTP/2: the connection is
/// busy while its answer goes out, not only while it is being made.
#[tokio::test]
async fn a_large_answer_read_slowly_arrives_whole_over_http1_and_http2() {
    use http_body_util::BodyExt;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use std::time::{Duration, Instant};

    let period = Duration::from_millis(300);
    let server = TimedServer::hi(period).await;
    let addr = server.addr;

    // HTTP/1: 64 KiB at most a read, every 15 ms.
    let mut stream = slow_reader(addr).await;
    let started = Instant::now();
    let mut read = 0;
    let mut chunk = vec![0; 64 * 1024];
    loop {
        match tokio::io::AsyncReadExt::read(&mut stream, &mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let took = started.elapsed();
    assert!(
        took > 3 * period,
        "read in {took:?}: not slow enough to test"
    );
    assert!(
        read > BIG,
        "{read} bytes of {BIG} and its head, in {took:?}"
    );

    // HTTP/2: one frame every 4 ms.
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(format!("http://{addr}/big"))
        .body(Full::<Bytes>::default())
        .unwrap();
    let mut body = sender.send_request(request).await.unwrap().into_body();
    let started = Instant::now();
    let mut read = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap_or_else(|e| panic!("cut after {read} bytes: {e}"));
        read += frame.into_data().map_or(0, |data| data.len());
        tokio::time::sleep(Duration::from_millis(4)).await;
    }
    assert!(started.elapsed() > 3 * period, "{:?}", started.elapsed());
    assert_eq!(read, BIG);
    server.stop().await;
}

/// A client that stops reading its answer is dropped once the answer has
/// waited for it, without a byte going out, for two periods: it does not
/// hold the connection for ever.
#[tokio::test]
async fn a_client_that_stops_reading_its_answer_is_dropped() {
    use std::time::Duration;

    let server = TimedServer::hi(Duration::from_millis(300)).await;
    let mut stream = slow_reader(server.addr).await;
    // Reads nothing for ten periods, then all there is.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut rest),
    )
    .await;
    assert!(ended.is_ok(), "the connection was still open");
    assert!(
        rest.len() < BIG,
        "{} bytes: the whole answer waited for the client",
        rest.len()
    );
    server.stop().await;
}

/// A header read timeout too long for the clock's instants waits for ever,
/// as `None` does, and the server answers: it does not fail every HTTP/1
/// connection computing a deadline past the end of time.
#[tokio::test]
async fn a_header_read_timeout_past_the_clocks_end_waits_for_ever() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server = TimedServer::hi(std::time::Duration::MAX).await;
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply:?}");
    assert!(reply.ends_with("\r\n\r\nhi"), "{reply:?}");
    server.stop().await;
}

/// A client that sends part of a body and then nothing gets 408 Request
/// Timeout once a header read timeout passes with no part of it, and the
/// place a `connections_per_ip` cap gave it comes back; a client that
/// sends its body slowly, a part within each period, is read whole.
#[tokio::test]
async fn a_body_that_stops_coming_gets_408_and_one_that_keeps_coming_is_read() {
    use std::time::{Duration, Instant};
    use suprnova::rate_limit::RateLimitMiddleware;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let period = Duration::from_millis(300);
    let cap = RateLimitMiddleware::connections_per_ip(10);
    let router = Router::new()
        .post("/echo", |mut req: Request| async move {
            match req.bytes().await {
                Ok(body) => HttpResponse::text(format!("{} bytes", body.len())),
                Err(e) => e.to_response(),
            }
        })
        .middleware(cap.clone());
    let server = TimedServer::start(router, period).await;
    let addr = server.addr;
    let head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nConnection: close\r\n\r\n";

    // Stops after 4 of 10 bytes.
    let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    stalled.write_all(head).await.unwrap();
    stalled.write_all(b"abcd").await.unwrap();
    let sent = Instant::now();
    let mut reply = String::new();
    let read =
        tokio::time::timeout(Duration::from_secs(5), stalled.read_to_string(&mut reply)).await;
    assert!(read.is_ok(), "no answer to a body that stopped coming");
    let waited = sent.elapsed();
    assert!(
        reply.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
        "{reply:?}"
    );
    assert!(reply.ends_with("\r\n\r\n408 Request Timeout"), "{reply:?}");
    assert!(
        waited >= period && waited < period * 3,
        "answered after {waited:?}"
    );
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 0);

    // A byte every 100 ms: the body takes over three periods.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(head).await.unwrap();
    for byte in b"0123456789" {
        tokio::time::sleep(Duration::from_millis(100)).await;
        slow.write_all(&[*byte]).await.unwrap();
    }
    let mut reply = String::new();
    slow.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply:?}");
    assert!(reply.ends_with("\r\n\r\n10 bytes"), "{reply:?}");

    server.stop().await;
}

/// An HTTP/2 body whose client cannot send because another stream filled
/// the connection's flow-control window is not timed out: on one
/// connection, 1.5 MiB to a handler that reads it after 2 s (more than the
/// server's 1 MiB window), then 10 bytes to a handler that reads at once,
/// with a 300 ms header read timeout. Both are read whole.
#[tokio::test]
async fn an_http2_body_held_back_by_the_servers_window_is_not_timed_out() {
    use http_body_util::BodyExt;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use std::time::Duration;

    let read = |mut req: Request| async move {
        match req.bytes().await {
            Ok(body) => HttpResponse::text(format!("{} bytes", body.len())),
            Err(e) => e.to_response(),
        }
    };
    let router = Router::new()
        .post("/late", move |req: Request| async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            read(req).await
        })
        .post("/echo", read);
    let server = TimedServer::start(router, Duration::from_millis(300)).await;
    let addr = server.addr;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let ask = |mut sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
               path: &'static str,
               body: Vec<u8>| async move {
        let request = http::Request::post(format!("http://{addr}{path}"))
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        sender.ready().await.unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    let large = tokio::spawn(ask(sender.clone(), "/late", vec![b'a'; 3 << 19]));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let small = ask(sender.clone(), "/echo", b"0123456789".to_vec()).await;
    assert_eq!(small, (200, "10 bytes".to_owned()));
    assert_eq!(large.await.unwrap(), (200, format!("{} bytes", 3 << 19)));
    server.stop().await;
}

/// A connection to `addr` with a small receive buffer, that has asked for
/// `GET /big` over HTTP/1.1 and is to be closed after the answer.
async fn slow_reader(addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut stream,
        b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    stream
}
