//! How far along a follower is: a status line on stderr when it is a terminal (redrawn every
//! second), else one log line every 30 seconds. Both read the follower's [`Metrics`], so the
//! line, the log and `/metrics` say the same.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use super::metrics::Metrics;

/// What one report says.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// Events applied by this process.
    pub applied: u64,
    /// Events read and found stale by this process.
    pub stale: u64,
    /// Subjects that exist in the replica.
    pub subjects: i64,
    /// Kafka: records not yet read, all partitions; http: seqs behind each node's latest,
    /// all nodes (`None` for a webhook receiver).
    pub behind_events: Option<i64>,
    /// Now minus the newest applied event's time (`None` before one was applied).
    pub behind_seconds: Option<f64>,
}

impl Status {
    /// The status now, from `metrics`; `counted` says whether events behind is known (Kafka
    /// and http count it, a webhook receiver cannot).
    pub fn now(metrics: &Metrics, counted: bool) -> Status {
        let now_ms = chrono::Utc::now().timestamp_millis();
        Status {
            applied: metrics.count("applied"),
            stale: metrics.count("stale"),
            subjects: metrics.subjects.with_label_values(&["present"]).get(),
            behind_events: counted.then(|| metrics.behind_events.get()),
            behind_seconds: metrics.seconds_behind(now_ms),
        }
    }

    /// The status line.
    pub fn line(&self) -> String {
        let behind = match self.behind_events {
            Some(n) => format!(", {n} events behind"),
            None => String::new(),
        };
        let seconds = match self.behind_seconds {
            Some(s) => format!(", {s:.1} s behind"),
            None => ", no event yet".to_owned(),
        };
        format!(
            "{} applied, {} stale, {} subjects{behind}{seconds}",
            self.applied, self.stale, self.subjects
        )
    }
}

/// Report progress until the task is dropped or aborted; `counted` as for [`Status::now`].
pub async fn report(metrics: Arc<Metrics>, counted: bool) {
    let terminal = std::io::stderr().is_terminal();
    let every = if terminal {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(30)
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let status = Status::now(&metrics, counted);
        if terminal {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{}", status.line());
            let _ = err.flush();
        } else {
            crate::telemetry::follow::progress(&status);
        }
    }
}

/// Clear the status line (at exit), when there is one.
pub fn clear() {
    if std::io::stderr().is_terminal() {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_applied_and_lag() {
        let status = Status {
            applied: 10,
            stale: 2,
            subjects: 7,
            behind_events: Some(40),
            behind_seconds: Some(1.25),
        };
        assert_eq!(
            status.line(),
            "10 applied, 2 stale, 7 subjects, 40 events behind, 1.2 s behind"
        );
        let webhook = Status {
            behind_events: None,
            behind_seconds: None,
            ..status
        };
        assert_eq!(
            webhook.line(),
            "10 applied, 2 stale, 7 subjects, no event yet"
        );
    }
}
