//! A test program for kill -9 during a retention sweep: it commits from several tasks while
//! it sweeps expired rows in small batches, and prints every acknowledged commit
//! (`ack <seq>`) and every sweep batch it asks for (`sweep`) and got (`swept <n>`), until it
//! is killed.
//!
//! Usage: `ankusa-crashtest sweep <store-dir> <round>`. Each round's clock starts ten days after
//! the previous one's, so every earlier row is expired; a lifecycle sink (`crash`) confirms
//! all but the newest rows, so the sweep always has rows it must keep.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ankusa::audit::{
    Change, Clock, CommitError, Context, Limits, ManualClock, Trail, TrailOptions,
};
use ankusa::store::{keys::meta, Cf, Store};
use serde_json::json;

const DAY: u64 = 86_400_000;
const T0: u64 = 1_700_000_000_000;
/// Rows each round commits before it sweeps.
const SEED: u64 = 600;
/// Rows the sink has not confirmed after the seed.
const UNSEEN: u64 = 300;
const SINK: &str = "crash";

/// `sweep`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// The round: its clock starts ten days after the previous round's.
    round: u64,
}

/// Commit and sweep until killed.
pub fn exec(args: Args) {
    let Args { dir, round } = args;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(dir, round));
}

async fn run(dir: PathBuf, round: u64) {
    let clock = Arc::new(ManualClock::new(T0 + round * 10 * DAY));
    let store = Store::open(&dir).expect("open store");
    let options = TrailOptions {
        sinks: vec![SINK.into()],
        limits: Limits {
            retention: Duration::from_millis(DAY),
            sweep_batch: 50,
            outbox_max_backlog: u64::MAX,
            ..Limits::default()
        },
        ..TrailOptions::default()
    };
    let trail = Trail::start(store, options, clock.clone()).expect("trail");
    let mut seeders = Vec::new();
    for w in 0..8 {
        let trail = trail.clone();
        seeders.push(tokio::spawn(async move {
            for i in 0..SEED / 8 {
                commit(&trail, &format!("r{round}-seed-{w}-{i}"), i % 5 != 0).await;
            }
        }));
    }
    for s in seeders {
        let _ = s.await;
    }
    let last = *trail.committed().borrow();
    let position = trail
        .store()
        .meta_u64(&meta::sink_position(SINK))
        .expect("position");
    trail
        .advance(SINK, position.max(last.saturating_sub(UNSEEN)), vec![])
        .await
        .expect("advance");
    clock.advance(2 * DAY);
    println!("ready");
    for w in 0..4 {
        let trail = trail.clone();
        tokio::spawn(async move {
            for i in 0u64.. {
                commit(&trail, &format!("r{round}-{w}-{i}"), i % 5 != 0).await;
            }
        });
    }
    let cutoff = clock.now_ms() - DAY;
    let mut at_cursor = 0u64;
    loop {
        say("sweep".into());
        match trail.sweep_batch(cutoff, 50).await {
            Ok(batch) => {
                say(format!("swept {}", batch.pruned));
                if !batch.more {
                    // Sweeps that find only rows the sink has not confirmed (kills land here
                    // too), then the sink catches up a little: more rows become deletable.
                    at_cursor += 1;
                    if at_cursor.is_multiple_of(4) {
                        let to = batch.cursor.unwrap_or(0) + 100;
                        let to = to.min(*trail.committed().borrow());
                        let _ = trail.advance(SINK, to, vec![]).await;
                    }
                }
            }
            Err(e) => eprintln!("sweep failed: {e}"),
        }
    }
}

/// Commit one change (`flagged`: a lifecycle event, with an entity) and print its ack.
async fn commit(trail: &Trail, key: &str, flagged: bool) {
    let k = key.to_owned();
    let done = trail
        .commit(Context::new("crashsweep", None, None), move |tx| {
            let value = json!({"key": k});
            tx.put_json(Cf::Sources, k.clone().into_bytes(), &value)?;
            let mut change = Change::new("source.create", format!("sources/{k}"))
                .states(None, Some(value))
                .revision(1);
            if flagged {
                change = change.entity(json!({"id": k, "revision": 1}));
            }
            Ok::<_, CommitError<()>>((change, ()))
        })
        .await;
    match done {
        Ok(c) => say(format!("ack {}", c.seq)),
        Err(e) => eprintln!("commit failed: {e:?}"),
    }
}

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
