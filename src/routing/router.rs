//! `Router`: routes by method and path, each with its middleware chain.

use std::fmt;
use std::sync::Arc;

use http::Method;

use super::handler::Handler;
use super::path::PathPattern;
use crate::http::{HttpResponse, Request};
use crate::middleware::{Middleware, MiddlewareAliases, run_chain};

/// A route that could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// A named middleware does not exist or refused its arguments.
    #[error("route {method} {path}: {source}")]
    Alias {
        /// The method of the route.
        method: String,
        /// The path of the route.
        path: String,
        /// What the alias said.
        #[source]
        source: crate::middleware::AliasError,
    },
    /// A named middleware was added to a router with no routes.
    #[error("middleware `{spec}` was added before any route: {reason}")]
    NoRoutes {
        /// The name with its arguments.
        spec: String,
        /// Why it was refused, if the alias itself failed.
        reason: String,
    },
    /// The path is not a valid route path.
    #[error("{0}")]
    Path(String),
    /// The same method and path were registered twice.
    #[error("route {method} {path} is registered twice")]
    Duplicate {
        /// The method.
        method: String,
        /// The path.
        path: String,
    },
}

struct Route {
    method: Method,
    path: PathPattern,
    handler: Arc<dyn Handler>,
    stack: Arc<[Arc<dyn Middleware>]>,
    labels: Vec<String>,
}

/// Routes by method and path.
///
/// [`Router::middleware`] wraps every route registered before it; the
/// middleware added first runs first (outermost), so
/// `.middleware(session).middleware(throttle)` runs the session middleware
/// and then the throttle. Routes registered after a `.middleware(...)` call
/// are not wrapped by it.
///
/// ```
/// use suprnova::{HttpResponse, Request, Router};
///
/// async fn show(req: Request) -> HttpResponse {
///     HttpResponse::text(format!("user {}", req.param("id").unwrap_or("?")))
/// }
///
/// let router = Router::new().get("/users/{id}", show);
/// assert!(router.validate().is_ok());
/// ```
#[derive(Default)]
pub struct Router {
    routes: Vec<Route>,
    errors: Vec<RouteError>,
}

/// A route as [`Router::routes`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteInfo {
    /// The method.
    pub method: Method,
    /// The path as registered.
    pub path: String,
    /// The named middleware on the route, as written (`throttle:60,1`).
    pub middleware: Vec<String>,
}

impl Router {
    /// An empty router.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` for `method` and `path`.
    pub fn route(mut self, method: Method, path: &str, handler: impl Handler) -> Self {
        let pattern = match PathPattern::parse(path) {
            Ok(p) => p,
            Err(e) => {
                self.errors.push(RouteError::Path(e));
                return self;
            }
        };
        if self
            .routes
            .iter()
            .any(|r| r.method == method && r.path == pattern)
        {
            self.errors.push(RouteError::Duplicate {
                method: method.to_string(),
                path: path.to_owned(),
            });
            return self;
        }
        self.routes.push(Route {
            method,
            path: pattern,
            handler: Arc::new(handler),
            stack: Arc::from(Vec::new()),
            labels: Vec::new(),
        });
        self
    }

    /// Registers a `GET` route (which also answers `HEAD`).
    pub fn get(self, path: &str, handler: impl Handler) -> Self {
        self.route(Method::GET, path, handler)
    }

    /// Registers a `POST` route.
    pub fn post(self, path: &str, handler: impl Handler) -> Self {
        self.route(Method::POST, path, handler)
    }

    /// Registers a `PUT` route.
    pub fn put(self, path: &str, handler: impl Handler) -> Self {
        self.route(Method::PUT, path, handler)
    }

    /// Registers a `PATCH` route.
    pub fn patch(self, path: &str, handler: impl Handler) -> Self {
        self.route(Method::PATCH, path, handler)
    }

    /// Registers a `DELETE` route.
    pub fn delete(self, path: &str, handler: impl Handler) -> Self {
        self.route(Method::DELETE, path, handler)
    }

    /// Wraps every route registered so far in `middleware`, inside the
    /// middleware added before it.
    pub fn middleware(self, middleware: impl Middleware) -> Self {
        self.push_middleware(Arc::new(middleware), None)
    }

    /// Wraps every route registered so far in the middleware an alias names,
    /// such as `"throttle:60,1"`.
    ///
    /// A name that is not registered, or arguments the alias refuses, are
    /// recorded as a [`RouteError`]: [`Router::validate`] returns it and
    /// [`serve`](crate::server::serve) refuses to start. Use
    /// [`Router::try_middleware_named`] to get the error at once.
    pub fn middleware_named(self, spec: &str) -> Self {
        match self.resolve_named(spec) {
            Ok(mw) => self.push_middleware(mw, Some(spec)),
            Err(e) => {
                let mut this = self;
                this.errors.push(e);
                this
            }
        }
    }

    /// Like [`Router::middleware_named`], but returns the error.
    ///
    /// ```
    /// use suprnova::{HttpResponse, Router};
    ///
    /// let err = Router::new()
    ///     .get("/", |_req| async { HttpResponse::text("hi") })
    ///     .try_middleware_named("no_such_alias")
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("no_such_alias"));
    /// ```
    pub fn try_middleware_named(self, spec: &str) -> Result<Self, RouteError> {
        let mw = self.resolve_named(spec)?;
        Ok(self.push_middleware(mw, Some(spec)))
    }

    fn resolve_named(&self, spec: &str) -> Result<Arc<dyn Middleware>, RouteError> {
        let resolved = MiddlewareAliases::current().resolve(spec);
        match (self.routes.first(), resolved) {
            (_, Ok(mw)) if !self.routes.is_empty() => Ok(mw),
            (None, result) => Err(RouteError::NoRoutes {
                spec: spec.to_owned(),
                reason: result.err().map_or_else(String::new, |e| e.reason),
            }),
            (Some(route), Err(source)) => Err(RouteError::Alias {
                method: route.method.to_string(),
                path: route.path.as_str().to_owned(),
                source,
            }),
            (Some(_), Ok(_)) => unreachable!("handled by the first arm"),
        }
    }

    fn push_middleware(mut self, middleware: Arc<dyn Middleware>, label: Option<&str>) -> Self {
        for route in &mut self.routes {
            let mut stack: Vec<Arc<dyn Middleware>> = route.stack.iter().cloned().collect();
            stack.push(middleware.clone());
            route.stack = Arc::from(stack);
            if let Some(label) = label {
                route.labels.push(label.to_owned());
            }
        }
        self
    }

    /// Adds every route of `other`, with its middleware, to this router.
    pub fn merge(mut self, other: Router) -> Self {
        for route in other.routes {
            if self
                .routes
                .iter()
                .any(|r| r.method == route.method && r.path == route.path)
            {
                self.errors.push(RouteError::Duplicate {
                    method: route.method.to_string(),
                    path: route.path.as_str().to_owned(),
                });
            } else {
                self.routes.push(route);
            }
        }
        self.errors.extend(other.errors);
        self
    }

    /// The first registration error, if any.
    pub fn validate(&self) -> Result<(), RouteError> {
        match self.errors.first() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Every registration error.
    pub fn errors(&self) -> &[RouteError] {
        &self.errors
    }

    /// The registered routes, in order.
    pub fn routes(&self) -> Vec<RouteInfo> {
        self.routes
            .iter()
            .map(|r| RouteInfo {
                method: r.method.clone(),
                path: r.path.as_str().to_owned(),
                middleware: r.labels.clone(),
            })
            .collect()
    }

    /// Runs the route that matches `request` and returns its answer: 404 when
    /// no path matches, 405 (with `Allow`) when the path matches another
    /// method, 500 when the router has registration errors.
    pub async fn dispatch(&self, mut request: Request) -> HttpResponse {
        if let Some(error) = self.errors.first() {
            tracing::error!(%error, "request on a router with registration errors");
            return HttpResponse::text("500 Internal Server Error").status(500);
        }
        let path = request.path().to_owned();
        let method = request.method().clone();
        let mut allowed: Vec<&Method> = Vec::new();
        for route in &self.routes {
            let Some(params) = route.path.matches(&path) else {
                continue;
            };
            let head_on_get = method == Method::HEAD && route.method == Method::GET;
            if route.method != method && !head_on_get {
                allowed.push(&route.method);
                continue;
            }
            request.set_params(params);
            return run_chain(route.stack.clone(), 0, route.handler.clone(), request)
                .await
                .unwrap_or_else(|short_circuit| short_circuit);
        }
        if allowed.is_empty() {
            return HttpResponse::text("404 Not Found").status(404);
        }
        let allow: Vec<&str> = allowed.iter().map(|m| m.as_str()).collect();
        HttpResponse::text("405 Method Not Allowed")
            .status(405)
            .header("Allow", allow.join(", "))
    }
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field("routes", &self.routes())
            .field("errors", &self.errors)
            .finish()
    }
}
