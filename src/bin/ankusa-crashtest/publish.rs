//! A test program for publisher crash tests: on an empty store it commits `n` source
//! changes, then publishes them to a file sink in batches of `batch`, printing `published`
//! and exiting once its position reaches the last seq. Named failpoints
//! (`lifecycle::before_persist`, `lifecycle::after_persist`), armed through `FAILPOINTS`,
//! abort the process mid-way.
//!
//! Usage: `ankusa-crashtest publish <store-dir> <events-file> <n> <batch>`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ankusa::audit::{Change, CommitError, Context, SystemClock, Trail, TrailOptions};
use ankusa::lifecycle::{Publisher, PublisherOptions, SinkSpec};
use ankusa::store::{Cf, Store};
use ankusa_sinks::{FileConfig, FileSink, RetryPolicy};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// `publish`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    /// The store's directory (empty at the first run).
    dir: PathBuf,
    /// The file sink's file.
    events: PathBuf,
    /// Changes to commit.
    n: u64,
    /// The publisher's batch.
    batch: usize,
}

/// Commit `n` changes and publish them, or die at an armed failpoint.
pub fn exec(args: Args) {
    let Args {
        dir,
        events,
        n,
        batch,
    } = args;
    // A failpoint's panic must kill the process like a crash would, not one task.
    std::panic::set_hook(Box::new(|_| std::process::abort()));
    let _scenario = fail::FailScenario::setup();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let store = Store::open(&dir).expect("open store");
        let options = TrailOptions {
            sinks: vec!["file".into()],
            ..TrailOptions::default()
        };
        let trail = Trail::start(store, options, Arc::new(SystemClock)).expect("trail");
        let mut last = *trail.committed().borrow();
        while last < n {
            let i = last + 1;
            trail
                .commit(Context::new("crashtest", None, None), move |tx| {
                    let value = json!({"id": format!("s{i}"), "revision": 1});
                    tx.put_json(Cf::Sources, format!("t1/s{i}").into_bytes(), &value)?;
                    let change = Change::new("source.create", format!("sources/s{i}"))
                        .tenant("t1")
                        .states(None, Some(value.clone()))
                        .revision(1)
                        .entity(value);
                    Ok::<_, CommitError<()>>((change, ()))
                })
                .await
                .expect("commit");
            last = i;
        }
        let retry = RetryPolicy::default();
        let sink = FileSink::new(FileConfig {
            path: events,
            retry,
        })
        .expect("file sink");
        let spec = SinkSpec {
            name: "file".into(),
            sink: Arc::new(sink),
            retry,
        };
        let options = PublisherOptions {
            source: "urn:ankusa:crashtest".into(),
            batch,
            idle: Duration::from_millis(20),
            in_flight: 4,
            max_dead_letters: 100_000,
        };
        let stop = CancellationToken::new();
        let publisher = Publisher::start(trail.clone(), vec![spec], options, stop.clone())
            .await
            .expect("publisher");
        while publisher.statuses()[0].position < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.cancel();
        publisher.join().await;
        trail.shutdown().await;
        println!("published");
    });
}
