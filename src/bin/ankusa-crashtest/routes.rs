//! A test program for the route dual-write crash tests: on the store at `<store-dir>` it makes
//! one route change in the Redis route store at `<redis-url>` (tenant `t1`), then prints `done`.
//! Named failpoints of the dual write (`dual::before_begin`, `dual::before_apply`,
//! `dual::before_finish`, `dual::after_finish`), armed through `FAILPOINTS` (e.g.
//! `FAILPOINTS=dual::before_finish=panic`), abort the process there, as a crash would.
//!
//! `loop` updates the route's filter again and again, printing `ack <seq>` after each, until
//! it is killed.
//!
//! Usage: `ankusa-crashtest routes <store-dir> <redis-url> create|update|delete|loop <id>
//! [destination]`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ankusa::audit::{Context, SystemClock, Trail, TrailOptions};
use ankusa::store::Store;
use ankusa::subjects::remote::redis::RedisStore;
use ankusa::subjects::routes::{NewRoute, Route, RoutePatch, Routes};

/// `routes`' arguments.
#[derive(clap::Args)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// The Redis route store's URL.
    url: String,
    /// `create`, `update`, `delete` or `loop`.
    op: String,
    /// The route's id.
    id: String,
    /// The route's destination (`create`).
    #[arg(default_value = "https://example.com/a")]
    destination: String,
}

/// Make the change, or die at an armed failpoint.
pub fn exec(args: Args) {
    let Args {
        dir,
        url,
        op,
        id,
        destination,
    } = args;
    let op = op.as_str();
    // A failpoint's panic must kill the process like a crash would, not one task.
    std::panic::set_hook(Box::new(|_| std::process::abort()));
    let _scenario = fail::FailScenario::setup();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let store = Store::open(&dir).expect("open store");
        let trail =
            Trail::start(store, TrailOptions::default(), Arc::new(SystemClock)).expect("trail");
        let route_store =
            RedisStore::<Route>::new(&url, "ankusa:", Duration::from_secs(2)).expect("route store");
        let routes = Routes::new(Arc::new(route_store), trail.clone());
        let ctx = Context::new("crashtest", None, Some(format!("{op}-{id}")));
        let tenant = "t1".to_owned();
        let result = match op {
            "create" => {
                let input = NewRoute {
                    id,
                    source: "s1".into(),
                    destination,
                    filter: Default::default(),
                    enabled: true,
                };
                routes.create(ctx, tenant, input).await
            }
            "update" => {
                let patch = RoutePatch {
                    destination: Some(destination),
                    ..RoutePatch::default()
                };
                routes.update(ctx, tenant, id, patch, None).await
            }
            "delete" => routes.delete(ctx, tenant, id, None).await,
            "loop" => loop {
                let mut filter = serde_json::Map::new();
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                filter.insert("n".into(), nanos.to_string().into());
                let patch = RoutePatch {
                    filter: Some(filter),
                    ..RoutePatch::default()
                };
                let outcome = routes
                    .update(ctx.clone(), tenant.clone(), id.clone(), patch, None)
                    .await
                    .expect("update");
                println!("ack {}", outcome.seq.unwrap_or(0));
            },
            other => {
                eprintln!("unknown operation {other}");
                std::process::exit(2);
            }
        };
        trail.shutdown().await;
        match result {
            Ok(outcome) => println!("done {}", outcome.seq.unwrap_or(0)),
            Err(e) => {
                println!("refused {e}");
                std::process::exit(1);
            }
        }
    });
}
