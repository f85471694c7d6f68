//! `ankusa follow kafka | webhook | http | verify`: keep a replica of the routes and sources from
//! the lifecycle events, and compare one with a node's admin API.
//!
//! The consumers live in the library (`ankusa::replica`); this file parses arguments, starts
//! the progress line and the metrics listener, passes SIGINT/SIGTERM in as the shutdown, and
//! turns a difference found by `--verify` into a failing exit. Secrets and tokens are read
//! into [`Hidden`], whose `Debug` shows nothing, and clap never shows the values of the
//! environment variables they may come from.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::replica::http::{self, HttpOptions};
use crate::replica::kafka::{self, KafkaOptions, Start};
use crate::replica::verify::{self, VerifyOptions};
use crate::replica::webhook::{Server, WebhookOptions};
use crate::replica::{file, metrics, progress, Metrics};

/// What `ankusa follow` does.
#[derive(Debug, clap::Subcommand)]
pub enum FollowCommand {
    /// Follow every partition of the topic a Kafka sink writes into a replica file.
    Kafka(KafkaArgs),
    /// Receive a webhook sink's requests (Standard Webhooks signed) into a replica file.
    Webhook(WebhookArgs),
    /// Watch nodes' lifecycle events over HTTP (GET /admin/v1/lifecycle/events) into a
    /// replica file.
    Http(HttpArgs),
    /// Compare a replica file with a node's admin API; exits 1 on a difference.
    Verify(VerifyArgs),
}

/// A secret or a token: shown by nothing.
#[derive(Clone)]
pub struct Hidden(String);

impl std::str::FromStr for Hidden {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Hidden(s.to_owned()))
    }
}

impl Hidden {
    /// The value, for the one place it goes (a header, a signature check).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where to compare the replica (`--verify`, and `follow verify`).
#[derive(Debug, clap::Args)]
pub struct ApiArgs {
    /// A bearer token: admin:read for --url/--verify; follow http watches with it too, so it
    /// needs events:read there.
    #[arg(long, env = "ANKUSA_FOLLOW_TOKEN", hide_env_values = true)]
    pub token: Option<Hidden>,
    /// A tenant to list beside those the replica holds (repeatable).
    #[arg(long = "tenant", value_name = "TENANT")]
    pub tenants: Vec<String>,
    /// Compare only the subjects of this store (`subjectstore`; repeatable): the node's
    /// own stores and the shared ones, when the replica holds several nodes' own stores.
    #[arg(long = "store", value_name = "STORE")]
    pub stores: Vec<String>,
}

/// Arguments of `ankusa follow kafka`.
#[derive(Debug, clap::Args)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers (host:port,...).
    #[arg(long)]
    pub brokers: String,
    /// The topic the Kafka sink writes.
    #[arg(long)]
    pub topic: String,
    /// The consumer group the offsets are committed to (for lag tooling; the replica file
    /// is what a restart reads).
    #[arg(long)]
    pub group: String,
    /// The replica file (created if missing; holds the offsets too).
    #[arg(long)]
    pub out: PathBuf,
    /// Where a new replica starts: every event the topic holds, or only what comes next
    /// (then ask a node for a snapshot: POST /admin/v1/lifecycle/snapshot).
    #[arg(long, value_enum, default_value_t = Start::Beginning)]
    pub start: Start,
    /// Write the replica file after this many events...
    #[arg(long, default_value_t = kafka::DEFAULT_BATCH_EVENTS, value_name = "N")]
    pub batch_events: usize,
    /// ...or after this many milliseconds.
    #[arg(long, default_value_t = kafka::DEFAULT_BATCH_MS, value_name = "MS")]
    pub batch_ms: u64,
    /// Catch up (every partition read to its end), then compare with the node at this URL
    /// and exit: 0 when equal, 1 on a difference.
    #[arg(long, value_name = "URL", requires = "token")]
    pub verify: Option<String>,
    /// The token and scope of `--verify`.
    #[command(flatten)]
    pub api: ApiArgs,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

/// Arguments of `ankusa follow webhook`.
#[derive(Debug, clap::Args)]
pub struct WebhookArgs {
    /// The address to listen on (host:port).
    #[arg(long)]
    pub listen: String,
    /// A whsec_<base64> secret of the sink (repeatable, or comma-separated in the
    /// environment variable, while keys rotate).
    #[arg(
        long = "secret",
        env = "ANKUSA_FOLLOW_SECRET",
        hide_env_values = true,
        value_delimiter = ',',
        required = true
    )]
    pub secrets: Vec<Hidden>,
    /// The replica file (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

/// Arguments of `ankusa follow http`.
#[derive(Debug, clap::Args)]
pub struct HttpArgs {
    /// A node's base URL (http://host:port; repeatable: the nodes of a fleet, merged into
    /// one replica).
    #[arg(long = "url", value_name = "URL", required = true)]
    pub urls: Vec<String>,
    /// The replica file (created if missing; holds each node's position too).
    #[arg(long)]
    pub out: PathBuf,
    /// Events asked for in one answer (1 to 1000).
    #[arg(long, default_value_t = http::DEFAULT_LIMIT, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// How long a node holds a poll with no event to send (0s to 50s, under the node's
    /// api.request_timeout).
    #[arg(long, default_value = "30s", value_parser = humantime_serde::re::humantime::parse_duration)]
    pub wait: Duration,
    /// Write the replica file after this many events...
    #[arg(long, default_value_t = http::DEFAULT_BATCH_EVENTS, value_name = "N")]
    pub batch_events: usize,
    /// ...or after this many milliseconds.
    #[arg(long, default_value_t = http::DEFAULT_BATCH_MS, value_name = "MS")]
    pub batch_ms: u64,
    /// Catch up (every node answered with its latest position), then compare with the node
    /// at this URL and exit: 0 when equal, 1 on a difference.
    #[arg(long, value_name = "URL")]
    pub verify: Option<String>,
    /// The token (events:read; admin:read too with --verify) and the scope of `--verify`.
    #[command(flatten)]
    pub api: ApiArgs,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

/// Arguments of `ankusa follow verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The replica file.
    #[arg(long)]
    pub replica: PathBuf,
    /// The node's base URL (http://host:port).
    #[arg(long)]
    pub url: String,
    /// The token and scope of the comparison.
    #[command(flatten)]
    pub api: ApiArgs,
}

/// Run `ankusa follow <command>` until it is done or SIGINT/SIGTERM, writing results to
/// `out`.
pub fn run(command: FollowCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match command {
            FollowCommand::Kafka(args) => follow_kafka(args, out).await,
            FollowCommand::Webhook(args) => follow_webhook(args).await,
            FollowCommand::Http(args) => follow_http(args, out).await,
            FollowCommand::Verify(args) => {
                let api = api_options(args.url, args.api)?;
                compare(&args.replica, &api, out).await
            }
        }
    })
}

async fn follow_kafka(args: KafkaArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let verify = match args.verify {
        Some(url) => Some(api_options(url, args.api)?),
        None => None,
    };
    let options = KafkaOptions {
        brokers: args.brokers,
        topic: args.topic,
        group: args.group,
        out: args.out.clone(),
        batch_events: args.batch_events.max(1),
        batch_interval: Duration::from_millis(args.batch_ms.max(1)),
        until_caught_up: verify.is_some(),
        start: args.start,
    };
    let metrics = Metrics::new();
    let tasks = start_reporting(&metrics, args.metrics.as_deref(), true).await?;
    let followed = kafka::follow(options, metrics, crate::node::signal()).await;
    stop_reporting(tasks);
    followed?;
    match verify {
        Some(api) => compare(&args.out, &api, out).await,
        None => Ok(()),
    }
}

async fn follow_webhook(args: WebhookArgs) -> anyhow::Result<()> {
    let options = WebhookOptions {
        listen: args.listen,
        secrets: args.secrets.into_iter().map(|s| s.0).collect(),
        out: args.out,
    };
    let metrics = Metrics::new();
    let server = Server::bind(options, metrics.clone()).await?;
    crate::telemetry::follow::listening(server.local_addr()?);
    let tasks = start_reporting(&metrics, args.metrics.as_deref(), false).await?;
    let served = server.run(crate::node::signal()).await;
    stop_reporting(tasks);
    Ok(served?)
}

async fn follow_http(args: HttpArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let token = args
        .api
        .token
        .clone()
        .context("--token (or ANKUSA_FOLLOW_TOKEN) with events:read is needed to watch")?;
    anyhow::ensure!(
        args.wait <= Duration::from_secs(50),
        "--wait is at most 50s (the longest a node holds a poll)"
    );
    let verify = match args.verify {
        Some(url) => Some(api_options(url, args.api)?),
        None => None,
    };
    let options = HttpOptions {
        urls: args.urls,
        token: token.0,
        out: args.out.clone(),
        limit: args.limit,
        wait: args.wait,
        batch_events: args.batch_events.max(1),
        batch_interval: Duration::from_millis(args.batch_ms.max(1)),
        until_caught_up: verify.is_some(),
    };
    let metrics = Metrics::new();
    let tasks = start_reporting(&metrics, args.metrics.as_deref(), true).await?;
    let followed = http::follow(options, metrics, crate::node::signal()).await;
    stop_reporting(tasks);
    followed?;
    match verify {
        Some(api) => compare(&args.out, &api, out).await,
        None => Ok(()),
    }
}

/// The progress task and, with `--metrics`, the metrics listener.
async fn start_reporting(
    metrics: &Arc<Metrics>,
    listen: Option<&str>,
    counted: bool,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut tasks = vec![tokio::spawn(progress::report(metrics.clone(), counted))];
    if let Some(addr) = listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--metrics {addr}"))?;
        let metrics = metrics.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = metrics::serve(listener, metrics, std::future::pending()).await {
                crate::telemetry::follow::metrics_failed(&e);
            }
        }));
    }
    Ok(tasks)
}

fn stop_reporting(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        task.abort();
    }
    progress::clear();
}

fn api_options(url: String, api: ApiArgs) -> anyhow::Result<VerifyOptions> {
    let token = api
        .token
        .context("--token (or ANKUSA_FOLLOW_TOKEN) is needed to read the API")?;
    Ok(VerifyOptions {
        url,
        token: token.0,
        tenants: api.tenants,
        stores: api.stores,
    })
}

/// Compare the replica file at `path` with the API; an error when they differ.
async fn compare(
    path: &std::path::Path,
    api: &VerifyOptions,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let replica = file::load(path)?
        .with_context(|| format!("no replica file at {}", path.display()))?
        .replica;
    let differences = verify::verify(&replica, api).await?;
    out.write_all(verify::report(&differences).as_bytes())?;
    if !differences.is_empty() {
        anyhow::bail!(
            "the replica differs from {} in {} subjects",
            api.url,
            differences.len()
        );
    }
    let (present, _) = replica.counts();
    writeln!(
        out,
        "the replica equals {}: {present} subjects kept",
        api.url
    )?;
    Ok(())
}
