//! Trace context over real HTTP: a change made with a W3C `traceparent` keeps the trace in
//! its row, and its lifecycle event carries it (file sink, webhook sink and its headers,
//! Kafka's `ce_traceparent`), a dual write's (a route's) too, also when settlement finishes
//! it after a crash, and a redelivery after a restart the same value; a malformed or missing
//! `traceparent` starts a fresh trace, never a
//! 400; and with `[telemetry] otlp_endpoint` the real binary exports the request's span, in
//! the caller's trace, to a real OTLP/HTTP collector.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::api::lifecycle::hook_sink;
use crate::support::eventually;
use crate::support::node::*;
use crate::support::publisher::read_events;
use ankusa_sinks::test_support::{Receiver, Recorded};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// The caller's trace: trace id, span id, sampled.
const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";
const STATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

/// The parts of a valid version-00 traceparent (trace id, parent id, flags), or a panic.
fn parts(traceparent: &str) -> (String, String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    let hex = |s: &str, len| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    assert!(
        p.len() == 4 && p[0] == "00" && hex(p[1], 32) && hex(p[2], 16) && hex(p[3], 2),
        "not a traceparent: {traceparent}"
    );
    assert!(p[1].bytes().any(|b| b != b'0') && p[2].bytes().any(|b| b != b'0'));
    (p[1].into(), p[2].into(), p[3].into())
}

/// The row's traceparent, which must be the node's span in the caller's trace: the caller's
/// trace id and flags, a span id of its own.
fn joined(row: &Value) -> String {
    let traceparent = row["traceparent"]
        .as_str()
        .expect("a traceparent")
        .to_owned();
    let (trace_id, span_id, flags) = parts(&traceparent);
    assert_eq!((trace_id.as_str(), flags.as_str()), (TRACE_ID, "01"));
    assert_ne!(span_id, PARENT_ID, "the node's own span");
    traceparent
}

/// A file sink at `<data>/events.jsonl` and the webhook sink `hook` to `url`.
fn file_and_hook(v: &mut Value, url: &str) {
    let path = v["node"]["data_dir"].as_str().unwrap().to_owned() + "/events.jsonl";
    hook_sink(v, json!(["file", "hook"]), url);
    v["lifecycle"]["sink"]["file"]["path"] = json!(path);
}

/// Create source `id` of tenant t1 with `headers` (name, value).
async fn create_source(node: &TestNode, id: &str, headers: &[(&str, &str)]) -> Reply {
    let mut rb = node.req(Method::POST, "/admin/v1/tenants/t1/sources", Some(ADMIN));
    for (name, value) in headers {
        rb = rb.header(*name, *value);
    }
    let r = node.send(rb.json(&json!({"id": id, "kind": "k"}))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    r
}

/// The events of the file sink, once there are `n`.
async fn file_events(node: &TestNode, n: usize) -> Vec<Value> {
    let path = node.data_dir().join("events.jsonl");
    let read = async || Some(read_events(&path)).filter(|e| e.len() >= n);
    eventually("the file sink's events", Duration::from_secs(30), read).await
}

/// The receiver's requests, once there are `n`.
async fn requests(receiver: &Receiver, n: usize) -> Vec<Recorded> {
    let got = async || Some(receiver.requests()).filter(|r| r.len() >= n);
    eventually("the webhook's requests", Duration::from_secs(30), got).await
}

/// A header of a recorded request, if it has it.
fn header(r: &Recorded, name: &str) -> Option<String> {
    r.headers.get(name).map(|v| v.to_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changes_trace_is_in_its_row_and_every_sinks_event() {
    let receiver = Receiver::start().await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| file_and_hook(v, &url)).await;
    let r = create_source(
        &node,
        "s1",
        &[("traceparent", PARENT), ("tracestate", STATE)],
    )
    .await;
    let row = node.row(r.seq().unwrap()).await;
    let traceparent = joined(&row);
    assert_eq!(row["tracestate"], STATE);

    let events = file_events(&node, 1).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["traceparent"], traceparent.as_str());
    assert_eq!(events[0]["tracestate"], STATE);
    let sent = requests(&receiver, 1).await;
    assert_eq!(sent.len(), 1);
    // The W3C headers, beside the binding's `ce-` ones (binary mode).
    assert_eq!(header(&sent[0], "traceparent"), Some(traceparent.clone()));
    assert_eq!(header(&sent[0], "tracestate").as_deref(), Some(STATE));
    assert_eq!(header(&sent[0], "ce-traceparent"), Some(traceparent));
    assert_eq!(header(&sent[0], "ce-tracestate").as_deref(), Some(STATE));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_changes_trace_passes_through_its_pending_row() {
    let receiver = Receiver::start().await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| file_and_hook(v, &url)).await;
    let route = json!({"id": "r1", "source": "s1", "destination": "https://h/x"});
    let r = node
        .send(
            node.req(Method::POST, "/admin/v1/tenants/t1/routes", Some(ADMIN))
                .header("traceparent", PARENT)
                .json(&route),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let row = node.row(r.seq().unwrap()).await;
    assert_eq!(row["action"], "route.create");
    let traceparent = joined(&row);
    // No tracestate was sent: none is kept.
    assert!(row.get("tracestate").is_none(), "{row}");
    let events = file_events(&node, 1).await;
    assert_eq!(events[0]["type"], "io.ankusa.route.created");
    assert_eq!(events[0]["traceparent"], traceparent.as_str());
    assert!(events[0].get("tracestate").is_none());
    let sent = requests(&receiver, 1).await;
    assert_eq!(header(&sent[0], "traceparent"), Some(traceparent));
    assert_eq!(header(&sent[0], "tracestate"), None);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivery_after_a_restart_carries_the_same_trace() {
    // The webhook fails the event, the node stops before it is confirmed, and the next run
    // delivers it from the outbox.
    let receiver = Receiver::answering(503).await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| hook_sink(v, json!(["hook"]), &url)).await;
    let r = create_source(&node, "s1", &[("traceparent", PARENT)]).await;
    let traceparent = joined(&node.row(r.seq().unwrap()).await);
    requests(&receiver, 1).await;
    let dir = node.stop().await;
    let failed = receiver.requests().len();
    assert!(failed >= 1);
    receiver.answer(200);
    let node = TestNode::start_on(dir, |v| hook_sink(v, json!(["hook"]), &url)).await;
    // Only the change's event: the memory route store's snapshot markers are the node's
    // own, traced by no request.
    let created = async || {
        let sent: Vec<Recorded> = receiver
            .requests()
            .into_iter()
            .filter(|r| header(r, "ce-type").as_deref() == Some("io.ankusa.source.created"))
            .collect();
        (sent.len() > failed).then_some(sent)
    };
    let sent = eventually("the redelivery", Duration::from_secs(30), created).await;
    for request in &sent {
        assert_eq!(header(request, "traceparent"), Some(traceparent.clone()));
        assert_eq!(
            header(request, "webhook-id"),
            header(&sent[0], "webhook-id")
        );
    }
    node.stop().await;
}

#[tokio::test]
async fn a_malformed_traceparent_starts_a_fresh_trace() {
    let node = TestNode::start().await;
    let malformed = [
        "nonsense",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ];
    let mut traces = Vec::new();
    for (i, bad) in malformed.iter().enumerate() {
        // Its tracestate is dropped with it (W3C: no tracestate without a traceparent).
        let headers = [("traceparent", *bad), ("tracestate", STATE)];
        let r = create_source(&node, &format!("s{i}"), &headers).await;
        let row = node.row(r.seq().unwrap()).await;
        let (trace_id, _, _) = parts(row["traceparent"].as_str().unwrap());
        assert_ne!(trace_id, TRACE_ID, "{bad}");
        assert!(row.get("tracestate").is_none(), "{bad}: {row}");
        traces.push(trace_id);
    }
    let distinct: std::collections::HashSet<_> = traces.iter().collect();
    assert_eq!(distinct.len(), malformed.len(), "a new trace each time");
    // A header that is no text at all is no refusal either.
    let rb = node
        .req(Method::POST, "/admin/v1/tenants/t1/sources", Some(ADMIN))
        .header(
            "traceparent",
            reqwest::header::HeaderValue::from_bytes(b"00-\xff").unwrap(),
        )
        .json(&json!({"id": "binary", "kind": "k"}));
    let r = node.send(rb).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    parts(
        node.row(r.seq().unwrap()).await["traceparent"]
            .as_str()
            .unwrap(),
    );
    node.stop().await;
}

#[tokio::test]
async fn without_a_traceparent_each_request_starts_a_trace() {
    let node = TestNode::start().await;
    let a = create_source(&node, "a", &[]).await;
    let b = create_source(&node, "b", &[]).await;
    let ra = node.row(a.seq().unwrap()).await;
    let rb = node.row(b.seq().unwrap()).await;
    let (ta, _, fa) = parts(ra["traceparent"].as_str().unwrap());
    let (tb, _, _) = parts(rb["traceparent"].as_str().unwrap());
    assert_ne!(ta, tb);
    // The node samples the traces it starts.
    assert_eq!(fa, "01");
    assert!(ra.get("tracestate").is_none());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_records_carry_the_trace_as_ce_traceparent() {
    use crate::support::kafka::{kafka_headers, kafka_reader};
    use rdkafka::consumer::StreamConsumer;
    use rdkafka::mocking::MockCluster;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("lifecycle", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let node = TestNode::start_with(|v| {
        v["lifecycle"]["sinks"] = json!(["kafka"]);
        v["lifecycle"]["sink"]["kafka"] =
            json!({"kind": "kafka", "brokers": brokers, "topic": "lifecycle"});
    })
    .await;
    let r = create_source(
        &node,
        "s1",
        &[("traceparent", PARENT), ("tracestate", STATE)],
    )
    .await;
    let traceparent = joined(&node.row(r.seq().unwrap()).await);
    let consumer: StreamConsumer = kafka_reader(&cluster.bootstrap_servers(), "lifecycle", 1);
    let record = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
        .await
        .expect("a record")
        .unwrap();
    let headers = kafka_headers(&record);
    assert_eq!(headers.get("ce_traceparent"), Some(&traceparent));
    assert_eq!(
        headers.get("ce_tracestate").map(String::as_str),
        Some(STATE)
    );
    node.stop().await;
}

/// What a collector got on `POST /v1/traces`: each request's content type and body.
type Exports = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An OTLP/HTTP collector on a free loopback port that keeps what it is sent.
async fn collector() -> (String, Exports) {
    use axum::http::HeaderMap;
    let exports = Exports::default();
    let kept = exports.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                let ty = headers
                    .get("content-type")
                    .map(|v| v.to_str().unwrap_or_default());
                let ty = ty.unwrap_or_default().to_owned();
                kept.lock().unwrap().push((ty, body.to_vec()));
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, exports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_span_is_exported_over_otlp_in_the_callers_trace() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let (endpoint, exports) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = format!(
        "[[api.tokens]]\nname = \"alice\"\nsha256 = \"{}\"\nscopes = [\"admin:write\", \
         \"audit:read\"]\n[telemetry]\notlp_endpoint = \"{endpoint}\"\n",
        ankusa::api::auth::digest_hex(ADMIN)
    );
    let mut served =
        crate::support::served::serve(dir.path(), &tokens, crate::support::served::Stream::Stderr);
    let client = reqwest::Client::new();
    let ready = async || {
        let r = client.get(format!("{}/readyz", served.base)).send().await;
        r.is_ok_and(|r| r.status() == StatusCode::OK)
    };
    eventually("the node to be ready", Duration::from_secs(60), ready).await;
    let r = client
        .post(format!("{}/admin/v1/tenants/t1/sources", served.base))
        .bearer_auth(ADMIN)
        .header("traceparent", PARENT)
        .json(&json!({"id": "s1", "kind": "k"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let row: Value = client
        .get(format!("{}/admin/v1/audit/1", served.base))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (_, span_id, _) = parts(&joined(&row));
    // SIGTERM: the node flushes its spans as it stops, before the batch's own delay.
    let pid = served.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(killed.unwrap().success());
    assert!(served.child.wait().unwrap().success(), "a clean exit");

    let exports = exports.lock().unwrap().clone();
    assert!(!exports.is_empty(), "no export reached the collector");
    let mut spans = Vec::new();
    for (ty, body) in &exports {
        assert_eq!(ty, "application/x-protobuf");
        let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        for resource in request.resource_spans {
            let service = resource.resource.unwrap().attributes;
            let service = service.iter().find(|a| a.key == "service.name").unwrap();
            assert_eq!(service.value, Some(string("ankusa")));
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let span = spans
        .iter()
        .find(|s| hex(&s.trace_id) == TRACE_ID)
        .unwrap_or_else(|| panic!("no span of the caller's trace in {spans:?}"));
    assert_eq!(span.name, "POST /admin/v1/tenants/{tenant}/sources");
    assert_eq!(hex(&span.span_id), span_id, "the span the row names");
    assert_eq!(hex(&span.parent_span_id), PARENT_ID);
    let status = span
        .attributes
        .iter()
        .find(|a| a.key == "http.response.status_code")
        .expect("the answer's status");
    assert_eq!(status.value, Some(int(201)));
}

/// An OTLP string value.
fn string(s: &str) -> opentelemetry_proto::tonic::common::v1::AnyValue {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    opentelemetry_proto::tonic::common::v1::AnyValue {
        value: Some(Value::StringValue(s.into())),
    }
}

/// An OTLP integer value.
fn int(i: i64) -> opentelemetry_proto::tonic::common::v1::AnyValue {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    opentelemetry_proto::tonic::common::v1::AnyValue {
        value: Some(Value::IntValue(i)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_write_settled_after_a_crash_keeps_its_trace() {
    use crate::routes::{route_rows, settling, wait_settled};
    use crate::support::trail::{ctx, open_trail};
    use ankusa::audit::{Change, RowResult, Trace};
    use ankusa::subjects::remote::memory::MemoryStore;
    use ankusa::subjects::routes::{Route, RouteStore};
    let dir = tempfile::tempdir().unwrap();
    let trace = Trace {
        traceparent: PARENT.into(),
        tracestate: Some(STATE.into()),
    };
    // A route create begun in a trace and never finished: the node stopped before its apply.
    {
        let trail = open_trail(dir.path(), true);
        let change = Change::new("route.create", "routes/r1")
            .tenant("t1")
            .states(None, Some(json!({"id": "r1"})))
            .entity(json!({"id": "r1"}))
            .locate("route", json!({"tenant": "t1", "id": "r1"}));
        let traced = ctx("alice").traced(Some(trace));
        let pending = trail.begin::<()>(traced, change).await.unwrap();
        std::mem::forget(pending);
        trail.shutdown().await;
    }
    // The next run settles it from its pending row: the row keeps the change's trace.
    let trail = open_trail(dir.path(), true);
    let store: Arc<RouteStore> = Arc::new(MemoryStore::<Route>::default());
    let settling = settling(
        &trail,
        store,
        Duration::from_millis(50),
        Duration::from_secs(10),
    );
    wait_settled(trail.store(), Duration::from_secs(10)).await;
    let rows = route_rows(trail.store(), "r1");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].result, RowResult::Failed, "never applied");
    assert_eq!(rows[0].traceparent.as_deref(), Some(PARENT));
    assert_eq!(rows[0].tracestate.as_deref(), Some(STATE));
    settling.stop().await;
    trail.shutdown().await;
}
