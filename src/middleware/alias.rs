//! Middleware aliases: `"throttle:60,1"` on a route, resolved at boot.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use super::Middleware;
use crate::container::App;

type Factory = dyn Fn(&[&str]) -> Result<Arc<dyn Middleware>, String> + Send + Sync;

/// A route named middleware that could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("middleware `{spec}`: {reason}")]
pub struct AliasError {
    /// The name with its arguments, as the route wrote it.
    pub spec: String,
    /// Why it was refused.
    pub reason: String,
}

/// The aliases registered in one container.
///
/// Applications use [`register_middleware_alias`] and
/// [`register_middleware_alias_with_args`], which register in
/// [`App::current`]; this type is what they install there.
#[derive(Default)]
pub struct MiddlewareAliases {
    factories: RwLock<HashMap<String, Arc<Factory>>>,
}

impl MiddlewareAliases {
    /// The registry of [`App::current`], created empty on first use.
    pub fn current() -> Arc<MiddlewareAliases> {
        App::current().get_or_install(|| Arc::new(MiddlewareAliases::default()))
    }

    /// Registers `name` with a factory that receives the arguments.
    pub fn insert(
        &self,
        name: &str,
        factory: impl Fn(&[&str]) -> Result<Arc<dyn Middleware>, String> + Send + Sync + 'static,
    ) {
        self.factories
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned(), Arc::new(factory));
    }

    /// Builds the middleware a route names: `name` or `name:arg1,arg2`.
    ///
    /// Arguments are split on `,` and trimmed, as Laravel splits them.
    pub fn resolve(&self, spec: &str) -> Result<Arc<dyn Middleware>, AliasError> {
        let (name, args) = spec_parts(spec);
        let factory = self
            .factories
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| AliasError {
                spec: spec.to_owned(),
                reason: format!("no middleware alias named `{name}` is registered"),
            })?;
        factory(&args).map_err(|reason| AliasError {
            spec: spec.to_owned(),
            reason,
        })
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .factories
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }
}

/// A middleware spec's name and arguments, each trimmed: `name` or
/// `name:arg1,arg2`, the arguments split on `,` as Laravel splits them.
fn spec_parts(spec: &str) -> (&str, Vec<&str>) {
    match spec.split_once(':') {
        Some((name, args)) => (name.trim(), args.split(',').map(str::trim).collect()),
        None => (spec.trim(), Vec::new()),
    }
}

/// Whether two specs name the same middleware with the same arguments,
/// blanks around them aside (`throttle:2,1` and `throttle:2, 1`).
pub(crate) fn same_spec(a: &str, b: &str) -> bool {
    a == b || spec_parts(a) == spec_parts(b)
}

impl fmt::Debug for MiddlewareAliases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MiddlewareAliases")
            .field("names", &self.names())
            .finish()
    }
}

/// Registers `middleware` under `name` in [`App::current`]. Every route that
/// names it shares the one instance. Naming it with arguments is refused.
///
/// ```
/// use suprnova::middleware::register_middleware_alias;
/// use suprnova::{async_trait, Middleware, Next, Request, Response};
///
/// struct Audit;
///
/// #[async_trait]
/// impl Middleware for Audit {
///     async fn handle(&self, request: Request, next: Next) -> Response {
///         tracing::info!(path = request.path(), "request");
///         next(request).await
///     }
/// }
///
/// register_middleware_alias("audit", Audit);
/// ```
pub fn register_middleware_alias(name: &str, middleware: impl Middleware) {
    let shared: Arc<dyn Middleware> = Arc::new(middleware);
    let alias = name.to_owned();
    MiddlewareAliases::current().insert(name, move |args| {
        if args.is_empty() {
            Ok(shared.clone())
        } else {
            Err(format!("the alias `{alias}` takes no arguments"))
        }
    });
}

/// Registers `name` with a factory that builds the middleware from the
/// route's arguments, in [`App::current`]. The factory's error refuses the
/// route at registration.
///
/// ```
/// use suprnova::middleware::register_middleware_alias_with_args;
/// use suprnova::{async_trait, Middleware, Next, Request, Response};
///
/// struct Tag(String);
///
/// #[async_trait]
/// impl Middleware for Tag {
///     async fn handle(&self, request: Request, next: Next) -> Response {
///         let mut response = next(request).await?;
///         response.set_header("X-Tag", &self.0);
///         Ok(response)
///     }
/// }
///
/// register_middleware_alias_with_args("tag", |args: &[&str]| match args {
///     [name] => Ok(Tag(name.to_string())),
///     _ => Err("expected one argument, the tag"),
/// });
/// ```
pub fn register_middleware_alias_with_args<F, M, E>(name: &str, factory: F)
where
    F: Fn(&[&str]) -> Result<M, E> + Send + Sync + 'static,
    M: Middleware,
    E: fmt::Display,
{
    MiddlewareAliases::current().insert(name, move |args| {
        factory(args)
            .map(|m| Arc::new(m) as Arc<dyn Middleware>)
            .map_err(|e| e.to_string())
    });
}
