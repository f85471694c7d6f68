//! The comparison, and the API reader against a real HTTP server answering pages.

use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query};
use axum::http::HeaderMap;
use serde_json::json;

use super::*;
use crate::replica::event::{Change, Kind, Meaning};
use crate::replica::version::Version;

fn replica(subjects: &[(&str, &str, Option<Value>)]) -> Replica {
    let mut r = Replica::default();
    for (i, (store, key, entity)) in subjects.iter().enumerate() {
        r.apply(Meaning::Change(Change {
            kind: Kind::Route,
            store: (*store).into(),
            key: (*key).into(),
            version: Version(i as u64 + 1),
            entity: entity.clone(),
            snapshot: None,
        }));
    }
    r
}

#[test]
fn differences_are_missing_extra_different_and_ambiguous() {
    let r = replica(&[
        (
            "s",
            "t/routes/same",
            Some(json!({"id": "same", "revision": 1})),
        ),
        (
            "s",
            "t/routes/changed",
            Some(json!({"id": "changed", "enabled": true, "revision": 2})),
        ),
        ("s", "t/routes/extra", Some(json!({"id": "extra"}))),
        ("s", "t/routes/gone", None),
        ("n1", "t/sources/local", Some(json!({"id": "local"}))),
        (
            "n2",
            "t/sources/local",
            Some(json!({"id": "local", "x": 1})),
        ),
    ]);
    let (view, ambiguous) = replica_view(&r, &[]);
    assert_eq!(
        ambiguous,
        vec![Difference::Ambiguous {
            key: "t/sources/local".into(),
            stores: vec!["n1".into(), "n2".into()],
        }]
    );
    let api: BTreeMap<String, Value> = [
        ("t/routes/same", json!({"id": "same", "revision": 1})),
        (
            "t/routes/changed",
            json!({"id": "changed", "enabled": false, "revision": 3}),
        ),
        ("t/routes/gone", json!({"id": "gone"})),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let differences = compare(&view, &api);
    assert_eq!(
        differences,
        vec![
            Difference::Different {
                key: "t/routes/changed".into(),
                fields: vec!["enabled".into(), "revision".into()],
                replica: json!({"id": "changed", "enabled": true, "revision": 2}),
                api: json!({"id": "changed", "enabled": false, "revision": 3}),
            },
            Difference::Extra {
                key: "t/routes/extra".into(),
                replica: json!({"id": "extra"})
            },
            Difference::Missing {
                key: "t/routes/gone".into(),
                api: json!({"id": "gone"})
            },
        ]
    );
    assert_eq!(
        report(&differences),
        concat!(
            "different t/routes/changed (enabled, revision): replica {\"enabled\":true,\"id\":\"changed\",\"revision\":2}, api {\"enabled\":false,\"id\":\"changed\",\"revision\":3}\n",
            "extra     t/routes/extra: replica {\"id\":\"extra\"}\n",
            "missing   t/routes/gone: api {\"id\":\"gone\"}\n",
        )
    );
    let (only_n1, none) = replica_view(&r, &["n1".into()]);
    assert!(none.is_empty());
    assert_eq!(
        only_n1.get("t/sources/local"),
        Some(&json!({"id": "local"}))
    );
    let named = tenants(&view, &["other".into()]);
    assert_eq!(named.into_iter().collect::<Vec<_>>(), ["other", "t"]);
}

/// A node's list endpoints: `pages` per tenant and plural, one item per page, `next` set;
/// records the queries and the Authorization header.
async fn serve_lists(seen: Arc<Mutex<Vec<String>>>) -> String {
    let handler = move |Path((tenant, plural)): Path<(String, String)>,
                        Query(q): Query<BTreeMap<String, String>>,
                        headers: HeaderMap| {
        let seen = seen.clone();
        async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            seen.lock()
                .unwrap()
                .push(format!("{tenant}/{plural}?{q:?} {auth}"));
            if auth != "Bearer tok" {
                return (axum::http::StatusCode::UNAUTHORIZED, axum::Json(json!({})))
                    .into_response();
            }
            let ids: &[&str] = if plural == "routes" { &["a", "b"] } else { &[] };
            let start = q
                .get("after")
                .map_or(0, |a| ids.iter().position(|i| i == a).unwrap() + 1);
            let items: Vec<Value> = ids
                .get(start)
                .map(|id| json!({"id": id}))
                .into_iter()
                .collect();
            let next = (start + 1 < ids.len()).then(|| ids[start]);
            axum::Json(json!({"items": items, "next": next})).into_response()
        }
    };
    use axum::response::IntoResponse;
    let app = axum::Router::new().route(
        "/admin/v1/tenants/{tenant}/{plural}",
        axum::routing::get(handler),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn the_api_is_read_page_by_page_with_the_token() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let url = serve_lists(seen.clone()).await;
    let r = replica(&[
        ("s", "t/routes/a", Some(json!({"id": "a"}))),
        ("s", "t/routes/c", Some(json!({"id": "c"}))),
    ]);
    let options = VerifyOptions {
        url: url.clone(),
        token: "tok".into(),
        tenants: vec![],
        stores: vec![],
    };
    let differences = verify(&r, &options).await.unwrap();
    assert_eq!(
        differences,
        vec![
            Difference::Missing {
                key: "t/routes/b".into(),
                api: json!({"id": "b"})
            },
            Difference::Extra {
                key: "t/routes/c".into(),
                replica: json!({"id": "c"})
            },
        ]
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "t/routes?{\"limit\": \"1000\"} Bearer tok",
            "t/routes?{\"after\": \"a\", \"limit\": \"1000\"} Bearer tok",
            "t/sources?{\"limit\": \"1000\"} Bearer tok",
        ]
    );
    let refused = VerifyOptions {
        token: "wrong".into(),
        ..options
    };
    let e = verify(&r, &refused).await.unwrap_err().to_string();
    assert_eq!(e, "GET /admin/v1/tenants/t/routes: 401 Unauthorized: the token was refused (it needs admin:read)");
    assert!(!format!("{refused:?}").contains("wrong"));
    let bad = VerifyOptions {
        url: "ftp://x".into(),
        ..refused
    };
    assert_eq!(
        verify(&r, &bad).await.unwrap_err().to_string(),
        "--url \"ftp://x\" is not an http(s) URL"
    );
}
