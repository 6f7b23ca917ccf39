//! Quickstart: a small application served on 127.0.0.1:8080 (`PORT`
//! overrides).
//!
//! Run it with `cargo run --example quickstart`, then:
//!
//! ```text
//! curl -i http://127.0.0.1:8080/
//! ```

use suprnova::{HttpResponse, Request, Router};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let port: u16 = std::env::var("PORT")
        .ok()
        .map(|p| p.parse())
        .transpose()
        .map_err(|e| format!("PORT is invalid: {e}"))?
        .unwrap_or(8080);
    let router = Router::new().get("/", |_req: Request| async {
        HttpResponse::text("Hello from Suprnova.\n")
    });
    let server = suprnova::server::bind(("127.0.0.1", port)).await?;
    let addr = server.local_addr()?;
    tracing::info!(%addr, "listening; try: curl -i http://{addr}/");
    server.serve(router).await?;
    Ok(())
}
