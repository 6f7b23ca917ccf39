//! The examples, built once and run as a user runs them: from an empty
//! directory, with only the variables a test gives.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;

use super::http::Reply;

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

/// A command for an example with only `vars` in its environment, run from
/// an empty directory so that no `.env` leaks in.
pub fn command(name: &str, vars: &[(&str, &str)]) -> Command {
    let dir = std::env::temp_dir().join(format!("suprnova-examples-cwd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("an empty working directory");
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

/// Lines of a pipe, read on a thread of their own.
#[derive(Clone)]
pub struct Lines(Arc<Mutex<Vec<String>>>);

impl Lines {
    pub fn read(pipe: impl Read + Send + 'static) -> Self {
        let lines = Lines(Arc::default());
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                sink.0.lock().unwrap().push(line);
            }
        });
        lines
    }

    pub fn text(&self) -> String {
        self.0.lock().unwrap().join("\n")
    }
}

/// Runs an example that exits by itself; its stdout and stderr.
pub fn run_to_exit(name: &str, vars: &[(&str, &str)], limit: Duration) -> (String, String) {
    let mut child = command(name, vars).spawn().expect("start the example");
    let stdout = Lines::read(child.stdout.take().unwrap());
    let stderr = Lines::read(child.stderr.take().unwrap());
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
    // Let the readers drain.
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        status.success(),
        "{name} failed ({status}):\n{}\n{}",
        stdout.text(),
        stderr.text()
    );
    (stdout.text(), stderr.text())
}

/// A served example: killed on drop.
pub struct Served {
    child: Child,
    /// What the example printed on stdout.
    pub stdout: Lines,
    /// What the example printed on stderr.
    pub stderr: Lines,
    base: String,
    clients: Mutex<
        HashMap<
            std::net::IpAddr,
            hyper_util::client::legacy::Client<
                hyper_util::client::legacy::connect::HttpConnector,
                Full<Bytes>,
            >,
        >,
    >,
}

impl Served {
    pub fn start(name: &str, vars: &[(&str, &str)]) -> Self {
        let mut all = vec![("PORT", "0")];
        all.extend_from_slice(vars);
        let mut child = command(name, &all).spawn().expect("start the example");
        let stdout = Lines::read(child.stdout.take().unwrap());
        let stderr = Lines::read(child.stderr.take().unwrap());
        let started = Instant::now();
        let base = loop {
            let found = stdout.0.lock().unwrap().iter().find_map(|line| {
                let at = line.find("listening on http://")?;
                Some(line[at + "listening on ".len()..].trim().to_owned())
            });
            if let Some(base) = found {
                break base;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "{name} exited ({status}) before listening:\n{}\n{}",
                    stdout.text(),
                    stderr.text()
                );
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("{name} did not listen within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Self {
            child,
            stdout,
            stderr,
            base,
            clients: Mutex::default(),
        }
    }

    pub async fn send(&self, method: &str, path: &str, form: Option<&str>) -> Reply {
        let local = std::net::IpAddr::from([127, 0, 0, 1]);
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
                let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
                connector.set_local_address(Some(local));
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build(connector)
            })
            .clone();
        let response = tokio::time::timeout(Duration::from_secs(10), client.request(request))
            .await
            .expect("the example answered within 10 s")
            .expect("the request reached the example");
        Reply::read(response).await
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
