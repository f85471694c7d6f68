//! A test program for crash tests: commits changes to local subjects in a loop from several
//! tasks and prints every acknowledged commit (`ack <seq> <key>`) until it is killed.
//!
//! Usage: `ankusa-crashtest commit <store-dir> <run-id> [writers]`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use ankusa::audit::{Change, CommitError, Context, SystemClock, Trail, TrailOptions, TreeOptions};
use ankusa::store::{Cf, Store};
use serde_json::json;

/// `commit`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// A prefix for this run's keys, so that the keys of every run differ.
    run: String,
    /// Concurrent committing tasks.
    #[arg(default_value_t = 8)]
    writers: usize,
}

/// Commit in a loop until killed.
pub fn exec(args: Args) {
    let Args { dir, run, writers } = args;
    let _scenario = fail::FailScenario::setup();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let store = Store::open(&dir).expect("open store");
        let trail = Trail::start(store, options(), Arc::new(SystemClock)).expect("trail");
        println!("ready");
        let mut tasks = Vec::new();
        for w in 0..writers {
            let trail = trail.clone();
            let run = run.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0u64.. {
                    let key = format!("{run}-{w}-{i}");
                    let k = key.clone();
                    let done = trail
                        .commit(Context::new("crashtest", None, None), move |tx| {
                            let value = json!({"key": k, "i": i});
                            tx.put_json(Cf::Sources, k.clone().into_bytes(), &value)?;
                            let change = Change::new("source.create", k)
                                .states(None, Some(value))
                                .revision(1);
                            Ok::<_, CommitError<()>>((change, ()))
                        })
                        .await;
                    match done {
                        Ok(c) => {
                            let mut out = std::io::stdout().lock();
                            let _ = writeln!(out, "ack {} {key}", c.seq);
                            let _ = out.flush();
                        }
                        Err(e) => eprintln!("commit failed: {e:?}"),
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
}

/// Checkpoints every 50 rows, so that kills land among checkpoint rows too.
fn options() -> TrailOptions {
    TrailOptions {
        tree: TreeOptions {
            checkpoint_rows: 50,
            ..TreeOptions::default()
        },
        ..TrailOptions::default()
    }
}
