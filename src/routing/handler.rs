//! Handlers: the function at the end of a route's chain.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::http::{HttpResponse, IntoResponse, Request, Response};

/// The function a route runs after its middleware.
///
/// Any `async fn(Request) -> R` (or closure returning a future) where `R` is
/// an [`HttpResponse`], a [`Response`], a `String` or a
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
    /// A panic while the handler's future runs is its route's answer,
    /// `500`, inside the route's middleware (one while a handler makes its
    /// future, before it returns one, is answered 500 by the server): a throttle still
    /// counts the request (its `after` callbacks see the 500) and adds its
    /// headers, as Laravel's pipeline turns an exception into a response
    /// before its throttle sees it.
    fn call(&self, request: Request) -> BoxFuture<'static, Response> {
        let fut = self(request);
        Box::pin(async move {
            match AssertUnwindSafe(fut).catch_unwind().await {
                Ok(answer) => answer.into_response(),
                Err(_) => Ok(panicked()),
            }
        })
    }
}

/// The answer to a request whose handler or middleware panicked.
pub(crate) fn panicked() -> HttpResponse {
    tracing::error!("a handler or middleware panicked; answering 500");
    HttpResponse::internal_server_error()
}
