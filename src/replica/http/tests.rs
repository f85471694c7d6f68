//! `follow http` without a network: node URLs and the queries built on them, what each answer
//! of a node means, the watch's steps (positions, 410s, failures and backoff), and the loop's
//! bookkeeping of several nodes in one replica file.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::client::{asked, reply};
use super::watch::{RETRY_AFTER_MAX, RETRY_INITIAL, RETRY_MAX};
use super::*;
use crate::replica::file::KafkaProgress;

fn at(position: u64, incarnation: &str) -> WatchPosition {
    WatchPosition {
        position,
        incarnation: incarnation.into(),
    }
}

#[test]
fn node_urls_have_one_spelling_and_refuse_what_is_not_a_base() {
    let key = |u: &str| NodeUrl::parse(u).map(|n| n.key());
    assert_eq!(key("http://Node-A:8080").unwrap(), "http://node-a:8080");
    assert_eq!(key("http://node-a:8080/").unwrap(), "http://node-a:8080");
    assert_eq!(
        key("HTTPS://gw.example/ankusa/").unwrap(),
        "https://gw.example/ankusa"
    );
    for (bad, says) in [
        ("node-a:8080", "http:// or https://"),
        ("ftp://node-a", "http:// or https://"),
        ("http://node-a:8080/?after=3", "no query"),
        ("http://node-a:8080/#x", "no query or fragment"),
        ("http://ops:pw@node-a:8080", "credentials go in --token"),
        ("not a url", "not a node's URL"),
    ] {
        let e = key(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
        assert!(!e.contains("pw@") || bad.contains("pw@"), "{e}");
    }
    let e = nodes(&["http://a:1".into(), "http://A:1/".into()]).unwrap_err();
    assert!(e.to_string().contains("http://a:1 is given twice"), "{e}");
    assert!(nodes(&[]).is_err());
}

#[test]
fn the_poll_resumes_after_the_position_in_its_incarnation() {
    let node = NodeUrl::parse("http://gw.example/ankusa/").unwrap();
    let new = node.events(None, 1000, Duration::from_secs(30));
    assert_eq!(
        new.as_str(),
        "http://gw.example/ankusa/admin/v1/lifecycle/events?after=0&limit=1000&wait=30s"
    );
    let resumed = node.events(Some(&at(42, "0b6e")), 10, Duration::from_millis(1500));
    assert_eq!(
        resumed.as_str(),
        "http://gw.example/ankusa/admin/v1/lifecycle/events\
         ?after=42&incarnation=0b6e&limit=10&wait=1500ms"
    );
    let snapshot = node.endpoint(&["admin", "v1", "lifecycle", "snapshot"]);
    assert_eq!(
        snapshot.as_str(),
        "http://gw.example/ankusa/admin/v1/lifecycle/snapshot"
    );
}

/// A route event as the node serves it (structured JSON).
fn event(seq: u64, key: &str, store: &str, version: u64, entity: Value) -> Value {
    json!({
        "specversion": "1.0", "id": format!("e{seq}"), "source": "urn:ankusa:node-a",
        "type": "io.ankusa.route.updated", "datacontenttype": "application/json",
        "sequence": format!("{seq:020}"), "partitionkey": key,
        "subjectversion": format!("{version:020}"), "subjectstore": store,
        "data": {"action": "route.update", "entity": entity, "revision": 1},
    })
}

fn answer_body(events: &[Value], position: u64, incarnation: &str, latest: u64) -> Vec<u8> {
    let body = json!({"events": events, "position": position, "incarnation": incarnation,
                      "latest": latest});
    serde_json::to_vec(&body).unwrap()
}

fn answer(events: &[Value], position: u64, incarnation: &str, latest: u64) -> Answer {
    match reply(
        StatusCode::OK,
        None,
        &answer_body(events, position, incarnation, latest),
    ) {
        Reply::Answer(answer) => answer,
        other => panic!("not an answer: {other:?}"),
    }
}

fn transient(r: &Reply) -> &str {
    match r {
        Reply::Failed(Failure::Transient { detail, .. }) => detail,
        other => panic!("not a transient failure: {other:?}"),
    }
}

#[test]
fn each_answer_of_a_node_means_one_reply() {
    let a = answer(
        &[event(3, "t/routes/r1", "redis:a", 3, json!({"id": "r1"}))],
        3,
        "0b6e",
        9,
    );
    assert_eq!((a.events.len(), a.position, a.latest), (1, 3, 9));
    assert_eq!(a.incarnation, "0b6e");

    let gone = br#"{"error":"position_gone","message":"m","oldest":41,"incarnation":"91fa"}"#;
    let expected = Gone {
        oldest: 41,
        incarnation: "91fa".into(),
    };
    assert_eq!(reply(StatusCode::GONE, None, gone), Reply::Gone(expected));

    let garbage = [
        (
            StatusCode::OK,
            &b"<html>proxy</html>"[..],
            "answered 200 with no watch answer",
        ),
        (
            StatusCode::OK,
            br#"{"events":[{"id":"x"}],"position":1,"incarnation":"i","latest":1}"#,
            "no watch answer",
        ),
        (
            StatusCode::OK,
            br#"{"events":[],"position":-1,"incarnation":"i","latest":1}"#,
            "no watch answer",
        ),
        (
            StatusCode::GONE,
            br#"{"error":"gone"}"#,
            "without a position_gone body",
        ),
        (StatusCode::BAD_GATEWAY, b"", "answered 502 Bad Gateway"),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            br#"{"error":"internal"}"#,
            "500 Internal Server Error internal",
        ),
    ];
    for (status, body, says) in garbage {
        let r = reply(status, None, body);
        assert!(transient(&r).contains(says), "{status}: {r:?}");
    }
    let busy = reply(
        StatusCode::SERVICE_UNAVAILABLE,
        Some(Duration::from_secs(3)),
        br#"{"error":"too_many_watchers"}"#,
    );
    let Reply::Failed(Failure::Transient { retry_after, .. }) = busy else {
        panic!("{busy:?}");
    };
    assert_eq!(retry_after, Some(Duration::from_secs(3)));

    for status in [StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN] {
        assert_eq!(
            reply(status, None, b""),
            Reply::Failed(Failure::Refused(status))
        );
    }
    for (status, says) in [
        (StatusCode::NOT_FOUND, "older than the watch"),
        (StatusCode::BAD_REQUEST, "400 Bad Request invalid"),
    ] {
        let r = reply(status, None, br#"{"error":"invalid"}"#);
        let Reply::Failed(Failure::Permanent(detail)) = &r else {
            panic!("{r:?}");
        };
        assert!(detail.contains(says), "{detail}");
    }
}

#[test]
fn a_snapshot_request_is_taken_started_or_running() {
    let started = asked(StatusCode::ACCEPTED, None, br#"{"snapshot":{"id":"5b0e"}}"#);
    assert_eq!(started, Ok(Asked::Started("5b0e".into())));
    let running = br#"{"error":"snapshot_in_progress","message":"m"}"#;
    assert_eq!(
        asked(StatusCode::CONFLICT, None, running),
        Ok(Asked::Running)
    );
    let off = asked(StatusCode::CONFLICT, None, br#"{"error":"conflict"}"#).unwrap_err();
    assert!(
        matches!(&off, Failure::Transient { detail, .. } if detail.contains("409 conflict")),
        "{off:?}"
    );
    let refused = asked(StatusCode::FORBIDDEN, None, b"").unwrap_err();
    assert_eq!(refused, Failure::Refused(StatusCode::FORBIDDEN));
}

fn down() -> Reply {
    Reply::Failed(Failure::Transient {
        detail: "connection refused".into(),
        retry_after: None,
    })
}

#[test]
fn the_position_moves_only_with_an_answer_that_holds_together() {
    let mut watch = Watch::new("http://a:1", None);
    assert_eq!(
        (watch.at(), watch.after()),
        (None, 0),
        "a new replica reads from the oldest"
    );
    let Step::Apply { recovered: 0, .. } = watch.step(Reply::Answer(answer(&[], 5, "i1", 9)))
    else {
        panic!("an answer is applied");
    };
    assert_eq!(watch.at(), Some(&at(5, "i1")));

    // Down, then garbage: the position stays, the pauses grow.
    let Step::Retry(first) = watch.step(down()) else {
        panic!()
    };
    let behind = Reply::Answer(answer(&[], 3, "i1", 9));
    let Step::Retry(second) = watch.step(behind) else {
        panic!("a position that moved back")
    };
    assert!(
        second.detail.contains("position 3 behind the 5 asked"),
        "{second:?}"
    );
    let past = Reply::Answer(answer(&[], 10, "i1", 9));
    let Step::Retry(third) = watch.step(past) else {
        panic!("a position past latest")
    };
    assert!(third.detail.contains("past its latest 9"), "{third:?}");
    assert_eq!((first.failures, second.failures, third.failures), (1, 2, 3));
    assert_eq!(watch.at(), Some(&at(5, "i1")));

    // Back: the answer says how many failures it ended.
    let Step::Apply { recovered, answer } = watch.step(Reply::Answer(answer(&[], 9, "i1", 9)))
    else {
        panic!()
    };
    assert_eq!((recovered, answer.position), (3, 9));
    let Step::Retry(again) = watch.step(down()) else {
        panic!()
    };
    assert_eq!(again.failures, 1, "an answer resets the count");
}

#[test]
fn a_gone_position_moves_only_once_the_snapshot_is_asked_for() {
    let mut watch = Watch::new("http://a:1", Some(at(57, "i1")));
    let gone = Gone {
        oldest: 41,
        incarnation: "i2".into(),
    };
    let step = watch.step(Reply::Gone(gone.clone()));
    assert_eq!(
        step,
        Step::Relist {
            gone: gone.clone(),
            pause: Duration::ZERO
        },
        "the first 410 relists at once"
    );
    assert_eq!(
        watch.at(),
        Some(&at(57, "i1")),
        "not moved before the snapshot request"
    );
    // A 410 again before any answer (the request failed and was retried) pauses first.
    let Step::Relist { pause, .. } = watch.step(Reply::Gone(gone.clone())) else {
        panic!()
    };
    assert!(pause >= RETRY_INITIAL / 2, "{pause:?}");
    assert_eq!(watch.relisted(&gone), at(41, "i2"));
    assert_eq!(watch.at(), Some(&at(41, "i2")));
}

#[test]
fn a_refused_token_stops_naming_the_scope_and_other_4xx_stop_too() {
    let mut watch = Watch::new("http://a:1", None);
    for status in [StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN] {
        let Step::Stop(error) = watch.step(Reply::Failed(Failure::Refused(status))) else {
            panic!()
        };
        assert!(error.starts_with("http://a:1 refused the watch"), "{error}");
        assert!(error.contains("events:read"), "{error}");
    }
    let Step::Stop(error) = watch.step(Reply::Failed(Failure::Permanent("answered 404".into())))
    else {
        panic!()
    };
    assert_eq!(error, "http://a:1: answered 404");
}

#[test]
fn backoff_doubles_to_its_cap_with_jitter_and_honours_retry_after() {
    for failures in 1..40 {
        let full = RETRY_INITIAL
            .saturating_mul(1 << (failures - 1).min(16))
            .min(RETRY_MAX);
        let pause = backoff(failures);
        assert!(pause >= full / 2 && pause <= full, "{failures}: {pause:?}");
    }
    let mut watch = Watch::new("http://a:1", None);
    let busy = |secs| {
        Reply::Failed(Failure::Transient {
            detail: "503".into(),
            retry_after: Some(Duration::from_secs(secs)),
        })
    };
    let Step::Retry(r) = watch.step(busy(3)) else {
        panic!()
    };
    assert_eq!(r.pause, Duration::from_secs(3));
    let Step::Retry(r) = watch.step(busy(3600)) else {
        panic!()
    };
    assert_eq!(
        r.pause, RETRY_AFTER_MAX,
        "a Retry-After past the cap is not waited out"
    );
}

fn options(out: &std::path::Path) -> HttpOptions {
    HttpOptions {
        urls: vec!["http://a:1".into(), "http://b:1".into()],
        token: "t".into(),
        out: out.to_owned(),
        limit: 100,
        wait: Duration::from_secs(1),
        batch_events: 100,
        batch_interval: Duration::from_millis(50),
        until_caught_up: true,
    }
}

#[tokio::test]
async fn two_nodes_merge_into_one_file_with_their_positions() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    let options = options(&out);
    let nodes = nodes(&options.urls).unwrap();
    let metrics = Metrics::new();
    let mut follower = Follower::start(&options, &nodes, metrics.clone()).unwrap();
    // Node b's older version of r1 arrives after node a's newer one: stale by the rule.
    let newer = event(
        8,
        "t/routes/r1",
        "redis:a",
        12,
        json!({"id": "r1", "v": 12}),
    );
    let older = event(
        4,
        "t/routes/r1",
        "redis:a",
        11,
        json!({"id": "r1", "v": 11}),
    );
    follower.apply("http://a:1", answer(&[newer], 8, "ia", 10));
    follower.apply("http://b:1", answer(&[older], 4, "ib", 4));
    assert!(!follower.caught_up(), "a is 2 behind");
    assert_eq!(metrics.behind_events.get(), 2);
    follower.apply("http://a:1", answer(&[], 10, "ia", 10));
    assert!(follower.caught_up());
    assert_eq!((metrics.count("applied"), metrics.count("stale")), (1, 1));
    follower.flush().await.unwrap();
    assert_eq!(follower.pending, 0);

    let saved = file::load(&out).unwrap().unwrap();
    let positions: Vec<(&str, u64, &str)> = saved
        .progress
        .http
        .iter()
        .map(|(k, p)| (k.as_str(), p.position, p.incarnation.as_str()))
        .collect();
    assert_eq!(
        positions,
        [("http://a:1", 10, "ia"), ("http://b:1", 4, "ib")]
    );
    let r1 = &saved.replica.subjects["redis:a"]["t/routes/r1"];
    assert_eq!(r1.entity, Some(json!({"id": "r1", "v": 12})));

    // A poll whose wait ran out moves nothing: no write for it.
    follower.apply("http://b:1", answer(&[], 4, "ib", 4));
    assert_eq!(follower.pending, 0);
    // A relist moves the position back and holds "caught up" until a snapshot completes.
    follower.relisted("http://b:1", at(1, "ib2"));
    assert_eq!(follower.pending, 1);
    assert_eq!(follower.file.progress.http["http://b:1"], at(1, "ib2"));
    follower.apply("http://b:1", answer(&[], 6, "ib2", 6));
    assert!(!follower.caught_up(), "the relist's snapshot is not in yet");
    assert_eq!(metrics.relists.get(), 1);
    follower.apply("http://b:1", answer(&snapshot("s1"), 8, "ib2", 8));
    assert!(follower.caught_up(), "the snapshot completed");
}

/// An empty snapshot's two markers, as the node serves them.
fn snapshot(id: &str) -> [Value; 2] {
    let marker = |seq: u64, verb: &str, entity: Value| {
        json!({
            "specversion": "1.0", "id": format!("e{seq}"), "source": "urn:ankusa:node-b",
            "type": format!("io.ankusa.snapshot.{verb}"), "datacontenttype": "application/json",
            "data": {"action": "snapshot", "entity": entity, "revision": null},
        })
    };
    [
        marker(7, "started", json!({"id": id, "stores": []})),
        marker(8, "finished", json!({"id": id, "count": 0})),
    ]
}

#[tokio::test]
async fn a_replica_kept_from_kafka_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    let mut kept = ReplicaFile::default();
    kept.progress.kafka = Some(KafkaProgress {
        topic: "events".into(),
        next: Default::default(),
    });
    file::save(&out, &kept).unwrap();
    let options = options(&out);
    let error = follow(options, Metrics::new(), std::future::pending())
        .await
        .unwrap_err();
    let shown = error.to_string();
    assert!(
        shown.contains("follows kafka topic events, not http"),
        "{shown}"
    );
}
