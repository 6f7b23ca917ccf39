//! A handler the test holds while it looks at what a request holds, and
//! the waits that go with it.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use suprnova::rate_limit::ConnectionsPerIp;
use suprnova::{HttpResponse, Request, Router};
use tokio::sync::{Semaphore, mpsc};

/// A handler that reports when it starts and then waits until the test
/// releases it, so the test can look at the counts while it runs.
#[derive(Clone)]
pub struct Gate {
    /// Told once each time a handler has started.
    pub entered: mpsc::UnboundedSender<()>,
    /// The permits a held handler waits for.
    pub release: Arc<Semaphore>,
}

impl Gate {
    pub fn new() -> (Self, mpsc::UnboundedReceiver<()>) {
        let (entered, rx) = mpsc::unbounded_channel();
        let gate = Self {
            entered,
            release: Arc::new(Semaphore::new(0)),
        };
        (gate, rx)
    }

    pub fn router(&self, path: &str, cap: &ConnectionsPerIp) -> Router {
        Router::new()
            .get(path, self.handler())
            .middleware(cap.clone())
    }

    /// The held handler: it reports its start, keeps its request (and so
    /// what the request holds) until released, then answers `done`.
    pub fn handler(&self) -> impl Fn(Request) -> BoxFuture<'static, HttpResponse> + use<> {
        let gate = self.clone();
        move |req: Request| {
            let gate = gate.clone();
            Box::pin(async move {
                let _held = req;
                let _ = gate.entered.send(());
                let _permit = gate.release.acquire().await.unwrap();
                HttpResponse::text("done")
            })
        }
    }

    pub fn release(&self, n: usize) {
        self.release.add_permits(n);
    }
}

pub async fn entered(rx: &mut mpsc::UnboundedReceiver<()>) {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("the handler did not start in time")
        .unwrap();
}

/// Waits until `cap` reports `want` for `addr`, for at most 5 s.
pub async fn open_becomes(cap: &ConnectionsPerIp, addr: IpAddr, want: usize) {
    let start = Instant::now();
    while cap.open_for(addr) != want {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "open_for({addr}) stayed {} instead of {want}",
            cap.open_for(addr)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
