//! What the bench prints: each part's runs or rounds as they end, then one table of the
//! figures the targets are judged by (medians over the runs or rounds), with each target and
//! whether it holds.

use crate::fanout::Point;
use crate::figures::{median, spread};
use crate::latency::{Run, Times};
use crate::memory::Phase;

/// A target's outcome.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Miss,
    /// A figure without a target, printed beside the others.
    Reported,
}

impl Verdict {
    fn of(holds: bool) -> Verdict {
        if holds {
            Verdict::Pass
        } else {
            Verdict::Miss
        }
    }

    fn text(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Miss => "MISS",
            Verdict::Reported => "-",
        }
    }
}

/// One line of the final table.
pub struct Row {
    figure: String,
    measured: String,
    baseline: String,
    ratio: String,
    target: &'static str,
    pub verdict: Verdict,
}

/// Part 1's header.
pub fn latency_header(rate: f64, kafka: &str, runs: usize, secs: f64) {
    println!(
        "part 1: commit to watcher beside commit to Kafka-confirmed ({kafka}), route changes at {rate:.0}/s (open loop), {runs} runs of {secs:.1} s; ms from each row's commit"
    );
    println!(
        "{:>4} {:>10} | {:>17} | {:>17} | {:>17} | {:>17}",
        "run",
        "answered/s",
        "answer p50/p99/max",
        "SSE p50/p99/max",
        "long-poll",
        "Kafka confirmed"
    );
}

/// One run of part 1: from the commit, then from just before the request.
pub fn latency_run(n: usize, r: &Run) {
    let three = |t: &Times| format!("{:.2}/{:.2}/{:.2}", t.p50, t.p99, t.max);
    println!(
        "{n:>4} {:>10.0} | {:>17} | {:>17} | {:>17} | {:>17}",
        r.answered_rate,
        three(&r.http),
        three(&r.stream),
        three(&r.long_poll),
        three(&r.kafka)
    );
    let sent = |t: &Times| format!("{:.2}/{:.2}", t.sent_p50, t.sent_p99);
    println!(
        "     from just before the request, p50/p99: answer {}, SSE {}, long-poll {}, Kafka {}",
        sent(&r.http),
        sent(&r.stream),
        sent(&r.long_poll),
        sent(&r.kafka)
    );
}

/// Part 1's rows: each watcher's p99 from the send against the target, Kafka's beside it.
pub fn latency_rows(runs: &[Run], rate: f64) -> Vec<Row> {
    let kafka = median(runs.iter().map(|r| r.kafka.p99).collect());
    let (klo, khi) = spread(&runs.iter().map(|r| r.kafka.p99).collect::<Vec<_>>());
    let row = |name: &str, of: fn(&Run) -> f64| {
        let p99s: Vec<f64> = runs.iter().map(of).collect();
        let (lo, hi) = spread(&p99s);
        let p99 = median(p99s);
        Row {
            figure: format!("commit->watcher p99 at {rate:.0}/s, {name}"),
            measured: format!("{p99:.2} ms ({lo:.2}-{hi:.2})"),
            baseline: format!("Kafka confirmed p99 {kafka:.2} ms ({klo:.2}-{khi:.2})"),
            ratio: format!(
                "{:.2}",
                median(runs.iter().map(|r| of(r) / r.kafka.p99).collect())
            ),
            target: "<= 5 ms",
            verdict: Verdict::of(p99 <= 5.0),
        }
    };
    vec![
        row("SSE", |r| r.stream.p99),
        row("long-poll", |r| r.long_poll.p99),
    ]
}

/// Part 2's header.
pub fn fanout_header(rounds: usize, writers: usize, secs: f64) {
    println!(
        "part 2: events served to caught-up SSE watchers, route changes from {writers} closed-loop connections, {rounds} rounds of {secs:.1} s per point"
    );
    println!(
        "{:>5} {:>8} {:>10} {:>14} {:>12} {:>10} {:>12} {:>12}",
        "round",
        "watchers",
        "changes/s",
        "delivered/s",
        "per watcher",
        "catch-up",
        "node us/ev",
        "client us/ev"
    );
}

/// Milliseconds, or `-` where there is no figure.
fn ms_or_dash(ms: f64) -> String {
    match ms.is_nan() {
        true => "-".into(),
        false => format!("{ms:.1}ms"),
    }
}

/// One point of part 2.
pub fn fanout_point(round: usize, p: &Point) {
    println!(
        "{round:>5} {:>8} {:>10.0} {:>14.0} {:>12.0} {:>10} {:>12.2} {:>12.2}",
        p.watchers,
        p.changes_rate,
        p.delivered_rate,
        p.delivered_rate / p.watchers.max(1) as f64,
        ms_or_dash(p.catch_up_ms),
        p.node_us,
        p.client_us
    );
}

/// A round of part 2: its points (no watcher first), and its bare scan's events/s.
pub struct Round {
    pub points: Vec<Point>,
    pub scan: f64,
}

impl Round {
    fn at(&self, watchers: usize) -> Option<&Point> {
        self.points.iter().find(|p| p.watchers == watchers)
    }

    /// The node's CPU time per event delivered to `watchers`, above what the same changes
    /// cost with no watcher: what watching itself costs, us.
    fn watch_us(&self, watchers: usize) -> f64 {
        match (self.at(0), self.at(watchers)) {
            (Some(none), Some(p)) => p.node_us - none.node_us / watchers as f64,
            _ => f64::NAN,
        }
    }
}

/// A round's bare scan and its ratios.
pub fn fanout_scan(round: usize, events: u64, r: &Round) {
    let ratios: Vec<String> = r
        .points
        .iter()
        .filter(|p| p.watchers > 0)
        .map(|p| {
            format!(
                "{:.3} at {} (watching {:.2} us/event)",
                p.delivered_rate / r.scan,
                p.watchers,
                r.watch_us(p.watchers)
            )
        })
        .collect();
    println!(
        "{round:>5} bare scan: {events} events, {:.0}/s ({:.2} us/event); delivered/bare: {}",
        r.scan,
        1e6 / r.scan,
        ratios.join(", ")
    );
}

/// Part 2's rows: delivered/bare at each watcher count (the target at `many`).
pub fn fanout_rows(rounds: &[Round], many: usize) -> Vec<Row> {
    let counts: Vec<usize> = rounds[0].points.iter().map(|p| p.watchers).collect();
    let scan = median(rounds.iter().map(|r| r.scan).collect());
    let mut rows = Vec::new();
    for w in counts.into_iter().filter(|w| *w > 0) {
        let of = |r: &Round| r.points.iter().find(|p| p.watchers == w).copied();
        let points: Vec<Point> = rounds.iter().filter_map(of).collect();
        let delivered = median(points.iter().map(|p| p.delivered_rate).collect());
        let ratios: Vec<f64> = rounds
            .iter()
            .filter_map(|r| Some(of(r)?.delivered_rate / r.scan))
            .collect();
        let (lo, hi) = spread(&ratios);
        let ratio = median(ratios);
        let (target, verdict) = match w == many {
            true => (">= 0.5", Verdict::of(ratio >= 0.5)),
            false => ("", Verdict::Reported),
        };
        if w == many {
            rows.push(watch_cpu_row(rounds, many));
        }
        rows.push(Row {
            figure: format!("events/s to {w} watcher(s), summed over them"),
            measured: format!("{delivered:.0}/s"),
            baseline: format!("bare outbox scan {scan:.0}/s"),
            ratio: format!("{ratio:.3} ({lo:.3}-{hi:.3})"),
            target,
            verdict,
        });
    }
    rows
}

/// What watching costs the node per event delivered to `many` watchers, beside the bare
/// scan's time per event: the rate the watch path would reach on the scan's CPU time, where
/// the delivered rate is bound by the changes the node takes.
fn watch_cpu_row(rounds: &[Round], many: usize) -> Row {
    let us = median(rounds.iter().map(|r| r.watch_us(many)).collect());
    let scan_us = median(rounds.iter().map(|r| 1e6 / r.scan).collect());
    Row {
        figure: format!("node CPU per event to {many} watchers, watching only"),
        measured: format!("{us:.2} us"),
        baseline: format!("bare scan {scan_us:.2} us/event"),
        ratio: format!("{:.2} (scan/watching)", scan_us / us),
        target: "",
        verdict: Verdict::Reported,
    }
}

/// Part 3's header.
pub fn memory_header(rate: f64, secs: f64) {
    println!(
        "part 3: RSS of the node as a process of its own; {} route changes (the watchers' tail filled), then SSE watchers caught up while route changes go at {rate:.0}/s for {secs:.1} s; MiB",
        crate::memory::FILL
    );
    println!(
        "{:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>8} {:>10} {:>12}",
        "watchers",
        "idle",
        "peak",
        "end",
        "peak-idle",
        "changes/s",
        "max lag",
        "catch-up",
        "node us/chg"
    );
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// One phase of part 3.
pub fn memory_phase(p: &Phase) {
    println!(
        "{:>8} {:>8.1} {:>8.1} {:>8.1} {:>10.1} {:>10.0} {:>8} {:>10} {:>12.1}",
        p.watchers,
        mib(p.idle),
        mib(p.peak),
        mib(p.end),
        mib(p.peak.saturating_sub(p.idle)),
        p.changes_rate,
        p.max_lag,
        ms_or_dash(p.catch_up_ms),
        p.node_us
    );
}

/// Part 3's row: the phase with watchers, its peak above its own idle; the phase without
/// watchers beside it.
pub fn memory_row(alone: Option<&Phase>, watched: &Phase) -> Row {
    let above = mib(watched.peak.saturating_sub(watched.idle));
    let alone = alone.map_or(String::new(), |a| {
        format!(", no watcher {:.1}", mib(a.peak.saturating_sub(a.idle)))
    });
    Row {
        figure: format!("peak RSS above idle, {} watchers", watched.watchers),
        measured: format!("{above:.1} MiB"),
        baseline: format!("idle {:.1} MiB{alone}", mib(watched.idle)),
        ratio: "-".into(),
        target: "<= 64 MiB",
        verdict: Verdict::of(above <= 64.0),
    }
}

/// The final table.
pub fn table(rows: &[Row]) {
    println!();
    println!("watch bench: the figures against their targets (medians of the runs or rounds, their range in brackets)");
    println!(
        "{:<48} {:>22}  {:<46} {:<22} {:<10} verdict",
        "figure", "measured", "baseline (same run)", "ratio", "target"
    );
    for r in rows {
        println!(
            "{:<48} {:>22}  {:<46} {:<22} {:<10} {}",
            r.figure,
            r.measured,
            r.baseline,
            r.ratio,
            r.target,
            r.verdict.text()
        );
    }
}
