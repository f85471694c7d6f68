//! The two remote stores behave alike: any sequence of reads and compare-and-set writes gives
//! the same answers and leaves the same routes in memory and in Redis (the Lua scripts and the
//! in-process table implement one contract), and in both a route's versions only increase.

use std::sync::Arc;

use ankusa::subjects::remote::memory::MemoryStore;
use std::collections::BTreeMap;

use ankusa::subjects::remote::{Cas, Versioned};
use ankusa::subjects::routes::{Route, RouteStore};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::routes::redis_store;
use crate::support::redis::RedisServer;

/// Which version a write expects: the route's present one, one it had before (or any that
/// never was its), or none (a create).
#[derive(Debug, Clone, Copy)]
enum Expect {
    Current,
    Stale,
    Absent,
}

/// One operation on route `r<id>`: put, delete, or read.
#[derive(Debug, Clone)]
enum Op {
    Put { id: u8, expect: Expect },
    Delete { id: u8, expect: Expect },
    Get { id: u8 },
}

fn expect() -> impl Strategy<Value = Expect> {
    prop_oneof![
        Just(Expect::Current),
        Just(Expect::Stale),
        Just(Expect::Absent)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3u8, expect()).prop_map(|(id, expect)| Op::Put { id, expect }),
        (0..3u8, expect()).prop_map(|(id, expect)| Op::Delete { id, expect }),
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

/// A version neither store issues in this test: the memory store's are microseconds since
/// the epoch, and Redis counts a few thousand.
const NEVER_ISSUED: u64 = 999_999_999;

/// One store under test, and every version it issued per route, in order.
struct Tracked<'a> {
    store: &'a RouteStore,
    issued: BTreeMap<u8, Vec<u64>>,
}

impl Tracked<'_> {
    /// The version `expect` names for route `id`, as this store knows it.
    async fn expected(&self, tenant: &str, id: u8, expect: Expect) -> Option<u64> {
        let found = self.store.get(tenant, &format!("r{id}")).await.unwrap();
        match expect {
            Expect::Current => found.version(),
            Expect::Stale => Some(
                self.issued
                    .get(&id)
                    .and_then(|v| v.iter().rev().nth(1).copied())
                    .unwrap_or(NEVER_ISSUED),
            ),
            Expect::Absent => None,
        }
    }

    /// What `op` answers, as text without versions (the two stores' counters differ); the
    /// version a write took is kept.
    async fn apply(&mut self, tenant: &str, op: &Op) -> String {
        let (id, cas) = match *op {
            Op::Put { id, expect } => {
                let expected = self.expected(tenant, id, expect).await;
                let revision = self
                    .store
                    .get(tenant, &format!("r{id}"))
                    .await
                    .unwrap()
                    .into_subject()
                    .map_or(1, |r| r.revision + 1);
                let route = route(tenant, id, revision);
                (id, self.store.put(route, None, expected).await.unwrap())
            }
            Op::Delete { id, expect } => {
                let expected = self.expected(tenant, id, expect).await.unwrap_or(0);
                let name = format!("r{id}");
                (
                    id,
                    self.store.delete(tenant, &name, expected).await.unwrap(),
                )
            }
            Op::Get { id } => {
                let name = format!("r{id}");
                let found = self.store.get(tenant, &name).await.unwrap().into_subject();
                let exists = self.store.exists(tenant, &name).await.unwrap();
                assert_eq!(exists, found.is_some(), "exists agrees with get");
                return format!("{found:?}");
            }
        };
        match cas {
            Cas::Written(stamp) => {
                self.issued.entry(id).or_default().push(stamp.version);
                "Written".to_owned()
            }
            conflict => format!("{conflict:?}"),
        }
    }

    /// Every route's versions increased, and the store's version is at or above them all.
    async fn versions_increased(&self) -> Result<(), TestCaseError> {
        let now = self.store.version().await.unwrap().version;
        for versions in self.issued.values() {
            prop_assert!(versions.windows(2).all(|w| w[0] < w[1]), "{:?}", versions);
            prop_assert!(versions.iter().all(|v| *v <= now));
        }
        Ok(())
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
                let mut a = Tracked {
                    store: memory.as_ref(),
                    issued: BTreeMap::new(),
                };
                let mut b = Tracked {
                    store: on_redis.as_ref(),
                    issued: BTreeMap::new(),
                };
                for op in &ops {
                    let (x, y) = (a.apply(&tenant, op).await, b.apply(&tenant, op).await);
                    prop_assert_eq!(&x, &y, "{:?}", op);
                }
                let routes = |listed: Vec<Versioned<Route>>| {
                    listed.into_iter().map(|v| v.subject).collect::<Vec<_>>()
                };
                let x = routes(memory.list(&tenant, None, 10).await.unwrap());
                let y = routes(on_redis.list(&tenant, None, 10).await.unwrap());
                prop_assert_eq!(x, y);
                a.versions_increased().await?;
                b.versions_increased().await
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
        let Cas::Written(stamp) = store.put(route("t1", id, 1), None, None).await.unwrap() else {
            panic!("r{id} is created");
        };
        // The store's version is at or above every version it issued.
        let now = store.version().await.unwrap();
        assert!(
            stamp.version <= now.version && stamp.store == now.store,
            "{stamp:?} {now:?}"
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

    let ids = |routes: Vec<Versioned<Route>>| {
        routes.into_iter().map(|r| r.subject.id).collect::<Vec<_>>()
    };
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
