//! The service container: a typed map from a type to one shared value.
//!
//! [`App`] holds what the application installed at boot: the
//! [`RateLimiterDriver`](crate::rate_limit::RateLimiterDriver), the cache
//! store, the named limiters, the trusted proxies. A value is stored as an
//! `Arc<T>` and looked up by `T`, where `T` may be a trait object:
//!
//! ```
//! use std::sync::Arc;
//! use suprnova::container::App;
//!
//! trait Greeter: Send + Sync {
//!     fn hello(&self) -> String;
//! }
//! struct English;
//! impl Greeter for English {
//!     fn hello(&self) -> String { "hello".into() }
//! }
//!
//! let app = App::new();
//! app.install::<dyn Greeter>(Arc::new(English));
//! assert_eq!(app.get::<dyn Greeter>().unwrap().hello(), "hello");
//! ```
//!
//! # Which container a lookup sees
//!
//! The static methods ([`App::bind`], [`App::resolve`], [`App::resolve_make`])
//! act on [`App::current`]: the container of the innermost [`App::scope`]
//! around the running task, else the one [`App::enter`] set on this thread,
//! else the process-wide [`App::global`]. The server captures the current
//! container when it starts and runs every connection inside it.
//!
//! # Lookups on the request path
//!
//! A lookup reads the map without taking a lock: the map is replaced whole
//! on each install (installs happen at boot), and readers load the current
//! one without writing anything another core reads. [`App::get`] clones the
//! value's `Arc`, which writes its reference count; where every request
//! looks the same value up, [`App::get_with`] and [`App::resolve_with`] lend
//! it instead, so that two cores serving requests write no shared cache
//! line between them. Measured on two threads, a lookup under a read lock
//! with an `Arc` clone took 24 ns alone and about 100 ns while the other
//! thread did the same (docs/performance-history.md).
//!
//! # Isolating tests
//!
//! `cargo test` runs tests in parallel threads. A test that builds its own
//! `App` and runs inside [`App::scope`] sees only what it installed, and no
//! other test sees it:
//!
//! ```
//! use std::sync::Arc;
//! use suprnova::container::App;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let app = App::new();
//! app.install(Arc::new(42_u32));
//! app.scope(async {
//!     assert_eq!(*App::resolve::<u32>().unwrap(), 42);
//! })
//! .await;
//! // Outside the scope the process-wide container is current again.
//! assert!(App::resolve::<u32>().is_none());
//! # });
//! ```

use std::any::{Any, TypeId, type_name};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use crate::copy_on_write::CopyOnWrite;

type Entry = Arc<dyn Any + Send + Sync>;
/// A `TypeId` is a hash already; foldhash mixes it in a few instructions.
type Services = HashMap<TypeId, Entry, foldhash::fast::RandomState>;

/// A typed service container. Clones share one map.
#[derive(Clone, Default)]
pub struct App {
    shared: Arc<Shared>,
}

/// The map every clone of one [`App`] sees, read without a lock.
#[derive(Default)]
struct Shared {
    services: CopyOnWrite<Services>,
}

/// A lookup found nothing installed under the type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nothing is installed in the container for `{type_name}`")]
pub struct ContainerError {
    /// The type that was asked for.
    pub type_name: &'static str,
}

tokio::task_local! {
    static SCOPED: App;
}

thread_local! {
    /// The containers entered on this thread, the current one last, each
    /// with the number of the guard that holds it.
    static ENTERED: RefCell<Vec<(u64, App)>> = const { RefCell::new(Vec::new()) };
    /// The number the next guard on this thread gets.
    static NEXT_GUARD: Cell<u64> = const { Cell::new(0) };
}

impl App {
    /// An empty container.
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide container, used when no scope is active.
    pub fn global() -> App {
        static GLOBAL: OnceLock<App> = OnceLock::new();
        GLOBAL.get_or_init(App::new).clone()
    }

    /// The container lookups see here: the innermost [`App::scope`] of the
    /// running task, else the innermost [`App::enter`] of this thread, else
    /// [`App::global`].
    pub fn current() -> App {
        if let Ok(app) = SCOPED.try_with(App::clone) {
            return app;
        }
        ENTERED
            .with(|stack| stack.borrow().last().map(|(_, app)| app.clone()))
            .unwrap_or_else(App::global)
    }

    /// Runs `f` on [`App::current`]. Inside an [`App::scope`], as every
    /// request a server handles is, the container is lent rather than
    /// cloned: a lookup on the request path then writes no reference count
    /// that the other cores' requests write too.
    pub fn with_current<R>(f: impl FnOnce(&App) -> R) -> R {
        let mut f = Some(f);
        let lent = SCOPED.try_with(|app| f.take().map(|f| f(app)));
        match (lent, f) {
            (Ok(Some(result)), _) => result,
            (_, Some(f)) => f(&App::current()),
            (_, None) => unreachable!("`f` runs once: either in the scope or here"),
        }
    }

    /// Installs `value` under `T`, replacing what was there.
    ///
    /// `T` may be unsized: `app.install::<dyn Trait>(Arc::new(impl))`.
    pub fn install<T>(&self, value: Arc<T>)
    where
        T: ?Sized + Send + Sync + 'static,
    {
        let entry: Entry = Arc::new(value);
        self.change(|services| {
            services.insert(TypeId::of::<T>(), entry);
        });
    }

    /// The value installed under `T`, if any.
    pub fn get<T>(&self) -> Option<Arc<T>>
    where
        T: ?Sized + Send + Sync + 'static,
    {
        self.get_with::<T, _>(|found| found.cloned())
    }

    /// Runs `f` on the value installed under `T` (or `None`), lent rather
    /// than cloned: no reference count is written, so cores that look up
    /// one value on every request do not pass its cache line between them.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use suprnova::container::App;
    ///
    /// let app = App::new();
    /// app.install(Arc::new(String::from("eu-west")));
    /// assert_eq!(app.get_with::<String, _>(|region| region.map(|r| r.len())), Some(7));
    /// assert!(app.get_with::<u32, _>(|n| n.is_none()));
    /// ```
    pub fn get_with<T, R>(&self, f: impl FnOnce(Option<&Arc<T>>) -> R) -> R
    where
        T: ?Sized + Send + Sync + 'static,
    {
        let services = self.shared.services.load();
        f(services
            .get(&TypeId::of::<T>())
            .and_then(|entry| entry.downcast_ref::<Arc<T>>()))
    }

    /// The value installed under `T`, or an error naming `T`.
    pub fn make<T>(&self) -> Result<Arc<T>, ContainerError>
    where
        T: ?Sized + Send + Sync + 'static,
    {
        self.get::<T>().ok_or(ContainerError {
            type_name: type_name::<T>(),
        })
    }

    /// The value installed under `T`, or the one `init` makes and installs.
    ///
    /// Two racing callers may both run `init`; one value wins and both get it.
    pub fn get_or_install<T>(&self, init: impl FnOnce() -> Arc<T>) -> Arc<T>
    where
        T: ?Sized + Send + Sync + 'static,
    {
        if let Some(found) = self.get::<T>() {
            return found;
        }
        let made = init();
        self.change(|services| {
            services
                .entry(TypeId::of::<T>())
                .or_insert_with(|| Arc::new(made))
                .downcast_ref::<Arc<T>>()
                .cloned()
                .expect("the entry of a TypeId holds that type")
        })
    }

    /// Removes what is installed under `T` and returns it.
    pub fn remove<T>(&self) -> Option<Arc<T>>
    where
        T: ?Sized + Send + Sync + 'static,
    {
        self.change(|services| services.remove(&TypeId::of::<T>()))
            .and_then(|entry| entry.downcast_ref::<Arc<T>>().cloned())
    }

    /// Runs `future` with this container as [`App::current`].
    ///
    /// Tasks spawned from inside do not inherit the scope; wrap them in
    /// `app.scope(...)` too (the server does this for every connection).
    pub fn scope<F: Future>(&self, future: F) -> impl Future<Output = F::Output> + use<F> {
        SCOPED.scope(self.clone(), future)
    }

    /// Makes this container [`App::current`] on this thread until the guard
    /// drops. For synchronous code and tests; async code uses [`App::scope`].
    ///
    /// Guards may drop in any order: the container current is the one
    /// entered last whose guard is still held, so `guard = other.enter()`
    /// makes `other` current, and dropping an outer guard first keeps the
    /// inner container current.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use suprnova::container::App;
    ///
    /// let (a, b) = (App::new(), App::new());
    /// a.install(Arc::new("a"));
    /// b.install(Arc::new("b"));
    /// let mut guard = a.enter();
    /// guard = b.enter();
    /// assert_eq!(*App::resolve::<&str>().unwrap(), "b");
    /// # drop(guard);
    /// ```
    pub fn enter(&self) -> AppGuard {
        let number = NEXT_GUARD.with(|next| {
            let number = next.get();
            next.set(number + 1);
            number
        });
        ENTERED.with(|stack| stack.borrow_mut().push((number, self.clone())));
        AppGuard {
            number,
            _not_send: std::marker::PhantomData,
        }
    }

    /// Installs `value` under `T` in [`App::current`].
    pub fn bind<T>(value: Arc<T>)
    where
        T: ?Sized + Send + Sync + 'static,
    {
        App::current().install(value);
    }

    /// Installs `value` under its own type in [`App::current`].
    pub fn singleton<T: Send + Sync + 'static>(value: T) {
        App::current().install(Arc::new(value));
    }

    /// The value under `T` in [`App::current`], if any.
    pub fn resolve<T>() -> Option<Arc<T>>
    where
        T: ?Sized + Send + Sync + 'static,
    {
        App::with_current(App::get::<T>)
    }

    /// Runs `f` on the value under `T` in [`App::current`] (or `None`),
    /// lent as [`App::get_with`] lends it.
    pub fn resolve_with<T, R>(f: impl FnOnce(Option<&Arc<T>>) -> R) -> R
    where
        T: ?Sized + Send + Sync + 'static,
    {
        App::with_current(|app| app.get_with(f))
    }

    /// The value under `T` in [`App::current`], or an error naming `T`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use suprnova::container::App;
    ///
    /// trait Mailer: Send + Sync {}
    /// struct Smtp;
    /// impl Mailer for Smtp {}
    ///
    /// let app = App::new();
    /// let _guard = app.enter();
    /// assert!(App::resolve_make::<dyn Mailer>().is_err());
    /// App::bind::<dyn Mailer>(Arc::new(Smtp));
    /// let mailer: Arc<dyn Mailer> = App::resolve_make::<dyn Mailer>().unwrap();
    /// # drop(mailer);
    /// ```
    pub fn resolve_make<T>() -> Result<Arc<T>, ContainerError>
    where
        T: ?Sized + Send + Sync + 'static,
    {
        App::with_current(App::make::<T>)
    }

    /// Applies `change` to a copy of the map and makes the copy current.
    fn change<R>(&self, change: impl FnOnce(&mut Services) -> R) -> R {
        self.shared.services.change(change)
    }
}

impl fmt::Debug for App {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.shared.services.load().len();
        f.debug_struct("App").field("services", &count).finish()
    }
}

/// Keeps a container current on this thread; see [`App::enter`].
#[must_use = "the container stops being current when the guard drops"]
pub struct AppGuard {
    /// Which entry of the thread's stack this guard holds.
    number: u64,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for AppGuard {
    fn drop(&mut self) {
        // Its own entry, wherever it stands: guards need not drop in the
        // order they were made (`guard = other.enter()` drops the old one
        // after the new one is pushed).
        // The container is dropped after the stack is let go of, in case
        // what it holds looks at the stack as it drops.
        let _left = ENTERED.with(|stack| {
            let mut stack = stack.borrow_mut();
            let at = stack.iter().rposition(|(n, _)| *n == self.number)?;
            Some(stack.remove(at))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    trait Named: Send + Sync {
        fn name(&self) -> &'static str;
    }
    struct A;
    impl Named for A {
        fn name(&self) -> &'static str {
            "a"
        }
    }

    #[test]
    fn installs_and_resolves_trait_objects() {
        let app = App::new();
        assert!(app.get::<dyn Named>().is_none());
        app.install::<dyn Named>(Arc::new(A));
        assert_eq!(app.get::<dyn Named>().unwrap().name(), "a");
        assert!(app.remove::<dyn Named>().is_some());
        assert!(app.get::<dyn Named>().is_none());
    }

    #[test]
    fn a_lent_value_is_not_cloned() {
        let app = App::new();
        let value = Arc::new(7_u64);
        app.install(value.clone());
        // Here, the container's and this test's.
        assert_eq!(Arc::strong_count(&value), 2);
        let seen = app.get_with::<u64, _>(|lent| (lent.map(|v| **v), Arc::strong_count(&value)));
        assert_eq!(seen, (Some(7), 2));
        assert!(app.get_with::<u32, _>(|lent| lent.is_none()));
        let cloned = app.get::<u64>().unwrap();
        assert_eq!(Arc::strong_count(&value), 3);
        drop(cloned);
    }

    #[test]
    fn a_change_keeps_what_others_installed() {
        let app = App::new();
        std::thread::scope(|s| {
            for n in 0..8_u8 {
                let app = app.clone();
                s.spawn(move || match n % 4 {
                    0 => app.install(Arc::new(u16::from(n))),
                    1 => app.install(Arc::new(u32::from(n))),
                    2 => app.install(Arc::new(u64::from(n))),
                    _ => app.install(Arc::new(i64::from(n))),
                });
            }
        });
        assert!(app.get::<u16>().is_some() && app.get::<u32>().is_some());
        assert!(app.get::<u64>().is_some() && app.get::<i64>().is_some());
    }

    #[test]
    fn make_names_the_missing_type() {
        let err = App::new().make::<dyn Named>().err().unwrap();
        assert!(err.to_string().contains("Named"), "{err}");
    }

    /// A container holding `value` under its own type.
    fn holding<T: Send + Sync + 'static>(value: T) -> App {
        let app = App::new();
        app.install(Arc::new(value));
        app
    }

    #[test]
    fn enter_nests_and_unwinds() {
        let (outer, inner) = (holding(1_u8), holding(2_u8));
        let _o = outer.enter();
        {
            let _i = inner.enter();
            assert_eq!(*App::resolve::<u8>().unwrap(), 2);
            assert_eq!(App::resolve_with::<u8, _>(|n| n.map(|n| **n)), Some(2));
        }
        assert_eq!(*App::resolve::<u8>().unwrap(), 1);
    }

    // The container lent inside a scope is the scope's, and outside any
    // scope `with_current` sees what `current` sees.
    #[tokio::test]
    async fn with_current_lends_the_scope_and_falls_back_outside_it() {
        let (entered, scoped) = (holding(1_u32), holding(2_u32));
        let _g = entered.enter();
        let read = || App::with_current(|app| *app.get::<u32>().unwrap());
        assert_eq!(read(), 1);
        assert_eq!(scoped.scope(async move { read() }).await, 2);
        assert_eq!(read(), 1);
    }

    #[tokio::test]
    async fn scope_wins_over_enter() {
        let (entered, scoped) = (holding(1_u16), holding(2_u16));
        let _g = entered.enter();
        let seen = scoped
            .scope(async { *App::resolve::<u16>().unwrap() })
            .await;
        assert_eq!(seen, 2);
    }
}
