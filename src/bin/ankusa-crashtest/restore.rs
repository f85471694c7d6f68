//! A test program for restore crash tests: boots the trail on a store (which, restored,
//! opens its new incarnation at boot), prints `booted <last seq>` and stops cleanly. Named
//! failpoints of that boot (`audit::restore::before_batch`, `audit::restore::in_batch`,
//! `audit::restore::after_batch`), armed through `FAILPOINTS`, abort the process mid-way,
//! as a kill -9 would.
//!
//! Usage: `ankusa-crashtest restore <store-dir>`.

use std::path::PathBuf;
use std::sync::Arc;

use ankusa::audit::{SystemClock, Trail, TrailOptions};
use ankusa::store::Store;

/// `restore`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    /// The store's directory (restored, or not).
    dir: PathBuf,
}

/// Boot the trail and stop, or die at an armed failpoint.
pub fn exec(args: Args) {
    let Args { dir } = args;
    // A failpoint's panic must kill the process like a crash would, not unwind.
    std::panic::set_hook(Box::new(|_| std::process::abort()));
    let _scenario = fail::FailScenario::setup();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let store = Store::open(&dir).expect("open store");
        let trail = match Trail::start(store, TrailOptions::default(), Arc::new(SystemClock)) {
            Ok(trail) => trail,
            Err(e) => {
                eprintln!("boot failed: {e}");
                std::process::exit(1);
            }
        };
        let last = *trail.committed().borrow();
        trail.shutdown().await;
        println!("booted {last}");
    });
}
