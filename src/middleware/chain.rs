//! The `Middleware` trait and the chain that runs a route.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::http::{Request, Response};
use crate::routing::Handler;

/// The rest of the chain: call it with the request to run the next
/// middleware, and in the end the handler.
pub type Next = Box<dyn FnOnce(Request) -> BoxFuture<'static, Response> + Send>;

/// Code that runs around a route's handler; see the [module docs](crate::middleware).
#[async_trait::async_trait]
pub trait Middleware: Send + Sync + 'static {
    /// Handles `request`, calling `next(request).await` to run the rest of
    /// the chain, or answering without it.
    async fn handle(&self, request: Request, next: Next) -> Response;
}

#[async_trait::async_trait]
impl<M: Middleware + ?Sized> Middleware for Arc<M> {
    async fn handle(&self, request: Request, next: Next) -> Response {
        (**self).handle(request, next).await
    }
}

/// Runs `stack[from..]` (outermost first) and then `handler`.
pub(crate) fn run_chain(
    stack: Arc<[Arc<dyn Middleware>]>,
    from: usize,
    handler: Arc<dyn Handler>,
    request: Request,
) -> BoxFuture<'static, Response> {
    match stack.get(from).cloned() {
        None => handler.call(request),
        Some(middleware) => Box::pin(async move {
            let next: Next = Box::new(move |request| run_chain(stack, from + 1, handler, request));
            // Through the trait object itself: `middleware.handle` would
            // pick the `Arc` impl above, one more boxed future a request.
            (*middleware).handle(request, next).await
        }),
    }
}
