//! `ankusa audit key` and `ankusa audit verify`: the trail's checkpoint key, and an offline
//! check of a store (or a backup restored to a directory) against its Merkle tree and
//! checkpoints. Both open the store as a RocksDB secondary, so they work beside a running node
//! and never write to the store.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;

use super::progress::Progress;
use crate::audit::tree::checkpoint::CheckpointKey;
use crate::audit::tree::verify::{self, External, ExternalResult, Verification};
use crate::config::Config;
use crate::store::Store;

/// `verify` found the trail and its tree or checkpoints apart.
pub const EXIT_BROKEN: u8 = 1;
/// `verify` could not run: no store, no tree, a checkpoint file it cannot read or whose
/// signature does not verify.
pub const EXIT_UNUSABLE: u8 = 2;

/// Arguments of `ankusa audit key`.
#[derive(Debug, clap::Args)]
pub struct KeyArgs {
    /// The store directory (default: node.data_dir of the configuration).
    #[arg(long)]
    pub store: Option<PathBuf>,
}

/// Arguments of `ankusa audit verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The store directory (default: node.data_dir of the configuration).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// A checkpoint kept outside the node, in its signed-note text form (the `checkpoint`
    /// of an io.ankusa.trail.checkpoint event, or of GET /admin/v1/audit/checkpoint). Repeat
    /// for several.
    #[arg(long = "checkpoint", value_name = "FILE")]
    pub checkpoints: Vec<PathBuf>,
    /// The verifier key to trust (`ankusa audit key` printed it); default: the store's own,
    /// which someone holding the disk could have replaced.
    #[arg(long, value_name = "VERIFIER_KEY")]
    pub key: Option<String>,
}

/// Run `ankusa audit key`: print the store's verifier key.
pub fn key(config: &Config, args: KeyArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let (store, _scratch) = open(config, args.store.as_deref())?;
    let key = CheckpointKey::load(&store)?.context(
        "the store has no checkpoint key yet: a node with audit.tree on makes it at its start",
    )?;
    writeln!(out, "{}", key.verifier_key())?;
    Ok(())
}

/// Run `ankusa audit verify`; the exit code says what it found.
pub fn verify(config: &Config, args: VerifyArgs, out: &mut dyn Write) -> ExitCode {
    match run_verify(config, args, out) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(EXIT_BROKEN),
        Err(e) => {
            eprintln!("ankusa: {e:#}");
            ExitCode::from(EXIT_UNUSABLE)
        }
    }
}

fn run_verify(config: &Config, args: VerifyArgs, out: &mut dyn Write) -> anyhow::Result<bool> {
    let mut external = Vec::new();
    for path in &args.checkpoints {
        let note = std::fs::read_to_string(path)
            .with_context(|| format!("reading checkpoint {}", path.display()))?;
        external.push(External {
            name: path.display().to_string(),
            note,
        });
    }
    let (store, _scratch) = open(config, args.store.as_deref())?;
    let progress = Progress::start("verifying the audit trail");
    let outcome = verify::verify(
        &store,
        args.key.as_deref(),
        &external,
        &mut |done, total| {
            progress.set(&format!(
                "verifying the audit trail: {done} of {total} rows"
            ));
        },
    );
    progress.finish();
    match outcome? {
        Verification::Verified(s) => {
            let rows = match s.rows {
                Some((first, last)) => format!("rows {first} to {last}"),
                None => "no rows".to_owned(),
            };
            writeln!(
                out,
                "verified: {rows}, tree size {}, root {}, {} checkpoint rows",
                s.size, s.root, s.checkpoints
            )?;
            for (name, result) in s.external {
                let line = match result {
                    ExternalResult::Verified { size } => format!("verified at size {size}"),
                    ExternalResult::RolledBack { ended } => format!(
                        "covers rows a restore rolled back (its incarnation ended at seq {ended})"
                    ),
                    ExternalResult::Predates { size } => {
                        format!("size {size} predates the oldest retained row: not checked")
                    }
                };
                writeln!(out, "checkpoint {name}: {line}")?;
            }
            Ok(true)
        }
        Verification::Broken { seq, reason } => {
            writeln!(out, "NOT verified: first bad seq {seq}: {reason}")?;
            Ok(false)
        }
    }
}

/// The store at `path` (or the configured one) as a secondary, with its scratch directory.
fn open(config: &Config, path: Option<&Path>) -> anyhow::Result<(Store, tempfile::TempDir)> {
    let path = path.map_or_else(|| config.node.data_dir.clone(), Path::to_path_buf);
    if !path.join("CURRENT").exists() {
        anyhow::bail!("no store at {}", path.display());
    }
    let scratch = tempfile::tempdir().context("creating a scratch directory")?;
    let store = Store::open_secondary(&path, scratch.path())
        .with_context(|| format!("opening the store at {}", path.display()))?;
    store.catch_up().context("catching up with the primary")?;
    Ok((store, scratch))
}
