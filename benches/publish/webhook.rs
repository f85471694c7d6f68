//! Webhook throughput: the publisher through the webhook sink beside a bare reqwest loop
//! sending the same requests (same headers and bodies, pre-built) with the same concurrency,
//! both to the shared test receiver.

use std::sync::Arc;

use ankusa::audit::Trail;
use ankusa_sinks::test_support::Receiver;
use ankusa_sinks::{Sink, WebhookConfig, WebhookSink};
use futures::StreamExt;

use crate::backlog::{drain, events_of, fill, trail};
use crate::clock::{Clock, Run};
use crate::report::round_sinks;
use crate::SECRET;

/// A receiver on loopback answering 204 and recording nothing (its cost is the run's): the
/// URL events go to.
pub async fn receiver() -> String {
    let receiver = Receiver::builder().answer(204).unrecorded().start().await;
    receiver.url()
}

pub async fn webhook(n: u64) -> Vec<(Run, Run)> {
    let url = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let names = round_sinks("hook");
    let trail = trail(
        dir.path(),
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    fill(&trail, n).await;
    let config = WebhookConfig::new(url.clone(), vec![SECRET.into()]);
    let concurrency = config.max_in_flight;
    let bare = BareWebhook::new(&trail, &url);
    // One sink and one client for every round; the first round warms both up and is not
    // reported.
    let sink: Arc<dyn Sink> = Arc::new(WebhookSink::new(config).unwrap());
    let mut rounds = vec![];
    for name in &names {
        let ours = drain(&trail, sink.clone(), name).await;
        rounds.push((ours, bare.send(concurrency).await));
    }
    trail.shutdown().await;
    rounds.split_off(1)
}

/// The webhook baseline: a bare reqwest client sending the requests the sink would send for
/// a trail's events (ce- headers, signature headers, body), built before it is timed.
pub struct BareWebhook {
    pub client: reqwest::Client,
    pub url: reqwest::Url,
    pub requests: Vec<(reqwest::header::HeaderMap, Vec<u8>)>,
}

impl BareWebhook {
    pub fn new(trail: &Trail, url: &str) -> BareWebhook {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let requests = events_of(trail)
            .into_iter()
            .map(|e| {
                let req =
                    cloudevents::binding::reqwest::RequestBuilderExt::event(client.post(url), e)
                        .unwrap()
                        .header("webhook-id", "msg_bench")
                        .header("webhook-timestamp", "1700000000")
                        .header(
                            "webhook-signature",
                            "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
                        )
                        .build()
                        .unwrap();
                (
                    req.headers().clone(),
                    req.body()
                        .and_then(|b| b.as_bytes())
                        .unwrap_or_default()
                        .to_vec(),
                )
            })
            .collect();
        // Parsed once, as the sink does.
        let url = reqwest::Url::parse(url).unwrap();
        BareWebhook {
            client,
            url,
            requests,
        }
    }

    /// Send every request, `concurrency` at a time, and time it.
    pub async fn send(&self, concurrency: usize) -> Run {
        let requests = self.requests.clone();
        let clock = Clock::start();
        futures::stream::iter(requests)
            .map(|(headers, body)| {
                let client = self.client.clone();
                let url = self.url.clone();
                async move {
                    client
                        .post(url)
                        .headers(headers)
                        .body(body)
                        .send()
                        .await
                        .unwrap()
                        .status()
                }
            })
            .buffer_unordered(concurrency)
            .for_each(|s| async move { assert!(s.is_success()) })
            .await;
        clock.stop(self.requests.len() as u64)
    }
}
