//! Handlers: the function at the end of a route's chain.

use std::future::Future;

use futures_util::future::BoxFuture;

use crate::http::{IntoResponse, Request, Response};

/// The function a route runs after its middleware.
///
/// Any `async fn(Request) -> R` (or closure returning a future) where `R` is
/// an [`HttpResponse`](crate::HttpResponse), a [`Response`], a `String` or a
/// `&'static str` is a handler.
pub trait Handler: Send + Sync + 'static {
    /// Runs the handler.
    fn call(&self, request: Request) -> BoxFuture<'static, Response>;
}

impl<F, Fut, R> Handler for F
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoResponse,
{
    fn call(&self, request: Request) -> BoxFuture<'static, Response> {
        let fut = self(request);
        Box::pin(async move { fut.await.into_response() })
    }
}
