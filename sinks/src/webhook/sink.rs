//! Sending events as signed requests and classifying the answers.
//!
//! Classification follows the retry contract of the Standard Webhooks spec and of svix:
//! 2xx delivered; 408, 429, 5xx, timeouts and connection errors are passing (retry, honouring a
//! clamped `Retry-After`); 410 means the endpoint is gone (the sink is disabled); anything else,
//! 3xx included since redirects are never followed (a redirect could move signed events to a
//! host nobody configured), is a permanent refusal of that event.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use cloudevents::{AttributesReader, Event};
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Client, Method, Request, StatusCode, Url};
use uuid::Uuid;

use super::config::{WebhookConfig, WebhookMode};
use super::signing::{binary_message_id, Signer};
use crate::encoding::Binding;
use crate::retry::RetryPolicy;
use crate::{encoding, partition_key, telemetry, Delivery, Outcome, Sink, SinkError};

const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");
/// The W3C trace context headers, from the event's distributed-tracing extension.
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
const STRUCTURED: &str = "application/cloudevents+json";
const BATCH: &str = "application/cloudevents-batch+json";

/// The UUIDv5 namespace of batch ids (see [`batch_id`]).
const BATCH_NAMESPACE: Uuid = Uuid::from_u128(0x8c6f_37d2_5a41_4b0e_9f3c_2d7e_61a4_b905);

/// A sink that POSTs events to one HTTP endpoint.
#[derive(Debug, Clone)]
pub struct WebhookSink {
    client: Client,
    url: Url,
    healthcheck_url: Option<Url>,
    mode: WebhookMode,
    signer: Signer,
    max_in_flight: usize,
    retry: RetryPolicy,
}

/// The `webhook-id` of a batch request: `batch_` + UUIDv5(fixed namespace, the events' ids
/// joined by `\n`). The same slice always gets the same id, so a retried batch is recognisable
/// as a duplicate; a different slice (the publisher regrouped) gets a different one.
pub fn batch_id<'a>(events: impl IntoIterator<Item = &'a Event>) -> String {
    let ids: Vec<&str> = events.into_iter().map(|e| e.id()).collect();
    format!(
        "batch_{}",
        Uuid::new_v5(&BATCH_NAMESPACE, ids.join("\n").as_bytes())
    )
}

impl WebhookSink {
    /// Validates `config` (URL, secrets, timeouts) and builds the HTTP client.
    pub fn new(config: WebhookConfig) -> Result<Self, SinkError> {
        let (url, healthcheck_url) = config.validate()?;
        let signer = Signer::new(&config.secrets)?;
        let client = Client::builder()
            .use_rustls_tls()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            // No cap on idle connections below the concurrency: a connection is handed back
            // to the pool a moment after its answer, so a cap at `max_in_flight` closed
            // connections that the next requests then had to open again (a fifth of the
            // sink's throughput on loopback). At most `max_in_flight` requests are under way,
            // and idle connections close after the pool's idle timeout.
            .user_agent(concat!("ankusa/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| SinkError::Config(format!("http client: {e}")))?;
        Ok(WebhookSink {
            client,
            url,
            healthcheck_url,
            mode: config.mode,
            signer,
            max_in_flight: config.max_in_flight,
            retry: config.retry,
        })
    }

    /// Binary/structured mode: keys concurrently, events of one key in order.
    async fn send_by_key(&self, events: &[Delivery]) -> Vec<Outcome> {
        let mut outcomes = vec![None; events.len()];
        let lanes = futures::stream::iter(lanes_by_key(events))
            .map(|lane| self.send_lane(events, lane))
            .buffer_unordered(self.max_in_flight)
            .collect::<Vec<_>>()
            .await;
        for (index, outcome) in lanes.into_iter().flatten() {
            outcomes[index] = Some(outcome);
        }
        let missing = || Outcome::Retry {
            after: None,
            reason: "not_sent".into(),
        };
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(missing))
            .collect()
    }

    /// Sends the events at `lane` (one key, ascending seq) one by one. After an event that
    /// must be retried (or a 410), the rest are not sent and come back as `Retry`, keeping
    /// the key's order. An event refused for good does not hold its key back: it is
    /// dead-lettered and the sink moves on, as the Kafka sink does.
    async fn send_lane(&self, events: &[Delivery], lane: Vec<usize>) -> Vec<(usize, Outcome)> {
        let mut results = Vec::with_capacity(lane.len());
        let mut blocked: Option<Option<Duration>> = None;
        for index in lane {
            if let Some(after) = blocked {
                let reason = "earlier_event_of_key_failed".into();
                results.push((index, Outcome::Retry { after, reason }));
                continue;
            }
            let outcome = self.send_one(&events[index]).await;
            match &outcome {
                Outcome::Delivered | Outcome::Rejected { .. } => {}
                Outcome::Retry { after, .. } => blocked = Some(*after),
                Outcome::Disabled { .. } => blocked = Some(None),
            }
            results.push((index, outcome));
        }
        results
    }

    async fn send_one(&self, delivery: &Delivery) -> Outcome {
        let event = &delivery.event;
        let request = match self.mode {
            WebhookMode::Binary => self.binary(event).and_then(|r| {
                let id = binary_message_id(r.headers()).ok_or(())?;
                self.signed(r, &id)
            }),
            _ => encoding::structured(event)
                .map_err(|_| ())
                .and_then(|body| {
                    let builder = self.client.post(self.url.clone());
                    let request = builder.header(CONTENT_TYPE, STRUCTURED).body(body).build();
                    request.map_err(|_| ())
                })
                .and_then(|r| self.signed(r, event.id())),
        }
        .and_then(|r| traced(r, event));
        match request {
            Ok(request) => self.execute(request, 1).await,
            Err(()) => {
                telemetry::encode_failed("webhook", delivery.seq);
                Outcome::Rejected {
                    reason: "encode".into(),
                }
            }
        }
    }

    /// The binary-mode request of `event`, as the SDK's reqwest binding makes it (`ce-`
    /// headers, `content-type` for `datacontenttype`, the data as the body) but read off the
    /// event in place: the binding takes the event by value, a full copy per request.
    pub(crate) fn binary(&self, event: &Event) -> Result<Request, ()> {
        let mut request = Request::new(Method::POST, self.url.clone());
        let headers = request.headers_mut();
        // Room for every header the request gets, the signature's three and the trace's two
        // included, so the map is allocated once (without walking the event's attributes
        // twice).
        headers.reserve(encoding::PUBLISHED_HEADERS + 5);
        for (name, attribute) in event.iter() {
            let value = HeaderValue::from_str(&encoding::attribute_text(&attribute));
            headers.append(binary_header(name)?, value.map_err(|_| ())?);
        }
        if let Some(data) = encoding::data_bytes(event).map_err(|_| ())? {
            *request.body_mut() = Some(data.into_owned().into());
        }
        Ok(request)
    }

    /// Batch mode: one request for the whole slice, whose outcome every event shares.
    /// (Encoding an `Event` as JSON cannot fail in practice; if it did, the batch is rejected.)
    async fn send_batch(&self, events: &[Delivery]) -> Vec<Outcome> {
        let encoded = encoding::batch(events.iter().map(|d| &d.event));
        let id = batch_id(events.iter().map(|d| &d.event));
        let request = encoded.map_err(|_| ()).and_then(|body| {
            let builder = self.client.post(self.url.clone());
            let request = builder.header(CONTENT_TYPE, BATCH).body(body).build();
            request.map_err(|_| ()).and_then(|r| self.signed(r, &id))
        });
        let outcome = match request {
            Ok(request) => self.execute(request, events.len()).await,
            Err(()) => Outcome::Rejected {
                reason: "encode".into(),
            },
        };
        vec![outcome; events.len()]
    }

    /// Adds the Standard Webhooks headers over the request's exact body bytes.
    fn signed(&self, mut request: Request, id: &str) -> Result<Request, ()> {
        let timestamp = chrono::Utc::now().timestamp();
        let body = request
            .body()
            .and_then(|b| b.as_bytes())
            .unwrap_or_default();
        let signature = self.signer.sign(id, timestamp, body);
        let headers = request.headers_mut();
        headers.insert(WEBHOOK_ID, HeaderValue::from_str(id).map_err(|_| ())?);
        headers.insert(WEBHOOK_TIMESTAMP, HeaderValue::from(timestamp));
        let mut signature = HeaderValue::from_str(&signature).map_err(|_| ())?;
        signature.set_sensitive(true);
        headers.insert(WEBHOOK_SIGNATURE, signature);
        Ok(request)
    }

    async fn execute(&self, request: Request, events: usize) -> Outcome {
        let outcome = match self.client.execute(request).await {
            Ok(mut response) => {
                let outcome = classify(response.status(), response.headers(), &self.retry);
                // Drain the (small) answer so the connection can be reused.
                while let Ok(Some(_)) = response.chunk().await {}
                outcome
            }
            Err(e) => Outcome::Retry {
                after: None,
                reason: error_kind(&e).into(),
            },
        };
        match &outcome {
            Outcome::Delivered => {}
            Outcome::Retry { reason, .. }
            | Outcome::Rejected { reason }
            | Outcome::Disabled { reason } => telemetry::attempt_failed("webhook", reason, events),
        }
        outcome
    }
}

#[async_trait]
impl Sink for WebhookSink {
    fn kind(&self) -> &'static str {
        "webhook"
    }

    async fn send(&self, events: &[Delivery]) -> Vec<Outcome> {
        match (self.mode, events.is_empty()) {
            (_, true) => Vec::new(),
            (WebhookMode::Batch, false) => self.send_batch(events).await,
            (_, false) => self.send_by_key(events).await,
        }
    }

    /// GETs `healthcheck_url` expecting a 2xx; passes without a request if none is set.
    async fn healthcheck(&self) -> Result<(), SinkError> {
        let Some(url) = &self.healthcheck_url else {
            return Ok(());
        };
        let response = self.client.get(url.clone()).send().await;
        match response {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(SinkError::Unhealthy(format!(
                "healthcheck answered {}",
                r.status().as_u16()
            ))),
            Err(e) => Err(SinkError::Unhealthy(format!(
                "healthcheck failed: {}",
                error_kind(&e)
            ))),
        }
    }
}

/// `request` with the W3C `traceparent` and `tracestate` headers of `event`'s
/// distributed-tracing extension, when it has one: a receiver's HTTP tracing joins the
/// change's trace without reading CloudEvents. (A batch request carries events of many
/// traces, each in its own `traceparent` attribute, and no header.)
fn traced(mut request: Request, event: &Event) -> Result<Request, ()> {
    for (header, name) in [(TRACEPARENT, "traceparent"), (TRACESTATE, "tracestate")] {
        if let Some(value) = event.extension(name) {
            let value = HeaderValue::from_str(&value.to_string()).map_err(|_| ())?;
            request.headers_mut().insert(header, value);
        }
    }
    Ok(request)
}

/// The binary-mode header of attribute or extension `name`. The names a published event has
/// are made once: `HeaderName::from_static` checks its text each time it runs, ten times
/// per request.
fn binary_header(name: &str) -> Result<HeaderName, ()> {
    static KNOWN: LazyLock<Vec<(&str, HeaderName)>> = LazyLock::new(|| {
        encoding::known_headers(Binding::Http)
            .map(|(name, header)| (name, HeaderName::from_static(header)))
            .collect()
    });
    match KNOWN.iter().find(|(known, _)| *known == name) {
        Some((_, header)) => Ok(header.clone()),
        None => HeaderName::try_from(encoding::header_name(Binding::Http, name).as_ref())
            .map_err(|_| ()),
    }
}

/// Indices of `events` grouped by partition key, each group in slice order; groups in order
/// of first appearance. Events without a key share one group (ordered, conservatively).
fn lanes_by_key(events: &[Delivery]) -> Vec<Vec<usize>> {
    let mut lane_of: HashMap<Option<Cow<'_, str>>, usize> = HashMap::with_capacity(events.len());
    let mut lanes: Vec<Vec<usize>> = Vec::new();
    for (index, delivery) in events.iter().enumerate() {
        let key = partition_key(&delivery.event);
        let lane = *lane_of.entry(key).or_insert_with(|| {
            lanes.push(Vec::new());
            lanes.len() - 1
        });
        lanes[lane].push(index);
    }
    lanes
}

/// The outcome of a response with `status`.
pub(crate) fn classify(status: StatusCode, headers: &HeaderMap, retry: &RetryPolicy) -> Outcome {
    if status.is_success() {
        return Outcome::Delivered;
    }
    let reason = format!("http_{}", status.as_u16());
    if status == StatusCode::GONE {
        Outcome::Disabled { reason }
    } else if status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
    {
        let after = headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()))
            .map(|wish| retry.clamp_retry_after(wish));
        Outcome::Retry { after, reason }
    } else {
        Outcome::Rejected { reason }
    }
}

/// A `Retry-After` value: delay-seconds or an HTTP date (a past date means now).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A low-cardinality name for a transport error (never its message: it may hold the URL).
fn error_kind(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "timeout"
    } else if error.is_connect() {
        "connect"
    } else if error.is_body() || error.is_decode() {
        "body"
    } else if error.is_request() {
        "request"
    } else {
        "http"
    }
}
