//! Sources through the admin API, over real HTTP: every effective change writes exactly one
//! row with the right fields, every no-op writes none, pages come back in id order, and
//! concurrent updates of one source never lose one.

use std::collections::BTreeSet;

use crate::support::node::*;
use ankusa::store::{keys, Cf, Store};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const SOURCES: &str = "/admin/v1/tenants/t1/sources";

#[tokio::test]
async fn each_change_writes_one_row_with_exact_fields() {
    let node = TestNode::start().await;
    let create = node
        .send(
            node.req(Method::POST, SOURCES, Some(ADMIN))
                .header("x-request-id", "req-create-1")
                .json(&json!({"id": "s1", "kind": "webhook", "secret": "sekrit-1",
                              "config": {"url": "https://example.test/hook"}})),
        )
        .await;
    assert_eq!(create.status, StatusCode::CREATED, "{}", create.text);
    assert_eq!(create.request_id(), "req-create-1");
    assert_eq!(create.header("etag").as_deref(), Some("\"1\""));
    assert_eq!(
        create.json(),
        json!({"id": "s1", "tenant": "t1", "kind": "webhook", "secret": "[redacted]",
               "config": {"url": "https://example.test/hook"}, "revision": 1})
    );
    let rows = node.rows().await;
    assert_eq!(rows.len(), 1);
    let r1 = &rows[0];
    assert_eq!(Some(r1["seq"].as_u64().unwrap()), create.seq());
    assert_eq!(r1["actor"], "alice");
    assert_eq!(r1["remote_ip"], "127.0.0.1");
    assert_eq!(r1["request_id"], "req-create-1");
    assert_eq!(r1["action"], "source.create");
    assert_eq!(r1["tenant"], "t1");
    assert_eq!(r1["resource"], "sources/s1");
    assert_eq!(r1["revision"], 1);
    assert_eq!(r1["result"], "ok");
    assert_eq!(r1["before_hash"], Value::Null);
    assert!(is_hash(&r1["after_hash"]), "{r1}");
    assert_eq!(r1["detail"], json!({"config_keys": 1}));
    assert_eq!(r1["publish"], true);

    // A read writes nothing.
    let read = node
        .call(Method::GET, &format!("{SOURCES}/s1"), READER, None)
        .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.json(), create.json());

    // No X-Request-Id: one is generated, echoed, and is the row's.
    let update = node
        .call(
            Method::PATCH,
            &format!("{SOURCES}/s1"),
            ADMIN,
            Some(json!({"kind": "kafka"})),
        )
        .await;
    assert_eq!(update.status, StatusCode::OK, "{}", update.text);
    assert_eq!(update.json()["revision"], 2);
    let generated = update.request_id();
    assert!(uuid::Uuid::parse_str(&generated).is_ok(), "{generated}");
    let r2 = node.row(update.seq().unwrap()).await;
    assert_eq!(r2["request_id"], generated.as_str());
    assert_eq!(r2["action"], "source.update");
    assert_eq!(r2["revision"], 2);
    assert_eq!(r2["before_hash"], r1["after_hash"]);
    assert!(is_hash(&r2["after_hash"]) && r2["after_hash"] != r1["after_hash"]);
    assert_eq!(r2["detail"], json!({"fields": 1}));

    let delete = node
        .send(
            node.req(Method::DELETE, &format!("{SOURCES}/s1"), Some(WRITER))
                .header("if-match", "\"2\"")
                .header("x-request-id", "req-delete"),
        )
        .await;
    assert_eq!(delete.status, StatusCode::NO_CONTENT, "{}", delete.text);
    assert_eq!(delete.request_id(), "req-delete");
    let r3 = node.row(delete.seq().unwrap()).await;
    assert_eq!(r3["actor"], "writer");
    assert_eq!(r3["action"], "source.delete");
    assert_eq!(r3["resource"], "sources/s1");
    assert_eq!(r3["tenant"], "t1");
    assert_eq!(r3["revision"], 3, "a delete's revision is the last one + 1");
    assert_eq!(r3["before_hash"], r2["after_hash"]);
    assert_eq!(r3["after_hash"], Value::Null);
    assert_eq!(r3["result"], "ok");

    let gone = node
        .call(Method::GET, &format!("{SOURCES}/s1"), READER, None)
        .await;
    assert_error(&gone, 404, "not_found");
    let rows = node.rows().await;
    assert_eq!(rows.len(), 3);
    let seqs: Vec<u64> = rows.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, vec![1, 2, 3]);
    let dir = node.stop().await;
    // A create's and an update's event carry the very bytes the API answered with.
    let store = Store::open(&dir.path().join("data")).unwrap();
    for (seq, answer) in [(1, &create.text), (2, &update.text)] {
        let outbox = store.get(Cf::Audit, &keys::outbox_key(seq)).unwrap();
        assert_eq!(outbox.as_deref(), Some(answer.as_bytes()), "row {seq}");
    }
}

#[tokio::test]
async fn no_op_requests_write_no_row() {
    let node = TestNode::start().await;
    let s1 = json!({"id": "s1", "kind": "webhook", "secret": "x1", "config": {"a": 1}});
    let created = node
        .call(Method::POST, SOURCES, ADMIN, Some(s1.clone()))
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let item = format!("{SOURCES}/s1");
    let cases: Vec<(Reply, u16, &str)> = vec![
        (
            node.call(Method::POST, SOURCES, ADMIN, Some(s1.clone()))
                .await,
            409,
            "already_exists",
        ),
        (
            node.call(
                Method::POST,
                SOURCES,
                ADMIN,
                Some(json!({"id": "s2", "kind": "Bad Kind"})),
            )
            .await,
            422,
            "invalid_input",
        ),
        (
            node.call(
                Method::PATCH,
                &format!("{SOURCES}/nope"),
                ADMIN,
                Some(json!({"kind": "k"})),
            )
            .await,
            404,
            "not_found",
        ),
        (
            node.call(Method::PATCH, &item, ADMIN, Some(json!({})))
                .await,
            422,
            "invalid_input",
        ),
        (
            node.send(
                node.req(Method::PATCH, &item, Some(ADMIN))
                    .header("if-match", "\"7\"")
                    .json(&json!({"kind": "other"})),
            )
            .await,
            409,
            "revision_mismatch",
        ),
        (
            node.send(
                node.req(Method::DELETE, &item, Some(ADMIN))
                    .header("if-match", "2"),
            )
            .await,
            409,
            "revision_mismatch",
        ),
        (
            node.call(Method::DELETE, &format!("{SOURCES}/nope"), ADMIN, None)
                .await,
            404,
            "not_found",
        ),
        (
            node.send(
                node.req(Method::PATCH, &item, None)
                    .json(&json!({"kind": "k"})),
            )
            .await,
            401,
            "unauthorized",
        ),
        (
            node.call(Method::PATCH, &item, READER, Some(json!({"kind": "k"})))
                .await,
            403,
            "forbidden",
        ),
        (
            node.call(Method::DELETE, &item, AUDITOR, None).await,
            403,
            "forbidden",
        ),
    ];
    for (reply, status, code) in &cases {
        assert_error(reply, *status, code);
        assert_eq!(reply.seq(), None);
    }
    // The same values again: 200 with the source as it is, no row, no new revision.
    let same = node
        .call(
            Method::PATCH,
            &item,
            ADMIN,
            Some(json!({"kind": "webhook", "config": {"a": 1}})),
        )
        .await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.text);
    assert_eq!(same.seq(), None);
    assert_eq!(same.json()["revision"], 1);
    assert_eq!(node.rows().await.len(), 1, "only the create wrote a row");
    // A number is kept exactly as sent (serde_json's best-effort float parsing reads this one
    // a unit in the last place off), and setting it again is no change.
    let t = 113.879_342_897_756_78_f64;
    let float = json!({"config": {"t": t}});
    let set = node
        .call(Method::PATCH, &item, ADMIN, Some(float.clone()))
        .await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text);
    assert_eq!(set.json()["revision"], 2);
    let got = node.call(Method::GET, &item, ADMIN, None).await;
    assert_eq!(
        got.json()["config"]["t"].as_f64().map(f64::to_bits),
        Some(t.to_bits()),
        "{}",
        got.text
    );
    let again = node.call(Method::PATCH, &item, ADMIN, Some(float)).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(again.seq(), None, "{}", again.text);
    assert_eq!(node.rows().await.len(), 2);
    node.stop().await;
}

#[tokio::test]
async fn pages_come_back_in_id_order_per_tenant() {
    let node = TestNode::start().await;
    for id in ["e", "a", "d", "b", "c"] {
        let r = node
            .call(
                Method::POST,
                SOURCES,
                ADMIN,
                Some(json!({"id": id, "kind": "k"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let other = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1-x/sources",
            ADMIN,
            Some(json!({"id": "z", "kind": "k"})),
        )
        .await;
    assert_eq!(other.status, StatusCode::CREATED);
    let mut seen = Vec::new();
    let mut after = String::new();
    let mut pages = 0;
    loop {
        let q = if after.is_empty() {
            "?limit=2".to_owned()
        } else {
            format!("?limit=2&after={after}")
        };
        let page = node
            .call(Method::GET, &format!("{SOURCES}{q}"), READER, None)
            .await
            .json();
        pages += 1;
        for item in page["items"].as_array().unwrap() {
            assert_eq!(item["tenant"], "t1");
            seen.push(item["id"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(next) => after = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(seen, ["a", "b", "c", "d", "e"]);
    assert_eq!(pages, 3);
    node.stop().await;
}

#[tokio::test]
async fn fifty_concurrent_updates_all_land_with_consecutive_revisions() {
    let node = TestNode::start().await;
    let item = format!("{SOURCES}/hot");
    let r = node
        .call(
            Method::POST,
            SOURCES,
            ADMIN,
            Some(json!({"id": "hot", "kind": "k"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let updates = (0..50).map(|i| {
        let rb = node
            .req(Method::PATCH, &item, Some(ADMIN))
            .header("x-request-id", format!("upd-{i}"))
            .json(&json!({"config": {"writer": i}}));
        node.send(rb)
    });
    let replies = futures::future::join_all(updates).await;
    let mut revisions = BTreeSet::new();
    for r in &replies {
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        revisions.insert(r.json()["revision"].as_u64().unwrap());
    }
    assert_eq!(revisions, (2..=51).collect::<BTreeSet<u64>>());
    let rows: Vec<Value> = node
        .rows()
        .await
        .into_iter()
        .filter(|r| r["action"] == "source.update")
        .collect();
    assert_eq!(rows.len(), 50);
    // In seq order the revisions are consecutive, and each row chains onto the one before.
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["revision"], i as u64 + 2);
        if i > 0 {
            assert_eq!(row["before_hash"], rows[i - 1]["after_hash"]);
        }
    }
    // Every accepted update has its own row, matched by request id and seq.
    for r in &replies {
        let row = rows
            .iter()
            .find(|row| row["seq"].as_u64() == r.seq())
            .expect("row");
        assert_eq!(row["request_id"], r.request_id().as_str());
        assert_eq!(row["revision"], r.json()["revision"]);
    }
    // The last row's update is the source's present state.
    let last = rows.last().unwrap()["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let writer: u64 = last.trim_start_matches("upd-").parse().unwrap();
    let now = node.call(Method::GET, &item, READER, None).await.json();
    assert_eq!(now["revision"], 51);
    assert_eq!(now["config"], json!({"writer": writer}));
    node.stop().await;
}

#[tokio::test]
async fn concurrent_read_modify_write_with_if_match_loses_no_update() {
    let node = TestNode::start().await;
    let item = format!("{SOURCES}/counter");
    let r = node
        .call(
            Method::POST,
            SOURCES,
            ADMIN,
            Some(json!({"id": "counter", "kind": "k", "config": {"n": 0}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let workers = (0..50).map(|_| {
        let node = &node;
        let item = item.clone();
        async move {
            let mut conflicts = 0u32;
            for _ in 0..200 {
                let now = node.call(Method::GET, &item, READER, None).await;
                let etag = now.header("etag").unwrap();
                let n = now.json()["config"]["n"].as_u64().unwrap();
                let put = node
                    .send(
                        node.req(Method::PATCH, &item, Some(ADMIN))
                            .header("if-match", etag)
                            .json(&json!({"config": {"n": n + 1}})),
                    )
                    .await;
                match put.status {
                    StatusCode::OK => return conflicts,
                    StatusCode::CONFLICT => {
                        assert_eq!(put.code(), "revision_mismatch");
                        assert_eq!(put.seq(), None);
                        conflicts += 1;
                    }
                    other => panic!("{other}: {}", put.text),
                }
            }
            panic!("no progress in 200 attempts");
        }
    });
    let conflicts: u32 = futures::future::join_all(workers).await.into_iter().sum();
    let now = node.call(Method::GET, &item, READER, None).await.json();
    assert_eq!(now["config"]["n"], 50, "every increment landed");
    assert_eq!(now["revision"], 51);
    let rows: Vec<Value> = node
        .rows()
        .await
        .into_iter()
        .filter(|r| r["action"] == "source.update")
        .collect();
    assert_eq!(
        rows.len(),
        50,
        "one row per accepted update, none for the {conflicts} conflicts"
    );
    let revisions: Vec<u64> = rows
        .iter()
        .map(|r| r["revision"].as_u64().unwrap())
        .collect();
    assert_eq!(revisions, (2..=51).collect::<Vec<u64>>());
    node.stop().await;
}
