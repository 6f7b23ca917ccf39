//! The examples, built and run as a user runs them, and asked over HTTP on
//! loopback or read from what they print: each does what its doc comment
//! and the docs say.

mod support;

use std::time::Duration;

use support::examples::{self, Running};

/// Runs example `name` to its end, which must be a success: what it
/// printed on stdout and stderr.
fn printed(name: &str, vars: &[(&str, &str)], limit: Duration) -> (String, String) {
    let exited = examples::run_to_exit(name, vars, limit);
    assert!(
        exited.status.success(),
        "{name} failed ({}):\n{}\n{}",
        exited.status,
        exited.stdout,
        exited.stderr
    );
    (exited.stdout, exited.stderr)
}

/// What `examples/laravel_migration.rs` says its routes do: the curl lines
/// it logs, run with a real client.
async fn laravel_migration_routes(app: &Running) {
    let user = app.send("GET", "/api/user", None).await;
    assert_eq!(user.status, 200, "{}", user.body);
    assert_eq!(
        (
            user.header("x-ratelimit-limit"),
            user.header("x-ratelimit-remaining")
        ),
        (Some("60"), Some("59"))
    );
    assert!(user.body.contains("\"ip\":\"127.0.0.1\""), "{}", user.body);

    // `for i in $(seq 4); do curl -X POST /api/uploads; done`: 3 a minute.
    let mut uploads = Vec::new();
    for _ in 0..4 {
        uploads.push(app.send("POST", "/api/uploads", None).await);
    }
    let statuses: Vec<u16> = uploads.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [201, 201, 201, 429]);
    let left: Vec<Option<&str>> = uploads
        .iter()
        .map(|r| r.header("x-ratelimit-remaining"))
        .collect();
    assert_eq!(left, [Some("2"), Some("1"), Some("0"), Some("0")]);
    assert!(
        uploads
            .iter()
            .all(|r| r.header("x-ratelimit-limit") == Some("3"))
    );
    let retry: u64 = uploads[3].header("retry-after").unwrap().parse().unwrap();
    assert!((59..=60).contains(&retry), "{retry}");

    // Failed sign-ins only, 5 a minute, with the limiter's own answer.
    let mut logins = Vec::new();
    for _ in 0..6 {
        logins.push(app.send("POST", "/login", Some("password=guess")).await);
    }
    let statuses: Vec<u16> = logins.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [422, 422, 422, 422, 422, 429]);
    assert_eq!(
        logins[5].body,
        "Too many login attempts. Please try again later.\n"
    );
    assert_eq!(logins[4].header("x-ratelimit-remaining"), Some("0"));
    assert!(logins[5].header("retry-after").is_some());

    let export = app.send("GET", "/export", None).await;
    assert_eq!(export.status, 200);
    assert_eq!(
        (
            export.header("x-ratelimit-limit"),
            export.header("x-ratelimit-remaining")
        ),
        (Some("10"), Some("9"))
    );

    let limits = app.send("GET", "/limits", None).await;
    assert_eq!(limits.status, 200);
    for (key, count) in [
        ("api:127.0.0.1", 1),
        ("uploads:127.0.0.1:attempts:3:decay:60", 3),
        ("uploads:127.0.0.1:attempts:20:decay:86400", 3),
        ("login:127.0.0.1", 5),
        ("ip:127.0.0.1:path:/export", 1),
    ] {
        let line = limits
            .body
            .lines()
            .find(|l| l.starts_with(&format!("{key}: ")))
            .unwrap_or_else(|| panic!("no line for {key} in:\n{}", limits.body));
        assert!(
            line.starts_with(&format!("{key}: {count} attempts, window ends in ")),
            "{line}"
        );
    }
}

#[tokio::test]
async fn the_laravel_migration_example_on_memory_does_what_its_curl_lines_say() {
    let app = Running::start("laravel_migration", &[("CACHE_STORE", "memory")]);
    laravel_migration_routes(&app).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn the_laravel_migration_example_stores_laravels_keys_in_its_own_redis() {
    let redis = support::redis::RedisServer::start();
    let url = redis.url();
    let app = Running::start("laravel_migration", &[("REDIS_URL", url.as_str())]);
    laravel_migration_routes(&app).await;
    // Laravel's cache database is 1, and its prefixes come before the key.
    let client = redis::Client::open(format!("{url}/1")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for (key, count) in [
        ("api:127.0.0.1", "1"),
        ("uploads:127.0.0.1:attempts:3:decay:60", "3"),
        ("login:127.0.0.1", "5"),
        ("ip:127.0.0.1:path:/export", "1"),
    ] {
        let full = format!("laravel-database-laravel-cache-{key}");
        let value: Option<String> = redis::cmd("GET")
            .arg(&full)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(value.as_deref(), Some(count), "{full}");
        let ttl: i64 = redis::cmd("TTL")
            .arg(&full)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!((1..=60).contains(&ttl), "{full}: {ttl}");
        let timer: Option<String> = redis::cmd("GET")
            .arg(format!("{full}:timer"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            timer.is_some_and(|t| t.parse::<i64>().is_ok()),
            "{full}:timer"
        );
    }
    drop(app);
}

#[test]
fn the_login_protection_example_prints_what_its_doc_comment_promises() {
    let (out, err) = printed("login_protection", &[], Duration::from_secs(60));
    let runs = |title: &str| -> String {
        let mut lines = out.lines();
        lines
            .find(|l| l.starts_with(title))
            .unwrap_or_else(|| panic!("no {title:?} in:\n{out}\n{err}"));
        lines.next().unwrap_or_default().trim().to_owned()
    };
    // 1. One address, many accounts: 20 a minute per address.
    assert_eq!(runs("1. "), "401 x20, 429 x5");
    // 2. Many addresses, one account: 5 per account.
    assert_eq!(runs("2. "), "401 x5, 429 x3");
    // 3. Capitals reach the same bucket.
    assert_eq!(runs("3. "), "429 x1");
    // 4. A decoy buys no fresh quota.
    assert_eq!(runs("4. "), "429 x1");
    // 5. Naming nobody skips the per-recipient limit.
    assert_eq!(runs("5. "), "422 x1");
    #[cfg(feature = "redis")]
    assert_eq!(runs("6. "), "503 x1");
}

#[test]
fn the_websocket_caps_example_refuses_the_fourth_socket_and_the_eleventh_opening() {
    let (out, err) = printed("websocket_caps", &[], Duration::from_secs(60));
    let all = format!("{out}\n{err}");
    for n in 1..=3 {
        assert!(
            out.contains(&format!("socket {n}: open, echoes \"hello\"")),
            "{all}"
        );
    }
    assert!(out.contains("open for 127.0.0.1: 3"), "{all}");
    let step2 = out
        .lines()
        .skip_while(|l| !l.starts_with("2. "))
        .nth(1)
        .unwrap_or_default();
    assert!(step2.contains("refused: 429"), "{all}");
    assert!(step2.contains("Retry-After: none"), "{all}");
    assert!(out.contains("open for 127.0.0.2: 1"), "{all}");
    assert!(
        out.contains("open for 127.0.0.1 after the close: 2"),
        "{all}"
    );
    for n in 6..=10 {
        assert!(
            out.contains(&format!("attempt {n}: open, then closed")),
            "attempt {n}:\n{all}"
        );
    }
    for n in 11..=12 {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("attempt {n}:")))
            .unwrap_or_else(|| panic!("no attempt {n}:\n{all}"));
        assert!(line.contains("refused: 429"), "{line}");
        assert!(!line.contains("Retry-After: none"), "{line}");
    }
}

#[cfg(feature = "redis")]
#[test]
fn the_redis_cluster_example_shares_one_exact_limit_between_its_replicas() {
    let cluster = support::redis::RedisCluster::start(3);
    let url = cluster.url();
    let (out, err) = printed(
        "redis_cluster",
        &[("RATE_LIMIT_REDIS_URL", url.as_str())],
        Duration::from_secs(120),
    );
    let all = format!("{out}\n{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("replica ")).count(),
        4,
        "{all}"
    );
    let admitted: Vec<&str> = out
        .lines()
        .filter(|l| l.ends_with(" admitted") && l.trim_start().starts_with("example:"))
        .collect();
    assert_eq!(admitted.len(), 4, "{all}");
    for line in &admitted {
        assert!(line.ends_with(": 100 admitted"), "{line}");
    }
    assert!(out.contains("after the wait: admitted = true"), "{all}");
    for hit in 1..=5 {
        assert!(out.contains(&format!("hit {hit} from replica")), "{all}");
    }
    let verdicts: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("hit "))
        .map(|l| l.rsplit(": ").next().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        [
            "admitted", "admitted", "admitted", "admitted", "admitted", "refused", "refused"
        ]
    );
    let summary = out
        .lines()
        .find(|l| l.trim_start().starts_with("attempts = "))
        .unwrap_or_else(|| panic!("{all}"));
    assert!(
        summary
            .trim_start()
            .starts_with("attempts = 7, available in "),
        "{summary}"
    );
}
