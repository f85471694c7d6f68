//! One delivery attempt of a lane, and what its outcomes come to.
//!
//! A sink answers an attempt with one outcome per event, in order. The lane reads them oldest
//! first and moves its position over the events delivered or refused for good (dead-lettered)
//! up to the first that failed: never over a gap, so the position is always the highest
//! *contiguous* confirmed seq. An event refused for good when the sink's dead letters are
//! full is a failure too: it is not passed over without its dead letter.

use std::time::{Duration, Instant};

use ankusa_sinks::Outcome;
use futures::future::BoxFuture;

use super::reader::Page;
use crate::lifecycle::dead_letters;
use crate::store::Entry;
use crate::telemetry;

/// One attempt under way: its page and its outcomes to come.
pub(super) struct Attempt {
    /// The page handed over.
    pub(super) page: Page,
    /// Exactly one outcome per event of the page, in order.
    pub(super) outcomes: BoxFuture<'static, Vec<Outcome>>,
    /// Whether the sink let the next attempt be submitted before these outcomes are known.
    pub(super) open: bool,
    /// When the page was handed over.
    pub(super) started: Instant,
}

/// What failed an attempt short of its last event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Failure {
    /// A passing failure: start again from the position, not before the destination's wish.
    Retry(Option<Duration>, String),
    /// The destination is gone (a 410): the sink stops at its position.
    Disabled(String),
    /// An event refused for good, with no room for its dead letter: the sink stops before
    /// it, retrying, until an operator removes dead letters.
    DeadLettersFull,
}

/// What an attempt's outcomes come to, read in order up to the first failure.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Tally {
    /// The position after them: the last event delivered or dead-lettered before the first
    /// failure, or, with no failure, the last seq the page covers.
    pub(super) to: u64,
    /// The dead letters of the events refused for good, written with the position.
    pub(super) dead: Vec<Entry>,
    /// How many events were delivered.
    pub(super) delivered: u64,
    /// What stopped the attempt short, if anything did.
    pub(super) failure: Option<Failure>,
}

/// Read sink `sink`'s outcomes of `page`, in order, from `position`: the position moves over
/// delivered and dead-lettered events up to the first that failed, dead-lettering at most
/// `room` (the first refused one beyond it fails the attempt).
pub(super) fn tally(
    sink: &str,
    position: u64,
    room: u64,
    page: &Page,
    outcomes: &[Outcome],
) -> Tally {
    let mut tally = Tally {
        to: position,
        dead: Vec::new(),
        delivered: 0,
        failure: None,
    };
    for (i, d) in page.deliveries.iter().enumerate() {
        match outcomes.get(i) {
            Some(Outcome::Delivered) => tally.delivered += 1,
            Some(Outcome::Rejected { reason }) if tally.dead.len() as u64 >= room => {
                telemetry::lifecycle::refused_for_good(sink, d.seq, reason, false);
                tally.failure = Some(Failure::DeadLettersFull);
                break;
            }
            Some(Outcome::Rejected { reason }) => {
                telemetry::lifecycle::refused_for_good(sink, d.seq, reason, true);
                let letter = dead_letters::encode(sink, d, reason, page.ats[i]);
                tally.dead.push(letter);
            }
            Some(Outcome::Retry { after, reason }) => {
                tally.failure = Some(Failure::Retry(*after, reason.clone()));
                break;
            }
            Some(Outcome::Disabled { reason }) => {
                tally.failure = Some(Failure::Disabled(reason.clone()));
                break;
            }
            None => {
                let reason = "sink returned too few outcomes".into();
                tally.failure = Some(Failure::Retry(None, reason));
                break;
            }
        }
        tally.to = d.seq;
    }
    if tally.failure.is_none() {
        // Rows of the page whose events could not be built are passed over too.
        tally.to = tally.to.max(page.last.unwrap_or(tally.to));
    }
    tally
}
