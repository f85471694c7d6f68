//! `ankusa follow http`: a replica kept from the nodes' own watch endpoint
//! (`GET /admin/v1/lifecycle/events`, docs/watch.md), for a consumer with no broker and no
//! receiver of its own: it long-polls each node and applies what comes by the rule.
//!
//! One task per node ([`watching`]) polls and steps its [`Watch`]; every answer goes to the
//! one loop that owns the replica file ([`Follower`]), which applies its events and moves the
//! node's position in the same step. The file is written from that loop only, so what it
//! holds is always a replica and the positions of exactly the events in it: never a position
//! ahead of its events. Several nodes of a fleet merge into one replica as Kafka's partitions
//! do: the rule orders whatever order they come in.
//!
//! The nodes answer 410 when a position is gone (retention passed it, or the store was
//! restored from a backup behind it): the task asks that node for a snapshot, then resumes
//! from the oldest position it serves. The events from there and the snapshot's items
//! bring the replica back to the node's state, deletions included (the snapshot prunes what
//! it did not list). Failures (a node down, hung, answering 5xx or garbage) are logged and
//! retried with backoff from the same position; a refused token stops the follower.

mod client;
mod watch;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

pub use client::{Asked, Client, NodeUrl, BODY_LIMIT, MARGIN};
pub use watch::{backoff, Answer, Failure, Gone, Reply, Retry, Step, Watch};

use super::file::{self, ReplicaFile, WatchPosition};
use super::metrics::Metrics;
use super::FollowError;
use crate::telemetry::follow as telemetry;

/// Events asked for in one answer (the node's most).
pub const DEFAULT_LIMIT: u32 = 1000;
/// How long a node holds a poll with nothing to send (the node's most is 50 s, and it must
/// be under its `api.request_timeout`, 60 s by default).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// Events between two writes of the replica file, at most (as Kafka's: each write encodes
/// the whole replica).
pub const DEFAULT_BATCH_EVENTS: usize = super::kafka::DEFAULT_BATCH_EVENTS;
/// The longest an applied event waits to be written (ms).
pub const DEFAULT_BATCH_MS: u64 = super::kafka::DEFAULT_BATCH_MS;
/// How long an answer waits when the follower is to stop once caught up: long enough that a
/// node caught up early is not polled in a loop, short enough not to hold the stop.
const CATCHING_UP_WAIT: Duration = Duration::from_secs(1);
/// Answers waiting for the loop, per node: a node's task waits for room rather than reading
/// further ahead of the replica.
const QUEUED: usize = 2;

/// What an http follower needs.
#[derive(Clone)]
pub struct HttpOptions {
    /// The nodes' base URLs (`http://node:8080`).
    pub urls: Vec<String>,
    /// A bearer token with `events:read`.
    pub token: String,
    /// The replica file.
    pub out: PathBuf,
    /// Events per answer, at most (1 to 1000).
    pub limit: u32,
    /// How long a poll waits for an event.
    pub wait: Duration,
    /// Write the replica file after this many events...
    pub batch_events: usize,
    /// ...or this long after the first event not yet written.
    pub batch_interval: Duration,
    /// Stop (after writing the replica) once every node answered with its latest position:
    /// catch up, then return (for `--verify`).
    pub until_caught_up: bool,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("urls", &self.urls)
            .field("token", &"<redacted>")
            .field("out", &self.out)
            .field("limit", &self.limit)
            .field("wait", &self.wait)
            .field("until_caught_up", &self.until_caught_up)
            .finish_non_exhaustive()
    }
}

/// What a node's task tells the loop.
#[derive(Debug)]
enum Heard {
    /// An answer, checked: apply its events, then move the node's position.
    Answer { node: String, answer: Answer },
    /// The node took a snapshot request after a 410: its position moves to `at`.
    Relisted { node: String, at: WatchPosition },
    /// The node's watch cannot go on.
    Stopped(FollowError),
}

/// Follow `options.urls` into `options.out` until `shutdown`, then write the replica.
pub async fn follow(
    options: HttpOptions,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), FollowError> {
    let nodes = nodes(&options.urls)?;
    let mut follower = Follower::start(&options, &nodes, metrics)?;
    let wait = match options.until_caught_up {
        true => options.wait.min(CATCHING_UP_WAIT),
        false => options.wait,
    };
    let (tx, mut rx) = mpsc::channel(QUEUED * nodes.len());
    // Dropped on return, which aborts every node's task.
    let mut tasks = JoinSet::new();
    for node in nodes {
        let at = follower.file.progress.http.get(&node.key()).cloned();
        telemetry::watching(&node, at.as_ref());
        let client = Client::new(node, &options.token, options.limit.clamp(1, 1000), wait)
            .map_err(FollowError::Options)?;
        tasks.spawn(watching(client, at, follower.metrics.clone(), tx.clone()));
    }
    drop(tx);
    tokio::pin!(shutdown);
    // (An interval of zero would panic: a write per millisecond is the most asked.)
    let mut tick = tokio::time::interval(options.batch_interval.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => follower.flush().await?,
            heard = rx.recv() => match heard {
                Some(Heard::Answer { node, answer }) => follower.apply(&node, answer),
                Some(Heard::Relisted { node, at }) => follower.relisted(&node, at),
                Some(Heard::Stopped(error)) => {
                    follower.flush().await?;
                    return Err(error);
                }
                None => break,
            },
        }
        if follower.pending >= options.batch_events {
            follower.flush().await?;
        }
        if options.until_caught_up && follower.caught_up() {
            break;
        }
    }
    follower.flush().await
}

/// The nodes of `urls`, each once.
fn nodes(urls: &[String]) -> Result<Vec<NodeUrl>, FollowError> {
    if urls.is_empty() {
        return Err(FollowError::Options("follow http needs a --url".into()));
    }
    let mut nodes: Vec<NodeUrl> = Vec::new();
    for url in urls {
        let node = NodeUrl::parse(url).map_err(FollowError::Options)?;
        if nodes.iter().any(|n| n.key() == node.key()) {
            return Err(FollowError::Options(format!("--url {node} is given twice")));
        }
        nodes.push(node);
    }
    Ok(nodes)
}

/// One node's task: poll, step, hand answers to the loop; until the loop is gone or the
/// watch cannot go on.
async fn watching(
    client: Client,
    at: Option<WatchPosition>,
    metrics: Arc<Metrics>,
    tx: mpsc::Sender<Heard>,
) {
    let node = client.node().key();
    let mut watch = Watch::new(&node, at);
    loop {
        let reply = client.poll(watch.at()).await;
        let heard = match watch.step(reply) {
            Step::Apply { answer, recovered } => {
                if recovered > 0 {
                    telemetry::watch_recovered(&node, answer.position, recovered);
                }
                let node = node.clone();
                Heard::Answer { node, answer }
            }
            Step::Relist { gone, pause } => {
                tokio::time::sleep(pause).await;
                match relist(&client, &mut watch, &gone, &metrics).await {
                    Ok(at) => Heard::Relisted {
                        node: node.clone(),
                        at,
                    },
                    Err(error) => Heard::Stopped(FollowError::Refused(error)),
                }
            }
            Step::Retry(retry) => {
                metrics.request_failures.inc();
                telemetry::watch_failed(&node, watch.after(), &retry);
                tokio::time::sleep(retry.pause).await;
                continue;
            }
            Step::Stop(error) => Heard::Stopped(FollowError::Refused(error)),
        };
        let stopped = matches!(heard, Heard::Stopped(_));
        if tx.send(heard).await.is_err() || stopped {
            return;
        }
    }
}

/// Ask the node for a snapshot until it takes the request, then move the watch to where
/// the 410 says; an error when the node refuses the token.
async fn relist(
    client: &Client,
    watch: &mut Watch,
    gone: &Gone,
    metrics: &Metrics,
) -> Result<WatchPosition, String> {
    let node = client.node().key();
    let from = watch.after();
    loop {
        let failure = match client.snapshot().await {
            Ok(asked) => {
                let snapshot = match &asked {
                    Asked::Started(id) => format!("started {id}"),
                    Asked::Running => "one was running".to_owned(),
                };
                telemetry::relisted(&node, from, gone.oldest, &gone.incarnation, &snapshot);
                return Ok(watch.relisted(gone));
            }
            Err(failure) => failure,
        };
        let retry = watch.failed(failure)?;
        metrics.request_failures.inc();
        telemetry::snapshot_request_failed(&node, &retry);
        tokio::time::sleep(retry.pause).await;
    }
}

/// The loop's state: the replica file, and what each node's last answer said.
struct Follower {
    file: ReplicaFile,
    out: PathBuf,
    metrics: Arc<Metrics>,
    /// Events (and moves) applied since the last write.
    pending: usize,
    /// Per node (its key): how it stands.
    standing: BTreeMap<String, Standing>,
}

/// How one node stands, from its last answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Standing {
    /// `latest - position` of its last answer; `None` before one.
    behind: Option<u64>,
    /// A relist asked for a snapshot not yet completed in the replica: until then the
    /// replica may hold what the node deleted, so it is not caught up.
    relisting: bool,
}

impl Follower {
    /// Load the replica file (refusing one kept from Kafka).
    fn start(
        options: &HttpOptions,
        nodes: &[NodeUrl],
        metrics: Arc<Metrics>,
    ) -> Result<Follower, FollowError> {
        let file = file::load(&options.out)?.unwrap_or_default();
        if let Some(kafka) = &file.progress.kafka {
            return Err(FollowError::Mismatch {
                path: options.out.clone(),
                found: format!("kafka topic {}", kafka.topic),
                asked: "http".into(),
            });
        }
        metrics.count_subjects(&file.replica);
        let standing = nodes
            .iter()
            .map(|n| (n.key(), Standing::default()))
            .collect();
        Ok(Follower {
            file,
            out: options.out.clone(),
            metrics,
            pending: 0,
            standing,
        })
    }

    /// Apply `answer`'s events and move `node`'s position past them.
    fn apply(&mut self, node: &str, answer: Answer) {
        let mut completed = false;
        for event in &answer.events {
            match self.file.replica.apply_event(event) {
                Ok(effect) => {
                    completed |= effect.completed;
                    self.metrics.applied(&effect, super::event_time_ms(event));
                }
                Err(error) => {
                    self.metrics.skipped("invalid");
                    telemetry::event_skipped(node, &error);
                }
            }
        }
        let at = WatchPosition {
            position: answer.position,
            incarnation: answer.incarnation,
        };
        // An answer that moved nothing (a poll whose wait ran out) needs no write.
        if !answer.events.is_empty() || self.file.progress.http.get(node) != Some(&at) {
            self.pending += answer.events.len().max(1);
            self.file.progress.http.insert(node.to_owned(), at);
        }
        let standing = self.standing.entry(node.to_owned()).or_default();
        standing.behind = Some(answer.latest.saturating_sub(answer.position));
        standing.relisting &= !completed;
        let behind: u64 = self.standing.values().filter_map(|s| s.behind).sum();
        self.metrics
            .behind_events
            .set(i64::try_from(behind).unwrap_or(i64::MAX));
    }

    /// Move `node`'s position to where a relist resumes.
    fn relisted(&mut self, node: &str, at: WatchPosition) {
        self.metrics.relists.inc();
        self.file.progress.http.insert(node.to_owned(), at);
        self.pending += 1;
        let standing = self.standing.entry(node.to_owned()).or_default();
        standing.behind = None;
        standing.relisting = true;
    }

    /// Whether every node's last answer was at its latest, with no relist under way.
    fn caught_up(&self) -> bool {
        self.standing
            .values()
            .all(|s| s.behind == Some(0) && !s.relisting)
    }

    /// Write the replica file if anything was applied since the last write.
    async fn flush(&mut self) -> Result<(), FollowError> {
        if self.pending == 0 {
            return Ok(());
        }
        let started = Instant::now();
        let bytes = file::encode(&self.file);
        let (path, len) = (self.out.clone(), bytes.len());
        let written = crate::store::blocking::run("the replica file's write", move || {
            file::write(&path, &bytes)
        })
        .await;
        written.map_err(|_| FollowError::Unwritten(self.out.clone()))??;
        let counts = self.file.replica.counts();
        self.metrics
            .written(len, started.elapsed().as_secs_f64(), counts);
        self.pending = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
