//! The audit read API, the client address of a row behind proxies, and the OpenAPI
//! document against the routes the node really serves.

use std::collections::BTreeSet;

use crate::support::node::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

async fn make_changes(node: &TestNode) {
    for (tenant, id) in [("t1", "a"), ("t1", "b"), ("t2", "c")] {
        let r = node
            .call(
                Method::POST,
                &format!("/admin/v1/tenants/{tenant}/sources"),
                ADMIN,
                Some(json!({"id": id, "kind": "k"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let r = node
        .call(
            Method::PATCH,
            "/admin/v1/tenants/t1/sources/a",
            ADMIN,
            Some(json!({"kind": "k2"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = node
        .call(
            Method::PUT,
            "/admin/v1/tenants/t1/overrides/a",
            ADMIN,
            Some(json!({"rate": 3})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
}

async fn audit(node: &TestNode, query: &str) -> Reply {
    node.call(
        Method::GET,
        &format!("/admin/v1/audit{query}"),
        AUDITOR,
        None,
    )
    .await
}

async fn create(node: &TestNode, id: &str, xff: &str) -> Reply {
    node.send(
        node.req(Method::POST, "/admin/v1/tenants/t1/sources", Some(ADMIN))
            .header("x-forwarded-for", xff)
            .json(&json!({"id": id, "kind": "k"})),
    )
    .await
}

/// The seqs of a page of rows.
pub(crate) fn seqs(page: &Value) -> Vec<u64> {
    page["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn rows_page_in_seq_order_with_filters() {
    let node = TestNode::start().await;
    make_changes(&node).await;
    let all = audit(&node, "").await.json();
    assert_eq!(seqs(&all), vec![1, 2, 3, 4, 5]);
    assert_eq!(all["next"], Value::Null);

    let first = audit(&node, "?limit=2").await.json();
    assert_eq!(seqs(&first), vec![1, 2]);
    assert_eq!(first["next"], 2);
    let second = audit(&node, "?after=2&limit=2").await.json();
    assert_eq!(seqs(&second), vec![3, 4]);
    assert_eq!(second["next"], 4);
    let last = audit(&node, "?after=4&limit=2").await.json();
    assert_eq!(seqs(&last), vec![5]);
    assert_eq!(last["next"], Value::Null);

    assert_eq!(seqs(&audit(&node, "?tenant=t2").await.json()), vec![3]);
    assert_eq!(
        seqs(&audit(&node, "?action=source.update").await.json()),
        vec![4]
    );
    assert_eq!(
        seqs(&audit(&node, "?resource=sources/").await.json()),
        vec![1, 2, 3, 4]
    );
    assert_eq!(
        seqs(&audit(&node, "?resource=overrides/a").await.json()),
        vec![5]
    );
    assert_eq!(
        seqs(&audit(&node, "?tenant=t1&resource=sources/a").await.json()),
        vec![1, 4]
    );

    let one = node
        .call(Method::GET, "/admin/v1/audit/4", AUDITOR, None)
        .await;
    assert_eq!(one.status, StatusCode::OK);
    assert_eq!(one.json(), all["rows"][3]);
    assert_error(
        &node
            .call(Method::GET, "/admin/v1/audit/99", AUDITOR, None)
            .await,
        404,
        "not_found",
    );
    assert_error(
        &node
            .call(Method::GET, "/admin/v1/audit/0", AUDITOR, None)
            .await,
        404,
        "not_found",
    );
    assert_error(
        &node
            .call(Method::GET, "/admin/v1/audit/x", AUDITOR, None)
            .await,
        400,
        "bad_request",
    );
    for bad in [
        "?limit=0",
        "?limit=1001",
        "?after=-1",
        "?after=x",
        "?seq=1",
        "?tenant=",
    ] {
        assert_error(&audit(&node, bad).await, 400, "bad_request");
    }
    // Only audit:read reads the trail; rows carry no audit key and nothing but hashes.
    assert_error(
        &node
            .call(Method::GET, "/admin/v1/audit", READER, None)
            .await,
        403,
        "forbidden",
    );
    assert_error(
        &node
            .call(Method::GET, "/admin/v1/audit/1", WRITER, None)
            .await,
        403,
        "forbidden",
    );
    for row in all["rows"].as_array().unwrap() {
        let keys: BTreeSet<&str> = row
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected: BTreeSet<&str> = [
            "v",
            "seq",
            "at",
            "actor",
            "remote_ip",
            "request_id",
            "action",
            "tenant",
            "resource",
            "detail",
            "before_hash",
            "after_hash",
            "revision",
            "result",
            "publish",
            // Every change through the API is made in a trace (the request's own, here).
            "traceparent",
        ]
        .into();
        // A source's row also says the version its change took (a local store: no `store`).
        if row["action"].as_str().unwrap().starts_with("source.") {
            expected.insert("version");
        }
        assert_eq!(keys, expected, "{row}");
    }
    node.stop().await;
}

#[tokio::test]
async fn forwarded_for_is_believed_only_from_trusted_proxies() {
    // Nobody trusted: the header is ignored, the row has the peer's address.
    let node = TestNode::start().await;
    let r = create(&node, "a", "203.0.113.7").await;
    assert_eq!(node.row(r.seq().unwrap()).await["remote_ip"], "127.0.0.1");
    let r = create(&node, "b", "not an address").await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "an untrusted peer's header is not even read"
    );
    node.stop().await;

    // Loopback trusted: the right-most address that is not a trusted proxy is the client.
    let node = TestNode::start_with(|c| c["api"]["trusted_proxies"] = json!(["127.0.0.0/8"])).await;
    let r = create(&node, "a", "198.51.100.1, 203.0.113.7, 127.0.0.2").await;
    assert_eq!(node.row(r.seq().unwrap()).await["remote_ip"], "203.0.113.7");
    let r = create(&node, "b", "2001:db8::1").await;
    assert_eq!(node.row(r.seq().unwrap()).await["remote_ip"], "2001:db8::1");
    // Not an address: the peer, and no refusal (issue 17).
    let odd = create(&node, "c", "203.0.113.7, <script>").await;
    assert_eq!(node.row(odd.seq().unwrap()).await["remote_ip"], "127.0.0.1");
    assert_eq!(node.rows().await.len(), 3);
    node.stop().await;
}

#[tokio::test]
async fn forwarded_for_takes_the_forms_proxies_send() {
    let node = TestNode::start_with(|c| c["api"]["trusted_proxies"] = json!(["127.0.0.0/8"])).await;
    let cases = [
        ("203.0.113.7:41234", "203.0.113.7"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("2001:db8::2", "2001:db8::2"),
        (
            "198.51.100.1, 203.0.113.8:8080, 127.0.0.2:80",
            "203.0.113.8",
        ),
        // Not an address: the walk stops there, at the proxy that sent it.
        ("unknown", "127.0.0.1"),
        ("_hidden, 127.0.0.2", "127.0.0.1"),
        ("203.0.113.9, unknown", "127.0.0.1"),
    ];
    for (i, (xff, client)) in cases.iter().enumerate() {
        let r = create(&node, &format!("s{i}"), xff).await;
        assert_eq!(r.status, StatusCode::CREATED, "{xff}: {}", r.text);
        let row = node.row(r.seq().unwrap()).await;
        assert_eq!(row["remote_ip"], *client, "{xff}");
    }
    node.stop().await;
}

/// Every `(METHOD, path)` of the OpenAPI document.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.insert((method.to_uppercase(), path.clone()));
        }
    }
    routes
}

/// `path` with its parameters filled in: `{tenant}` is `t1`, `{seq}` is `1`, any other is
/// `probe`.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|segment| match segment {
            "{tenant}" => "t1",
            "{seq}" => "1",
            s if s.starts_with('{') && s.ends_with('}') => "probe",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test]
async fn openapi_document_and_served_routes_agree() {
    let node = TestNode::start().await;
    let served = node
        .send(node.req(Method::GET, "/admin/v1/openapi.json", None))
        .await;
    assert_eq!(served.status, StatusCode::OK);
    let file: Value =
        serde_json::from_str(include_str!("../../../openapi/admin-v1.json")).expect("valid JSON");
    assert_eq!(
        served.json(),
        file,
        "the node serves the document kept in the repo"
    );
    assert_eq!(file["openapi"], "3.1.0");

    let table: BTreeSet<(String, String)> = ankusa::api::router::admin_endpoints()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p.to_owned()))
        .collect();
    let doc = documented(&file);
    assert_eq!(
        table.difference(&doc).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "served but not documented"
    );
    assert_eq!(
        doc.difference(&table).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "documented but not served"
    );

    // And the router really answers each of them (not with no_route / method_not_allowed):
    // probed with bodies that are refused, so that nothing is written.
    for (method, path) in &doc {
        let concrete = concrete(path);
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let r = node
            .send(
                node.req(method.clone(), &concrete, Some(ADMIN))
                    .json(&json!({"bogus": 1})),
            )
            .await;
        assert!(
            !["no_route", "method_not_allowed"].contains(&r.code().as_str()),
            "{method} {concrete}: {}",
            r.text
        );
        assert!(r.header("x-request-id").is_some());
    }
    assert_error(
        &node
            .call(Method::GET, "/admin/v1/nothing", ADMIN, None)
            .await,
        404,
        "no_route",
    );
    assert_error(
        &node.call(Method::PUT, "/admin/v1/audit", ADMIN, None).await,
        405,
        "method_not_allowed",
    );
    assert!(node.rows().await.is_empty(), "probing wrote nothing");
    node.stop().await;
}

/// The tree's endpoints: the checkpoint the interval timer signs, a row's inclusion proof
/// and a consistency proof, and each refusal by its code.
#[tokio::test]
async fn checkpoints_and_proofs_are_served_to_auditors() {
    let node = TestNode::start_with(|c| c["audit"]["checkpoint_interval"] = json!("1s")).await;
    let none = node
        .call(Method::GET, "/admin/v1/audit/checkpoint", AUDITOR, None)
        .await;
    assert_error(&none, 404, "not_found");
    make_changes(&node).await;
    // Five rows; within a second of them the timer signs row 6, of the tree of five.
    crate::support::eventually::eventually(
        "a checkpoint",
        std::time::Duration::from_secs(10),
        async || {
            node.call(Method::GET, "/admin/v1/audit/checkpoint", AUDITOR, None)
                .await
                .status
                == StatusCode::OK
        },
    )
    .await;
    let cp = node
        .call(Method::GET, "/admin/v1/audit/checkpoint", AUDITOR, None)
        .await
        .json();
    assert_eq!(cp["size"], 5);
    let row = node.row(6).await;
    assert_eq!(row["action"], "trail.checkpoint");
    assert_eq!(row["actor"], "system");
    assert_eq!(row["detail"], cp);
    let text = cp["checkpoint"].as_str().unwrap();
    let origin = cp["origin"].as_str().unwrap();
    assert!(
        text.starts_with(&format!(
            "{origin}\n5\n{}\n\n\u{2014} ",
            cp["root"].as_str().unwrap()
        )),
        "{text}"
    );

    let proof = node
        .call(Method::GET, "/admin/v1/audit/2/proof", AUDITOR, None)
        .await;
    assert_eq!(proof.status, StatusCode::OK);
    let proof = proof.json();
    assert_eq!(
        (
            proof["seq"].clone(),
            proof["index"].clone(),
            proof["size"].clone()
        ),
        (json!(2), json!(1), json!(5))
    );
    assert_eq!(proof["root"], cp["root"]);
    assert_eq!(
        proof["proof"].as_array().unwrap().len(),
        3,
        "a path of log2(5) rounded up"
    );
    let c = node
        .call(
            Method::GET,
            "/admin/v1/audit/consistency?from=2&to=5",
            AUDITOR,
            None,
        )
        .await;
    assert_eq!(c.status, StatusCode::OK);
    assert_eq!(c.json()["to_root"], cp["root"]);

    for (path, status, code) in [
        ("/admin/v1/audit/2/proof?size=99", 404, "not_found"),
        ("/admin/v1/audit/5/proof?size=3", 404, "not_found"),
        ("/admin/v1/audit/99/proof?size=5", 404, "not_found"),
        ("/admin/v1/audit/2/proof?size=x", 400, "bad_request"),
        (
            "/admin/v1/audit/consistency?from=0&to=5",
            422,
            "invalid_input",
        ),
        (
            "/admin/v1/audit/consistency?from=5&to=2",
            422,
            "invalid_input",
        ),
        ("/admin/v1/audit/consistency?from=4&to=99", 404, "not_found"),
        ("/admin/v1/audit/consistency?from=4", 400, "bad_request"),
    ] {
        let r = node.call(Method::GET, path, AUDITOR, None).await;
        assert_error(&r, status, code);
    }
    // Only audit:read.
    let r = node
        .call(Method::GET, "/admin/v1/audit/checkpoint", READER, None)
        .await;
    assert_error(&r, 403, "forbidden");
    // Stopped, not dropped: the store closes before the process exits (a store still being
    // written at exit can abort in RocksDB's teardown).
    node.stop().await;
}
