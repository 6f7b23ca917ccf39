//! Routing: [`Router`] maps a method and a path to a handler and its
//! middleware chain.

mod handler;
mod path;
mod router;

pub use handler::Handler;
pub use router::{RouteError, RouteInfo, Router};

pub(crate) use handler::panicked;
pub(crate) use router::{ConnectionRouter, MatchedRoute};
