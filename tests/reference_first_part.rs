//! The first part of the API reference (the sliding-window driver, the
//! rate-limit middleware, `ip_based`, `connections_per_ip`,
//! `hold_for_connection`, `identity_key` and the counter API of the
//! `RateLimiter` facade): each of its examples as written, and the
//! behaviour its sentences state.

mod support;

use std::sync::Arc;
use support::peer;

use bytes::Bytes;
use http_body_util::Full;
use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Router};

fn get(path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(path).body(Full::default()).unwrap()
}

// ---- The examples, as written -------------------------------------------

#[tokio::test]
async fn example_sliding_window_driver() -> Result<(), Box<dyn std::error::Error>> {
    use std::sync::Arc;
    use std::time::Duration;
    use suprnova::rate_limit::memory::InMemoryRateLimiter;
    use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};

    let limiter: Arc<dyn RateLimiterDriver> = Arc::new(InMemoryRateLimiter::new());
    let cfg = SlidingWindowConfig {
        max_requests: 60,
        window: Duration::from_secs(60),
    };
    let ok = limiter.try_acquire("user:42", &cfg).await?;
    if !ok {
        let wait = limiter.retry_after("user:42", &cfg).await?;
        // wait is the Option<Duration> until the oldest slot in the bucket
        // ages out.
        let _: Option<Duration> = wait;
    }
    assert!(ok);
    Ok(())
}

/// An application whose installed driver is an in-memory limiter, as the
/// reference's examples resolve it.
fn app_with_a_memory_driver() -> App {
    let app = App::new();
    app.install::<dyn suprnova::rate_limit::RateLimiterDriver>(Arc::new(
        suprnova::rate_limit::memory::InMemoryRateLimiter::new(),
    ));
    app
}

#[tokio::test]
async fn example_rate_limit_middleware_new() {
    let app = app_with_a_memory_driver();
    app.scope(async {
        use std::sync::Arc;
        use std::time::Duration;
        use suprnova::container::App;
        use suprnova::rate_limit::{
            BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig,
        };

        let limiter: Arc<dyn RateLimiterDriver> =
            App::resolve_make::<dyn RateLimiterDriver>().unwrap();

        let mw = RateLimitMiddleware::new(
            limiter,
            SlidingWindowConfig {
                max_requests: 100,
                window: Duration::from_secs(60),
            },
            |req| format!("route:{}", req.path()),
        )
        .on_backend_error(BackendErrorPolicy::FailClosed);
        let _ = mw;
    })
    .await;
}

#[test]
fn example_ip_based() {
    use std::time::Duration;
    use suprnova::rate_limit::RateLimitMiddleware;

    let twenty_a_minute = RateLimitMiddleware::ip_based(20, Duration::from_secs(60));
    let _ = twenty_a_minute;
}

struct Broadcast;

#[suprnova::async_trait]
impl suprnova::ws::WebSocketHandler for Broadcast {
    async fn on_socket(&self, _socket: suprnova::ws::WebSocket) {}
}

#[test]
fn example_connections_per_ip_on_a_websocket_route() {
    use suprnova::rate_limit::RateLimitMiddleware;
    use suprnova::ws;

    let router: Router =
        ws!("/ws/broadcast", Broadcast).middleware(RateLimitMiddleware::connections_per_ip(100));
    let _ = router;
}

mod count_open {
    use suprnova::{Middleware, Next, Request, Response, async_trait};

    pub struct Slot(pub std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl Drop for Slot {
        fn drop(&mut self) {
            self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    pub struct CountOpen(pub std::sync::Arc<std::sync::atomic::AtomicUsize>);

    #[async_trait]
    impl Middleware for CountOpen {
        async fn handle(&self, mut request: Request, next: Next) -> Response {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            request.hold_for_connection(Slot(self.0.clone()));
            next(request).await
        }
    }
}

#[tokio::test]
async fn example_hold_for_connection_gives_the_place_back_with_the_request() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let open = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let in_handler = seen.clone();
    let counter = open.clone();
    let router = Router::new()
        .get("/x", move |req: suprnova::Request| {
            let in_handler = in_handler.clone();
            let counter = counter.clone();
            async move {
                let _req = req;
                in_handler.store(counter.load(Ordering::SeqCst), Ordering::SeqCst);
                Ok::<_, HttpResponse>(HttpResponse::text("ok"))
            }
        })
        .middleware(count_open::CountOpen(open.clone()));
    let response = handle_request_with_peer(&router, get("/x"), peer("203.0.113.9:1")).await;
    assert_eq!(response.status_code(), 200);
    assert_eq!(seen.load(Ordering::SeqCst), 1, "held while the handler ran");
    assert_eq!(
        open.load(Ordering::SeqCst),
        0,
        "given back with the request"
    );
}

#[tokio::test]
async fn example_identity_key_per_recipient() {
    let app = app_with_a_memory_driver();
    app.scope(async {
        use std::sync::Arc;
        use std::time::Duration;
        use suprnova::container::App;
        use suprnova::rate_limit::{
            BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig,
        };
        let limiter: Arc<dyn RateLimiterDriver> =
            App::resolve_make::<dyn RateLimiterDriver>().unwrap();

        use suprnova::rate_limit::{identity_key, names_identity};

        let per_recipient = RateLimitMiddleware::new(
            limiter.clone(),
            SlidingWindowConfig {
                max_requests: 3,
                window: Duration::from_secs(900),
            },
            |req| identity_key(req, "email", "auth-issuance"),
        )
        .key_reads_body(4096)
        .only_when(|req| names_identity(req, "email"))
        .on_backend_error(BackendErrorPolicy::FailClosed);
        let _ = per_recipient;
    })
    .await;
}

async fn do_login_work() -> &'static str {
    "logged in"
}

#[tokio::test]
async fn example_counter_api_and_attempt() -> Result<(), Box<dyn std::error::Error>> {
    let clock = FakeClock::at_unix(946_684_800);
    let store = Arc::new(suprnova::cache::MemoryStore::with_clock(clock.shared()));
    let app = App::new();
    app.install(Arc::new(CacheRateLimiter::new(store, clock.shared())));
    app.scope(async {
        use suprnova::RateLimiter;

        // Burn one attempt; seeds the window if missing.
        let n = RateLimiter::hit("login:1.2.3.4", 60).await?;
        assert_eq!(n, 1);

        // Laravel's `hit($key)` defaults to a 60-second window; this is that call.
        let n = RateLimiter::hit_for_minute("login:1.2.3.4").await?;
        assert_eq!(n, 2);

        let window_end = suprnova::chrono::Utc::now() + suprnova::chrono::Duration::hours(2);
        let n = RateLimiter::hit_until("exports:user:1", window_end).await?;
        let _ = n;

        let over_limit = RateLimiter::hit_and_check("login:1.2.3.4", 5, 60).await?;
        if over_limit { /* return 429 */ }
        assert!(!over_limit);

        let n = RateLimiter::increment("api:user:1", 60, 5).await?;
        assert_eq!(n, 5);

        let attempts = RateLimiter::attempts("login:1.2.3.4").await?;
        assert_eq!(attempts, 3);

        let secs = RateLimiter::available_in("login:1.2.3.4").await?;
        assert_eq!(secs, 60);

        let remaining = RateLimiter::remaining("login:1.2.3.4", 5).await?;
        assert_eq!(remaining, 2);
        let remaining = RateLimiter::retries_left("login:1.2.3.4", 5).await?;
        assert_eq!(remaining, 2);

        let over = RateLimiter::too_many_attempts("login:1.2.3.4", 5).await?;
        assert!(!over);

        RateLimiter::reset_attempts("login:1.2.3.4").await?;
        RateLimiter::clear("login:1.2.3.4").await?;

        let result =
            RateLimiter::attempt("login:1.2.3.4", 5, || async { do_login_work().await }, 60)
                .await?;
        match result {
            Some(value) => {
                /* callback ran, attempt counted */
                assert_eq!(value, "logged in");
            }
            None => {
                /* over limit, callback was NOT run */
                panic!("refused")
            }
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })
    .await
}

// ---- The sliding-window driver ------------------------------------------

// ---- hold_for_connection over the real server --------------------------

mod over_the_wire {
    use super::*;
    use futures_util::{SinkExt, StreamExt};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use support::http::TestServer;
    use suprnova::ws::{Message, WebSocket, WebSocketHandler};

    /// Tells the test the socket is open, then echoes until the peer closes.
    struct Hold(tokio::sync::mpsc::UnboundedSender<()>);

    #[suprnova::async_trait]
    impl WebSocketHandler for Hold {
        async fn on_socket(&self, mut socket: WebSocket) {
            let _ = self.0.send(());
            while let Some(Ok(message)) = socket.recv().await {
                if let Message::Text(text) = message
                    && socket.send(text.as_str().to_owned()).await.is_err()
                {
                    break;
                }
            }
        }
    }

    async fn becomes(open: &AtomicUsize, want: usize) {
        support::within("the count", std::time::Duration::from_secs(5), async {
            while open.load(Ordering::SeqCst) != want {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await;
    }

    /// "For a WebSocket upgrade the server moves the guards into the task
    /// that runs the socket and drops them when the task ends."
    #[tokio::test]
    async fn a_guard_of_ones_own_middleware_lives_as_long_as_the_socket() {
        let open = Arc::new(AtomicUsize::new(0));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let router: Router =
            suprnova::ws!("/ws", Hold(tx)).middleware(count_open::CountOpen(open.clone()));
        let server = TestServer::start(router).await;
        let url = format!("ws://{}/ws", server.addr());
        let (mut client, _) = support::within(
            "the handshake",
            std::time::Duration::from_secs(5),
            tokio_tungstenite::connect_async(url),
        )
        .await
        .unwrap();
        support::within("the session", std::time::Duration::from_secs(5), rx.recv()).await;
        client.send(Message::text("hi")).await.unwrap();
        let echoed = support::within("the echo", std::time::Duration::from_secs(5), client.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(echoed, Message::text("hi"));
        assert_eq!(
            open.load(Ordering::SeqCst),
            1,
            "held while the socket is open"
        );

        client.close(None).await.unwrap();
        support::within("the close", std::time::Duration::from_secs(5), async {
            while let Some(Ok(_)) = client.next().await {}
        })
        .await;
        becomes(&open, 0).await;
    }

    /// "For any other request they drop with the request", over HTTP.
    #[tokio::test]
    async fn a_guard_of_ones_own_middleware_is_given_back_after_a_plain_request() {
        let open = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(AtomicUsize::new(usize::MAX));
        let (in_handler, counter) = (seen.clone(), open.clone());
        let router = Router::new()
            .get("/x", move |req: suprnova::Request| {
                let (in_handler, counter) = (in_handler.clone(), counter.clone());
                async move {
                    let _req = req;
                    in_handler.store(counter.load(Ordering::SeqCst), Ordering::SeqCst);
                    Ok::<_, HttpResponse>(HttpResponse::text("ok"))
                }
            })
            .middleware(count_open::CountOpen(open.clone()));
        let server = TestServer::start(router).await;
        for _ in 0..3 {
            let reply = server.get("/x").await;
            assert_eq!(reply.status, 200);
            assert_eq!(reply.body, "ok");
            assert_eq!(seen.load(Ordering::SeqCst), 1);
            becomes(&open, 0).await;
        }
    }
}

// ---- connections_per_ip: the address --------------------------------------

/// "An IPv4 address written in IPv6 form, ::ffff:203.0.113.1, counts as the
/// IPv4 address", here as a trusted proxy forwards it.
#[tokio::test]
async fn a_forwarded_ipv4_mapped_client_counts_as_its_ipv4_address() {
    use support::held::{Gate, entered};
    use support::http::TestServer;

    let app = App::new();
    app.install(Arc::new(
        "127.0.0.1"
            .parse::<suprnova::http::TrustedProxies>()
            .unwrap(),
    ));
    app.scope(async {
        let cap = suprnova::rate_limit::RateLimitMiddleware::connections_per_ip(1);
        let (gate, mut rx) = Gate::new();
        let server = Arc::new(TestServer::start(gate.router("/slow", &cap)).await);
        let send = |client: &'static str| {
            let server = server.clone();
            let request = http::Request::get(server.url("/slow"))
                .header("X-Forwarded-For", client)
                .body(Full::default())
                .unwrap();
            async move { server.send(request).await }
        };
        let held = tokio::spawn(send("203.0.113.1"));
        entered(&mut rx).await;
        let v4: std::net::IpAddr = "203.0.113.1".parse().unwrap();
        let mapped: std::net::IpAddr = "::ffff:203.0.113.1".parse().unwrap();
        assert_eq!(cap.open_for(v4), 1);
        assert_eq!(cap.open_for(mapped), 1);

        let refused = send("::ffff:203.0.113.1").await;
        assert_eq!(refused.status, 429);
        assert_eq!(refused.body, "429 Too Many Requests");
        assert_eq!(refused.header("retry-after"), None);

        gate.release(1);
        assert_eq!(held.await.unwrap().status, 200);
        assert_eq!(cap.addresses_open(), 0);
    })
    .await;
}

/// ".on_backend_error(...), .only_when(...) and .key_reads_body(...) chain
/// onto it as they do onto RateLimitMiddleware::new."
#[tokio::test]
async fn ip_based_takes_the_same_chain_as_new() {
    use suprnova::rate_limit::{BackendErrorPolicy, RateLimitMiddleware};
    let clock = FakeClock::at_unix(1_000_000);
    let app = App::new();
    app.install::<dyn suprnova::rate_limit::RateLimiterDriver>(Arc::new(
        suprnova::rate_limit::memory::InMemoryRateLimiter::with_clock(clock.shared()),
    ));
    app.scope(async {
        let mw = RateLimitMiddleware::ip_based(1, std::time::Duration::from_secs(60))
            .on_backend_error(BackendErrorPolicy::FailClosed)
            .only_when(|req| req.path() != "/free")
            .key_reads_body(16);
        let router = Router::new()
            .get("/limited", |_req: suprnova::Request| async {
                HttpResponse::text("ok")
            })
            .post("/limited", |_req: suprnova::Request| async {
                HttpResponse::text("ok")
            })
            .get("/free", |_req: suprnova::Request| async {
                HttpResponse::text("ok")
            })
            .middleware(mw);
        let from = peer("198.51.100.7:4000");
        let first = handle_request_with_peer(&router, get("/limited"), from).await;
        assert_eq!(first.status_code(), 200);
        let second = handle_request_with_peer(&router, get("/limited"), from).await;
        assert_eq!(second.status_code(), 429);
        assert_eq!(second.body_text(), "429 Too Many Requests");
        assert_eq!(second.header_str("retry-after"), Some("60"));
        let free = handle_request_with_peer(&router, get("/free"), from).await;
        assert_eq!(free.status_code(), 200);
        let big = http::Request::post("/limited")
            .body(Full::new(Bytes::from(vec![b'x'; 17])))
            .unwrap();
        let big = handle_request_with_peer(&router, big, from).await;
        assert_eq!(big.status_code(), 413);
        let from_elsewhere = peer("198.51.100.8:4000");
        let small = http::Request::post("/limited")
            .body(Full::new(Bytes::from(vec![b'x'; 16])))
            .unwrap();
        let small = handle_request_with_peer(&router, small, from_elsewhere).await;
        assert_eq!(small.status_code(), 200);
    })
    .await;
}
