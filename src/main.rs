//! The `ankusa` binary: argument parsing and the edges (config, logging, exit codes).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use ankusa::cli;
use ankusa::config::{Config, LogFormat};
use ankusa::telemetry;

/// Ankusa: the audit trail of a node's configuration changes, and the lifecycle events
/// of its routes and sources.
#[derive(Debug, Parser)]
#[command(name = "ankusa", version, about, long_about = None)]
struct Args {
    /// Configuration file, merged over the embedded default (config/default.toml).
    #[arg(long, short, global = true, env = "ANKUSA_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the node: open the store, boot the trail and serve HTTP until SIGINT/SIGTERM.
    Serve,
    /// Read the audit trail of a store.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Make admin API bearer tokens and their digests for `[[api.tokens]]`.
    #[command(subcommand)]
    Token(cli::token::TokenCommand),
    /// Back up a stopped store, list backups, restore one.
    #[command(subcommand)]
    Backup(cli::backup::BackupCommand),
    /// Check the configuration without starting a node, or print the effective one.
    #[command(subcommand)]
    Config(cli::config::ConfigCommand),
    /// Keep a replica of the routes and sources from the lifecycle events (Kafka or
    /// webhook), and compare one with a node's admin API.
    #[command(subcommand)]
    Follow(cli::follow::FollowCommand),
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Print rows in seq order; works while a node runs on the store.
    Tail(cli::tail::TailArgs),
    /// Print the store's checkpoint verifier key (signed-note text), for witnesses and
    /// `audit verify --key`.
    Key(cli::audit::KeyArgs),
    /// Check a store's rows against its Merkle tree and every checkpoint (stored or given).
    /// Exit 0: verified; 1: the trail and the tree or a checkpoint part (the first bad seq is
    /// printed); 2: it cannot be checked (no store, no tree, an unreadable or unsigned
    /// checkpoint).
    Verify(cli::audit::VerifyArgs),
    /// Stream a window of a node's trail (the same filters as GET /admin/v1/audit) as
    /// NDJSON, each row with its inclusion proof against a signed checkpoint, for checking
    /// without the node. Exit 0 only for a complete export; 1 on any failure (a refused
    /// token, a node down, a cut stream).
    Export(cli::audit_export::ExportArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match Config::load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ankusa: {e}");
            return ExitCode::from(2);
        }
    };
    if !matches!(args.command, Command::Serve) {
        telemetry::init_logging(
            &config.log.level,
            config.log.format == LogFormat::Json,
            None,
        );
    }
    let result = match args.command {
        Command::Serve => {
            ankusa::purge_idle_memory();
            run_serve(config)
        }
        Command::Audit(AuditCommand::Tail(tail)) => cli::tail::run(&config, tail),
        Command::Audit(AuditCommand::Key(key)) => {
            cli::audit::key(&config, key, &mut std::io::stdout().lock())
        }
        Command::Audit(AuditCommand::Verify(verify)) => {
            return cli::audit::verify(&config, verify, &mut std::io::stdout().lock());
        }
        Command::Audit(AuditCommand::Export(export)) => cli::audit_export::run(export),
        Command::Backup(backup) => cli::backup::run(&config, backup, &mut std::io::stdout().lock()),
        Command::Config(command) => cli::config::run(
            &config,
            args.config.as_deref(),
            command,
            &mut std::io::stdout().lock(),
        ),
        Command::Follow(follow) => cli::follow::run(follow, &mut std::io::stdout().lock()),
        Command::Token(token) => cli::token::run(
            token,
            &mut std::io::stdin().lock(),
            &mut std::io::stdout().lock(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ankusa: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_serve(config: Config) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // The span exporter's batch task runs on the node's runtime.
    let tracing = {
        let _enter = runtime.enter();
        telemetry::trace::Tracing::start(&config.telemetry)?
    };
    let json = config.log.format == LogFormat::Json;
    telemetry::init_logging(&config.log.level, json, Some(&tracing));
    let result = runtime.block_on(ankusa::node::run(config, ankusa::node::signal()));
    // Flushed from this thread, while the runtime's workers still run the export.
    tracing.shutdown();
    result
}
