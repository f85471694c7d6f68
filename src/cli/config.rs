//! `ankusa config check | show`: a configuration checked without starting a node (as
//! `nginx -t` does), and the effective configuration with its secrets redacted.
//!
//! Loading the configuration already checks every key and value (`main` does it before any
//! command, and a bad one exits 2 naming the key, never its value). `check --connect` also
//! runs what the node would try at start: each listed sink's healthcheck (the broker reachable
//! and the topic there, the webhook's healthcheck URL) and a ping of each Redis store.

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;

use crate::config::{Config, RemoteStoreKind, SourceStoreKind};
use crate::subjects::remote::redis::RedisStore;
use crate::subjects::remote::RemoteStore;
use crate::subjects::routes;
use crate::subjects::sources::Source;

/// What `ankusa config` does.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Check the configuration (the embedded default, --config FILE and ANKUSA_* variables):
    /// exit 0 when it is valid, 2 naming what is wrong.
    Check {
        /// Also reach what it names: each listed sink's healthcheck, each Redis store. Exit 1
        /// when one fails.
        #[arg(long)]
        connect: bool,
    },
    /// Print the effective configuration as JSON, secrets redacted.
    Show,
}

/// Run `ankusa config <command>` on `config` (loaded from `file`), writing to `out`.
pub fn run(
    config: &Config,
    file: Option<&Path>,
    command: ConfigCommand,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    match command {
        ConfigCommand::Show => {
            let effective = Config::effective(file)?;
            writeln!(out, "{}", serde_json::to_string_pretty(&effective)?)?;
            Ok(())
        }
        ConfigCommand::Check { connect } => {
            let origin = file.map_or("the embedded default".into(), |f| f.display().to_string());
            writeln!(out, "configuration ok: {origin}")?;
            if !connect {
                return Ok(());
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let failed = runtime.block_on(reach(config, out))?;
            anyhow::ensure!(
                failed == 0,
                "{failed} of the configured destinations failed"
            );
            Ok(())
        }
    }
}

/// Run each check, printing one line per destination; how many failed.
async fn reach(config: &Config, out: &mut dyn Write) -> anyhow::Result<usize> {
    let mut failed = 0;
    let mut report = |what: String, result: Result<(), String>| -> anyhow::Result<()> {
        match result {
            Ok(()) => writeln!(out, "ok      {what}")?,
            Err(e) => {
                failed += 1;
                writeln!(out, "failed  {what}: {e}")?;
            }
        }
        Ok(())
    };
    for name in &config.lifecycle.sinks {
        let Some(sink) = config.lifecycle.sink.get(name) else {
            continue;
        };
        let checked = match sink.build().await {
            Ok((sink, _)) => sink.healthcheck().await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        report(format!("lifecycle sink {name}"), checked)?;
    }
    if config.routes.store == RemoteStoreKind::Redis {
        let store = routes::open(&config.routes).context("the route store")?;
        report("route store (redis)".into(), ping(store.as_ref()).await)?;
    }
    if config.sources.store == SourceStoreKind::Redis {
        let store =
            RedisStore::<Source>::open(&config.sources.redis()).context("the source store")?;
        report("source store (redis)".into(), ping(&store).await)?;
    }
    Ok(failed)
}

/// A round trip to a remote store: its version counter read.
async fn ping<T: crate::subjects::remote::RemoteSubject>(
    store: &dyn RemoteStore<T>,
) -> Result<(), String> {
    store.version().await.map(|_| ()).map_err(|e| e.to_string())
}
