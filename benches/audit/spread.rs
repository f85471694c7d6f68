//! The trail the queries run on: rows spread the way a busy node's are, with the three things
//! an auditor asks about planted at known places, so that both ways of answering can be
//! checked against exact counts.
//!
//! - Actors: a fifth of the rows are `system`'s, a sixth an automation token's, the rest
//!   spread over 5,000 tokens (about 130 rows each); [`ACTOR`] has exactly 1,000, evenly
//!   spread from the first row to the last (so a scan cannot stop early).
//! - Subjects: 50,000 across five kinds and 500 tenants, each with a history of about 20
//!   rows; [`SUBJECT`] has exactly [`SUBJECT_ROWS`].
//! - Time: rows 0 to 7.2 s apart (3.6 s on average: about 1,000 rows an hour), so that a
//!   million rows span some 42 days and one hour is a thousandth of them. The hour asked
//!   about starts at the middle row.
//! - Results: 1% failed, 0.2% interrupted.
//!
//! Rows are the size of a real one (about 430 bytes, [`rows::source_row`] reshaped) and
//! carry no outbox entity: the queries read rows and index entries only.

use ankusa::audit::{Filter, Row, RowResult};

use crate::rows;

/// The actor whose rows are asked for: exactly 1,000 of them.
pub const ACTOR: &str = "token-auditee";
/// Rows of [`ACTOR`].
pub const ACTOR_ROWS: u64 = 1_000;
/// The subject whose history is asked for.
pub const SUBJECT: &str = "routes/tenant-0042/checkout-webhook";
/// Rows of [`SUBJECT`].
pub const SUBJECT_ROWS: u64 = 250;
/// One hour, in ms.
pub const HOUR_MS: u64 = 3_600_000;

/// Each kind's resource prefix and the noun its actions start with.
const KINDS: [(&str, &str); 5] = [
    ("sources", "source"),
    ("routes", "route"),
    ("overrides", "override"),
    ("quarantine", "quarantine"),
    ("replay", "replay"),
];
const VERBS: [&str; 5] = ["create", "update", "update", "update", "delete"];
const SUBJECTS: u64 = 50_000;
const TENANTS: u64 = 500;
const TOKENS: u64 = 5_000;
/// The largest gap between two rows' commit times.
const MAX_GAP_MS: u64 = 7_200;

/// The rows of a trail of `n`, made in seq order, and what the queries should find.
pub struct Spread {
    n: u64,
    state: u64,
    at: u64,
    /// Rows made so far with the newest `at` (a gap may be 0).
    same_at: u64,
    /// Where the hour asked about starts (the middle row's `at`), once made.
    pub hour_from: Option<u64>,
    /// Rows made within that hour.
    pub hour_rows: u64,
}

impl Spread {
    /// A spread of `n` rows (at least [`ACTOR_ROWS`]), the newest about now.
    pub fn new(n: u64, now_ms: u64) -> Spread {
        assert!(n >= ACTOR_ROWS, "the trail holds the actor's 1,000 rows");
        Spread {
            n,
            state: 0x5eed_a0d1_7000_0051,
            at: now_ms.saturating_sub(n * MAX_GAP_MS / 2),
            same_at: 0,
            hour_from: None,
            hour_rows: 0,
        }
    }

    /// Row `seq` (called for 1, 2, ... in order).
    pub fn row(&mut self, seq: u64) -> Row {
        let gap = self.next() % (MAX_GAP_MS + 1);
        self.at += gap;
        self.same_at = if gap == 0 { self.same_at + 1 } else { 1 };
        if seq == self.n / 2 {
            // The hour holds the rows before this one that share its `at` too.
            self.hour_from = Some(self.at);
            self.hour_rows = self.same_at;
        } else if self.hour_from.is_some_and(|from| self.at < from + HOUR_MS) {
            self.hour_rows += 1;
        }
        let (r, s) = (self.next(), self.next());
        let subject = s % SUBJECTS;
        let tenant = format!("tenant-{:04}", subject % TENANTS);
        let (kind, noun) = KINDS[(subject % 5) as usize];
        let mut row = rows::source_row(seq, self.at, "");
        row.resource = format!("{kind}/{tenant}/s-{subject:05}");
        row.action = format!("{noun}.{}", VERBS[((r >> 16) % 5) as usize]);
        row.actor = match r % 60 {
            0..12 => "system".into(),
            12..22 => "ops-automation".into(),
            _ => format!("token-{:04}", (r >> 8) % TOKENS),
        };
        row.result = match (r >> 32) % 1000 {
            0..10 => RowResult::Failed,
            10..12 => RowResult::Interrupted,
            _ => RowResult::Ok,
        };
        row.tenant = Some(tenant);
        row.publish = false;
        let every = self.n / ACTOR_ROWS;
        if (seq - 1).is_multiple_of(every) && (seq - 1) / every < ACTOR_ROWS {
            row.actor = ACTOR.into();
        }
        let every = self.n / SUBJECT_ROWS;
        if (seq - 1) % every == every / 2 && (seq - 1) / every < SUBJECT_ROWS {
            row.resource = SUBJECT.into();
            row.tenant = Some("tenant-0042".into());
            row.action = "route.update".into();
        }
        row
    }

    /// The three questions, each with how many rows answer it.
    pub fn questions(&self) -> Vec<(&'static str, Filter, u64)> {
        let from = self.hour_from.expect("the trail was made");
        vec![
            (
                "one actor",
                Filter {
                    actor: Some(ACTOR.into()),
                    ..Filter::default()
                },
                ACTOR_ROWS,
            ),
            (
                "one subject",
                Filter {
                    subject: Some(SUBJECT.into()),
                    ..Filter::default()
                },
                SUBJECT_ROWS,
            ),
            (
                "one hour",
                Filter {
                    from: Some(from),
                    until: Some(from + HOUR_MS),
                    ..Filter::default()
                },
                self.hour_rows,
            ),
        ]
    }

    /// splitmix64: deterministic, so every run builds the same trail.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
