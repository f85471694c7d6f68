//! Webhook sink tests against a real axum receiver on port 0 (`test_support::receiver`,
//! verifying signatures):
//! exact headers and bodies, every classification, same id and body on retry, per-key order,
//! batching, and no redirect followed.

use std::time::{Duration, Instant, SystemTime};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use super::sink::parse_retry_after;
use super::*;
use crate::test_support::receiver::{OLD_SECRET, RECEIVER_SECRET};
use crate::test_support::{
    event_id, sample, sample_data, sample_json, Receiver, Recorded, Reply, DATASCHEMA, INCARNATION,
    SOURCE,
};
use crate::{Delivery, Outcome, RetryPolicy, Sink, SinkError};

/// A receiver that knows the sink's new secret (`RECEIVER_SECRET`), not its old one.
async fn verifying() -> Receiver {
    Receiver::builder().verify(RECEIVER_SECRET).start().await
}

fn config(receiver: &Receiver, mode: WebhookMode) -> WebhookConfig {
    let secrets = vec![OLD_SECRET.to_string(), RECEIVER_SECRET.to_string()];
    let mut config = WebhookConfig::new(receiver.url(), secrets);
    config.mode = mode;
    config.timeout = Duration::from_secs(5);
    config.retry = RetryPolicy {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(10),
        max_retry_after: Duration::from_secs(60),
    };
    config
}

fn sink(receiver: &Receiver, mode: WebhookMode) -> WebhookSink {
    WebhookSink::new(config(receiver, mode)).unwrap()
}

fn retry(after: Option<Duration>, reason: &str) -> Outcome {
    Outcome::Retry {
        after,
        reason: reason.into(),
    }
}

#[tokio::test]
async fn binary_mode_sends_ce_headers_data_and_a_valid_signature() {
    let receiver = verifying().await;
    let sink = sink(&receiver, WebhookMode::Binary);

    assert_eq!(
        sink.send(&[sample(7, "acme/r1")]).await,
        vec![Outcome::Delivered]
    );

    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    let got = &requests[0];
    assert!(got.signature_valid, "signature did not verify");
    assert_eq!(got.header("ce-specversion"), "1.0");
    assert_eq!(got.header("ce-id"), event_id(7));
    assert_eq!(got.header("ce-type"), "io.ankusa.route.created");
    assert_eq!(got.header("ce-source"), SOURCE);
    assert_eq!(got.header("ce-subject"), "routes/acme/r1");
    assert_eq!(got.header("ce-time"), "2024-05-06T07:08:16+00:00");
    assert_eq!(got.header("ce-dataschema"), DATASCHEMA);
    assert_eq!(got.header("ce-sequence"), "00000000000000000007");
    assert_eq!(got.header("ce-incarnation"), INCARNATION);
    assert_eq!(got.header("ce-partitionkey"), "acme/r1");
    assert_eq!(got.header("content-type"), "application/json");
    let ce_headers = got.headers.keys().filter(|n| n.as_str().starts_with("ce-"));
    assert_eq!(ce_headers.count(), 10, "the ten above, no other");
    // The id binds every header above: SHA-256 of them in canonical form, written out.
    let canonical = [
        format!("ce-dataschema:{DATASCHEMA}"),
        format!("ce-id:{}", event_id(7)),
        format!("ce-incarnation:{INCARNATION}"),
        "ce-partitionkey:acme/r1".into(),
        "ce-sequence:00000000000000000007".into(),
        format!("ce-source:{SOURCE}"),
        "ce-specversion:1.0".into(),
        "ce-subject:routes/acme/r1".into(),
        "ce-time:2024-05-06T07:08:16+00:00".into(),
        "ce-type:io.ankusa.route.created".into(),
        "content-type:application/json".into(),
    ]
    .map(|line| line + "\n")
    .concat();
    let digest = <sha2::Sha256 as sha2::Digest>::digest(canonical.as_bytes());
    let expected_id = format!("msg_{}", URL_SAFE_NO_PAD.encode(digest));
    assert_eq!(got.header("webhook-id"), expected_id);
    let sent_at: i64 = got.header("webhook-timestamp").parse().unwrap();
    assert!((chrono::Utc::now().timestamp() - sent_at).abs() <= 5);
    let signatures: Vec<&str> = got.header("webhook-signature").split(' ').collect();
    assert_eq!(signatures.len(), 2, "one signature per secret");
    assert!(signatures.iter().all(|s| s.starts_with("v1,")));
    assert_eq!(got.body, sample_data(7, "acme/r1").as_bytes());
}

#[tokio::test]
async fn structured_mode_sends_the_exact_event_json() {
    let receiver = verifying().await;
    let sink = sink(&receiver, WebhookMode::Structured);

    assert_eq!(
        sink.send(&[sample(8, "acme/r2")]).await,
        vec![Outcome::Delivered]
    );

    let got = &receiver.requests()[0];
    assert!(got.signature_valid);
    assert_eq!(got.header("content-type"), "application/cloudevents+json");
    assert_eq!(got.header("webhook-id"), event_id(8));
    assert!(got.headers.get("ce-id").is_none());
    assert_eq!(got.body, sample_json(8, "acme/r2").as_bytes());
}

#[tokio::test]
async fn batch_mode_sends_one_array_with_a_stable_id() {
    let receiver = verifying().await;
    let sink = sink(&receiver, WebhookMode::Batch);
    let events = [sample(1, "a"), sample(2, "b"), sample(3, "a")];

    assert_eq!(sink.send(&events).await, vec![Outcome::Delivered; 3]);
    receiver.reply(Reply::Status(503));
    // Rebuilt events (fresh extension maps): the same slice must give the same request.
    let again = [sample(1, "a"), sample(2, "b"), sample(3, "a")];
    assert_eq!(sink.send(&again).await, vec![retry(None, "http_503"); 3]);

    let requests = receiver.requests();
    assert_eq!(requests.len(), 2, "one request per send");
    let expected_body = format!(
        "[{},{},{}]",
        sample_json(1, "a"),
        sample_json(2, "b"),
        sample_json(3, "a")
    );
    let expected_id = batch_id(events.iter().map(|d| &d.event));
    assert!(expected_id.starts_with("batch_"));
    for got in &requests {
        assert!(got.signature_valid);
        assert_eq!(
            got.header("content-type"),
            "application/cloudevents-batch+json"
        );
        assert_eq!(got.header("webhook-id"), expected_id);
        assert_eq!(got.body, expected_body.as_bytes());
    }
    let parsed: Vec<cloudevents::Event> = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(parsed[2], events[2].event);
    assert_ne!(batch_id(events[..2].iter().map(|d| &d.event)), expected_id);
}

#[tokio::test]
async fn every_answer_is_classified() {
    let receiver = verifying().await;
    let sink = sink(&receiver, WebhookMode::Binary);
    let send = |seq| {
        let sink = &sink;
        async move { sink.send(&[sample(seq, "k")]).await.remove(0) }
    };

    receiver.reply(Reply::Status(500));
    assert_eq!(send(1).await, retry(None, "http_500"));
    receiver.reply(Reply::Status(408));
    assert_eq!(send(2).await, retry(None, "http_408"));
    receiver.reply(Reply::RetryAfter(429, "7".into()));
    assert_eq!(
        send(3).await,
        retry(Some(Duration::from_secs(7)), "http_429")
    );
    receiver.reply(Reply::RetryAfter(503, "86400".into()));
    let clamped = Some(Duration::from_secs(60));
    assert_eq!(send(4).await, retry(clamped, "http_503"));
    let at = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
    receiver.reply(Reply::RetryAfter(429, at));
    let Outcome::Retry {
        after: Some(after), ..
    } = send(5).await
    else {
        panic!("expected a Retry with a delay")
    };
    assert!(
        after > Duration::from_secs(27) && after <= Duration::from_secs(30),
        "{after:?}"
    );
    receiver.reply(Reply::Status(410));
    let gone = Outcome::Disabled {
        reason: "http_410".into(),
    };
    assert_eq!(send(6).await, gone);
    for status in [400u16, 404, 422] {
        receiver.reply(Reply::Status(status));
        let reason = format!("http_{status}");
        assert_eq!(send(7).await, Outcome::Rejected { reason });
    }
    receiver.reply(Reply::Status(204));
    assert_eq!(send(8).await, Outcome::Delivered);
    assert!(receiver.requests().iter().all(|r| r.signature_valid));
}

#[tokio::test]
async fn a_retried_event_carries_the_same_id_and_body() {
    for mode in [WebhookMode::Binary, WebhookMode::Structured] {
        let receiver = verifying().await;
        let sink = sink(&receiver, mode);
        receiver.reply(Reply::Status(502));
        assert_eq!(
            sink.send(&[sample(9, "k")]).await,
            vec![retry(None, "http_502")]
        );
        receiver.reply(Reply::Status(200));
        // The publisher rebuilds the event from the store: a fresh `Event` value.
        assert_eq!(sink.send(&[sample(9, "k")]).await, vec![Outcome::Delivered]);

        let requests = receiver.requests();
        assert_eq!(requests.len(), 2, "{mode:?}");
        let id = requests[0].header("webhook-id");
        assert_eq!(requests[1].header("webhook-id"), id);
        if mode == WebhookMode::Structured {
            assert_eq!(id, event_id(9));
        } else {
            assert!(id.starts_with("msg_") && id.len() == 47, "{id}");
        }
        assert_eq!(requests[0].body, requests[1].body, "{mode:?}");
        assert!(requests.iter().all(|r| r.signature_valid));
    }
}

#[tokio::test]
async fn a_hanging_receiver_times_out_as_retry() {
    let receiver = verifying().await;
    let mut config = config(&receiver, WebhookMode::Binary);
    config.timeout = Duration::from_millis(300);
    let sink = WebhookSink::new(config).unwrap();
    receiver.reply(Reply::Hang(Duration::from_secs(10)));

    let started = Instant::now();
    assert_eq!(
        sink.send(&[sample(1, "k")]).await,
        vec![retry(None, "timeout")]
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_refused_connection_is_retry() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    drop(listener);
    let sink = WebhookSink::new(WebhookConfig::new(url, vec![OLD_SECRET.into()])).unwrap();
    assert_eq!(
        sink.send(&[sample(1, "k")]).await,
        vec![retry(None, "connect")]
    );
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let receiver = verifying().await;
    let sink = sink(&receiver, WebhookMode::Binary);
    receiver.reply(Reply::Redirect);
    let reason = "http_307".to_string();
    assert_eq!(
        sink.send(&[sample(1, "k")]).await,
        vec![Outcome::Rejected { reason }]
    );
    assert_eq!(receiver.redirect_hits(), 0);
    assert_eq!(receiver.requests().len(), 1);
}

/// 3 keys x 6 events, interleaved; every answer takes 30 ms.
fn interleaved() -> Vec<Delivery> {
    (1..=18)
        .map(|seq| sample(seq, ["a", "b", "c"][(seq % 3) as usize]))
        .collect()
}

fn seqs_of_key(requests: &[Recorded], key: &str) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.header("ce-partitionkey") == key)
        .map(|r| r.header("ce-sequence").to_string())
        .collect()
}

#[tokio::test]
async fn keys_go_concurrently_and_each_key_in_order() {
    let receiver = verifying().await;
    receiver.delay(Duration::from_millis(30));
    let sink = sink(&receiver, WebhookMode::Binary);
    let events = interleaved();

    assert_eq!(sink.send(&events).await, vec![Outcome::Delivered; 18]);

    let requests = receiver.requests();
    assert_eq!(requests.len(), 18);
    for key in ["a", "b", "c"] {
        let got = seqs_of_key(&requests, key);
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(got, sorted, "key {key} out of order");
        assert_eq!(got.len(), 6);
    }
    assert_eq!(
        receiver.max_concurrency(),
        3,
        "one request in flight per key"
    );
}

#[tokio::test]
async fn max_in_flight_bounds_concurrency() {
    let receiver = verifying().await;
    receiver.delay(Duration::from_millis(10));
    let mut config = config(&receiver, WebhookMode::Binary);
    config.max_in_flight = 1;
    let sink = WebhookSink::new(config).unwrap();

    assert_eq!(
        sink.send(&interleaved()).await,
        vec![Outcome::Delivered; 18]
    );
    assert_eq!(receiver.max_concurrency(), 1);
}

#[tokio::test]
async fn a_failure_holds_back_the_rest_of_its_key_only() {
    let receiver = verifying().await;
    receiver.fail_seq(3, 500);
    let sink = sink(&receiver, WebhookMode::Binary);
    let keys = ["a", "b", "a", "b", "a", "b"];
    let events: Vec<Delivery> = (1..=6).map(|s| sample(s, keys[s as usize - 1])).collect();

    let outcomes = sink.send(&events).await;

    let held = retry(None, "earlier_event_of_key_failed");
    let expected = vec![
        Outcome::Delivered,
        Outcome::Delivered,
        retry(None, "http_500"),
        Outcome::Delivered,
        held,
        Outcome::Delivered,
    ];
    assert_eq!(outcomes, expected);
    let requests = receiver.requests();
    let mut sent: Vec<&str> = requests.iter().map(|r| r.header("ce-sequence")).collect();
    sent.sort();
    let expected_sent: Vec<String> = [1, 2, 3, 4, 6].iter().map(|s| format!("{s:020}")).collect();
    assert_eq!(sent, expected_sent, "seq 5 must not be sent");
}

/// A permanent refusal is the event's alone: it is dead-lettered and the rest of its key
/// goes in the same attempt (holding them back would stall the sink in retries).
#[tokio::test]
async fn a_refused_event_does_not_hold_back_its_key() {
    let receiver = verifying().await;
    receiver.fail_seq(3, 400);
    let sink = sink(&receiver, WebhookMode::Binary);
    let keys = ["a", "b", "a", "b", "a", "b"];
    let events: Vec<Delivery> = (1..=6).map(|s| sample(s, keys[s as usize - 1])).collect();

    let outcomes = sink.send(&events).await;

    let refused = Outcome::Rejected {
        reason: "http_400".into(),
    };
    let mut expected = vec![Outcome::Delivered; 6];
    expected[2] = refused;
    assert_eq!(outcomes, expected);
    assert_eq!(seqs_of_key(&receiver.requests(), "a").len(), 3);
}

#[tokio::test]
async fn healthcheck_uses_the_configured_url_or_passes_without_one() {
    let receiver = verifying().await;
    sink(&receiver, WebhookMode::Binary)
        .healthcheck()
        .await
        .unwrap();
    assert_eq!(receiver.health_hits(), 0);
    assert!(receiver.requests().is_empty(), "no bogus event");

    let mut config = config(&receiver, WebhookMode::Binary);
    config.healthcheck_url = Some(format!("{}/health", receiver.base));
    let sink = WebhookSink::new(config).unwrap();
    sink.healthcheck().await.unwrap();
    receiver.health(503);
    let err = sink.healthcheck().await.unwrap_err();
    assert!(
        matches!(&err, SinkError::Unhealthy(m) if m.contains("503")),
        "{err}"
    );
    assert_eq!(receiver.health_hits(), 2);
}

#[test]
fn invalid_config_names_the_field_and_hides_secrets() {
    let good = WebhookConfig::new("https://example.test/hook", vec![OLD_SECRET.into()]);
    let cases: Vec<(WebhookConfig, &str)> = vec![
        (
            WebhookConfig {
                url: "not a url".into(),
                ..good.clone()
            },
            "url",
        ),
        (
            WebhookConfig {
                url: "ftp://h/x".into(),
                ..good.clone()
            },
            "url",
        ),
        (
            WebhookConfig {
                secrets: vec!["hunter2".into()],
                ..good.clone()
            },
            "secrets[0]",
        ),
        (
            WebhookConfig {
                secrets: vec![],
                ..good.clone()
            },
            "secrets",
        ),
        (
            WebhookConfig {
                max_in_flight: 0,
                ..good.clone()
            },
            "max_in_flight",
        ),
        (
            WebhookConfig {
                timeout: Duration::ZERO,
                ..good.clone()
            },
            "timeout",
        ),
        (
            WebhookConfig {
                healthcheck_url: Some("x".into()),
                ..good.clone()
            },
            "healthcheck_url",
        ),
    ];
    for (config, field) in cases {
        let err = WebhookSink::new(config).unwrap_err().to_string();
        assert!(err.contains(field), "{err} should name {field}");
        assert!(!err.contains("hunter2"), "{err}");
    }
    let shown = format!("{good:?}");
    assert!(
        !shown.contains(OLD_SECRET) && shown.contains("redacted"),
        "{shown}"
    );
}

#[test]
fn retry_after_parses_seconds_and_dates() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    assert_eq!(
        parse_retry_after("120", now),
        Some(Duration::from_secs(120))
    );
    assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
    let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
    assert_eq!(
        parse_retry_after(&later, now),
        Some(Duration::from_secs(90))
    );
    let earlier = httpdate::fmt_http_date(now - Duration::from_secs(90));
    assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
    assert_eq!(parse_retry_after("soon", now), None);
    assert_eq!(parse_retry_after("-5", now), None);
}

#[test]
fn binary_requests_match_the_sdk_binding() {
    use cloudevents::binding::reqwest::RequestBuilderExt;

    const URL: &str = "http://127.0.0.1:9/hook";
    fn pairs(request: &reqwest::Request) -> Vec<(String, Vec<u8>)> {
        let mut pairs: Vec<_> = request
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect();
        pairs.sort();
        pairs
    }
    let sink = WebhookSink::new(WebhookConfig::new(URL, vec![RECEIVER_SECRET.into()])).unwrap();
    // JSON data as a value (the test sample) and as bytes (what the publisher builds).
    let json = sample(42, "acme/r1").event;
    let mut bytes = json.clone();
    bytes.set_data("application/json", sample_data(42, "acme/r1").into_bytes());
    // An extension a published event does not have gets its header name made on the spot.
    let mut traced = bytes.clone();
    traced.set_extension(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    );
    for (event, headers) in [(json, 11), (bytes, 11), (traced, 12)] {
        let ours = sink.binary(&event).unwrap();
        let sdk = reqwest::Client::new()
            .post(URL)
            .event(event.clone())
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(pairs(&ours), pairs(&sdk));
        assert_eq!(pairs(&ours).len(), headers);
        let body = |r: &reqwest::Request| r.body().and_then(|b| b.as_bytes()).map(<[u8]>::to_vec);
        assert_eq!(body(&ours), body(&sdk));
        assert_eq!(
            body(&ours).unwrap(),
            sample_data(42, "acme/r1").into_bytes()
        );
        assert_eq!((ours.method(), ours.url()), (sdk.method(), sdk.url()));
    }
}

#[tokio::test]
async fn an_events_trace_goes_out_as_the_w3c_headers() {
    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const STATE: &str = "congo=t61rcWkgMzE";
    let traced = |seq: u64, state: Option<&str>| {
        let mut delivery = sample(seq, "acme/r1");
        delivery.event.set_extension("traceparent", PARENT);
        if let Some(state) = state {
            delivery.event.set_extension("tracestate", state);
        }
        delivery
    };
    for mode in [WebhookMode::Binary, WebhookMode::Structured] {
        let receiver = verifying().await;
        let sink = sink(&receiver, mode);
        let events = [
            traced(1, Some(STATE)),
            traced(2, None),
            sample(3, "acme/r1"),
        ];
        assert_eq!(sink.send(&events).await, vec![Outcome::Delivered; 3]);
        let requests = receiver.requests();
        let trace = |r: &Recorded| {
            let header = |name| r.headers.get(name).map(|v| v.to_str().unwrap().to_owned());
            (header("traceparent"), header("tracestate"))
        };
        let got: Vec<_> = requests.iter().map(trace).collect();
        assert_eq!(
            got,
            [
                (Some(PARENT.into()), Some(STATE.into())),
                (Some(PARENT.into()), None),
                (None, None)
            ],
            "{mode:?}"
        );
        assert!(requests.iter().all(|r| r.signature_valid));
        if mode == WebhookMode::Binary {
            // Beside what the CloudEvents binding maps.
            assert_eq!(requests[0].header("ce-traceparent"), PARENT);
            assert_eq!(requests[0].header("ce-tracestate"), STATE);
        }
    }
    // A batch holds many traces: each event's in its body, none as a header.
    let receiver = verifying().await;
    let sink = sink(&receiver, WebhookMode::Batch);
    assert_eq!(
        sink.send(&[traced(1, Some(STATE))]).await,
        vec![Outcome::Delivered]
    );
    let got = &receiver.requests()[0];
    assert!(got.headers.get("traceparent").is_none());
    let body: Vec<serde_json::Value> = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(body[0]["traceparent"], PARENT);
}
