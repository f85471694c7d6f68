//! Property: whatever a Redis route store loses (everything, or the tail of its counter and
//! a subject, as a failover does), and however often the node starts again with only what it
//! kept of the store (`Recalled`), no version is ever issued at or below one issued before,
//! and the store's version (a snapshot's floor) is never below one issued.
//!
//! The counter starts a year of microseconds ahead of Redis's clock, so that the clock, which
//! also holds versions up, cannot hide a floor that was lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ankusa::subjects::remote::redis::RedisStore;
use ankusa::subjects::remote::Cas;
use ankusa::subjects::routes::{Route, RouteStore};
use proptest::prelude::*;

use super::r1;
use crate::support::redis::RedisServer;

const IDS: [&str; 3] = ["r1", "r2", "r3"];

#[derive(Debug, Clone)]
enum Op {
    /// Create or update route `id`.
    Write { id: usize },
    /// Delete route `id`, if it exists.
    Delete { id: usize },
    /// Redis loses everything (a restart without persistence, a flush).
    Flush,
    /// Redis loses the tail: its counter goes back `by` versions and route `id` is gone.
    Tail { by: u16, id: usize },
    /// The node starts again, with what it kept of the store.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0usize..3).prop_map(|id| Op::Write { id }),
        2 => (0usize..3).prop_map(|id| Op::Delete { id }),
        1 => Just(Op::Flush),
        2 => (1u16..500, 0usize..3).prop_map(|(by, id)| Op::Tail { by, id }),
        2 => Just(Op::Restart),
    ]
}

fn store(url: &str, prefix: &str) -> Arc<RouteStore> {
    Arc::new(RedisStore::<Route>::new(url, prefix, Duration::from_secs(2)).expect("redis store"))
}

/// Write route `id` at the version it is at now.
async fn write(store: &RouteStore, id: &str) -> Cas {
    let found = store.get("t1", id).await.expect("get");
    let version = found.version();
    let revision = found.subject.map_or(1, |s| s.subject.revision + 1);
    let mut route = r1("https://example.test/p", revision);
    route.id = id.into();
    store.put(route, None, version).await.expect("put")
}

async fn run(url: String, prefix: String, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let counter = format!("{prefix}route:version");
    let (seconds, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let ahead = (seconds + 86_400 * 365) * 1_000_000;
    let () = redis::cmd("SET")
        .arg(&counter)
        .arg(ahead)
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut node = store(&url, &prefix);
    let mut issued = 0u64;
    for op in ops {
        let version = match op {
            Op::Write { id } => match write(node.as_ref(), IDS[id]).await {
                Cas::Written(stamp) => Some(stamp.version),
                Cas::Conflict { .. } => None,
            },
            Op::Delete { id } => {
                let found = node.get("t1", IDS[id]).await.expect("get");
                match found.version() {
                    Some(v) => match node.delete("t1", IDS[id], v).await.expect("delete") {
                        Cas::Written(stamp) => Some(stamp.version),
                        Cas::Conflict { .. } => None,
                    },
                    None => None,
                }
            }
            Op::Flush => {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{prefix}*"))
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                if !keys.is_empty() {
                    let () = redis::cmd("DEL")
                        .arg(keys)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                }
                None
            }
            Op::Tail { by, id } => {
                let now: Option<u64> = redis::cmd("GET")
                    .arg(&counter)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let back = now.unwrap_or(0).saturating_sub(u64::from(by));
                let () = redis::cmd("SET")
                    .arg(&counter)
                    .arg(back)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let key = format!("{prefix}route:{{t1}}:{}", IDS[id]);
                let () = redis::cmd("DEL")
                    .arg(key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                None
            }
            Op::Restart => {
                let kept = node
                    .recollection()
                    .expect("a Redis store keeps what it knows");
                node = store(&url, &prefix);
                node.recall(&kept);
                None
            }
        };
        if let Some(version) = version {
            prop_assert!(version > issued, "{version} issued after {issued}");
            issued = version;
        }
        let floor = node.version().await.expect("version").version;
        prop_assert!(
            floor >= issued,
            "the store's version {floor} below {issued}"
        );
    }
    Ok(())
}

/// Every case on one Redis, each under a prefix of its own.
#[test]
fn no_version_is_issued_twice_whatever_redis_loses() {
    let redis = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let case = AtomicU64::new(0);
    let config = ProptestConfig {
        cases: 48,
        // A failure prints its minimal case; there is no source file to keep it beside.
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let ops = prop::collection::vec(op(), 1..40);
    let result = runner.run(&ops, |ops| {
        let prefix = format!("p{}:", case.fetch_add(1, Ordering::Relaxed));
        runtime.block_on(run(redis.url(), prefix, ops))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
