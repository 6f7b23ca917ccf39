//! A `redis-server` of the bench's own on a free loopback port (never 6379)
//! and on a Unix socket in its scratch directory, with no persistence,
//! stopped on drop; and the `INFO commandstats`
//! counters, to count round trips.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The socket's file name in the scratch directory.
const SOCKET: &str = "redis.sock";

/// One `redis-server` child process.
pub struct RedisProcess {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl RedisProcess {
    /// Starts a server and waits until it answers `PING`. Panics with the
    /// fix when `redis-server` is missing: the bench never skips silently.
    pub fn start() -> Self {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
            listener.local_addr().unwrap().port()
        };
        let dir = std::env::temp_dir().join(format!(
            "suprnova-bench-redis-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("a scratch directory for redis-server");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(["--dir", dir.to_str().unwrap(), "--logfile", "redis.log"])
            .args(["--unixsocket", dir.join(SOCKET).to_str().unwrap()])
            .args(["--unixsocketperm", "700"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("could not start redis-server: apt-get install redis-server");
        let server = Self { child, port, dir };
        let start = Instant::now();
        while !server.command("PING").starts_with("+PONG") {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server did not answer PING"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id of the server, for /proc.
    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `unix://<scratch directory>/redis.sock`: the same server over its
    /// Unix socket.
    pub fn socket_url(&self) -> String {
        format!("unix://{}", self.dir.join(SOCKET).display())
    }

    /// A connection of the crate to this server over TCP, built inside
    /// `runtime`.
    #[cfg(feature = "redis")]
    pub fn connection(
        &self,
        runtime: &tokio::runtime::Runtime,
    ) -> suprnova::redis_client::RedisConnection {
        self.connection_at(&self.url(), runtime)
    }

    /// A connection of the crate to `url`, one of this server's two
    /// addresses, built inside `runtime`.
    #[cfg(feature = "redis")]
    pub fn connection_at(
        &self,
        url: &str,
        runtime: &tokio::runtime::Runtime,
    ) -> suprnova::redis_client::RedisConnection {
        use suprnova::redis_client::{RedisConfig, RedisConnection};
        let config = RedisConfig::from_url(url)
            .expect("a Redis URL")
            .with_timeouts(Duration::from_secs(2), Duration::from_secs(2));
        let _guard = runtime.enter();
        RedisConnection::new(config).expect("a Redis connection")
    }

    /// Sends one inline command and returns the whole raw reply.
    pub fn command(&self, command: &str) -> String {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return String::new();
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream
            .write_all(format!("{command}\r\n").as_bytes())
            .is_err()
        {
            return String::new();
        }
        let mut reply = Vec::new();
        let mut buf = [0_u8; 64 * 1024];
        // A bulk reply may come in several reads: read until it is whole.
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buf[..n]);
            if reply_is_whole(&reply) {
                break;
            }
        }
        String::from_utf8_lossy(&reply).into_owned()
    }

    /// A counter of `INFO stats` (`total_commands_processed`,
    /// `total_reads_processed`, ...), 0 when Redis does not report it.
    pub fn stat(&self, field: &str) -> u64 {
        self.command("INFO stats")
            .lines()
            .find_map(|line| {
                line.strip_prefix(field)?
                    .strip_prefix(':')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }

    /// The `calls` of every command in `INFO commandstats`, by command.
    pub fn command_calls(&self) -> HashMap<String, u64> {
        self.command("INFO commandstats")
            .lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?;
                Some((name.to_owned(), calls.parse().ok()?))
            })
            .collect()
    }
}

/// A simple string, an error, an integer, a bulk string whose announced
/// length has arrived, or an array of bulk strings that has all its lines.
fn reply_is_whole(reply: &[u8]) -> bool {
    let text = String::from_utf8_lossy(reply);
    match reply.first() {
        Some(b'$') => text
            .split_once("\r\n")
            .and_then(|(len, body)| Some(body.len() >= len[1..].parse::<usize>().ok()? + 2))
            .unwrap_or(false),
        // An array of bulk strings: its count line, then two lines each.
        Some(b'*') => text
            .split_once("\r\n")
            .and_then(|(len, _)| len[1..].parse::<usize>().ok())
            .is_some_and(|n| text.matches("\r\n").count() > 2 * n),
        Some(_) => text.ends_with("\r\n"),
        None => false,
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The difference of two `INFO commandstats` snapshots, without zeros.
pub fn calls_between(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
) -> HashMap<String, u64> {
    after
        .iter()
        .map(|(name, &calls)| (name.clone(), calls - before.get(name).copied().unwrap_or(0)))
        .filter(|&(_, calls)| calls > 0)
        .collect()
}
