//! Two nodes of a fleet (routes in one real Redis, sources each its own) watched by one
//! follower: writers on both change the same routes at once, and the one replica equals what
//! each node lists of the shared store and its own.

use serde_json::json;

use super::*;
use crate::fleet::write;
use crate::support::node::TestNode;
use crate::support::redis::RedisServer;

/// Node `name` of a fleet whose routes are in the Redis at `url`.
fn member(name: &'static str, url: String) -> impl FnOnce(&mut Value) + Clone {
    move |v: &mut Value| {
        watched(v);
        v["node"]["uri"] = json!(format!("urn:ankusa:{name}"));
        v["routes"]["store"] = json!("redis");
        v["routes"]["redis_url"] = json!(url);
        v["routes"]["verify_interval"] = json!("0s");
        v["settlement"]["interval"] = json!("100ms");
    }
}

/// The shared store's name, `redis:<id>`.
async fn shared_store(redis: &RedisServer) -> String {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let id: String = redis::cmd("GET")
        .arg("ankusa:store_id")
        .query_async(&mut conn)
        .await
        .unwrap();
    format!("redis:{id}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_of_a_fleet_merge_into_one_exact_replica() {
    let redis = RedisServer::start();
    let a = TestNode::start_with(member("node-a", redis.url())).await;
    let b = TestNode::start_with(member("node-b", redis.url())).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    let following = Following::start(options(&[&a.base, &b.base], &out, false));
    let (x, y) = tokio::join!(write(a.base.clone(), 51, 80), write(b.base.clone(), 52, 80));
    assert!(x + y > 60, "{}", x + y);
    let shared = shared_store(&redis).await;
    for (node, uri) in [(&a, "urn:ankusa:node-a"), (&b, "urn:ankusa:node-b")] {
        let stores = [shared.clone(), uri.to_owned()];
        converged(&node.base, &node.base, &out, &stores).await;
    }
    let metrics = following.stop().await;
    assert_eq!(metrics.count("invalid"), 0);
    // One replica holds the shared routes once and each node's own sources apart.
    let kept = file::load(&out).unwrap().unwrap();
    let stores: Vec<&String> = kept.replica.subjects.keys().collect();
    assert_eq!(stores.len(), 3, "{stores:?}");
    assert_eq!(kept.progress.http.len(), 2);
    a.stop().await;
    b.stop().await;
}
