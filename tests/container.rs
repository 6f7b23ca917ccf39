//! Containers scoped per test: what one test installs, another never sees.

mod support;

use std::sync::Arc;
use std::time::Duration;

use suprnova::container::App;

trait Marker: Send + Sync {
    fn id(&self) -> u32;
}
struct Id(u32);
impl Marker for Id {
    fn id(&self) -> u32 {
        self.0
    }
}

/// Installs `id` in a fresh container and checks, while other tests run,
/// that the scope sees its own value, including across `.await` points and
/// in a task spawned inside the scope.
async fn own_container_only(id: u32) {
    let app = App::new();
    app.install::<dyn Marker>(Arc::new(Id(id)));
    app.scope(async move {
        for _ in 0..50 {
            assert_eq!(App::resolve::<dyn Marker>().unwrap().id(), id);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let scoped = App::current();
        let spawned =
            tokio::spawn(scoped.scope(async { App::resolve::<dyn Marker>().unwrap().id() }));
        assert_eq!(spawned.await.unwrap(), id);
    })
    .await;
    assert!(
        App::global().get::<dyn Marker>().is_none(),
        "a scoped install leaked to the global container"
    );
}

#[tokio::test]
async fn first_test_sees_only_its_container() {
    own_container_only(1).await;
}

#[tokio::test]
async fn second_test_sees_only_its_container() {
    own_container_only(2).await;
}

#[test]
fn two_threads_at_once_never_see_each_other() {
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let threads: Vec<_> = [10_u32, 20]
        .into_iter()
        .map(|id| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                barrier.wait();
                rt.block_on(own_container_only(id));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn resolve_make_names_the_missing_service() {
    let app = App::new();
    let _guard = app.enter();
    let err = App::resolve_make::<dyn Marker>().err().unwrap();
    assert!(err.to_string().contains("Marker"), "{err}");
}

fn holding(id: u32) -> App {
    let app = App::new();
    app.install::<dyn Marker>(Arc::new(Id(id)));
    app
}

fn current_id() -> Option<u32> {
    App::resolve::<dyn Marker>().map(|m| m.id())
}

/// `guard = b.enter()` drops `a`'s guard after `b`'s is made: the guard
/// held is `b`'s, so `b` is current, and nothing is once it drops (a guard
/// that took the top of the stack off left `a` current).
#[test]
#[allow(
    unused_assignments,
    reason = "the old guard is dropped by the assignment"
)]
fn a_guard_given_a_new_container_makes_that_container_current() {
    let (a, b) = (holding(1), holding(2));
    let mut guard = a.enter();
    assert_eq!(current_id(), Some(1));
    guard = b.enter();
    assert_eq!(current_id(), Some(2));
    drop(guard);
    assert_eq!(current_id(), None);
}

/// Guards dropped in another order than they were made: the container whose
/// guard is still held stays current.
#[test]
fn dropping_an_outer_guard_first_keeps_the_inner_container_current() {
    let (a, b) = (holding(1), holding(2));
    let outer = a.enter();
    let inner = b.enter();
    drop(outer);
    assert_eq!(current_id(), Some(2));
    drop(inner);
    assert_eq!(current_id(), None);
}
