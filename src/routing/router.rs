//! `Router`: routes by method and path, each with its middleware chain.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use http::Method;

use super::handler::Handler;
use super::path::PathPattern;
use crate::http::{HttpResponse, Request};
use crate::middleware::{
    ChainHandle, Middleware, MiddlewareAliases, RouteChain, run_chain, same_spec,
};

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

/// Why a middleware added before any route is refused.
const WRAPS_EARLIER_ROUTES: &str =
    "middleware wraps the routes registered before it; add it after them";

/// Where a middleware goes in the chains of the routes it wraps.
#[derive(Clone, Copy)]
enum Place {
    /// Inside the middleware the routes have: it runs after them.
    Inside,
    /// Outside them: it runs first.
    Outside,
}

struct Route {
    method: Method,
    path: PathPattern,
    chain: Arc<RouteChain>,
    /// The name each middleware of the chain was added by, in the chain's
    /// order (`None` for one added as a value).
    names: Vec<Option<String>>,
}

/// A connection's own handle on the router it is served: every request of
/// the connection, and every [`Next`](crate::Next) of its chain, clones this
/// handle, whose reference count no other connection writes, instead of the
/// router's or the route's, which every connection's requests would write
/// from every core.
pub(crate) struct ConnectionRouter(pub(crate) Arc<Router>);

/// The route a request was matched to, for
/// [`Request::matched_route`](crate::Request::matched_route).
pub(crate) enum MatchedRoute {
    /// Matched in process: the route's name itself.
    Shared(Arc<str>),
    /// Matched on a connection: the connection's handle and the route's
    /// index.
    Connection(Arc<ConnectionRouter>, usize),
}

impl MatchedRoute {
    /// The route in its one spelling (`/items/{id}`).
    pub(crate) fn as_str(&self) -> &str {
        match self {
            MatchedRoute::Shared(name) => name,
            MatchedRoute::Connection(router, index) => router.0.routes[*index].path.canonical(),
        }
    }
}

/// One route of a router, reached through a connection's handle.
#[derive(Clone)]
struct HandledRoute {
    router: Arc<ConnectionRouter>,
    index: usize,
}

impl ChainHandle for HandledRoute {
    fn chain(&self) -> &RouteChain {
        &self.router.0.routes[self.index].chain
    }
}

/// Routes by method and path.
///
/// [`Router::middleware`] wraps every route registered before it; the
/// middleware added first runs first (outermost), so
/// `.middleware(session).middleware(throttle)` runs the session middleware
/// and then the throttle. Routes registered after a `.middleware(...)` call
/// are not wrapped by it. [`Router::wrap`] adds a middleware that runs
/// before those the routes already have, as a group's does.
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
            .any(|r| r.method == method && r.path.matches_as(&pattern))
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
            chain: Arc::new(RouteChain {
                stack: Vec::new(),
                handler: Arc::new(handler),
            }),
            names: Vec::new(),
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
    /// middleware added before it. Added before any route, it would wrap
    /// nothing: that is recorded as a [`RouteError::NoRoutes`], which
    /// [`Router::validate`] returns and [`serve`](crate::server::serve)
    /// refuses to start with.
    pub fn middleware(self, middleware: impl Middleware) -> Self {
        self.add_middleware(middleware, Place::Inside)
    }

    /// Wraps every route registered so far in `middleware`, outside the
    /// middleware they already have: it runs before them, as the middleware
    /// of a Laravel route group runs before its routes' own. Use it on a
    /// router of [merged](Router::merge) groups, for a middleware the
    /// groups' own must see the effect of (a sign-in before a throttle that
    /// counts by user). Added before any route it is refused as
    /// [`Router::middleware`] is.
    ///
    /// ```
    /// use suprnova::{HttpResponse, Middleware, Next, Request, Response, Router, async_trait};
    ///
    /// struct SignIn;
    ///
    /// #[async_trait]
    /// impl Middleware for SignIn {
    ///     async fn handle(&self, mut request: Request, next: Next) -> Response {
    ///         request.set_user_id("1");
    ///         next(request).await
    ///     }
    /// }
    ///
    /// let login = Router::new()
    ///     .post("/login", |_req: Request| async { HttpResponse::text("welcome") });
    /// // `SignIn` runs first, then whatever `login`'s routes already had.
    /// let routes = Router::new().merge(login).wrap(SignIn);
    /// assert!(routes.validate().is_ok());
    /// ```
    pub fn wrap(self, middleware: impl Middleware) -> Self {
        self.add_middleware(middleware, Place::Outside)
    }

    fn add_middleware(self, middleware: impl Middleware, place: Place) -> Self {
        if self.routes.is_empty() {
            let mut this = self;
            this.errors.push(RouteError::NoRoutes {
                spec: std::any::type_name_of_val(&middleware).to_owned(),
                reason: WRAPS_EARLIER_ROUTES.to_owned(),
            });
            return this;
        }
        self.push_middleware(Arc::new(middleware), None, place)
    }

    /// Wraps every route registered so far in the middleware an alias names,
    /// such as `"throttle:60,1"`, inside the middleware added before it.
    ///
    /// A route that already has the same name with the same arguments does
    /// not get it again, as Laravel runs each of a route's middleware once:
    /// `throttle:60,1` named on a group and on one of its routes counts that
    /// route's requests once.
    ///
    /// A name that is not registered, or arguments the alias refuses, are
    /// recorded as a [`RouteError`]: [`Router::validate`] returns it and
    /// [`serve`](crate::server::serve) refuses to start. Use
    /// [`Router::try_middleware_named`] to get the error at once.
    pub fn middleware_named(self, spec: &str) -> Self {
        self.add_named(spec, Place::Inside)
    }

    /// [`Router::middleware_named`] outside the middleware the routes
    /// already have, as [`Router::wrap`] adds it. A route that has the same
    /// name with the same arguments already runs it once, from here (first),
    /// as Laravel runs a name a group and its route both give where the
    /// group's stands.
    pub fn wrap_named(self, spec: &str) -> Self {
        self.add_named(spec, Place::Outside)
    }

    fn add_named(self, spec: &str, place: Place) -> Self {
        match self.resolve_named(spec) {
            Ok(mw) => self.push_middleware(mw, Some(spec), place),
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
        Ok(self.push_middleware(mw, Some(spec), Place::Inside))
    }

    fn resolve_named(&self, spec: &str) -> Result<Arc<dyn Middleware>, RouteError> {
        let resolved = MiddlewareAliases::current().resolve(spec);
        match (self.routes.first(), resolved) {
            (_, Ok(mw)) if !self.routes.is_empty() => Ok(mw),
            (None, result) => Err(RouteError::NoRoutes {
                spec: spec.to_owned(),
                reason: result
                    .err()
                    .map_or_else(|| WRAPS_EARLIER_ROUTES.to_owned(), |e| e.reason),
            }),
            (Some(route), Err(source)) => Err(RouteError::Alias {
                method: route.method.to_string(),
                path: route.path.as_str().to_owned(),
                source,
            }),
            (Some(_), Ok(_)) => unreachable!("handled by the first arm"),
        }
    }

    fn push_middleware(
        mut self,
        middleware: Arc<dyn Middleware>,
        label: Option<&str>,
        place: Place,
    ) -> Self {
        for route in &mut self.routes {
            // A name the route has runs once, where its first copy stands
            // (Laravel's `uniqueMiddleware` keeps the first): one added
            // inside comes after the copy and is left out, one added
            // outside comes first and takes the copy's place.
            let copy = label.and_then(|label| {
                route
                    .names
                    .iter()
                    .position(|name| name.as_deref().is_some_and(|name| same_spec(name, label)))
            });
            if copy.is_some() && matches!(place, Place::Inside) {
                continue;
            }
            let stack = &mut Arc::make_mut(&mut route.chain).stack;
            if let Some(at) = copy {
                stack.remove(at);
                route.names.remove(at);
            }
            let name = label.map(str::to_owned);
            match place {
                Place::Inside => {
                    stack.push(middleware.clone());
                    route.names.push(name);
                }
                Place::Outside => {
                    stack.insert(0, middleware.clone());
                    route.names.insert(0, name);
                }
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
                .any(|r| r.method == route.method && r.path.matches_as(&route.path))
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
                middleware: r.names.iter().flatten().cloned().collect(),
            })
            .collect()
    }

    /// Runs the route that matches `request` and returns its answer: 404 when
    /// no path matches, 405 (with `Allow`) when the path matches another
    /// method, 500 when the router has registration errors.
    ///
    /// The route is matched when `dispatch` is called, and a route without
    /// middleware is handed the request then (its handler makes its
    /// future); the future `dispatch` returns runs the rest.
    pub fn dispatch(&self, request: Request) -> impl Future<Output = HttpResponse> + '_ {
        self.dispatch_as(request, false)
    }

    /// [`Router::dispatch`] for the answer that goes out as it is returned
    /// (the in-process entry points): a WebSocket's 101 in it lets its
    /// session start. A router dispatched from another's route does not:
    /// the outer router's middleware may still replace the 101.
    pub(crate) fn dispatch_outermost(
        &self,
        request: Request,
    ) -> impl Future<Output = HttpResponse> + '_ {
        self.dispatch_as(request, true)
    }

    fn dispatch_as(
        &self,
        mut request: Request,
        outermost: bool,
    ) -> impl Future<Output = HttpResponse> + '_ {
        // Matched before the future is made, so that the future holds the
        // chain's future or the answer, never the request beside them.
        let found = self.find(&mut request).map(|index| {
            request.set_route(MatchedRoute::Shared(
                self.routes[index].path.canonical().clone(),
            ));
            run_chain(self.routes[index].chain.clone(), 0, request)
        });
        response_of(found, outermost)
    }

    /// [`Router::dispatch`] through a connection's handle on the router, so
    /// that the request's chain clones the handle rather than the route's
    /// parts.
    pub(crate) fn dispatch_handled(
        router: Arc<ConnectionRouter>,
        mut request: Request,
    ) -> impl Future<Output = HttpResponse> {
        let found = router.0.find(&mut request).map(|index| {
            // Through the connection's handle, whose count no other
            // connection writes, rather than the route's name, which every
            // connection's requests would.
            request.set_route(MatchedRoute::Connection(router.clone(), index));
            run_chain(HandledRoute { router, index }, 0, request)
        });
        response_of(found, true)
    }

    /// The index of the route that matches `request`, with the path's
    /// parameters set on it, or the answer when none does.
    fn find(&self, request: &mut Request) -> Result<usize, HttpResponse> {
        if let Some(error) = self.errors.first() {
            tracing::error!(%error, "request on a router with registration errors");
            return Err(HttpResponse::internal_server_error());
        }
        if !request.path().starts_with('/') {
            // `OPTIONS *` (the server as a whole) or `CONNECT host:443` (an
            // authority): no route's path, though `*` reads as a segment.
            return Err(HttpResponse::text("404 Not Found").status(404));
        }
        let mut allowed: Vec<&Method> = Vec::new();
        // A `GET` route answers `HEAD` unless a `HEAD` route of its own does.
        let mut get_for_head = None;
        for (index, route) in self.routes.iter().enumerate() {
            let Some(params) = route.path.matches(request.path()) else {
                continue;
            };
            let method = request.method();
            if route.method == method {
                request.set_params(params);
                return Ok(index);
            }
            if method == Method::HEAD && route.method == Method::GET {
                get_for_head.get_or_insert((index, params));
                continue;
            }
            allowed.push(&route.method);
        }
        if let Some((index, params)) = get_for_head {
            request.set_params(params);
            return Ok(index);
        }
        if allowed.is_empty() {
            return Err(HttpResponse::text("404 Not Found").status(404));
        }
        // A `GET` route answers `HEAD` too, so `Allow` says so.
        if allowed.contains(&&Method::GET) {
            allowed.push(&Method::HEAD);
        }
        let mut allow: Vec<&str> = Vec::with_capacity(allowed.len());
        for method in allowed {
            if !allow.contains(&method.as_str()) {
                allow.push(method.as_str());
            }
        }
        Err(HttpResponse::text("405 Method Not Allowed")
            .status(405)
            .header("Allow", allow.join(", ")))
    }
}

/// The answer of a matched route's chain, whether the handler gave it or a
/// middleware answered before it, or the answer given when no route matched.
async fn response_of(
    found: Result<futures_util::future::BoxFuture<'static, crate::http::Response>, HttpResponse>,
    outermost: bool,
) -> HttpResponse {
    match found {
        Ok(chain) => {
            let mut answer = chain.await.unwrap_or_else(|short_circuit| short_circuit);
            // The outermost router's answer is the one that goes out: a
            // WebSocket's 101 among them, whose session may start now. Any
            // other 1xx cannot be a final answer (a handler's was answered
            // 500 inside the chain already, where its middleware saw the
            // 500): one a middleware gave, or a `Handler` implemented by
            // hand, is answered 500 here, past the middleware.
            if outermost
                && answer.status_code_typed().is_informational()
                && !crate::ws::confirm_upgrade(&mut answer)
            {
                tracing::error!(
                    status = answer.status_code(),
                    "a route answered with a 1xx status that is no WebSocket upgrade; answering 500"
                );
                return HttpResponse::internal_server_error();
            }
            answer
        }
        Err(answer) => answer,
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::Notify;

    use super::*;
    use crate::http::Response;
    use crate::middleware::Next;

    struct Pass;

    #[async_trait::async_trait]
    impl Middleware for Pass {
        async fn handle(&self, request: Request, next: Next) -> Response {
            next(request).await
        }
    }

    /// A router whose one route (behind two middleware) signals `entered`
    /// and answers once `release` is notified.
    fn waiting_router(entered: Arc<Notify>, release: Arc<Notify>) -> Arc<ConnectionRouter> {
        let router = Router::new()
            .get("/", move |_req: Request| {
                let (entered, release) = (entered.clone(), release.clone());
                async move {
                    entered.notify_one();
                    release.notified().await;
                    HttpResponse::text("done")
                }
            })
            .middleware(Pass)
            .middleware(Pass);
        handled(router)
    }

    fn handled(router: Router) -> Arc<ConnectionRouter> {
        Arc::new(ConnectionRouter(Arc::new(router)))
    }

    fn get() -> Request {
        Request::new(http::Request::get("/").body(String::new()).unwrap())
    }

    async fn answer(router: &Router, method: Method, path: &str) -> HttpResponse {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .body(String::new())
            .unwrap();
        router.dispatch(Request::new(request)).await
    }

    #[test]
    fn routes_that_match_the_same_paths_are_duplicates() {
        for (first, second) in [
            ("/login", "/login/"),
            ("/login", "//login"),
            ("/users/{id}", "/users/{name}"),
        ] {
            let router = Router::new()
                .get(first, |_req: Request| async { "first" })
                .get(second, |_req: Request| async { "second" });
            assert_eq!(
                router.validate().unwrap_err(),
                RouteError::Duplicate {
                    method: "GET".to_owned(),
                    path: second.to_owned()
                },
                "{first} then {second}"
            );
            let merged = Router::new()
                .get(first, |_req: Request| async { "first" })
                .merge(Router::new().get(second, |_req: Request| async { "second" }));
            assert!(merged.validate().is_err(), "merged {first} and {second}");
        }
        let distinct = Router::new()
            .get("/users/{id}", |_req: Request| async { "a" })
            .get("/users/{id}/posts", |_req: Request| async { "b" })
            .post("/users/{id}", |_req: Request| async { "c" });
        assert!(distinct.validate().is_ok());
    }

    #[tokio::test]
    async fn a_head_route_answers_head_before_the_get_route() {
        let router = Router::new()
            .get("/login", |_req: Request| async {
                HttpResponse::text("page")
            })
            .route(Method::HEAD, "/login", |_req: Request| async {
                HttpResponse::new().header("x-head", "own")
            });
        assert!(router.validate().is_ok());
        let head = answer(&router, Method::HEAD, "/login").await;
        assert_eq!(head.header_str("x-head"), Some("own"));
        let get = answer(&router, Method::GET, "/login").await;
        assert_eq!(get.body_text(), "page");
        // Without one, GET's route answers HEAD.
        let only_get = Router::new().get("/a", |_req: Request| async { HttpResponse::text("a") });
        assert_eq!(
            answer(&only_get, Method::HEAD, "/a").await.status_code(),
            200
        );
    }

    #[tokio::test]
    async fn middleware_added_before_any_route_is_an_error() {
        let router = Router::new()
            .middleware(Pass)
            .post("/login", |_req: Request| async { "welcome" });
        let error = router.validate().unwrap_err();
        assert!(matches!(error, RouteError::NoRoutes { .. }), "{error:?}");
        assert!(error.to_string().contains("Pass"), "{error}");
        assert!(
            error
                .to_string()
                .ends_with("middleware wraps the routes registered before it; add it after them"),
            "{error}"
        );
        // A router with errors serves nothing.
        assert_eq!(
            answer(&router, Method::POST, "/login").await.status_code(),
            500
        );
    }

    #[tokio::test]
    async fn the_matched_route_is_the_route_in_one_spelling() {
        let router = Router::new().get("/items//{id}/", |req: Request| async move {
            HttpResponse::text(format!(
                "{} {}",
                req.matched_route().unwrap_or_default(),
                req.param("id").unwrap_or_default()
            ))
        });
        for path in ["/items/7", "//items/7/"] {
            assert_eq!(
                answer(&router, Method::GET, path).await.body_text(),
                "/items/{id} 7"
            );
        }
        let root = Router::new().get("/", |req: Request| async move {
            HttpResponse::text(req.matched_route().unwrap_or_default().to_owned())
        });
        assert_eq!(answer(&root, Method::GET, "/").await.body_text(), "/");
    }

    // Through a handle, a request in flight holds clones of the handle and
    // none of the route's chain, which every request of the route shares;
    // through `&Router` it holds clones of the chain.
    #[tokio::test]
    async fn a_request_through_a_handle_clones_the_handle_not_the_chain() {
        let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let router = waiting_router(entered.clone(), release.clone());
        let chain_count = || Arc::strong_count(&router.0.routes[0].chain);

        let handled = tokio::spawn(Router::dispatch_handled(router.clone(), get()));
        entered.notified().await;
        assert_eq!(chain_count(), 1);
        assert!(Arc::strong_count(&router) > 2);
        release.notify_one();
        assert_eq!(handled.await.unwrap().body_text(), "done");
        assert_eq!(Arc::strong_count(&router), 1);

        let lent = router.clone();
        let in_process = tokio::spawn(async move { lent.0.dispatch(get()).await });
        entered.notified().await;
        assert!(chain_count() > 1);
        release.notify_one();
        assert_eq!(in_process.await.unwrap().body_text(), "done");
        assert_eq!(chain_count(), 1);
    }

    #[tokio::test]
    async fn a_handled_router_answers_404_405_and_500_as_dispatch_does() {
        let router = handled(Router::new().post("/only-post", |_req: Request| async {
            HttpResponse::text("x")
        }));
        let missing = Router::dispatch_handled(router.clone(), get()).await;
        assert_eq!(missing.status_code(), 404);
        let wrong_method = Request::new(
            http::Request::get("/only-post")
                .body(String::new())
                .unwrap(),
        );
        let refused = Router::dispatch_handled(router.clone(), wrong_method).await;
        assert_eq!(refused.status_code(), 405);
        assert_eq!(refused.header_str("allow"), Some("POST"));

        let broken = handled(Router::new().get("/", |_req: Request| async { "x" }).route(
            Method::GET,
            "/",
            |_req: Request| async { "twice" },
        ));
        assert_eq!(
            Router::dispatch_handled(broken, get()).await.status_code(),
            500
        );
    }
}
