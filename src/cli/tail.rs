//! `ankusa audit tail`: print trail rows of a store, also while a node runs on it.
//!
//! The store is opened as a RocksDB secondary instance (its scratch state in a temporary
//! directory), so it never takes the primary's lock and never writes to it.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use crate::audit::{page, Filter, Row};
use crate::config::Config;
use crate::store::Store;

/// Arguments of `ankusa audit tail`.
#[derive(Debug, clap::Args)]
pub struct TailArgs {
    /// The store directory (default: node.data_dir of the configuration).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Print rows with seq greater than this.
    #[arg(long, default_value_t = 0)]
    pub after: u64,
    /// Print at most this many rows (0: no limit).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Keep printing rows as they are committed, until interrupted.
    #[arg(long, short)]
    pub follow: bool,
}

/// Run `ankusa audit tail`.
pub fn run(config: &Config, args: TailArgs) -> anyhow::Result<()> {
    let path = args
        .store
        .clone()
        .unwrap_or_else(|| config.node.data_dir.clone());
    if !path.join("CURRENT").exists() {
        anyhow::bail!("no store at {}", path.display());
    }
    let scratch = tempfile::tempdir().context("creating a scratch directory")?;
    let store = Store::open_secondary(&path, scratch.path())
        .with_context(|| format!("opening the store at {}", path.display()))?;
    let mut out = std::io::stdout().lock();
    let mut after = args.after;
    let mut left = if args.limit == 0 {
        usize::MAX
    } else {
        args.limit
    };
    if !args.json {
        writeln!(
            out,
            "{:>10}  {:<24}  {:<16}  {:<20}  {:<28}  {:<11}  rev",
            "seq", "at", "actor", "action", "resource", "result"
        )?;
    }
    loop {
        store.catch_up().context("catching up with the primary")?;
        let rows = page(&store, after, left.min(1000), &Filter::default())?;
        for row in &rows {
            print_row(&mut out, row, args.json)?;
            after = row.seq;
        }
        left -= rows.len();
        if left == 0 || (rows.is_empty() && !args.follow) {
            break;
        }
        if rows.is_empty() {
            out.flush()?;
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    Ok(())
}

fn print_row(out: &mut impl Write, row: &Row, json: bool) -> std::io::Result<()> {
    if json {
        serde_json::to_writer(&mut *out, row)?;
        return writeln!(out);
    }
    let at = chrono::DateTime::from_timestamp_millis(row.at as i64)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_default();
    let revision = row
        .revision
        .map(|r| r.to_string())
        .unwrap_or_else(|| "-".into());
    writeln!(
        out,
        "{:>10}  {:<24}  {:<16}  {:<20}  {:<28}  {:<11}  {}",
        row.seq,
        at,
        row.actor,
        row.action,
        row.resource,
        row.result.as_str(),
        revision
    )
}
