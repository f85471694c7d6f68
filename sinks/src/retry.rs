//! How long the publisher waits before it tries a sink again after a `Retry` outcome.
//!
//! Sinks make one attempt per call and never sleep; the waiting is the publisher's, so that it
//! can stop, persist positions and report while it waits. This module only computes the delay:
//! exponential backoff with *full jitter* (a uniform draw in `[0, ceiling]`, the AWS
//! "Exponential Backoff and Jitter" scheme), so that many retrying publishers, or many events
//! failing at once, do not hammer a recovering destination in lockstep. A destination's own
//! `Retry-After` wins over the schedule, but is clamped: a receiver must not be able to park a
//! sink for a day, nor spin it with `Retry-After: 0`.

use std::time::Duration;

use rand::Rng;
use serde::Deserialize;

use crate::SinkError;

/// The retry schedule of one sink (config key `retry` of every sink).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Ceiling of the first retry's delay; it doubles on every further attempt.
    /// Default `200ms`.
    #[serde(with = "humantime_serde", default = "default_initial")]
    pub initial: Duration,
    /// The ceiling never grows past this. Default `1m`.
    #[serde(with = "humantime_serde", default = "default_max")]
    pub max: Duration,
    /// The longest `Retry-After` a destination may impose; longer wishes are clamped to it.
    /// Default `5m`.
    #[serde(with = "humantime_serde", default = "default_max_retry_after")]
    pub max_retry_after: Duration,
}

fn default_initial() -> Duration {
    Duration::from_millis(200)
}

fn default_max() -> Duration {
    Duration::from_secs(60)
}

fn default_max_retry_after() -> Duration {
    Duration::from_secs(300)
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial: default_initial(),
            max: default_max(),
            max_retry_after: default_max_retry_after(),
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `attempt` (0 for the first retry after a failure).
    ///
    /// With a destination's `retry_after`, that wish clamped into `[initial, max_retry_after]`;
    /// otherwise a uniform draw in `[0, ceiling(attempt)]` (full jitter).
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(wish) = retry_after {
            return self.clamp_retry_after(wish);
        }
        let ceiling = u64::try_from(self.ceiling(attempt).as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rand::rng().random_range(0..=ceiling))
    }

    /// The upper bound of the jittered delay for `attempt`: `initial * 2^attempt`, capped at
    /// `max`. Non-decreasing in `attempt`, and never overflows.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.initial
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
            .min(self.max)
    }

    /// A destination's `Retry-After`, clamped into `[initial, max_retry_after]`.
    pub fn clamp_retry_after(&self, wish: Duration) -> Duration {
        wish.min(self.max_retry_after).max(self.initial)
    }

    /// Checks the policy; `prefix` names where it sits in the config (`retry`).
    pub fn validate(&self, prefix: &str) -> Result<(), SinkError> {
        if self.initial.is_zero() {
            return Err(SinkError::Config(format!("{prefix}.initial must be > 0")));
        }
        if self.max < self.initial {
            return Err(SinkError::Config(format!(
                "{prefix}.max must be >= {prefix}.initial"
            )));
        }
        if self.max_retry_after < self.initial {
            return Err(SinkError::Config(format!(
                "{prefix}.max_retry_after must be >= {prefix}.initial"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(30),
        }
    }

    #[test]
    fn jittered_delay_stays_within_the_ceiling() {
        let p = policy();
        for attempt in 0..20 {
            let ceiling = p.ceiling(attempt);
            for _ in 0..200 {
                assert!(p.delay(attempt, None) <= ceiling, "attempt {attempt}");
            }
        }
        assert_eq!(p.ceiling(0), Duration::from_millis(100));
        assert_eq!(p.ceiling(3), Duration::from_millis(800));
        assert_eq!(p.ceiling(7), Duration::from_secs(10));
    }

    #[test]
    fn jitter_spreads_the_delays() {
        let p = policy();
        let draws: Vec<Duration> = (0..100).map(|_| p.delay(6, None)).collect();
        let min = draws.iter().min().unwrap();
        let max = draws.iter().max().unwrap();
        // 100 uniform draws in [0, 6.4s]: all equal, or all in one tenth, would be a bug.
        assert!(*max - *min > Duration::from_millis(640), "{min:?}..{max:?}");
    }

    #[test]
    fn ceiling_is_monotone_and_capped_without_overflow() {
        let p = policy();
        let mut previous = Duration::ZERO;
        for attempt in 0..=u32::from(u16::MAX) {
            let c = p.ceiling(attempt);
            assert!(c >= previous, "attempt {attempt}");
            assert!(c <= p.max, "attempt {attempt}");
            previous = c;
        }
        assert_eq!(p.ceiling(u32::MAX), p.max);
    }

    #[test]
    fn retry_after_is_honoured_and_clamped() {
        let p = policy();
        assert_eq!(
            p.delay(0, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(
            p.delay(9, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(
            p.delay(0, Some(Duration::from_secs(3600))),
            Duration::from_secs(30)
        );
        assert_eq!(p.delay(0, Some(Duration::ZERO)), Duration::from_millis(100));
    }

    #[test]
    fn validation_names_the_field() {
        let mut p = policy();
        p.max = Duration::from_millis(1);
        let err = p.validate("retry").unwrap_err().to_string();
        assert!(err.contains("retry.max"), "{err}");
        p = policy();
        p.initial = Duration::ZERO;
        let err = p.validate("retry").unwrap_err().to_string();
        assert!(err.contains("retry.initial"), "{err}");
        assert!(policy().validate("retry").is_ok());
    }
}
