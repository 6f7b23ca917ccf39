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
    /// before its throttle sees it. So is an answer with a `1xx` status
    /// that is no WebSocket route's `101`, which cannot be a final answer:
    /// the route's middleware see the `500` the client gets.
    fn call(&self, request: Request) -> BoxFuture<'static, Response> {
        let fut = self(request);
        Box::pin(async move {
            match AssertUnwindSafe(fut).catch_unwind().await {
                Ok(answer) => final_answer(answer.into_response()),
                Err(_) => Ok(panicked()),
            }
        })
    }
}

/// A handler's `answer`, or `500` in place of a `1xx` that is no WebSocket
/// route's `101` (one that carries its upgrade). Any other `1xx` cannot be
/// a final answer: a `101` that is no WebSocket route's switches to no
/// protocol (RFC 9110, 15.2.2), and over HTTP/2 an interim HEADERS frame
/// that ends its stream is malformed (RFC 9113, 8.1), while hyper answers a
/// `100` or a `103` over HTTP/1 with a `500` of its own, and drops the
/// connection and the requests pipelined on it. Replaced here, where the
/// answer is made, rather than when it leaves the router, the route's
/// middleware see the `500`: a throttle adds its headers to it, and counts
/// it with its `after` callbacks, as it does a panic's.
fn final_answer(mut answer: Response) -> Response {
    let (Ok(response) | Err(response)) = &mut answer;
    if response.status_code_typed().is_informational() && !crate::ws::carries_upgrade(response) {
        tracing::error!(
            status = response.status_code(),
            "a handler answered with a 1xx status that is no WebSocket upgrade; answering 500"
        );
        *response = HttpResponse::internal_server_error();
    }
    answer
}

/// The answer to a request whose handler or middleware panicked.
pub(crate) fn panicked() -> HttpResponse {
    tracing::error!("a handler or middleware panicked; answering 500");
    HttpResponse::internal_server_error()
}
