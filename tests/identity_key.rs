//! Per-recipient limits: `identity_key` and `names_identity`, and a
//! password-reset route that stacks a per-recipient limit on a per-address
//! one.

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use suprnova::clock::{Clock, FakeClock};
use suprnova::keys::sha256_hex;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{
    BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig, identity_key,
    names_identity,
};
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Request, Router};

use support::clock_at;
use support::http::TestServer;

const FORM: &str = "application/x-www-form-urlencoded";
const JSON: &str = "application/json";

fn id(value: &str) -> String {
    format!("auth-issuance:id:{}", sha256_hex(value))
}

/// A request as the middleware sees it after `key_reads_body`.
async fn buffered(uri: &str, content_type: Option<&str>, body: &'static str) -> Request {
    let mut builder = http::Request::post(uri);
    if let Some(t) = content_type {
        builder = builder.header("content-type", t);
    }
    let mut req = Request::new(
        builder
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap(),
    )
    .with_peer("203.0.113.50:4000".parse().unwrap());
    req.body_bytes(4096).await.unwrap();
    req
}

fn key(req: &Request) -> String {
    identity_key(req, "email", "auth-issuance")
}

#[tokio::test]
async fn case_and_spacing_variants_share_one_hashed_key() {
    let variants = [
        buffered("/reset?email=Alice@Example.com", None, "").await,
        buffered("/reset?email=%20%20alice@example.COM%09", None, "").await,
        buffered("/reset", Some(FORM), "email=ALICE%40example.com+").await,
        buffered("/reset", Some(JSON), r#"{"email":" Alice@Example.com "}"#).await,
    ];
    for req in &variants {
        assert_eq!(key(req), id("alice@example.com"), "{req:?}");
        assert!(names_identity(req, "email"));
    }
    let k = key(&variants[0]);
    assert!(
        !k.contains("alice"),
        "the key must not reveal the address: {k}"
    );
    assert!(
        !k.contains("203.0.113.50"),
        "the key must not carry the caller: {k}"
    );
}

/// `josé` written with the precomposed `é` (U+00E9) and with `e` and a
/// combining acute accent (U+0301) is one mailbox, and shares one bucket.
#[tokio::test]
async fn canonically_equivalent_spellings_share_one_key() {
    let variants = [
        buffered("/reset?email=jos%C3%A9@mail.test", None, "").await,
        buffered("/reset?email=jose%CC%81@mail.test", None, "").await,
        buffered("/reset?email=JOSE%CC%81@Mail.test", None, "").await,
        buffered(
            "/reset",
            Some(JSON),
            "{\"email\":\"Jos\\u0065\\u0301@mail.test\"}",
        )
        .await,
    ];
    for req in &variants {
        assert_eq!(key(req), id("jos\u{e9}@mail.test"), "{req:?}");
    }
}

/// The query string naming `value` as `email`.
fn query_naming(value: &str) -> String {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("email", value)
        .finish();
    format!("/reset?{query}")
}

/// `ǰ` (U+01F0) has no capital of its own: its uppercase is `J` and a
/// combining caron (U+030C), whose lowercase `j` and U+030C is not in
/// normal form C. A change of capitalisation keeps the bucket all the same.
#[tokio::test]
async fn a_capitalised_spelling_shares_the_bucket_of_its_lowercase() {
    let lower = "\u{1F0}oe@mail.test";
    let upper = lower.to_uppercase();
    assert_eq!(upper, "J\u{30C}OE@MAIL.TEST");
    assert_eq!(upper.to_lowercase(), "j\u{30C}oe@mail.test");
    for value in [lower, &upper, "j\u{30C}oe@mail.test"] {
        let req = buffered(&query_naming(value), None, "").await;
        assert_eq!(key(&req), id(lower), "{value:?}");
    }
}

/// Laravel's `TrimStrings` middleware trims U+FEFF (a byte order mark),
/// U+200B (zero width space) and U+200E (left-to-right mark) at either end
/// as well as whitespace, so a handler ported from Laravel reads the value
/// without them: it shares the bucket of the value written without them.
/// Inside the value they stay, as Laravel keeps them.
#[tokio::test]
async fn what_laravel_s_trim_strings_trims_shares_one_key() {
    for value in [
        "\u{FEFF}victim@mail.test",
        "victim@mail.test\u{FEFF}",
        "\u{200B}victim@mail.test\u{200B}",
        "\u{200E} victim@mail.test \u{200E}",
        " \u{200E}\u{FEFF}\u{200B}\tVictim@Mail.test\u{200B}\n",
    ] {
        let req = buffered(&query_naming(value), None, "").await;
        assert_eq!(key(&req), id("victim@mail.test"), "{value:?}");
        assert!(names_identity(&req, "email"), "{value:?}");
    }
    let json = buffered(
        "/reset",
        Some(JSON),
        r#"{"email":"\ufeffvictim@mail.test\u200e"}"#,
    )
    .await;
    assert_eq!(key(&json), id("victim@mail.test"));
    // Only those characters: a value of nothing else names nobody.
    let blank = buffered(&query_naming("\u{FEFF}\u{200B}\u{200E}"), None, "").await;
    assert!(!names_identity(&blank, "email"));
    let inside = buffered(&query_naming("victim\u{200B}@mail.test"), None, "").await;
    assert_eq!(key(&inside), id("victim\u{200B}@mail.test"));
}

#[tokio::test]
async fn a_request_naming_nobody_falls_back_to_the_address() {
    let none = buffered("/reset?other=1", Some(FORM), "name=bob").await;
    assert!(!names_identity(&none, "email"));
    assert_eq!(key(&none), "auth-issuance:ip:203.0.113.50");
    let blank = buffered("/reset?email=", Some(JSON), r#"{"email":"   "}"#).await;
    assert!(!names_identity(&blank, "email"));
    assert_eq!(key(&blank), "auth-issuance:ip:203.0.113.50");
    // A JSON value that is not a string names nobody, and so does a nested one.
    let nested = buffered(
        "/reset",
        Some(JSON),
        r#"{"email":7,"user":{"email":"x@y.z"}}"#,
    )
    .await;
    assert!(!names_identity(&nested, "email"));
}

#[tokio::test]
async fn a_blank_value_does_not_hide_the_other_place() {
    let req = buffered("/reset?email=%20", Some(FORM), "email=victim%40mail.test").await;
    assert_eq!(key(&req), id("victim@mail.test"));
    let req = buffered(
        "/reset?email=victim@mail.test",
        Some(JSON),
        r#"{"email":""}"#,
    )
    .await;
    assert_eq!(key(&req), id("victim@mail.test"));
}

#[tokio::test]
async fn two_different_identities_share_the_ambiguity_bucket() {
    let req = buffered(
        "/reset?email=decoy@mail.test",
        Some(FORM),
        "email=victim%40mail.test",
    )
    .await;
    assert_eq!(key(&req), "auth-issuance:ambiguous");
    let req = buffered(
        "/reset",
        Some(JSON),
        r#"{"email":"a@x.test","email":"b@x.test"}"#,
    )
    .await;
    assert_eq!(key(&req), "auth-issuance:ambiguous");
    // The same identity twice, in any spelling, is not ambiguous.
    let req = buffered("/reset?email=A@x.test", Some(FORM), "email=a%40x.test").await;
    assert_eq!(key(&req), id("a@x.test"));
}

/// A JSON body naming one address, with a return URL that ends in the same
/// address as a query parameter, names one identity: the form reading of
/// the JSON text finds `alice%40mail.test"}`, JSON syntax no form encoder
/// writes unescaped, and that is not a name.
#[tokio::test]
async fn a_json_body_with_a_url_in_a_string_names_one_identity() {
    let req = buffered(
        "/reset",
        Some(JSON),
        r#"{"email":"alice@mail.test","return_to":"/welcome?team=5&email=alice%40mail.test"}"#,
    )
    .await;
    assert_eq!(key(&req), id("alice@mail.test"));
    // A field the form reading finds between two `&` still counts.
    let req = buffered(
        "/reset",
        Some(JSON),
        r#"{"email":"alice@mail.test","n":"&email=bob%40mail.test&"}"#,
    )
    .await;
    assert_eq!(key(&req), "auth-issuance:ambiguous");
}

#[tokio::test]
async fn without_key_reads_body_only_the_query_is_read() {
    let req = Request::new(
        http::Request::post("/reset")
            .header("content-type", FORM)
            .body(Full::new(Bytes::from_static(b"email=a%40x.test")))
            .unwrap(),
    );
    assert!(!names_identity(&req, "email"));
}

// ---- The password-reset route ----------------------------------------------

struct ResetRoute {
    router: Arc<Router>,
    sent: Arc<AtomicUsize>,
    driver: Arc<InMemoryRateLimiter>,
    clock: FakeClock,
}

/// `POST /password/reset`: 20 a minute per address, and 3 in 15 minutes per
/// mailbox read from the query or the body (4 KiB at most), failing closed.
/// The API reference's per-recipient limit: 3 resets a mailbox in 15
/// minutes, keyed on the body's `email`, requests naming none skipped.
fn per_recipient(limiter: Arc<dyn RateLimiterDriver>) -> RateLimitMiddleware {
    RateLimitMiddleware::new(
        limiter,
        SlidingWindowConfig {
            max_requests: 3,
            window: Duration::from_secs(900),
        },
        |req| identity_key(req, "email", "auth-issuance"),
    )
    .key_reads_body(4096)
    .only_when(|req| names_identity(req, "email"))
    .on_backend_error(BackendErrorPolicy::FailClosed)
}

fn reset_route() -> ResetRoute {
    let clock = clock_at(10, 0, 0);
    let driver = Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let limiter: Arc<dyn RateLimiterDriver> = driver.clone();
    let per_recipient = per_recipient(limiter.clone());
    let per_ip = RateLimitMiddleware::new(
        limiter,
        SlidingWindowConfig::new(20, Duration::from_secs(60)),
        |req| format!("reset:ip:{}", req.ip().unwrap_or_default()),
    );
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    let router = Router::new()
        .post("/password/reset", move |mut req: Request| {
            let counter = counter.clone();
            async move {
                let body = req.text().await.unwrap_or_default();
                counter.fetch_add(1, Ordering::SeqCst);
                HttpResponse::text(format!("sent {body}"))
            }
        })
        .middleware(per_ip)
        .middleware(per_recipient);
    ResetRoute {
        router: Arc::new(router),
        sent,
        driver,
        clock,
    }
}

impl ResetRoute {
    async fn post(&self, from: &str, uri: &str, content_type: &str, body: &str) -> HttpResponse {
        let req = http::Request::post(uri)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let peer: SocketAddr = format!("{from}:4000").parse().unwrap();
        handle_request_with_peer(&self.router, req, peer).await
    }

    async fn form(&self, from: &str, email: &str) -> u16 {
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("email", email)
            .finish();
        self.post(from, "/password/reset", FORM, &body)
            .await
            .status_code()
    }

    fn sent(&self) -> usize {
        self.sent.load(Ordering::SeqCst)
    }
}

fn address(n: usize) -> String {
    format!("198.51.{}.{}", n / 200, n % 200 + 1)
}

#[tokio::test]
async fn fifty_addresses_naming_one_mailbox_get_three_resets() {
    let route = reset_route();
    let mut statuses = Vec::new();
    for n in 0..50 {
        statuses.push(route.form(&address(n), "victim@mail.test").await);
    }
    assert_eq!(&statuses[..3], &[200, 200, 200]);
    assert!(statuses[3..].iter().all(|&s| s == 429), "{statuses:?}");
    assert_eq!(route.sent(), 3);

    let refused = route
        .post(
            "198.51.9.9",
            "/password/reset",
            FORM,
            "email=victim%40mail.test",
        )
        .await;
    assert_eq!(refused.body_text(), "429 Too Many Requests");
    assert_eq!(refused.header_str("retry-after"), Some("900"));
    assert_eq!(refused.header_str("x-ratelimit-limit"), Some("3"));

    // Another mailbox from one of those addresses is served.
    assert_eq!(route.form(&address(7), "someone@else.test").await, 200);
    // Fifteen minutes later the mailbox has its budget back.
    route.clock.advance(Duration::from_secs(900));
    assert_eq!(route.form(&address(8), "victim@mail.test").await, 200);
}

/// A form labelled as JSON (or as anything else) still names its mailbox:
/// a handler may read the form whatever the label, so the label cannot take
/// the request out of the per-recipient count.
#[tokio::test]
async fn a_form_labelled_as_json_still_counts_for_its_mailbox() {
    let route = reset_route();
    let mut statuses = Vec::new();
    for (n, label) in [FORM, JSON, "text/plain", JSON, JSON]
        .into_iter()
        .enumerate()
    {
        let reply = route
            .post(
                &address(n),
                "/password/reset",
                label,
                "email=victim%40mail.test",
            )
            .await;
        statuses.push(reply.status_code());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert_eq!(route.sent(), 3);
}

/// A reset form sent as multipart form data names its mailbox too, and
/// spends the same budget as the urlencoded form.
#[tokio::test]
async fn a_multipart_form_counts_for_its_mailbox() {
    let route = reset_route();
    let multipart = "--b0und\r\n\
Content-Disposition: form-data; name=\"email\"\r\n\r\n\
Victim@Mail.test\r\n\
--b0und--\r\n";
    let mut statuses = vec![route.form(&address(0), "victim@mail.test").await];
    for n in 1..4 {
        let reply = route
            .post(
                &address(n),
                "/password/reset",
                "multipart/form-data; boundary=b0und",
                multipart,
            )
            .await;
        statuses.push(reply.status_code());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    assert_eq!(route.sent(), 3);
}

/// A boundary that multipart parsers take from the label but RFC 2046 would
/// not allow in a body (`!`, `~`, `%`, over 70 characters, a quoted `;`)
/// still splits the body for the key: the handler's parser reads the
/// mailbox, so the mailbox's budget is spent.
#[tokio::test]
async fn a_multipart_form_with_any_labelled_boundary_counts_for_its_mailbox() {
    let long = "a".repeat(71);
    for (boundary, param) in [
        ("x!y", "x!y".to_owned()),
        ("~~boundary~~", "~~boundary~~".to_owned()),
        ("50%", "50%".to_owned()),
        (long.as_str(), long.clone()),
        ("a;b", "\"a;b\"".to_owned()),
        ("q\"t", "\"q\\\"t\"".to_owned()),
    ] {
        let route = reset_route();
        let body = format!(
            "--{boundary}\r\n\
Content-Disposition: form-data; name=\"email\"\r\n\r\n\
victim@mail.test\r\n\
--{boundary}--\r\n"
        );
        let label = format!("multipart/form-data; boundary={param}");
        let mut statuses = Vec::new();
        for n in 0..5 {
            let reply = route
                .post(&address(n), "/password/reset", &label, &body)
                .await;
            statuses.push(reply.status_code());
        }
        assert_eq!(statuses, [200, 200, 200, 429, 429], "{label}");
        assert_eq!(route.sent(), 3, "{label}");
    }
}

/// Bodies built so that one reading finds no mailbox while the form a
/// handler reads names the victim: each still counts for the victim's
/// mailbox. Sent labelled as a form, as an attacker would.
const CRAFTED: [(&str, &str); 3] = [
    // A form that is also a JSON object with no `email` field.
    (FORM, r#"{"x":"&email=victim%40mail.test&"}"#),
    // A form whose first line opens like a multipart boundary.
    (FORM, "--x\r\n&email=victim%40mail.test"),
    // Multipart by its label's boundary, after a preamble that opens like
    // another boundary.
    (
        "multipart/form-data; boundary=real",
        "--decoy\r\npreamble\r\n--real\r\n\
Content-Disposition: form-data; name=\"email\"\r\n\r\n\
victim@mail.test\r\n--real--\r\n",
    ),
];

#[tokio::test]
async fn a_body_built_to_read_two_ways_counts_for_the_mailbox_its_form_names() {
    for (n, crafted) in CRAFTED.into_iter().enumerate() {
        let route = reset_route();
        let mut statuses = vec![route.form(&address(0), "victim@mail.test").await];
        for from in 1..4 {
            let (label, body) = crafted;
            let reply = route
                .post(&address(from), "/password/reset", label, body)
                .await;
            statuses.push(reply.status_code());
        }
        assert_eq!(statuses, [200, 200, 200, 429], "crafted body {n}");
        assert_eq!(route.sent(), 3, "crafted body {n}");
    }
}

#[tokio::test]
async fn a_body_built_to_read_two_ways_counts_through_the_real_server() {
    let route = reset_route();
    let sent = route.sent.clone();
    let router = Arc::try_unwrap(route.router).ok().unwrap();
    let server = TestServer::start(router).await;
    let mut statuses = Vec::new();
    for (n, (label, body)) in CRAFTED.into_iter().enumerate() {
        let req = http::Request::post(server.url("/password/reset"))
            .header("content-type", label)
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap();
        let from = format!("127.0.0.{}", n + 1);
        statuses.push(server.send_from(from.parse().unwrap(), req).await.status);
    }
    let last = http::Request::post(server.url("/password/reset"))
        .header("content-type", FORM)
        .body(Full::new(Bytes::from_static(b"email=victim%40mail.test")))
        .unwrap();
    statuses.push(
        server
            .send_from("127.0.0.9".parse().unwrap(), last)
            .await
            .status,
    );
    assert_eq!(statuses, [200, 200, 200, 429]);
    assert_eq!(sent.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn spelling_variants_spend_one_budget_through_the_real_server() {
    let route = reset_route();
    let router = Arc::try_unwrap(route.router).ok().unwrap();
    let server = TestServer::start(router).await;
    let send = |from: &'static str, uri: String, content_type: &'static str, body: &'static str| {
        let server = &server;
        async move {
            let req = http::Request::post(server.url(&uri))
                .header("content-type", content_type)
                .body(Full::new(Bytes::from_static(body.as_bytes())))
                .unwrap();
            server.send_from(from.parse().unwrap(), req).await
        }
    };
    let first = send(
        "127.0.0.1",
        "/password/reset".into(),
        FORM,
        "email=Alice%40Example.com",
    )
    .await;
    assert_eq!(first.status, 200);
    // The per-recipient pair has fewer retries left than the per-address one.
    assert_eq!(first.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(first.header("x-ratelimit-remaining"), Some("2"));
    let second = send(
        "127.0.0.2",
        "/password/reset?email=%20ALICE@example.com".into(),
        FORM,
        "",
    )
    .await;
    assert_eq!(second.status, 200);
    let json = r#"{"email":"alice@EXAMPLE.com "}"#;
    let third = send("127.0.0.3", "/password/reset".into(), JSON, json).await;
    assert_eq!(third.status, 200);
    assert_eq!(
        third.body,
        format!("sent {json}"),
        "the handler read the exact body"
    );
    let fourth = send(
        "127.0.0.4",
        "/password/reset".into(),
        FORM,
        "email=alice%40example.com",
    )
    .await;
    assert_eq!(fourth.status, 429);
    assert_eq!(route.sent.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_body_over_the_cap_is_refused_with_413() {
    let route = reset_route();
    let padded = format!("email=victim%40mail.test&pad={}", "x".repeat(5000));
    let r = route
        .post("198.51.100.1", "/password/reset", FORM, &padded)
        .await;
    assert_eq!(r.status_code(), 413);
    assert_eq!(route.sent(), 0);
    // Padding is no way around the limit: spend the budget, then pad.
    for _ in 0..3 {
        assert_eq!(route.form("198.51.100.1", "victim@mail.test").await, 200);
    }
    let r = route
        .post("198.51.100.2", "/password/reset", FORM, &padded)
        .await;
    assert_eq!(r.status_code(), 413);
    assert_eq!(route.sent(), 3);
}

#[tokio::test]
async fn a_blank_query_value_does_not_hide_the_body_from_the_limit() {
    let route = reset_route();
    for _ in 0..3 {
        assert_eq!(route.form("198.51.100.1", "victim@mail.test").await, 200);
    }
    let r = route
        .post(
            "198.51.100.2",
            "/password/reset?email=",
            FORM,
            "email=victim%40mail.test",
        )
        .await;
    assert_eq!(r.status_code(), 429);
    assert_eq!(route.sent(), 3);
}

#[tokio::test]
async fn ambiguous_requests_share_one_bucket_whatever_they_name() {
    let route = reset_route();
    let ambiguous = |n: usize| {
        let route = &route;
        async move {
            let uri = format!("/password/reset?email=decoy{n}@mail.test");
            let body = format!("email=target{n}%40mail.test");
            route
                .post(&address(n), &uri, FORM, &body)
                .await
                .status_code()
        }
    };
    assert_eq!(ambiguous(1).await, 200);
    assert_eq!(ambiguous(2).await, 200);
    assert_eq!(ambiguous(3).await, 200);
    // Two fresh identities, but the ambiguity bucket is spent.
    assert_eq!(ambiguous(4).await, 429);
    assert_eq!(route.sent(), 3);
    // The refused request still counted against the identities it named,
    // whose own buckets admitted it: one of their three places is gone.
    assert_eq!(route.form(&address(20), "target4@mail.test").await, 200);
    assert_eq!(route.form(&address(21), "target4@mail.test").await, 200);
    assert_eq!(route.form(&address(22), "target4@mail.test").await, 429);
}

#[tokio::test]
async fn an_ambiguous_request_is_refused_by_a_spent_identity() {
    let route = reset_route();
    for n in 0..3 {
        assert_eq!(route.form(&address(n), "victim@mail.test").await, 200);
    }
    // A decoy in the other place buys no fresh quota.
    let r = route
        .post(
            &address(10),
            "/password/reset?email=decoy@mail.test",
            FORM,
            "email=victim%40mail.test",
        )
        .await;
    assert_eq!(r.status_code(), 429);
    assert_eq!(r.header_str("retry-after"), Some("900"));
    assert_eq!(route.sent(), 3);
}

#[tokio::test]
async fn an_ambiguous_request_is_counted_against_each_identity() {
    let route = reset_route();
    let r = route
        .post(
            &address(1),
            "/password/reset?email=one@mail.test",
            JSON,
            r#"{"email":"two@mail.test"}"#,
        )
        .await;
    assert_eq!(r.status_code(), 200);
    // Each named identity has two attempts left, not three.
    for email in ["one@mail.test", "two@mail.test"] {
        assert_eq!(route.form(&address(2), email).await, 200);
        assert_eq!(route.form(&address(3), email).await, 200);
        assert_eq!(route.form(&address(4), email).await, 429, "{email}");
    }
}

/// One host, well inside its per-address budget, naming 300 mailboxes in
/// each request spends none of their budgets: a request naming more than
/// two identities is refused and counted against no bucket.
#[tokio::test]
async fn a_request_naming_many_mailboxes_is_refused_and_spends_none_of_them() {
    let route = reset_route();
    let query: String = (0..300)
        .map(|n| format!("email=user{n}@mail.test"))
        .collect::<Vec<_>>()
        .join("&");
    let uri = format!("/password/reset?{query}");
    for _ in 0..3 {
        let r = route.post("203.0.113.7", &uri, FORM, "").await;
        assert_eq!(r.status_code(), 429);
        assert_eq!(r.body_text(), "429 Too Many Requests");
        assert_eq!(r.header_str("retry-after"), Some("900"));
        assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
        assert_eq!(r.header_str("x-ratelimit-remaining"), Some("0"));
        // The window's end, on the driver's clock (frozen here).
        let now = route.clock.unix_seconds();
        assert_eq!(
            r.header_str("x-ratelimit-reset"),
            Some(&*(now + 900).to_string())
        );
    }
    // Three in the query and the body together are as many.
    let r = route
        .post(
            "203.0.113.7",
            "/password/reset?email=user0@mail.test&email=user1@mail.test",
            FORM,
            "email=user2%40mail.test",
        )
        .await;
    assert_eq!(r.status_code(), 429);
    assert_eq!(route.sent(), 0);
    // Nothing was counted: not the mailboxes, not the shared bucket.
    assert_eq!(
        route.driver.bucket_count(),
        1,
        "only the per-address bucket"
    );
    let mut locked = 0;
    for n in 0..300 {
        let status = route.form(&address(n), &format!("user{n}@mail.test")).await;
        if status != 200 {
            locked += 1;
        }
    }
    assert_eq!(locked, 0, "{locked} mailboxes were locked out");
    // A spent mailbox gets no attempt by being named among many.
    for n in 0..2 {
        assert_eq!(route.form(&address(n + 400), "user0@mail.test").await, 200);
    }
    let r = route.post("203.0.113.8", &uri, FORM, "").await;
    assert_eq!(r.status_code(), 429);
    assert_eq!(route.sent(), 302);
}

#[tokio::test]
async fn requests_naming_nobody_skip_the_per_recipient_limit() {
    let route = reset_route();
    for n in 0..5 {
        let r = route
            .post("198.51.100.1", "/password/reset", FORM, "name=bob")
            .await;
        assert_eq!(r.status_code(), 200, "request {n}");
        // Only the per-address pair: the per-recipient limit did not run.
        assert_eq!(r.header_str("x-ratelimit-limit"), Some("20"));
    }
    // Nothing was stored under the identity namespace.
    let route_keys = route.driver.bucket_count();
    assert_eq!(route_keys, 1, "only the per-address bucket exists");
}

// ---- A handler that parses multipart with multer --------------------------

/// `POST /password/reset` under the per-recipient limit, its handler
/// reading the `email` part of a multipart body with multer (the parser
/// under axum's `Multipart`) and its `Field::text()`, and recording each
/// mailbox it sends to.
struct MulterRoute {
    router: Router,
    sent_to: Arc<Mutex<Vec<String>>>,
    ran: Arc<AtomicUsize>,
}

fn multer_reset_route() -> MulterRoute {
    let limiter: Arc<dyn RateLimiterDriver> = Arc::new(InMemoryRateLimiter::new());
    let per_recipient = per_recipient(limiter);
    let sent_to = Arc::new(Mutex::new(Vec::new()));
    let ran = Arc::new(AtomicUsize::new(0));
    let (sent, count) = (sent_to.clone(), ran.clone());
    let router = Router::new()
        .post("/password/reset", move |mut req: Request| {
            let (sent, count) = (sent.clone(), count.clone());
            async move {
                count.fetch_add(1, Ordering::SeqCst);
                let label = req.header("content-type").unwrap_or("").to_owned();
                let body = req.bytes().await.unwrap();
                let Ok(boundary) = multer::parse_boundary(&label) else {
                    return HttpResponse::text("no boundary").status(400);
                };
                let stream = futures_util::stream::once(async move { Ok::<_, Infallible>(body) });
                let mut multipart = multer::Multipart::new(stream, boundary);
                while let Ok(Some(field)) = multipart.next_field().await {
                    if field.name() == Some("email") {
                        let email = field.text().await.unwrap_or_default();
                        sent.lock().unwrap().push(email);
                        return HttpResponse::text("sent");
                    }
                }
                HttpResponse::text("no email").status(422)
            }
        })
        .middleware(per_recipient);
    MulterRoute {
        router,
        sent_to,
        ran,
    }
}

const MULTIPART: &str = "multipart/form-data; boundary=real";

impl MulterRoute {
    async fn post(&self, n: usize, body: &str) -> u16 {
        let req = http::Request::post("/password/reset")
            .header("content-type", MULTIPART)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let peer: SocketAddr = format!("{}:4000", address(n)).parse().unwrap();
        handle_request_with_peer(&self.router, req, peer)
            .await
            .status_code()
    }

    /// Ten requests from ten addresses, the `n`th with `body(n)`: multer
    /// reads the victim's mailbox from each, and the limit of 3 holds.
    async fn ten_reach_the_victim_three_times(&self, body: impl Fn(usize) -> String) {
        let mut statuses = Vec::new();
        for n in 0..10 {
            statuses.push(self.post(n, &body(n)).await);
        }
        let sent = self.sent_to.lock().unwrap().clone();
        assert_eq!(
            self.ran.load(Ordering::SeqCst),
            sent.len(),
            "the handler read a mailbox in every request it ran"
        );
        assert!(sent.iter().all(|s| s == "victim@mail.test"), "{sent:?}");
        assert_eq!(sent.len(), 3, "{sent:?}: {statuses:?}");
        assert_eq!(&statuses[..3], &[200, 200, 200]);
        assert!(statuses[3..].iter().all(|&s| s == 429), "{statuses:?}");
    }
}

/// A part whose `Content-Disposition` is `disposition`, holding `value`,
/// after `preamble`, in a body split by `real`.
fn one_part(preamble: &str, disposition: &str, headers: &str, value: &str) -> String {
    format!(
        "{preamble}--real\r\n\
Content-Disposition: {disposition}\r\n\
{headers}\r\n\
{value}\r\n\
--real--\r\n"
    )
}

#[tokio::test]
async fn a_multipart_body_multer_reads_counts_for_its_mailbox() {
    multer_reset_route()
        .ten_reach_the_victim_three_times(|_| {
            one_part("", "form-data; name=\"email\"", "", "victim@mail.test")
        })
        .await;
}

/// multer (3.1) names a part by the first `name` in its
/// `Content-Disposition` that follows a blank or a `;`: a quoted value ends
/// at its closing quote, an unquoted one at the first `;` or space. To it
/// each of these parts is named `email`, where the header's parameters
/// read as RFC 7578 writes them are `name` `email x`, `name` `"email"x`,
/// and a `filename`.
#[tokio::test]
async fn a_part_multer_names_email_counts_for_its_mailbox() {
    for disposition in [
        "form-data; name=email x",
        "form-data; name=\"email\"x",
        "form-data; filename=\"a name=email;\"",
        "form-data; name = email",
    ] {
        let route = multer_reset_route();
        let reached = route.ten_reach_the_victim_three_times(|_| {
            one_part("", disposition, "", "victim@mail.test")
        });
        reached.await;
    }
}

/// multer opens the body at the first `--<boundary>` anywhere in it, after
/// a preamble with no line break before it as well.
#[tokio::test]
async fn a_preamble_with_no_line_break_counts_for_the_mailbox() {
    for preamble in ["x", "preamble --", "\r\nx"] {
        multer_reset_route()
            .ten_reach_the_victim_three_times(|_| {
                one_part(
                    preamble,
                    "form-data; name=\"email\"",
                    "",
                    "victim@mail.test",
                )
            })
            .await;
    }
}

/// multer's `Field::text()` decodes a part by the `charset` of its own
/// `Content-Type`. In ISO-2022-JP an escape back to ASCII (`ESC ( B`) may
/// stand before any character: each place of it is other bytes, and the
/// same mailbox to the handler.
#[tokio::test]
async fn a_part_in_another_charset_counts_for_the_mailbox() {
    let mailbox = "victim@mail.test";
    multer_reset_route()
        .ten_reach_the_victim_three_times(|n| {
            let value = format!("{}\u{1b}(B{}", &mailbox[..n], &mailbox[n..]);
            let headers = "Content-Type: text/plain; charset=iso-2022-jp\r\n";
            one_part("", "form-data; name=\"email\"", headers, &value)
        })
        .await;
}

/// `Field::text()` drops a UTF-8 byte order mark: a part with one names the
/// mailbox of the part without.
#[tokio::test]
async fn a_part_with_a_byte_order_mark_counts_for_the_mailbox() {
    multer_reset_route()
        .ten_reach_the_victim_three_times(|n| {
            let bom = if n % 2 == 1 { "\u{feff}" } else { "" };
            let value = format!("{bom}victim@mail.test");
            one_part("", "form-data; name=\"email\"", "", &value)
        })
        .await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn the_stored_key_holds_the_hash_and_not_the_address() {
    use support::redis::RedisServer;
    use suprnova::rate_limit::redis::RedisRateLimiter;
    use suprnova::redis_client::{RedisConfig, RedisConnection};

    let server = RedisServer::start();
    let prefix = support::unique_prefix("identity");
    let conn = RedisConnection::new(RedisConfig::from_url(&server.url()).unwrap()).unwrap();
    let limiter: Arc<dyn RateLimiterDriver> =
        Arc::new(RedisRateLimiter::new(conn).with_prefix(&prefix));
    let router = Router::new()
        .post("/password/reset", |_req: Request| async {
            HttpResponse::text("sent")
        })
        .middleware(
            RateLimitMiddleware::new(
                limiter,
                SlidingWindowConfig::new(3, Duration::from_secs(2)),
                |req| identity_key(req, "email", "auth-issuance"),
            )
            .key_reads_body(4096)
            .only_when(|req| names_identity(req, "email")),
        );
    let req = http::Request::post("/password/reset")
        .header("content-type", FORM)
        .body(Full::new(Bytes::from_static(b"email=Alice%40Example.com")))
        .unwrap();
    let r = handle_request_with_peer(&router, req, "203.0.113.61:5000".parse().unwrap()).await;
    assert_eq!(r.status_code(), 200);

    let keys = server.command(&format!("KEYS {prefix}*"));
    let expected = format!("{prefix}{}", id("alice@example.com"));
    assert!(keys.contains(&expected), "{keys}");
    assert!(!keys.contains("203.0.113.61"), "{keys}");
    assert!(!keys.to_lowercase().contains("alice"), "{keys}");
    assert!(keys.starts_with("*1\r\n"), "exactly one key: {keys}");
}
