//! The HTTP core: requests, responses, the client address behind proxies.
//!
//! [`Request`], [`HttpResponse`] and [`Response`] are also re-exported at the
//! crate root, where application code names them.

mod body;
mod host;
mod proxies;
mod request;
mod response;

pub use body::{BodyError, BodyTimeout, BoxError};
pub(crate) use host::{host_fault, target_fault};
pub use proxies::{TrustedProxies, TrustedProxiesError};
pub use request::{AuthenticatedUser, Request};
pub use response::{HttpResponse, IntoResponse, Response};
