//! The running node: open the store, boot the trail, serve HTTP until told to stop, then
//! stop accepting, flush the writer and close the store, in that order.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::{self, AdminState, AppState, Shared};
use crate::audit::{SystemClock, Trail, TrailOptions};
use crate::config::Config;
use crate::config::RemoteStoreKind;
use crate::lifecycle;
use crate::lifecycle::watch::Watch;
use crate::store::Store;
use crate::subjects::remote::refresh::{self, RefreshOptions, Refreshable};
use crate::subjects::remote::{drift, loss};
use crate::subjects::remote::{Recalled, RemoteSubject};
use crate::subjects::routes;
use crate::subjects::snapshot::{LocalSources, Reason, SnapshotKind, Snapshots};
use crate::subjects::sources_remote::RemoteSources;

/// How long a stopping node waits for the last readers of its store to let go.
const STORE_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Run the node with `config` until `shutdown` resolves.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.api.listen)
        .await
        .with_context(|| format!("binding api.listen {}", config.api.listen))?;
    serve(config, listener, shutdown).await
}

/// Run the node on an already-bound listener (tests bind port 0).
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let data_dir = config.node.data_dir.clone();
    let options = TrailOptions {
        lifecycle: config.lifecycle.enabled,
        // Whether or not changes are still flagged: the sinks' positions hold back every row
        // they have not seen (see `lifecycle::start`).
        sinks: config.lifecycle.sinks.clone(),
        limits: config.audit.limits(),
        tree: config.audit.tree(),
        ..TrailOptions::default()
    };
    let (trail, closing) =
        crate::store::blocking::run("opening the store", move || -> anyhow::Result<_> {
            // The owner's only (0700): the trail, the token's digest and the outbox live here.
            crate::store::owner_only::create_dir_all(&data_dir)
                .with_context(|| format!("creating node.data_dir {}", data_dir.display()))?;
            let store = Store::open(&data_dir)
                .with_context(|| format!("opening the store at {}", data_dir.display()))?;
            let closing = store.closing();
            Ok((
                Trail::start(store, options, Arc::new(SystemClock))?,
                closing,
            ))
        })
        .await??;
    let stop = CancellationToken::new();
    let retention = crate::audit::retention::spawn(trail.clone(), stop.clone());
    let checkpoints = trail.spawn_checkpoints(stop.clone());
    let served = serve_on(&config, &trail, listener, shutdown, &stop).await;
    // Whatever ended the serving (a stop, or a part that would not start), the background
    // tasks stop, the writer flushes, and the store closes.
    stop.cancel();
    let _ = retention.await;
    let _ = checkpoints.await;
    trail.shutdown().await;
    drop(trail);
    // The last clones of the store go with reads still on the blocking pool (a request the
    // server closed may have left one running), and with the tasks of dual writes. Waiting
    // for them means that once this returns, the store's lock is free for whoever opens it
    // next.
    if tokio::time::timeout(STORE_CLOSE_WAIT, closing.wait())
        .await
        .is_err()
    {
        crate::telemetry::node::store_still_open(STORE_CLOSE_WAIT);
    } else {
        crate::telemetry::node::store_closed();
    }
    served
}

/// Start everything beside the trail (route and source stores, settlement, the restore's
/// refresh, the publisher, the admin API) and serve until `shutdown`; then stop accepting and
/// let the tasks stop (`stop`) and the work the API started finish. The caller shuts the trail
/// down afterwards, whatever this returns.
async fn serve_on(
    config: &Config,
    trail: &Trail,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    // Everything that can fail comes before any task starts: a start that fails leaves
    // nothing running beside the trail, which the caller shuts down.
    let addr = listener.local_addr()?;
    let (api_config, data_dir) = (config.api.clone(), config.node.data_dir.clone());
    // With no token configured, the first start makes the admin token and prints it once.
    let admin = crate::store::blocking::run("setting up the tokens", move || {
        AdminState::new(&api_config, &data_dir, &mut std::io::stdout().lock())
    })
    .await?
    .context("setting up the admin API's tokens")?;
    // Routes live in the route store; pending rows of their dual writes (left by a crash, or
    // dropped by a caller) are settled by reading the route back, while the node serves.
    let route_store = routes::open(&config.routes).context("opening the route store")?;
    let routes = routes::Routes::new(route_store, trail.clone());
    let sources =
        RemoteSources::open(&config.sources, trail).context("opening the source store")?;
    // What this node knew of the shared stores before it stopped: their floors and names.
    let recalled = |kind| async move {
        Recalled::read(trail, kind)
            .await
            .context("reading m:remote")
    };
    routes.store().recall(&recalled(routes::Route::KIND).await?);
    if let Some(sources) = &sources {
        let kind = crate::subjects::sources::Source::KIND;
        sources.remote().store().recall(&recalled(kind).await?);
    }
    // The publisher's lanes start once every sink is built and every position read.
    let publisher = lifecycle::start(&config.lifecycle, &config.node.uri, trail, stop.clone())
        .await?
        .map(Arc::new);
    let mut reconcilers = routes.remote().reconcilers();
    reconcilers.extend(sources.iter().flat_map(|s| s.remote().reconcilers()));
    let settlement = trail.start_settlement(reconcilers, config.settlement.options(), stop.clone());
    // After a restore, routes (and Redis sources) still hold what the lost store did after
    // the backup: a state refresh for each that the restored trail does not describe. Their
    // changes wait for it (the gates close here, before the node serves).
    let mut remote: Vec<Arc<dyn Refreshable>> = vec![Arc::new(routes.remote().clone())];
    remote.extend(
        sources
            .iter()
            .map(|s| Arc::new(s.remote().clone()) as Arc<dyn Refreshable>),
    );
    let snapshots = Snapshots::new(
        trail.clone(),
        config.node.uri.clone(),
        snapshot_kinds(&routes, sources.as_ref(), trail),
        stop.clone(),
    );
    // With lifecycle events off, a snapshot's rows would publish nothing.
    let flagging = config.lifecycle.enabled;
    let refreshing = refresh::start(
        trail,
        remote,
        RefreshOptions::new(config.settlement.interval),
        flagging.then(|| snapshots.clone()),
        stop.clone(),
    );
    // A memory route store starts empty: consumers still hold the routes of the last run.
    // An empty snapshot of routes tells them (a restore's snapshot covers routes already).
    let memory_routes = config.routes.store == RemoteStoreKind::Memory;
    if flagging && memory_routes && refreshing.is_none() && *trail.committed().borrow() > 0 {
        let routes = Some(vec![routes::Route::KIND.to_owned()]);
        snapshots.take_until_done(Reason::MemoryStore, routes, config.settlement.interval);
    }
    // A shared store that lost data: its row, /readyz, a snapshot of the kind.
    let (losses, watching) = watch_losses(
        trail,
        &routes,
        sources.as_ref(),
        &snapshots,
        flagging,
        config,
        stop,
    );
    // Subjects changed in Redis around the fleet: a drift row and a refreshed event each.
    let mut drifts = Vec::new();
    if config.routes.store == RemoteStoreKind::Redis {
        let kind: Arc<dyn drift::Verifiable> = Arc::new(routes.remote().clone());
        drifts.extend(drift::watch(
            kind,
            config.routes.verify_interval,
            stop.clone(),
        ));
    }
    if let Some(sources) = &sources {
        let kind: Arc<dyn drift::Verifiable> = Arc::new(sources.remote().clone());
        drifts.extend(drift::watch(
            kind,
            config.sources.verify_interval,
            stop.clone(),
        ));
    }
    // Watchers' streams end when the stop begins, so their connections close within it.
    let watchers_stop = CancellationToken::new();
    let (watch, tail) = Watch::start(
        trail,
        &config.node.uri,
        config.api.max_watchers,
        watchers_stop.clone(),
    );
    let shutdown = {
        let watchers_stop = watchers_stop.clone();
        async move {
            shutdown.await;
            watchers_stop.cancel();
        }
    };
    let console = config
        .api
        .console_enabled()
        .then(|| Arc::new(crate::console::Console::default()));
    // The Delivery page's plot: the node's own last hour of each sink.
    let sampling = match (&console, &publisher) {
        (Some(console), Some(publisher)) => Some(crate::console::history::keep(
            console.history.clone(),
            trail.clone(),
            publisher.clone(),
            stop.clone(),
        )),
        _ => None,
    };
    let ready = Arc::new(AtomicBool::new(false));
    let work = TaskTracker::new();
    let state = AppState::new(Shared {
        trail: trail.clone(),
        ready: ready.clone(),
        admin: Arc::new(admin),
        flagging: config.lifecycle.enabled,
        watch,
        lifecycle: publisher.clone(),
        backup_dir: config.node.backup_dir.clone(),
        routes,
        sources,
        snapshots: snapshots.clone(),
        losses,
        work: work.clone(),
        backing_up: Arc::new(tokio::sync::Semaphore::new(1)),
        console: console.clone(),
    });
    crate::telemetry::node::serving(addr, *trail.committed().borrow());
    ready.store(true, Ordering::Release);
    // Returns once every connection is closed: within `api.shutdown_grace` of `shutdown`.
    let limits = config.api.connection_limits();
    crate::server::serve(listener, api::router(state), limits, shutdown).await;
    ready.store(false, Ordering::Release);
    watchers_stop.cancel();
    let _ = tail.await;
    // Checked before the writer is asked to stop: then it stops on purpose.
    let writer_died = !trail.is_taking_changes();
    crate::telemetry::node::stopping();
    // Work the API started and a client left (a backup, a sink's enable) gets its row first.
    work.close();
    if !work.is_empty() {
        crate::telemetry::node::waiting_for_work(work.len());
    }
    work.wait().await;
    stop.cancel();
    if let Some(publisher) = publisher {
        publisher.join().await;
    }
    if let Some(settlement) = settlement {
        let _ = settlement.await;
    }
    if let Some(refreshing) = refreshing {
        let _ = refreshing.await;
    }
    let _ = watching.await;
    if let Some(sampling) = sampling {
        let _ = sampling.await;
    }
    for drifting in drifts {
        let _ = drifting.await;
    }
    snapshots.join().await;
    if writer_died {
        anyhow::bail!("the audit writer stopped while the node served (see the log above); every change since was refused");
    }
    Ok(())
}

/// Watch the shared stores (routes, and sources in Redis) for a loss of data.
fn watch_losses(
    trail: &Trail,
    routes: &routes::Routes,
    sources: Option<&RemoteSources>,
    snapshots: &Snapshots,
    flagging: bool,
    config: &Config,
    stop: &CancellationToken,
) -> (loss::Losses, tokio::task::JoinHandle<()>) {
    let mut stores: Vec<(&'static str, Arc<dyn loss::Watched>)> =
        vec![(routes::Route::KIND, Arc::new(routes.store().clone()))];
    if let Some(sources) = sources {
        let source_store = sources.remote().store().clone();
        stores.push((
            crate::subjects::sources::Source::KIND,
            Arc::new(source_store),
        ));
    }
    loss::watch(
        trail.clone(),
        stores,
        flagging.then(|| snapshots.clone()),
        config.settlement.interval,
        stop.clone(),
    )
}

/// What a snapshot covers: routes, and the sources wherever they live.
fn snapshot_kinds(
    routes: &routes::Routes,
    sources: Option<&RemoteSources>,
    trail: &Trail,
) -> Vec<Arc<dyn SnapshotKind>> {
    let sources: Arc<dyn SnapshotKind> = match sources {
        Some(remote) => Arc::new(remote.remote().clone()),
        None => Arc::new(LocalSources::new(trail.clone())),
    };
    vec![Arc::new(routes.remote().clone()), sources]
}

/// Resolves on SIGINT or SIGTERM.
pub async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => crate::telemetry::node::signalled("SIGINT"),
        _ = term => crate::telemetry::node::signalled("SIGTERM"),
    }
}
