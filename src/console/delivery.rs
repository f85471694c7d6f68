//! The console's Delivery page (each sink's state, position, backlog and lag, the plot of
//! its last hour, its dead letters) with its two actions, and the Snapshots page (the
//! snapshot running and the last, the incarnations, the newest checkpoint).
//!
//! An action goes through the same function as its API endpoint, with the signed-in token
//! as the row's actor: the console can do nothing the API would not let that token do, and
//! leaves the same row.

use askama::Template;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;

use super::history::{self, Point};
use super::page::{render, time, Nav, Refusal};
use super::session::Signed;
use super::trail::CsrfForm;
use crate::api::auth::{AdminRead, AdminWrite};
use crate::api::context::Origin;
use crate::api::{lifecycle as api, AppState};
use crate::config::Scope;
use crate::lifecycle::dead_letters::{self, DeadLetter};

/// Dead letters listed per sink.
const LETTERS: usize = 20;
/// The plot's box, in SVG units.
const PLOT: (u32, u32) = (600, 120);

/// A sink as the page shows it.
pub struct SinkView {
    name: String,
    kind: &'static str,
    state: &'static str,
    position: u64,
    backlog: u64,
    lag: String,
    last_error: String,
    delivered: u64,
    retries: u64,
    dead_lettered: u64,
    letters: Vec<LetterView>,
    letter_count: u64,
    plot: String,
    plot_top: u64,
    plot_summary: String,
    disabled: bool,
}

/// A dead letter as the page lists it.
pub struct LetterView {
    seq: u64,
    at: String,
    reason: String,
}

impl From<DeadLetter> for LetterView {
    fn from(l: DeadLetter) -> LetterView {
        LetterView {
            seq: l.seq,
            at: time(l.at),
            reason: l.reason,
        }
    }
}

#[derive(Template)]
#[template(path = "delivery.html")]
struct DeliveryPage {
    nav: Nav,
    cursor: u64,
    audit_seq: u64,
    sinks: Vec<SinkView>,
    writes: bool,
    notice: Option<String>,
}

/// What an action did, in the address the browser is sent to after it: typed fields the
/// page words itself, so that a link cannot make the page say anything else.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Notice {
    /// The sink an action was on.
    sink: Option<String>,
    /// An enable's row.
    enabled: Option<u64>,
    /// A redrive's letters delivered and remaining.
    delivered: Option<u64>,
    remaining: Option<u64>,
}

impl Notice {
    fn text(&self) -> Option<String> {
        let sink = self.sink.as_deref()?;
        match (self.enabled, self.delivered, self.remaining) {
            (Some(row), None, None) => Some(format!("Enabled sink {sink} (audit row {row}).")),
            (None, Some(delivered), Some(remaining)) => Some(format!(
                "Redrove sink {sink}'s dead letters: {delivered} delivered, {remaining} remaining."
            )),
            _ => None,
        }
    }
}

/// `GET /console/delivery`.
pub async fn delivery(
    signed: Signed<AdminRead>,
    State(state): State<AppState>,
    axum::extract::Query(notice): axum::extract::Query<Notice>,
) -> Result<Response, Refusal> {
    let audit_seq = *state.trail.committed().borrow();
    let statuses = state
        .lifecycle
        .as_deref()
        .map(crate::lifecycle::Publisher::statuses)
        .unwrap_or_default();
    let now = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
    let mut sinks = Vec::with_capacity(statuses.len());
    for s in statuses {
        let (store, name) = (state.trail.store().clone(), s.name.clone());
        let (letters, letter_count) =
            crate::store::blocking::run("a sink's dead letters", move || {
                let letters = dead_letters::list(&store, &name, 0, LETTERS)?;
                Ok::<_, crate::store::StoreError>((letters, dead_letters::count(&store, &name)?))
            })
            .await??;
        let points: Vec<Point> = state
            .console
            .as_deref()
            .map(|c| c.history.of(&s.name))
            .unwrap_or_default();
        let (plot, plot_top) = history::polyline(&points, PLOT.0, PLOT.1);
        let plot_summary = match (points.first(), points.last()) {
            (Some(first), Some(last)) => format!(
                "{} samples from {} to {}: backlog from {} to {}, at most {plot_top}",
                points.len(),
                time(first.at),
                time(last.at),
                first.backlog,
                last.backlog
            ),
            _ => "no samples yet (one every 15 s)".to_owned(),
        };
        sinks.push(SinkView {
            kind: s.kind,
            state: s.state.as_str(),
            disabled: s.state == crate::lifecycle::status::SinkState::Disabled,
            position: s.position,
            backlog: audit_seq.saturating_sub(s.position),
            lag: s.oldest_unconfirmed_at.map_or("caught up".to_owned(), |t| {
                format!("{:.1} s", now.saturating_sub(t) as f64 / 1000.0)
            }),
            last_error: s.last_error.unwrap_or_default(),
            delivered: s.delivered,
            retries: s.retries,
            dead_lettered: s.dead_lettered,
            letters: letters.into_iter().map(LetterView::from).collect(),
            letter_count,
            plot,
            plot_top,
            plot_summary,
            name: s.name,
        });
    }
    let page = DeliveryPage {
        nav: Nav::new(&signed.session, "delivery"),
        cursor: state.trail.stats().cursor.unwrap_or(0),
        audit_seq,
        sinks,
        writes: signed.has(Scope::AdminWrite),
        notice: notice.text(),
    };
    Ok(render(&page))
}

/// A signed-in `admin:write` caller's audit context: who, and from where.
pub struct Acting {
    signed: Signed<AdminWrite>,
    origin: Origin,
}

impl FromRequestParts<AppState> for Acting {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let signed = Signed::<AdminWrite>::from_request_parts(parts, state).await?;
        let origin = Origin::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Acting { signed, origin })
    }
}

impl Acting {
    fn context(&self, form: &CsrfForm) -> Result<crate::audit::Context, Refusal> {
        self.signed.check_csrf(&form.csrf)?;
        Ok(self.origin.context(&self.signed.session.caller.name))
    }
}

fn done(notice: &Notice) -> Response {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    if let Some(sink) = &notice.sink {
        q.append_pair("sink", sink);
    }
    for (name, value) in [
        ("enabled", notice.enabled),
        ("delivered", notice.delivered),
        ("remaining", notice.remaining),
    ] {
        if let Some(value) = value {
            q.append_pair(name, &value.to_string());
        }
    }
    Redirect::to(&format!("/console/delivery?{}", q.finish())).into_response()
}

/// `POST /console/delivery/{sink}/enable`: as `POST .../sinks/{sink}/enable`.
pub async fn enable(
    acting: Acting,
    State(state): State<AppState>,
    Path(sink): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Result<Response, Refusal> {
    let ctx = acting.context(&form)?;
    let seq = api::enable_sink(&state, ctx, &sink).await?;
    Ok(done(&Notice {
        sink: Some(sink),
        enabled: Some(seq),
        ..Notice::default()
    }))
}

/// `POST /console/delivery/{sink}/redrive`: as `POST .../dead-letters/redrive`.
pub async fn redrive(
    acting: Acting,
    State(state): State<AppState>,
    Path(sink): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Result<Response, Refusal> {
    let ctx = acting.context(&form)?;
    let report = api::redrive_sink(&state, ctx, &sink).await?;
    Ok(done(&Notice {
        sink: Some(sink),
        delivered: Some(report.delivered),
        remaining: Some(report.remaining),
        ..Notice::default()
    }))
}

/// An incarnation as the page lists it.
pub struct IncarnationView {
    from: u64,
    id: String,
    base: u64,
}

#[derive(Template)]
#[template(path = "snapshots.html")]
struct SnapshotsPage {
    nav: Nav,
    snapshot: String,
    incarnations: Vec<IncarnationView>,
    checkpoint: Option<crate::audit::tree::checkpoint::SignedCheckpoint>,
}

/// `GET /console/snapshots`: snapshots, incarnations and the newest checkpoint.
pub async fn snapshots(
    signed: Signed<AdminRead>,
    State(state): State<AppState>,
) -> Result<Response, Refusal> {
    let snapshot = serde_json::to_string_pretty(&state.snapshots.status()).unwrap_or_default();
    let incarnations = state
        .trail
        .history()
        .0
        .iter()
        .map(|i| IncarnationView {
            from: i.from,
            id: i.id.to_string(),
            base: i.base,
        })
        .collect();
    let page = SnapshotsPage {
        nav: Nav::new(&signed.session, "snapshots"),
        snapshot,
        incarnations,
        checkpoint: state.trail.newest_checkpoint().await?,
    };
    Ok(render(&page))
}
