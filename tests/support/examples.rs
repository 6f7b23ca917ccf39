//! The examples, built once and run as a user runs them: from an empty
//! directory, with only the variables a test gives.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::http::Reply;

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Longest wait for an example to listen.
const START_LIMIT: Duration = Duration::from_secs(30);

/// Every example of the crate, built in one cargo call the first time one
/// is asked for, with the profile and the features of the running test.
const EXAMPLES: [&str; 5] = [
    "quickstart",
    "laravel_migration",
    "login_protection",
    "websocket_caps",
    "redis_cluster",
];

/// The built example `name`.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        // This test runs from <target>/<profile>/deps; examples land in
        // <target>/<profile>/examples.
        let exe = std::env::current_exe().expect("the path of this test binary");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test binary sits in <target>/<profile>/deps")
            .to_path_buf();
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev".to_owned(),
            Some(name) => name.to_owned(),
        };
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "--quiet"]);
        for example in EXAMPLES {
            build.args(["--example", example]);
        }
        build
            .args(["--profile", &profile, "--no-default-features"])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        // Cargo runs this test with the variables of this package set
        // (CARGO_PKG_NAME and the like). Build scripts that watch them would
        // see a change and rebuild half the dependency tree, for this build
        // and again for the next `cargo test`.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            let set_for_this_run = name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_MANIFEST_")
                || name.starts_with("CARGO_BIN_")
                || matches!(
                    name.as_ref(),
                    "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR"
                );
            if set_for_this_run {
                build.env_remove(name.as_ref());
            }
        }
        // The features this test was built with, `default` among them when
        // it was on: another set is another build of the crate, which cargo
        // would compile again here.
        let features: Vec<&str> = [
            ("default", cfg!(feature = "default")),
            ("redis", cfg!(feature = "redis")),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        if !features.is_empty() {
            build.args(["--features", &features.join(",")]);
        }
        let status = build.status().expect("run cargo build --example");
        assert!(status.success(), "cargo build of the examples failed");
        profile_dir.join("examples")
    });
    let binary = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(binary.is_file(), "no binary at {}", binary.display());
    binary
}

/// A command for example `name` with only `vars` (and `RUST_LOG=info`) in
/// its environment, run from an empty directory so that no `.env` of the
/// developer's leaks in.
pub fn command(name: &str, vars: &[(&str, &str)]) -> Command {
    static EMPTY_DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = EMPTY_DIR.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("suprnova-examples-cwd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create an empty working directory");
        dir
    });
    let mut command = Command::new(binary(name));
    command
        .env_clear()
        .env("RUST_LOG", "info")
        .envs(vars.iter().copied())
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The lines of a pipe, read on a thread of its own.
pub struct Pipe {
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl Pipe {
    pub fn read(pipe: impl Read + Send + 'static) -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            lines,
            reader: Some(reader),
        }
    }

    /// The lines read so far.
    pub fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Every line, once the process has exited and closed the pipe.
    pub fn finish(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the pipe reader");
        }
        self.text()
    }
}

/// A running example, killed on drop.
pub struct Running {
    name: String,
    /// The example's process.
    pub child: Child,
    /// What it printed on stdout.
    pub stdout: Pipe,
    /// What it printed on stderr.
    pub stderr: Pipe,
    /// The address it listens on, as `http://127.0.0.1:<port>`.
    pub base: String,
    /// One keep-alive client for each source address.
    clients: Mutex<HashMap<IpAddr, Client<HttpConnector, Full<Bytes>>>>,
}

impl Running {
    /// Starts example `name` with `PORT=0` (a free port) and `vars`, and
    /// returns once it has logged the address it listens on.
    pub fn start(name: &str, vars: &[(&str, &str)]) -> Self {
        let mut all = vec![("PORT", "0")];
        all.extend_from_slice(vars);
        let mut child = command(name, &all).spawn().expect("start the example");
        let stdout = Pipe::read(child.stdout.take().unwrap());
        let stderr = Pipe::read(child.stderr.take().unwrap());
        let started = Instant::now();
        let base = loop {
            let listening = stdout.lines.lock().unwrap().iter().find_map(|line| {
                let at = line.find("listening on http://")?;
                Some(line[at + "listening on ".len()..].trim().to_owned())
            });
            if let Some(base) = listening {
                break base;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "{name} exited ({status}) before listening:\n{}\n{}",
                    stdout.text(),
                    stderr.text()
                );
            }
            if started.elapsed() > START_LIMIT {
                let _ = child.kill();
                panic!("{name} did not listen within {START_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Self {
            name: name.to_owned(),
            child,
            stdout,
            stderr,
            base,
            clients: Mutex::default(),
        }
    }

    /// Every line logged so far.
    pub fn log(&self) -> String {
        self.stdout.text()
    }

    /// Sends `method path`, with `form` as a form body, from 127.0.0.1.
    pub async fn send(&self, method: &str, path: &str, form: Option<&str>) -> Reply {
        self.send_from(LOCALHOST, method, path, form).await
    }

    /// Sends `method path` with `form` from `local`, any address of
    /// 127.0.0.0/8, so that the quickstart sees another client.
    pub async fn send_from(
        &self,
        local: IpAddr,
        method: &str,
        path: &str,
        form: Option<&str>,
    ) -> Reply {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if form.is_some() {
            request = request.header("content-type", "application/x-www-form-urlencoded");
        }
        let request = request
            .body(Full::new(Bytes::from(form.unwrap_or("").to_owned())))
            .unwrap();
        let client = self
            .clients
            .lock()
            .unwrap()
            .entry(local)
            .or_insert_with(|| {
                let mut connector = HttpConnector::new();
                connector.set_local_address(Some(local));
                Client::builder(TokioExecutor::new()).build(connector)
            })
            .clone();
        let response = tokio::time::timeout(Duration::from_secs(10), client.request(request))
            .await
            .unwrap_or_else(|_| panic!("{} answered within 10 s", self.name))
            .unwrap_or_else(|e| panic!("the request reached {}: {e}", self.name));
        Reply::read(response).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send("GET", path, None).await
    }

    /// `count` GETs of `path` in a row, from 127.0.0.1.
    pub async fn get_times(&self, path: &str, count: usize) -> Vec<Reply> {
        let mut replies = Vec::with_capacity(count);
        for _ in 0..count {
            replies.push(self.get(path).await);
        }
        replies
    }

    /// Waits (bounded) for the process to exit.
    pub fn wait_for_exit(&mut self, limit: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < limit,
                "{} was still running after {limit:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What an example that exited left behind.
pub struct Exited {
    /// How it exited.
    pub status: ExitStatus,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
}

/// Starts example `name` with `vars` on a free port and waits for it to
/// exit, failing the test if it is still running after `limit`.
pub fn run_to_exit(name: &str, vars: &[(&str, &str)], limit: Duration) -> Exited {
    let mut all = vec![("PORT", "0")];
    all.extend_from_slice(vars);
    let mut child = command(name, &all).spawn().expect("start the example");
    let mut stdout = Pipe::read(child.stdout.take().unwrap());
    let mut stderr = Pipe::read(child.stderr.take().unwrap());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{name} still ran after {limit:?}:\n{}\n{}",
                stdout.text(),
                stderr.text()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Exited {
        status,
        stdout: stdout.finish(),
        stderr: stderr.finish(),
    }
}
