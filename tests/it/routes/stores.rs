//! The two remote stores behave alike: any sequence of reads and compare-and-set writes gives
//! the same answers and leaves the same routes in memory and in Redis (the Lua scripts and the
//! in-process table implement one contract).

use std::sync::Arc;

use ankusa::subjects::remote::memory::MemoryStore;
use ankusa::subjects::remote::Cas;
use ankusa::subjects::routes::{Route, RouteStore};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::routes::redis_store;
use crate::support::redis::RedisServer;

/// One operation on route `r<id>`: put at `expected` (the route's revision becomes
/// `expected + 1`), delete at `expected`, or read.
#[derive(Debug, Clone)]
enum Op {
    Put { id: u8, expected: u64 },
    Delete { id: u8, expected: u64 },
    Get { id: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3u8, 0..4u64).prop_map(|(id, expected)| Op::Put { id, expected }),
        (0..3u8, 0..4u64).prop_map(|(id, expected)| Op::Delete { id, expected }),
        (0..3u8).prop_map(|id| Op::Get { id }),
    ]
}

fn route(tenant: &str, id: u8, revision: u64) -> Route {
    Route {
        id: format!("r{id}"),
        tenant: tenant.into(),
        source: "s1".into(),
        destination: format!("https://example.test/{revision}"),
        filter: Default::default(),
        enabled: true,
        revision,
    }
}

/// What `op` answers on `store`, as text.
async fn apply(store: &RouteStore, tenant: &str, op: &Op) -> String {
    match op {
        Op::Put { id, expected } => {
            let cas: Cas = store
                .put(&route(tenant, *id, expected + 1), *expected)
                .await
                .unwrap();
            format!("{cas:?}")
        }
        Op::Delete { id, expected } => {
            let cas = store
                .delete(tenant, &format!("r{id}"), *expected)
                .await
                .unwrap();
            format!("{cas:?}")
        }
        Op::Get { id } => format!("{:?}", store.get(tenant, &format!("r{id}")).await.unwrap()),
    }
}

#[test]
fn memory_and_redis_stores_agree_on_every_sequence() {
    let redis = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let on_redis = redis_store(&redis.url());
    let case = std::sync::atomic::AtomicU32::new(0);
    let mut runner = TestRunner::new(Config::with_cases(48));
    runner
        .run(&prop::collection::vec(op(), 1..24), |ops| {
            // A tenant per case: the cases share one Redis.
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tenant = format!("t{n}");
            let memory: Arc<RouteStore> = Arc::new(MemoryStore::<Route>::default());
            runtime.block_on(async {
                for op in &ops {
                    let a = apply(memory.as_ref(), &tenant, op).await;
                    let b = apply(on_redis.as_ref(), &tenant, op).await;
                    prop_assert_eq!(&a, &b, "{:?}", op);
                }
                let a = memory.list(&tenant, None, 10).await.unwrap();
                let b = on_redis.list(&tenant, None, 10).await.unwrap();
                prop_assert_eq!(a, b);
                Ok(())
            })
        })
        .unwrap();
}

/// An id the index lists whose route is gone (deleted between the store's two reads) does
/// not shorten a page: the store reads on, so a short page still means the end.
#[tokio::test]
async fn a_listed_id_whose_route_is_gone_does_not_end_the_listing() {
    let redis = RedisServer::start();
    let store = redis_store(&redis.url());
    for id in [1, 3, 4] {
        assert_eq!(
            store.put(&route("t1", id, 1), 0).await.unwrap(),
            Cas::Written
        );
    }
    // The index entry of a route deleted between ZRANGEBYLEX and HMGET, frozen in place.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg("ankusa:routes:{t1}")
        .arg(0)
        .arg("r2")
        .query_async(&mut conn)
        .await
        .unwrap();

    let ids = |routes: Vec<Route>| routes.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(ids(store.list("t1", None, 2).await.unwrap()), ["r1", "r3"]);
    assert_eq!(
        ids(store.list("t1", Some("r1"), 2).await.unwrap()),
        ["r3", "r4"]
    );
    assert_eq!(
        ids(store.list("t1", None, 10).await.unwrap()),
        ["r1", "r3", "r4"]
    );
}
