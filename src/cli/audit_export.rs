//! `ankusa audit export`: a window of a node's trail, each row with its inclusion proof
//! against a signed checkpoint, as NDJSON on stdout or in a file (docs/operations.md says how
//! a receiver checks it).
//!
//! It asks the node's admin API (`GET /admin/v1/audit`, `Accept: application/x-ndjson`) and
//! writes what comes as it comes, never holding more than a chunk. It succeeds only when the
//! stream ended with its end line: a refused request, a node that cannot be reached or goes
//! quiet, a connection that breaks, an error line or a stream without its end is a failure
//! (exit 1), and a file given with `--output` then keeps what came as `FILE.partial`, never
//! under the name a complete export has. The token goes in the `Authorization` header only.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{StatusCode, Url};

use super::follow::Hidden;
use super::progress::Progress;
use crate::replica::http::NodeUrl;
use receive::{Ended, Receiver};

mod receive;

/// The media type of an export.
const NDJSON: &str = "application/x-ndjson";
/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the node may take to answer, or to send the next chunk: a node that hangs is a
/// failure, not an export that hangs with it. A page is read within a bounded budget, so
/// a live node sends far more often.
const QUIET_TIMEOUT: Duration = Duration::from_secs(60);
/// The most of an error answer that is read.
const ERROR_BODY_LIMIT: usize = 64 << 10;

/// Arguments of `ankusa audit export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The node's base URL (http://host:port).
    #[arg(long, value_name = "URL")]
    pub node: String,
    /// A bearer token with the scope audit:read.
    #[arg(long, env = "ANKUSA_TOKEN", hide_env_values = true)]
    pub token: Option<Hidden>,
    /// Write the export to FILE (made once the export is complete; a failed one leaves
    /// what came in FILE.partial) instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Only rows of this tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only rows of this action (`source.update`).
    #[arg(long)]
    pub action: Option<String>,
    /// Only rows whose resource starts with this (`sources/`).
    #[arg(long)]
    pub resource: Option<String>,
    /// Only rows made by this actor (a token's name, or `system`).
    #[arg(long)]
    pub actor: Option<String>,
    /// Only rows with this result.
    #[arg(long, value_parser = ["ok", "failed", "interrupted"])]
    pub result: Option<String>,
    /// Only rows committed at or after this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,
    /// Only rows committed before this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Only rows with a seq greater than this (to go on from an export's `next`).
    #[arg(long, value_name = "SEQ")]
    pub after: Option<u64>,
    /// At most this many rows (1 to 1000; default: the whole window).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: Option<u32>,
}

/// Run `ankusa audit export`.
pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(export(args))
}

async fn export(args: ExportArgs) -> anyhow::Result<()> {
    let url = export_url(&args)?;
    let token = args
        .token
        .as_ref()
        .context("--token (or ANKUSA_TOKEN) with the scope audit:read is needed")?;
    let node = args.node.trim_end_matches('/');
    let client = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .context("making the HTTP client")?;
    let request = client
        .get(url)
        .bearer_auth(token.expose())
        .header(ACCEPT, NDJSON)
        .send();
    let response = match tokio::time::timeout(QUIET_TIMEOUT, request).await {
        Err(_) => bail!("the node at {node} did not answer within {QUIET_TIMEOUT:?}"),
        Ok(Err(e)) => bail!("could not reach the node at {node}: {}", cause(&e)),
        Ok(Ok(response)) => response,
    };
    let response = accepted(response, node).await?;
    let mut out = Output::open(args.output)?;
    let progress = Progress::start("exporting the audit trail");
    let received = receive(response, &mut out, &progress).await;
    progress.finish();
    match received.and_then(|ended| out.commit().map(|()| ended)) {
        Ok(ended) => {
            eprintln!("ankusa: {}", ended.summary());
            Ok(())
        }
        Err(e) => Err(match out.kept() {
            Some(partial) => e.context(format!("what came is in {}", partial.display())),
            None => e,
        }),
    }
}

/// Write the stream to `out` as it comes, and say how it ended.
async fn receive(
    mut response: reqwest::Response,
    out: &mut Output,
    progress: &Progress,
) -> anyhow::Result<Ended> {
    let mut receiver = Receiver::default();
    loop {
        let chunk = match tokio::time::timeout(QUIET_TIMEOUT, response.chunk()).await {
            Err(_) => bail!(
                "the export was cut after {} rows: the node sent nothing for {QUIET_TIMEOUT:?}",
                receiver.rows()
            ),
            Ok(Err(e)) => bail!(
                "the export was cut after {} rows: {}",
                receiver.rows(),
                cause(&e)
            ),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => chunk,
        };
        // Written as it came, even a line the receiver refuses: the file shows what the node
        // sent.
        out.write(&chunk)?;
        receiver.feed(&chunk)?;
        progress.set(&format!(
            "exporting the audit trail: {} rows",
            receiver.rows()
        ));
    }
    receiver.finish()
}

/// The response if it is an export; else what the node said, in a user's terms.
async fn accepted(response: reqwest::Response, node: &str) -> anyhow::Result<reqwest::Response> {
    let status = response.status();
    if status == StatusCode::OK {
        let media = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !media.starts_with(NDJSON) {
            bail!("the node at {node} answered {media:?}, not an export: does it serve one?");
        }
        return Ok(response);
    }
    let message = error_message(response).await;
    match status {
        StatusCode::UNAUTHORIZED => {
            bail!("the node refused the token (401): not one it knows ({message})")
        }
        StatusCode::FORBIDDEN => bail!("the token lacks the scope audit:read (403)"),
        _ => bail!("the node answered {status}: {message}"),
    }
}

/// The `message` of an error answer (`{"error", "message"}`), or what it held.
async fn error_message(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout(QUIET_TIMEOUT, response.chunk()).await {
        body.extend_from_slice(&chunk);
        if body.len() > ERROR_BODY_LIMIT {
            break;
        }
    }
    let json: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    match json.as_ref().and_then(|v| v["message"].as_str()) {
        Some(message) => message.to_owned(),
        None => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    }
}

/// The export's URL on the node `args.node`, with the filters as its query.
fn export_url(args: &ExportArgs) -> anyhow::Result<Url> {
    let node = NodeUrl::parse_flag("--node", &args.node).map_err(anyhow::Error::msg)?;
    let mut url = node.endpoint(&["admin", "v1", "audit"]);
    let after = args.after.map(|a| a.to_string());
    let limit = args.limit.map(|l| l.to_string());
    let filters = [
        ("tenant", &args.tenant),
        ("action", &args.action),
        ("resource", &args.resource),
        ("actor", &args.actor),
        ("result", &args.result),
        ("from", &args.from),
        ("until", &args.until),
        ("after", &after),
        ("limit", &limit),
    ];
    {
        let mut query = url.query_pairs_mut();
        for (name, value) in filters {
            if let Some(value) = value {
                query.append_pair(name, value);
            }
        }
    }
    Ok(url)
}

/// An error and its causes on one line (reqwest's own says only "error sending request").
fn cause(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Where the export goes: stdout, or `FILE.partial` renamed to `FILE` once complete.
enum Output {
    Stdout(std::io::Stdout),
    File {
        file: std::io::BufWriter<std::fs::File>,
        partial: PathBuf,
        path: PathBuf,
        done: bool,
    },
}

impl Output {
    fn open(path: Option<PathBuf>) -> anyhow::Result<Output> {
        let Some(path) = path else {
            return Ok(Output::Stdout(std::io::stdout()));
        };
        let mut name = path
            .file_name()
            .context("--output names no file")?
            .to_owned();
        name.push(".partial");
        let partial = path.with_file_name(name);
        let file = std::fs::File::create(&partial)
            .with_context(|| format!("creating {}", partial.display()))?;
        Ok(Output::File {
            file: std::io::BufWriter::with_capacity(256 << 10, file),
            partial,
            path,
            done: false,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        match self {
            Output::Stdout(out) => out.write_all(bytes).context("writing stdout"),
            Output::File { file, partial, .. } => file
                .write_all(bytes)
                .with_context(|| format!("writing {}", partial.display())),
        }
    }

    /// Flush what was written, and give a file its name: on disk first, so that a crash
    /// never leaves a complete-looking file that is not.
    fn commit(&mut self) -> anyhow::Result<()> {
        match self {
            Output::Stdout(out) => out.flush().context("writing stdout"),
            Output::File {
                file,
                partial,
                path,
                done,
            } => {
                file.flush()
                    .and_then(|()| file.get_ref().sync_all())
                    .and_then(|()| std::fs::rename(&*partial, &*path))
                    .with_context(|| format!("writing {}", path.display()))?;
                *done = true;
                Ok(())
            }
        }
    }

    /// The partial file a failed export leaves, if it wrote to one.
    fn kept(&mut self) -> Option<PathBuf> {
        match self {
            Output::Stdout(out) => {
                let _ = out.flush();
                None
            }
            Output::File {
                file,
                partial,
                done: false,
                ..
            } => {
                let _ = file.flush();
                Some(partial.clone())
            }
            Output::File { .. } => None,
        }
    }
}
