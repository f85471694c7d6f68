//! `ankusa follow http` against real nodes (in this process, on their real HTTP port): a node
//! taking concurrent changes, the real binary killed with -9 mid-stream and resumed, a
//! position the trail's ceiling deleted (410, a relist with a snapshot), a node down, hung
//! or answering garbage behind a TCP gate, a refused token, and two nodes of a fleet on Redis
//! merged into one replica. Every replica is compared whole with the nodes' admin API.
//!
//! What they share: the watcher's token, a follower in this process, and the comparison.

mod failures;
mod fleet;
mod relist;
mod stream;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ankusa::api::auth::digest_hex;
use ankusa::replica::file::{self, WatchPosition};
use ankusa::replica::http::{self, HttpOptions};
use ankusa::replica::verify::{self, Difference, VerifyOptions};
use ankusa::replica::{FollowError, Metrics, Replica};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// `events:read` and `admin:read`: what `follow http --verify` needs, and nothing more.
pub const WATCHER: &str = "tok-watcher-3b7e19";

/// A node's configuration: the test tokens and the watcher's.
pub fn watched(v: &mut Value) {
    let tokens = v["api"]["tokens"].as_array_mut().expect("the test tokens");
    tokens.push(json!({"name": "watcher", "sha256": digest_hex(WATCHER),
                       "scopes": ["events:read", "admin:read"]}));
}

/// A follower of `urls` into `out`: 100 events an answer, polls that wait 1 s, the file
/// written every 50 ms.
pub fn options(urls: &[&str], out: &Path, until_caught_up: bool) -> HttpOptions {
    HttpOptions {
        urls: urls.iter().map(|u| u.to_string()).collect(),
        token: WATCHER.into(),
        out: out.to_owned(),
        limit: 100,
        wait: Duration::from_secs(1),
        batch_events: 1000,
        batch_interval: Duration::from_millis(50),
        until_caught_up,
    }
}

/// Follow `urls` into `out` until every node answered at its latest; its metrics.
pub async fn caught_up(urls: &[&str], out: &Path) -> Arc<Metrics> {
    let metrics = Metrics::new();
    let followed = http::follow(
        options(urls, out, true),
        metrics.clone(),
        std::future::pending(),
    );
    let Ok(ran) = tokio::time::timeout(Duration::from_secs(120), followed).await else {
        let kept = file::load(out).ok().flatten();
        let progress = kept.as_ref().map(|k| &k.progress.http);
        let snapshots = kept
            .as_ref()
            .map(|k| k.replica.snapshots.keys().collect::<Vec<_>>());
        panic!(
            "the follower did not catch up: file at {progress:?}, snapshots under way \
             {snapshots:?}, metrics:\n{}",
            metrics.render()
        );
    };
    ran.expect("the follower ran cleanly");
    metrics
}

/// A follower running in this process until [`Following::stop`].
pub struct Following {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), FollowError>>,
    pub metrics: Arc<Metrics>,
}

impl Following {
    /// Follow with `options`.
    pub fn start(options: HttpOptions) -> Following {
        let metrics = Metrics::new();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(http::follow(options, metrics.clone(), async move {
            let _ = stopped.await;
        }));
        Following {
            stop,
            task,
            metrics,
        }
    }

    /// Stop it (it writes the file) and hand back its metrics.
    pub async fn stop(self) -> Arc<Metrics> {
        let _ = self.stop.send(());
        self.task
            .await
            .expect("the follower's task")
            .expect("the follower ran cleanly");
        self.metrics
    }
}

/// The position the replica file at `out` holds for `url`.
pub fn position(out: &Path, url: &str) -> Option<WatchPosition> {
    let file = file::load(out).ok().flatten()?;
    file.progress.http.get(url).cloned()
}

/// The node at `base`'s last seq, as its watch says.
pub async fn latest(base: &str) -> u64 {
    let mut after = 0;
    loop {
        let (status, answer) = watch(base, &format!("after={after}&limit=1")).await;
        match status {
            200 => return answer["latest"].as_u64().expect("latest"),
            // Rows deleted (a ceiling): ask from where the node serves.
            410 => after = answer["oldest"].as_u64().expect("oldest"),
            _ => panic!("{status}: {}", brief(&answer)),
        }
    }
}

/// `GET /admin/v1/lifecycle/events?<query>` with the watcher's token: status and body.
pub async fn watch(base: &str, query: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(format!("{base}/admin/v1/lifecycle/events?{query}"))
        .bearer_auth(WATCHER)
        .send()
        .await
        .expect("the watch answers");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `answer` for a failure's message: its start (an answer may hold megabytes of events).
pub fn brief(answer: &Value) -> String {
    answer.to_string().chars().take(400).collect()
}

/// The replica of every event of the node at `base` up to seq `position`, by the rule.
pub async fn replica_until(base: &str, position: u64) -> Replica {
    let mut replica = Replica::default();
    let mut after = 0;
    while after < position {
        let (status, answer) = watch(base, &format!("after={after}&limit=1000")).await;
        assert_eq!(status, 200, "{}", brief(&answer));
        for event in answer["events"].as_array().expect("events") {
            let seq: u64 = event["sequence"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap();
            if seq <= position {
                let event: cloudevents::Event = serde_json::from_value(event.clone()).unwrap();
                replica.apply_event(&event).unwrap();
            }
        }
        let next = answer["position"].as_u64().unwrap();
        assert!(next > after, "the watch moves on: {}", brief(&answer));
        after = next;
    }
    replica
}

/// How the replica in `out` differs from what the node at `base` lists of `stores` (all
/// when empty), in tenant t1.
pub async fn differences(base: &str, out: &Path, stores: &[String]) -> Vec<Difference> {
    let Some(kept) = file::load(out).expect("a replica file that reads") else {
        return vec![Difference::Extra {
            key: "(no replica file yet)".into(),
            replica: Value::Null,
        }];
    };
    let options = VerifyOptions {
        url: base.to_owned(),
        token: WATCHER.into(),
        tenants: vec!["t1".into()],
        stores: stores.to_vec(),
    };
    verify::verify(&kept.replica, &options)
        .await
        .expect("the API lists")
}

/// Wait until the replica in `out` equals what the node at `base` lists of `stores`, and
/// its position for `url` (the node, or a gate in front of it) is the node's latest.
pub async fn converged(base: &str, url: &str, out: &Path, stores: &[String]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let differences = differences(base, out, stores).await;
        let at = position(out, url).map(|p| p.position);
        let latest = latest(base).await;
        if differences.is_empty() && at == Some(latest) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replica did not converge on {base} (position {at:?} of {latest}):\n{}",
            verify::report(&differences)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
