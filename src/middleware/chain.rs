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

/// A route's middleware (outermost first) and its handler.
#[derive(Clone)]
pub(crate) struct RouteChain {
    pub(crate) stack: Vec<Arc<dyn Middleware>>,
    pub(crate) handler: Arc<dyn Handler>,
}

/// An owned way to reach one [`RouteChain`], which every [`Next`] of a
/// request holds a clone of.
///
/// The chain itself is shared by every request of the route, on every core;
/// a handle whose clone writes a reference count that only one connection
/// writes (the server's) keeps a request from writing a cache line the
/// other cores' requests write too.
pub(crate) trait ChainHandle: Clone + Send + Sync + 'static {
    /// The chain this handle reaches.
    fn chain(&self) -> &RouteChain;
}

impl ChainHandle for Arc<RouteChain> {
    fn chain(&self) -> &RouteChain {
        self
    }
}

/// Runs the chain's `stack[from..]` (outermost first) and then its handler.
pub(crate) fn run_chain<H: ChainHandle>(
    handle: H,
    from: usize,
    request: Request,
) -> BoxFuture<'static, Response> {
    let chain = handle.chain();
    if from >= chain.stack.len() {
        let mut request = request;
        request.enter_handler();
        return chain.handler.call(request);
    }
    Box::pin(async move {
        let rest = handle.clone();
        let next: Next = Box::new(move |request| run_chain(rest, from + 1, request));
        // Through the trait object itself: `middleware.handle` would pick
        // the `Arc` impl above, one more boxed future a request.
        let middleware: &dyn Middleware = &*handle.chain().stack[from];
        middleware.handle(request, next).await
    })
}
