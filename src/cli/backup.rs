//! `ankusa backup create | list | restore`: backups of a stopped store, and restores.
//!
//! `create` opens the store itself, so it takes the store's lock: it refuses a store a node
//! is running on (back that one up with `POST /admin/v1/backups`, which records the backup in
//! the trail). It writes no row: a backup tool does not change the history of what it copies
//! (the backup's sidecar records when it was made and which `m:audit_seq` it holds).
//! `restore` never touches a running node's store either, and leaves `m:incarnation_pending`
//! in what it restored, so that the next start opens a new incarnation.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::progress::Progress;
use crate::api::auth::ADMIN_TOKEN_FILE;
use crate::audit::{Clock, SystemClock};
use crate::config::Config;
use crate::store::backup::{BackupDir, BackupInfo};
use crate::store::restore::{restore, Carry, RestoreRequest};
use crate::store::Store;

/// What `ankusa backup` does.
#[derive(Debug, clap::Subcommand)]
pub enum BackupCommand {
    /// Back up a stopped store (a running node: POST /admin/v1/backups).
    Create(CreateArgs),
    /// List the backups in a directory: id, time, size, and the m:audit_seq each holds.
    List(ListArgs),
    /// Restore a backup into an empty path (or replace a stopped store with --force).
    Restore(RestoreArgs),
}

/// Arguments of `ankusa backup create`.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The backup directory (created if missing; backups in it share unchanged files).
    #[arg(long)]
    pub to: PathBuf,
    /// The store directory (default: node.data_dir of the configuration).
    #[arg(long)]
    pub store: Option<PathBuf>,
}

/// Arguments of `ankusa backup list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// The backup directory.
    pub dir: PathBuf,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ankusa backup restore`.
#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// The backup directory.
    #[arg(long)]
    pub from: PathBuf,
    /// The backup to restore (default: the newest).
    #[arg(long)]
    pub id: Option<u32>,
    /// The store directory to restore into: must be empty or absent, unless --force.
    #[arg(long)]
    pub store: PathBuf,
    /// Replace the (stopped) store at --store; it is moved aside, not deleted.
    #[arg(long)]
    pub force: bool,
}

/// Run `ankusa backup <command>`, writing results to `out`.
pub fn run(config: &Config, command: BackupCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        BackupCommand::Create(args) => create(config, args, out),
        BackupCommand::List(args) => list(args, out),
        BackupCommand::Restore(args) => restore_cmd(config, args, out),
    }
}

fn create(config: &Config, args: CreateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let path = args.store.unwrap_or_else(|| config.node.data_dir.clone());
    if !path.join("CURRENT").is_file() {
        anyhow::bail!("no store at {}", path.display());
    }
    if crate::config::within(&args.to, &path) {
        anyhow::bail!("the backup directory must be outside the store");
    }
    let store = Store::open(&path).map_err(|e| {
        let message = e.to_string();
        if message.contains("lock file") || message.contains("lock hold") {
            anyhow::anyhow!(
                "the store at {} is in use (is a node running on it?): back up a running node \
                 with POST /admin/v1/backups",
                path.display()
            )
        } else {
            anyhow::Error::new(e).context(format!("opening the store at {}", path.display()))
        }
    })?;
    let progress = Progress::start(&format!("backing up {}", path.display()));
    let made = BackupDir::create(&args.to).and_then(|mut dir| {
        progress.set(&format!(
            "backing up {} into {}",
            path.display(),
            args.to.display()
        ));
        dir.back_up(&store, SystemClock.now_ms())
    });
    progress.finish();
    let info = made.with_context(|| format!("backing up {}", path.display()))?;
    writeln!(
        out,
        "backup {} of {} in {}: m:audit_seq {}, {}, {} files",
        info.id,
        path.display(),
        args.to.display(),
        info.audit_seq.unwrap_or(0),
        human_size(info.size),
        info.files
    )?;
    Ok(())
}

fn list(args: ListArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let dir = BackupDir::open(&args.dir)?;
    let backups = dir.list();
    if args.json {
        for b in &backups {
            serde_json::to_writer(&mut *out, b)?;
            writeln!(out)?;
        }
        return Ok(());
    }
    writeln!(
        out,
        "{:>6}  {:<20}  {:>10}  {:>6}  {:>12}",
        "id", "created (UTC)", "size", "files", "m:audit_seq"
    )?;
    for b in &backups {
        print_backup(out, b)?;
    }
    Ok(())
}

fn print_backup(out: &mut dyn Write, b: &BackupInfo) -> std::io::Result<()> {
    let time = chrono::DateTime::from_timestamp(b.timestamp, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| "-".into());
    let seq = b.audit_seq.map_or_else(|| "-".into(), |s| s.to_string());
    writeln!(
        out,
        "{:>6}  {:<20}  {:>10}  {:>6}  {:>12}",
        b.id,
        time,
        human_size(b.size),
        b.files,
        seq
    )
}

fn restore_cmd(config: &Config, args: RestoreArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let carry = node_files(config, &args.store);
    let request = RestoreRequest {
        from: &args.from,
        id: args.id,
        target: &args.store,
        force: args.force,
        carry: &carry,
    };
    let progress = Progress::start("restoring");
    let done = restore(&request, SystemClock.now_ms(), &|stage| progress.set(stage));
    progress.finish();
    let restored = done?;
    writeln!(
        out,
        "restored backup {} (m:audit_seq {}) into {}; its next start opens a new incarnation",
        restored.id,
        restored.audit_seq,
        args.store.display()
    )?;
    if let Some(aside) = restored.replaced {
        writeln!(
            out,
            "the store that was there is now at {}: delete it when you no longer need it",
            aside.display()
        )?;
        for file in &restored.carried {
            writeln!(out, "kept in the restored store: {}", file.path.display())?;
        }
    }
    Ok(())
}

/// The files inside the store directory `store` that are the node's, not the store's, and
/// so stay when a restore replaces the store: the admin token's digest, copied (the token
/// keeps working, and the replaced store keeps its own), and the events of the configured
/// file sinks that write inside it, moved (the file goes on in one place, the restored rows
/// appended again with their ids, as every sink gets them).
fn node_files(config: &Config, store: &Path) -> Vec<Carry> {
    let token = Carry {
        path: PathBuf::from(ADMIN_TOKEN_FILE),
        moved: false,
    };
    let events = config
        .lifecycle
        .sink
        .values()
        .filter_map(|sink| match sink {
            ankusa_sinks::SinkConfig::File(file) => {
                crate::config::relative_within(&file.path, store)
            }
            _ => None,
        });
    std::iter::once(token)
        .chain(events.map(|path| Carry { path, moved: true }))
        .collect()
}

/// `1536` -> `1.5 KiB`.
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut size = bytes as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::human_size;

    #[test]
    fn sizes_read_like_sizes() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(5 << 30), "5.0 GiB");
    }
}
