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
