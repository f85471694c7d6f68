//! The throughput points of every round, the table of their medians, and the ratios
//! (each computed within a round, then the median of the rounds).

use std::collections::BTreeMap;

use ankusa::telemetry::dual::Stage;

use crate::changes::Kind;
use crate::closed::Turn;
use crate::stats::{median, Failures, Point};
use crate::CONNS;

/// What a throughput point measures.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Series {
    Override,
    Source,
    RouteMemory,
    RouteRedis,
    Raw,
}

impl Series {
    /// Every series, in the order a round measures them.
    pub const ALL: [Series; 5] = [
        Series::Raw,
        Series::Override,
        Series::Source,
        Series::RouteMemory,
        Series::RouteRedis,
    ];

    /// The series a short name (`override`, `source`, `route`, `route-redis`, `raw`) names.
    pub fn parse(name: &str) -> Option<Series> {
        Series::ALL.into_iter().find(|s| s.short() == name)
    }

    /// Every short name, for an error.
    pub fn names() -> String {
        Series::ALL.map(Series::short).join(", ")
    }

    fn short(self) -> &'static str {
        match self {
            Series::Override => "override",
            Series::Source => "source",
            Series::RouteMemory => "route",
            Series::RouteRedis => "route-redis",
            Series::Raw => "raw",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Series::Override => "override",
            Series::Source => "source",
            Series::RouteMemory => "route (memory)",
            Series::RouteRedis => "route (redis)",
            Series::Raw => "raw synced batch",
        }
    }
}

/// Every point, by series and connections, one per round in round order.
#[derive(Default)]
pub struct Table {
    points: BTreeMap<(Series, usize), Vec<Point>>,
}

impl Table {
    /// Record (and print) round `round`'s point of `series` at `n` connections.
    pub fn add(&mut self, round: usize, series: Series, n: usize, point: Point) {
        println!(
            "round {round} {n:>3} conns {:<17} {:>9.0}/s  p50 {:>7.2} ms  p99 {:>7.2} ms  cpu {:>6.0} us{}{}{}",
            series.name(),
            point.rate,
            point.p50,
            point.p99,
            point.cpu_us,
            redis_cpu(point.redis_us),
            stages(&point.stages),
            failed(&point.failures)
        );
        self.points.entry((series, n)).or_default().push(point);
    }

    fn rounds(&self, series: Series, n: usize) -> &[Point] {
        self.points.get(&(series, n)).map_or(&[], Vec::as_slice)
    }

    /// `f(round's a, round's b)` for every round, and their median.
    fn paired(&self, a: (Series, usize), b: (Series, usize)) -> (Vec<f64>, f64) {
        let ratios: Vec<f64> = self
            .rounds(a.0, a.1)
            .iter()
            .zip(self.rounds(b.0, b.1))
            .map(|(a, b)| a.rate / b.rate)
            .collect();
        let m = median(ratios.clone());
        (ratios, m)
    }

    /// The table of medians, then the ratios.
    pub fn print(&self) {
        println!();
        println!(
            "{:>5}  {:<17} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "conns",
            "change",
            "changes/s",
            "p50 ms",
            "p99 ms",
            "cpu us",
            "redis us",
            "load us",
            "vs raw"
        );
        for n in CONNS {
            for series in Series::ALL
                .into_iter()
                .filter(|s| *s != Series::Raw)
                .chain([Series::Raw])
            {
                let points = self.rounds(series, n);
                let of = |f: fn(&Point) -> f64| median(points.iter().map(f).collect());
                let (_, vs_raw) = self.paired((series, n), (Series::Raw, n));
                println!(
                    "{n:>5}  {:<17} {:>10.0} {:>8.2} {:>8.2} {:>8.0} {:>8} {:>8} {:>8.2}",
                    series.name(),
                    of(|p| p.rate),
                    of(|p| p.p50),
                    of(|p| p.p99),
                    of(|p| p.cpu_us),
                    micros(of(|p| p.redis_us)),
                    micros(of(|p| p.load_us)),
                    vs_raw
                );
            }
        }
        println!("(medians of the rounds; cpu: the process's CPU time per change apart from the load generator's threads; redis: redis-server's CPU time per change; load: the load generator's, which shares the cores too (for raw, nothing); vs raw: the median of each round's ratio to raw synced batches at the same concurrency)");
        self.print_stages();
        for (store, route) in [
            ("memory", Series::RouteMemory),
            ("redis", Series::RouteRedis),
        ] {
            self.ratio(
                &format!("route ({store}) at 64 / override at 64"),
                (route, 64),
                (Series::Override, 64),
                Some(0.8),
            );
            self.ratio(
                &format!("route ({store}) at 64 / route at 1"),
                (route, 64),
                (route, 1),
                Some(10.0),
            );
        }
        // The same change as a route's with one synced batch less (a source is committed in
        // one): what a dual write's second synced step costs, as a rate.
        self.ratio(
            "route (memory) at 64 / source at 64",
            (Series::RouteMemory, 64),
            (Series::Source, 64),
            None,
        );
    }

    /// Where a route change's time goes: the mean of each dual-write stage, per point.
    fn print_stages(&self) {
        println!();
        println!(
            "{:>5}  {:<17} {:>8} {:>8} {:>8} {:>8}",
            "conns", "route change", "read ms", "begin ms", "store ms", "finish ms"
        );
        for n in CONNS {
            for series in [Series::RouteMemory, Series::RouteRedis] {
                let points = self.rounds(series, n);
                let of = |i: usize| median(points.iter().map(|p| p.stages[i]).collect());
                println!(
                    "{n:>5}  {:<17} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                    series.name(),
                    of(0),
                    of(1),
                    of(2),
                    of(3)
                );
            }
        }
        println!("(medians of the rounds of each stage's mean, from the node's ankusa_audit_dual_write_seconds: read and store are the route store's round trips, begin and finish the waits for the pending row and the row to be synced)");
    }

    fn ratio(&self, what: &str, a: (Series, usize), b: (Series, usize), target: Option<f64>) {
        let (rounds, m) = self.paired(a, b);
        print_ratio(what, &rounds, m, target);
    }

    /// The highest median route rate (memory store) over the concurrencies.
    pub fn max_route_rate(&self) -> f64 {
        CONNS
            .iter()
            .map(|n| {
                median(
                    self.rounds(Series::RouteMemory, *n)
                        .iter()
                        .map(|p| p.rate)
                        .collect(),
                )
            })
            .fold(0.0, f64::max)
    }

    /// Every point's failures.
    pub fn failures(&mut self) -> Failures {
        let mut all = Failures::default();
        for p in self.points.values_mut().flatten() {
            all.merge(std::mem::take(&mut p.failures));
        }
        all
    }
}

/// One ratio: its median, every round's value, and whether it meets `target`.
fn print_ratio(what: &str, rounds: &[f64], median: f64, target: Option<f64>) {
    let rounds: Vec<String> = rounds.iter().map(|r| format!("{r:.2}")).collect();
    let verdict = match target {
        Some(t) => format!(
            "; target >= {t}: {}",
            if median >= t { "met" } else { "not met" }
        ),
        None => String::new(),
    };
    println!(
        "{what:<49} {median:>6.2} (rounds {}{verdict})",
        rounds.join(", ")
    );
}

/// `"  FAILED: n"` after a figure whose measurement had failures, else nothing.
pub fn failed(failures: &Failures) -> String {
    if failures.count == 0 {
        String::new()
    } else {
        format!("  FAILED: {} failures", failures.count)
    }
}

/// A pair of sides measured taking turns on one node (`closed::interleaved`), and the ratio
/// of their rates the issue sets a target for.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Pair {
    /// Override and route changes, 64 connections each: route / override.
    RouteOverride,
    /// Route changes from 64 connections and from 1: 64 / 1.
    RouteScale,
}

impl Pair {
    /// Every pair, in the order a round measures them.
    pub const ALL: [Pair; 2] = [Pair::RouteOverride, Pair::RouteScale];

    /// The pair `ANKUSA_BENCH_POINT` names (`mixed`, `scale`), and its route store (`-redis`:
    /// Redis).
    pub fn parse(name: &str) -> Option<(Pair, &'static str)> {
        let (pair, store) = match name.strip_suffix("-redis") {
            Some(pair) => (pair, "redis"),
            None => (name, "memory"),
        };
        let pair = match pair {
            "mixed" => Pair::RouteOverride,
            "scale" => Pair::RouteScale,
            _ => return None,
        };
        Some((pair, store))
    }

    /// Its two sides, in the order they take turns (override first, as the pair was first
    /// measured).
    pub fn sides(self) -> [Turn; 2] {
        let route = |conns| Turn {
            kind: Kind::Route,
            conns,
        };
        match self {
            Pair::RouteOverride => [
                Turn {
                    kind: Kind::Override,
                    conns: 64,
                },
                route(64),
            ],
            Pair::RouteScale => [route(64), route(1)],
        }
    }

    /// Its sides' names, in the order of [`Pair::sides`].
    pub fn names(self) -> [String; 2] {
        self.sides().map(Turn::name)
    }

    /// Which side the target is about: the ratio is its rate over the other's.
    fn measured(self) -> usize {
        match self {
            Pair::RouteOverride => 1,
            Pair::RouteScale => 0,
        }
    }

    /// The ratio the target is for, of the sides' rates.
    pub fn ratio(self, rates: [f64; 2]) -> f64 {
        let m = self.measured();
        rates[m] / rates[1 - m]
    }

    /// The ratio's name: `route at 64 / override at 64`.
    pub fn ratio_name(self) -> String {
        let (names, m) = (self.names(), self.measured());
        format!("{} / {}", names[m], names[1 - m])
    }

    /// The target for the ratio.
    pub fn target(self) -> f64 {
        match self {
            Pair::RouteOverride => 0.8,
            Pair::RouteScale => 10.0,
        }
    }
}

/// The measurements taking turns, per pair and route store, one per round.
#[derive(Default)]
pub struct Mixed {
    /// Per pair and store: each round's rates of its sides.
    rounds: BTreeMap<(Pair, &'static str), Vec<[f64; 2]>>,
    failures: Failures,
}

impl Mixed {
    /// Record (and print) round `round`'s points of `pair` with route store `store`.
    pub fn add(&mut self, round: usize, pair: Pair, store: &'static str, points: [Point; 2]) {
        for (what, p) in pair.names().iter().zip(&points) {
            println!(
                "round {round} {what:<14} taking turns, route store {store:<6} {:>9.0}/s  p50 {:>7.2} ms  p99 {:>7.2} ms{}",
                p.rate,
                p.p50,
                p.p99,
                failed(&p.failures)
            );
        }
        self.rounds
            .entry((pair, store))
            .or_default()
            .push(points.each_ref().map(|p| p.rate));
        for p in points {
            self.failures.merge(p.failures);
        }
    }

    /// Each pair's ratio per store, per round and their median.
    pub fn print(&self) {
        for ((pair, store), rounds) in &self.rounds {
            let ratios: Vec<f64> = rounds.iter().map(|rates| pair.ratio(*rates)).collect();
            let what = format!("{} ({store}), taking turns", pair.ratio_name());
            print_ratio(&what, &ratios, median(ratios.clone()), Some(pair.target()));
        }
    }

    /// Every measurement's failures.
    pub fn failures(&mut self) -> Failures {
        std::mem::take(&mut self.failures)
    }
}

/// A table cell of microseconds, `-` where the point has no such figure.
pub fn micros(us: f64) -> String {
    if us.is_nan() {
        "-".to_owned()
    } else {
        format!("{us:.0}")
    }
}

/// A point's redis-server CPU per change, for its round line (nothing where it has no Redis).
pub fn redis_cpu(us: f64) -> String {
    if us.is_nan() {
        String::new()
    } else {
        format!(" + redis {us:.0} us")
    }
}

/// A point's stages for its line: `read 0.63 begin 1.47 store 0.76 finish 1.55 ms` (nothing
/// where it made no dual write).
pub fn stages(means: &[f64; 4]) -> String {
    if means.iter().all(|m| m.is_nan()) {
        return String::new();
    }
    let each: Vec<String> = Stage::ALL
        .iter()
        .zip(means)
        .map(|(s, m)| format!("{} {m:.2}", s.label()))
        .collect();
    format!("; stages {} ms", each.join(" "))
}
