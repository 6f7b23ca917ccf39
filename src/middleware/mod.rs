//! Middleware: code that runs around a route's handler.
//!
//! A [`Middleware`] receives the request and [`Next`], the rest of the chain.
//! It may answer by itself (return `Err(response)` to short-circuit, or
//! `Ok(response)`), or call `next(request).await` and change what comes back.
//!
//! ```
//! use suprnova::{async_trait, HttpResponse, Middleware, Next, Request, Response};
//!
//! struct RequireHeader;
//!
//! #[async_trait]
//! impl Middleware for RequireHeader {
//!     async fn handle(&self, request: Request, next: Next) -> Response {
//!         if request.header("x-token").is_none() {
//!             return Err(HttpResponse::text("401 Unauthorized").status(401));
//!         }
//!         let mut response = next(request).await?;
//!         response.set_header("X-Checked", "yes");
//!         Ok(response)
//!     }
//! }
//! ```
//!
//! Routes name middleware by alias too: [`register_middleware_alias`] and
//! [`register_middleware_alias_with_args`] register a name, and
//! [`Router::middleware_named`](crate::Router::middleware_named) resolves it
//! when the route is registered, so a misspelt name or refused arguments fail
//! at boot, never at request time.

mod alias;
mod chain;

pub use alias::{
    AliasError, MiddlewareAliases, register_middleware_alias, register_middleware_alias_with_args,
};
pub use chain::{Middleware, Next};

pub(crate) use alias::same_spec;
pub(crate) use chain::{ChainHandle, RouteChain, run_chain};
