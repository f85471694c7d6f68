//! Kafka throughput: the publisher through the Kafka sink beside a bare rdkafka producer
//! sending the same records, pre-encoded.

use std::sync::Arc;

use ankusa_sinks::{KafkaConfig, KafkaSink, Sink};
use cloudevents::binding::rdkafka::{FutureRecordExt, MessageRecord};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

use crate::backlog::{drain, events_of, fill, trail};
use crate::clock::{Clock, Run};
use crate::report::round_sinks;
use crate::TOPIC;

pub async fn kafka(brokers: &str, n: u64) -> Vec<(Run, Run)> {
    let dir = tempfile::tempdir().unwrap();
    let names = round_sinks("kafka");
    let trail = trail(
        dir.path(),
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    fill(&trail, n).await;
    // The bare producer: same settings, the same records pre-encoded, every report awaited.
    let records: Vec<(String, MessageRecord)> = events_of(&trail)
        .into_iter()
        .map(|e| {
            (
                e.extension("partitionkey").unwrap().to_string(),
                MessageRecord::from_event(e).unwrap(),
            )
        })
        .collect();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", "30000")
        .set("linger.ms", "1")
        .create()
        .unwrap();
    // One sink and one bare producer for every round; the first round warms both up
    // (connections, producer ids, metadata) and is not reported.
    let sink: Arc<dyn Sink> = Arc::new(KafkaSink::new(KafkaConfig::new(brokers, TOPIC)).unwrap());
    let mut rounds = vec![];
    for name in &names {
        let ours = drain(&trail, sink.clone(), name).await;
        let clock = Clock::start();
        // `send` waits while the local queue is full; join_all enqueues in order, then
        // awaits every delivery report.
        let sends = records.iter().map(|(key, record)| {
            let r = FutureRecord::to(TOPIC)
                .message_record(record)
                .key(key.as_str());
            producer.send(r, rdkafka::util::Timeout::Never)
        });
        for report in futures::future::join_all(sends).await {
            report.map_err(|(e, _)| e).unwrap();
        }
        rounds.push((ours, clock.stop(records.len() as u64)));
    }
    trail.shutdown().await;
    rounds.split_off(1)
}
