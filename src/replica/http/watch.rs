//! One node's watch as a state machine: where it resumes, and what each reply makes it do.
//!
//! The requests are made elsewhere ([`client`](super::client)); [`Watch::step`] only takes a
//! reply and names the next step, so a test drives it reply by reply. The rules it keeps:
//!
//! - the position moves only with an answer that holds together (never back, never past
//!   `latest`), so a garbled answer is retried, never skipped over;
//! - a 410 moves it nowhere by itself: the follower asks for a snapshot first, and only
//!   once the node took the request does [`Watch::relisted`] move it to `oldest`. A crash
//!   between the two meets the 410 again and asks again;
//! - failures in a row back off exponentially (with jitter, so that followers restarted
//!   together do not hammer a node in step), and a refused token stops the follower: no
//!   retry makes a token valid.

use std::time::Duration;

use cloudevents::Event;
use reqwest::StatusCode;

use crate::replica::file::WatchPosition;

/// The first pause after a failure; each failure in a row doubles it...
pub const RETRY_INITIAL: Duration = Duration::from_millis(200);
/// ...up to this.
pub const RETRY_MAX: Duration = Duration::from_secs(10);
/// The longest `Retry-After` honoured: a node asking for more is asked again sooner.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);

/// A 200 answer of `GET /admin/v1/lifecycle/events`.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The events, in seq order.
    pub events: Vec<Event>,
    /// Where to resume: past the events served and those the filters left out.
    pub position: u64,
    /// The incarnation of the store that served them.
    pub incarnation: String,
    /// The node's last seq.
    pub latest: u64,
}

/// A 410 `position_gone`: the node cannot serve what follows the position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gone {
    /// The lowest position the node still serves.
    pub oldest: u64,
    /// The incarnation to resume in.
    pub incarnation: String,
}

/// Why a request brought no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// 401 or 403: the token is not one the node takes for watching.
    Refused(StatusCode),
    /// An answer the node will give again however often it is asked (400, 404, ...).
    Permanent(String),
    /// The node is down, hung, answers 5xx or something that is not the watch's answer.
    Transient {
        /// What happened (no token, no body beyond the error code).
        detail: String,
        /// The node's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },
}

/// What a request brought.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Events and the position after them.
    Answer(Answer),
    /// The position is gone.
    Gone(Gone),
    /// No answer.
    Failed(Failure),
}

/// What the watch does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Hand the answer to the replica and ask again at once; `recovered` is how many
    /// failures came before it (0: none).
    Apply {
        /// The answer, checked.
        answer: Answer,
        /// Failures in a row before this answer.
        recovered: u32,
    },
    /// Ask the node for a snapshot, then [`Watch::relisted`]; first pause this long (a 410
    /// right after a relist, or after a failure, is not answered by a burst of snapshots).
    Relist {
        /// What the node answered.
        gone: Gone,
        /// How long to wait first.
        pause: Duration,
    },
    /// Ask again after a pause.
    Retry(Retry),
    /// Stop the follower: asking again cannot help.
    Stop(String),
}

/// A failure to retry.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    /// What failed.
    pub detail: String,
    /// How long to wait before asking again.
    pub pause: Duration,
    /// Failures in a row, this one included.
    pub failures: u32,
}

/// Where one node's watch is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    /// The node, as the log and errors name it.
    url: String,
    /// Where the next request resumes; `None`: from the oldest event (a new replica).
    at: Option<WatchPosition>,
    /// Requests in a row that brought no answer (410s included).
    failures: u32,
}

impl Watch {
    /// A watch of the node at `url` resuming at `at` (from the replica file).
    pub fn new(url: &str, at: Option<WatchPosition>) -> Watch {
        Watch {
            url: url.to_owned(),
            at,
            failures: 0,
        }
    }

    /// Where the next request resumes.
    pub fn at(&self) -> Option<&WatchPosition> {
        self.at.as_ref()
    }

    /// The seq the next request asks to read after.
    pub fn after(&self) -> u64 {
        self.at.as_ref().map_or(0, |at| at.position)
    }

    /// What to do with `reply`.
    pub fn step(&mut self, reply: Reply) -> Step {
        match reply {
            Reply::Answer(answer) => match self.holds_together(&answer) {
                Ok(()) => {
                    let recovered = std::mem::take(&mut self.failures);
                    self.at = Some(WatchPosition {
                        position: answer.position,
                        incarnation: answer.incarnation.clone(),
                    });
                    Step::Apply { answer, recovered }
                }
                Err(detail) => self.retry(Failure::Transient {
                    detail,
                    retry_after: None,
                }),
            },
            Reply::Gone(gone) => {
                let pause = match self.failures {
                    0 => Duration::ZERO,
                    n => backoff(n),
                };
                self.failures += 1;
                Step::Relist { gone, pause }
            }
            Reply::Failed(failure) => self.retry(failure),
        }
    }

    fn retry(&mut self, failure: Failure) -> Step {
        match self.failed(failure) {
            Ok(retry) => Step::Retry(retry),
            Err(error) => Step::Stop(error),
        }
    }

    /// How to retry after `failure` (of a request for events or for a snapshot), or the
    /// error that stops the follower.
    pub fn failed(&mut self, failure: Failure) -> Result<Retry, String> {
        let (detail, retry_after) = match failure {
            Failure::Refused(status) => return Err(refused(&self.url, status)),
            Failure::Permanent(detail) => return Err(format!("{}: {detail}", self.url)),
            Failure::Transient {
                detail,
                retry_after,
            } => (detail, retry_after),
        };
        self.failures += 1;
        let asked = retry_after.unwrap_or_default().min(RETRY_AFTER_MAX);
        Ok(Retry {
            detail,
            pause: backoff(self.failures).max(asked),
            failures: self.failures,
        })
    }

    /// The node took the snapshot request that follows `gone`: resume from `oldest`.
    pub fn relisted(&mut self, gone: &Gone) -> WatchPosition {
        let at = WatchPosition {
            position: gone.oldest,
            incarnation: gone.incarnation.clone(),
        };
        self.at = Some(at.clone());
        at
    }

    /// Whether `answer` can follow the position asked: a node never serves a position
    /// behind the one asked in the same incarnation, nor one past its last seq.
    fn holds_together(&self, answer: &Answer) -> Result<(), String> {
        if answer.position > answer.latest {
            return Err(format!(
                "answered position {} past its latest {}",
                answer.position, answer.latest
            ));
        }
        match &self.at {
            Some(at) if at.incarnation == answer.incarnation && answer.position < at.position => {
                Err(format!(
                    "answered position {} behind the {} asked",
                    answer.position, at.position
                ))
            }
            _ => Ok(()),
        }
    }
}

/// The pause after `failures` failures in a row: [`RETRY_INITIAL`] doubled per failure up to
/// [`RETRY_MAX`], of which a random half (equal jitter).
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    let full = RETRY_INITIAL.saturating_mul(1 << doublings).min(RETRY_MAX);
    let half = full / 2;
    half + half.mul_f64(rand::random::<f64>())
}

/// The error of a refused token, naming the scope it needs.
fn refused(url: &str, status: StatusCode) -> String {
    let why = match status {
        StatusCode::FORBIDDEN => "the token lacks the scope events:read",
        _ => "the token is not valid there",
    };
    format!(
        "{url} refused the watch ({status}): {why}; follow http needs a token with \
         events:read (--token or ANKUSA_FOLLOW_TOKEN)"
    )
}
