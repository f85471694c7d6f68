//! The `webhook-id`s a follower has applied lately, so that a signed message is applied at
//! most once (Standard Webhooks: receivers dedupe on `webhook-id`).
//!
//! A message is accepted while its timestamp is within [`TOLERANCE_SECS`] of now, so an id
//! needs keeping for twice that after it was applied. The set is bounded: past [`CAPACITY`]
//! the oldest ids go early. A message replayed after its id went is still a no-op, since
//! its events are exactly those applied (the signature covers them) and the contract's rule
//! takes an event only once.

use std::collections::{HashSet, VecDeque};

use super::signature::TOLERANCE_SECS;

/// How long an id is kept, in seconds.
const WINDOW_SECS: i64 = 2 * TOLERANCE_SECS;
/// The most ids kept (about 10 MB).
pub const CAPACITY: usize = 100_000;

/// Recently applied ids, oldest first.
#[derive(Debug, Default)]
pub struct Seen {
    ids: HashSet<String>,
    order: VecDeque<(i64, String)>,
}

impl Seen {
    /// Whether `id` was applied within the window before `now` (unix seconds).
    pub fn contains(&mut self, id: &str, now: i64) -> bool {
        self.expire(now);
        self.ids.contains(id)
    }

    /// Remember that `id` was applied at `now`.
    pub fn insert(&mut self, id: &str, now: i64) {
        self.expire(now);
        if self.ids.contains(id) {
            return;
        }
        while self.order.len() >= CAPACITY {
            self.pop();
        }
        self.ids.insert(id.to_owned());
        self.order.push_back((now, id.to_owned()));
    }

    fn expire(&mut self, now: i64) {
        while self
            .order
            .front()
            .is_some_and(|(at, _)| now - at > WINDOW_SECS)
        {
            self.pop();
        }
    }

    fn pop(&mut self) {
        if let Some((_, id)) = self.order.pop_front() {
            self.ids.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_kept_for_the_window_then_forgotten() {
        let mut seen = Seen::default();
        assert!(!seen.contains("a", 1000));
        seen.insert("a", 1000);
        seen.insert("a", 1100);
        assert!(seen.contains("a", 1000 + WINDOW_SECS));
        assert!(!seen.contains("a", 1001 + WINDOW_SECS));
        assert!(seen.order.is_empty() && seen.ids.is_empty());
    }

    #[test]
    fn past_capacity_the_oldest_go_first() {
        let mut seen = Seen::default();
        for i in 0..=CAPACITY {
            seen.insert(&i.to_string(), 5);
        }
        assert_eq!(seen.ids.len(), CAPACITY);
        assert!(!seen.contains("0", 5));
        assert!(seen.contains("1", 5));
        assert!(seen.contains(&CAPACITY.to_string(), 5));
    }
}
