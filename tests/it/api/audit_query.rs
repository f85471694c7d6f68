//! `GET /admin/v1/audit` by actor, result and time window, and one subject's history at
//! `GET /admin/v1/audit/subjects/{resource}`, over real HTTP: exact rows, paged by `next`.

use reqwest::Method;
use serde_json::json;

use crate::api::audit::seqs;
use crate::support::node::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_by_actor_result_time_and_subject() {
    let node = TestNode::start().await;
    let source = |id: &str| json!({"id": id, "kind": "webhook", "secret": "pw", "config": {}});
    for (token, id) in [(ADMIN, "s1"), (WRITER, "s2"), (ADMIN, "s3")] {
        let r = node
            .call(
                Method::POST,
                "/admin/v1/tenants/t1/sources",
                token,
                Some(source(id)),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let patch = json!({"config": {"a": 1}});
    let r = node
        .call(
            Method::PATCH,
            "/admin/v1/tenants/t1/sources/s1",
            WRITER,
            Some(patch),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let rows = node.rows().await;
    assert_eq!(rows.len(), 4);
    let get = async |query: &str| {
        let r = node
            .call(
                Method::GET,
                &format!("/admin/v1/audit?{query}"),
                AUDITOR,
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{query}: {}", r.text);
        r.json()
    };
    assert_eq!(seqs(&get("actor=writer").await), vec![2, 4]);
    assert_eq!(seqs(&get("actor=alice&limit=1").await), vec![1]);
    assert_eq!(get("actor=alice&limit=1").await["next"], 1);
    assert_eq!(seqs(&get("actor=alice&after=1").await), vec![3]);
    assert_eq!(seqs(&get("result=ok&actor=writer").await), vec![2, 4]);
    assert_eq!(seqs(&get("result=failed").await), Vec::<u64>::new());
    // A window by commit time: from row 2's time, until row 4's (excluded).
    let at = |seq: usize| {
        let ms = rows[seq - 1]["at"].as_i64().unwrap();
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339()
    };
    let window = format!("from={}&until={}", urlencode(&at(2)), urlencode(&at(4)));
    let ms = |seq: usize| rows[seq - 1]["at"].as_u64().unwrap();
    let want: Vec<u64> = (1..=4)
        .filter(|s| ms(*s) >= ms(2) && ms(*s) < ms(4))
        .map(|s| s as u64)
        .collect();
    assert!(want.contains(&2));
    assert_eq!(seqs(&get(&window).await), want);
    // One subject's history.
    let r = node
        .call(
            Method::GET,
            "/admin/v1/audit/subjects/sources%2Fs1",
            AUDITOR,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(seqs(&r.json()), vec![1, 4]);
    let r = node
        .call(
            Method::GET,
            "/admin/v1/audit/subjects/sources%2Fs1?tenant=t2",
            AUDITOR,
            None,
        )
        .await;
    assert_eq!(seqs(&r.json()), Vec::<u64>::new());
    // Bad input, and the scope.
    for query in [
        "from=yesterday",
        "until=2026-13-01T00:00:00Z",
        "result=maybe",
        "actor=",
    ] {
        let r = node
            .call(
                Method::GET,
                &format!("/admin/v1/audit?{query}"),
                AUDITOR,
                None,
            )
            .await;
        assert_error(&r, 400, "bad_request");
    }
    let r = node
        .call(
            Method::GET,
            "/admin/v1/audit/subjects/sources%2Fs1",
            READER,
            None,
        )
        .await;
    assert_error(&r, 403, "forbidden");
    node.stop().await;
}

fn urlencode(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}
