//! What a measurement saw (rate, latency percentiles, failures), and medians over rounds.

use std::time::Duration;

use ankusa::telemetry::dual::{stage_total, Stage};

use crate::cpu::Cpu;

/// Failed requests: how many, and the first few answers, to print.
#[derive(Default)]
pub struct Failures {
    /// Every failure.
    pub count: u64,
    /// The first [`Failures::KEPT`] of them, as text.
    pub samples: Vec<String>,
}

impl Failures {
    const KEPT: usize = 5;

    /// Count one, keeping its text if few are kept yet.
    pub fn add(&mut self, what: String) {
        self.count += 1;
        if self.samples.len() < Self::KEPT {
            self.samples.push(what);
        }
    }

    /// Add `other`'s.
    pub fn merge(&mut self, other: Failures) {
        self.count += other.count;
        for s in other.samples {
            if self.samples.len() < Self::KEPT {
                self.samples.push(s);
            }
        }
    }
}

/// One measurement: a rate and its latencies' percentiles, in milliseconds.
pub struct Point {
    /// Successful changes (or batches) per second.
    pub rate: f64,
    pub p50: f64,
    pub p99: f64,
    /// CPU time of the process apart from the load generator, per change, in microseconds.
    pub cpu_us: f64,
    /// redis-server's CPU time per change, in microseconds (NaN: the point has no Redis).
    pub redis_us: f64,
    /// The load generator's CPU time per change, in microseconds: it shares the cores too.
    pub load_us: f64,
    /// A dual write's mean time in each [`Stage`], in milliseconds (NaN: none in the point).
    pub stages: [f64; 4],
    pub failures: Failures,
}

impl Point {
    /// The point of `latencies` (any order) over `elapsed`, which took `cpu` since `before`.
    pub fn of(
        mut latencies: Vec<Duration>,
        elapsed: Duration,
        cpu: (Option<Cpu>, Option<Cpu>),
        failures: Failures,
    ) -> Point {
        latencies.sort_unstable();
        let (cpu_us, load_us) = match cpu {
            (before, Some(after)) => after.split_since(before, latencies.len()),
            _ => (f64::NAN, f64::NAN),
        };
        Point {
            cpu_us,
            redis_us: f64::NAN,
            load_us,
            stages: [f64::NAN; 4],
            rate: latencies.len() as f64 / elapsed.as_secs_f64(),
            p50: percentile(&latencies, 0.50),
            p99: percentile(&latencies, 0.99),
            failures,
        }
    }
}

/// The time the node's dual writes have spent in each [`Stage`] so far, and how many did, read
/// from its metrics (the node runs in this process).
pub struct Stages([(f64, u64); 4]);

impl Stages {
    pub fn now() -> Stages {
        Stages(Stage::ALL.map(stage_total))
    }

    /// Each stage's mean since `self`, in milliseconds (NaN where none was timed).
    pub fn means_since(&self) -> [f64; 4] {
        let now = Stages::now();
        std::array::from_fn(|i| {
            let ((sum, n), (sum0, n0)) = (now.0[i], self.0[i]);
            match n - n0 {
                0 => f64::NAN,
                n => (sum - sum0) * 1000.0 / n as f64,
            }
        })
    }
}

/// The `p` percentile of sorted `latencies`, in milliseconds (NaN when there are none).
pub fn percentile(latencies: &[Duration], p: f64) -> f64 {
    crate::figures::percentile(latencies, p).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

pub use crate::figures::median;
