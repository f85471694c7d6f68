//! What the index entries cost the commits: `Trail::commit` (as the commit bench drives it)
//! on a trail writing them beside one that does not (`TrailOptions::bench_without_index`,
//! which only this bench sets), both open at once and taking turns every 200 ms
//! (`committers::interleaved`), at 1, 8 and 64 committers.

use std::sync::Arc;
use std::time::Duration;

use ankusa::audit::{SystemClock, Trail, TrailOptions};

use crate::committers::{interleaved, Ours};
use crate::figures::{median, spread};

/// Rounds per concurrency.
const ROUNDS: usize = 3;

/// A trail on a fresh store in `dir`, with or without index entries.
fn open(dir: &std::path::Path, without_index: bool) -> Trail {
    let store = ankusa::store::Store::open(dir).unwrap();
    let options = TrailOptions {
        bench_without_index: without_index,
        ..TrailOptions::default()
    };
    Trail::start(store, options, Arc::new(SystemClock)).unwrap()
}

/// Every round at 1, 8 and 64 committers, then the median of with / without per concurrency
/// (target >= 0.9); each ratio's median, by concurrency.
pub fn run(run_for: Duration) -> Vec<(usize, f64)> {
    println!(
        "commits with index entries beside without, interleaved, {ROUNDS} rounds of {} s each:",
        run_for.as_secs()
    );
    println!(
        "{:>11} {:>10} {:>10} {:>9} {:>8} {:>8} {:>11}",
        "committers", "with/s", "without/s", "with/out", "with us", "out us", "cpu out/with"
    );
    let mut medians = vec![];
    for n in [1usize, 8, 64] {
        let mut rounds: Vec<(Ours, Ours)> = vec![];
        for round in 1..=ROUNDS {
            let (with, without) = interleaved(n, run_for, |dir, side| open(dir, side == 1));
            println!(
                "{n:>11} {:>10.0} {:>10.0} {:>9.2} {:>8.1} {:>8.1} {:>11.2}   round {round}",
                with.rate,
                without.rate,
                with.rate / without.rate,
                with.cpu_us,
                without.cpu_us,
                without.cpu_us / with.cpu_us
            );
            rounds.push((with, without));
        }
        let ratios: Vec<f64> = rounds.iter().map(|(w, o)| w.rate / o.rate).collect();
        let cpu: Vec<f64> = rounds.iter().map(|(w, o)| o.cpu_us / w.cpu_us).collect();
        let ((lo, hi), (clo, chi)) = (spread(&ratios), spread(&cpu));
        let (ratio, rate) = (
            median(ratios),
            median(rounds.iter().map(|r| r.0.rate).collect()),
        );
        println!(
            "{n:>11} median: with/without {ratio:.2} ({lo:.2}-{hi:.2}), {rate:.0} commits/s \
             with; cpu without/with {:.2} ({clo:.2}-{chi:.2}) (target >= 0.9)",
            median(cpu)
        );
        medians.push((n, ratio));
    }
    medians
}
