//! The rounds of a throughput comparison, and the lines that report them.

use crate::clock::Run;
use crate::figures::median;

/// Rounds of each throughput comparison (after a warm-up round): ours then the bare
/// baseline, back to back, so both of a round see the same machine; the median round's ratio
/// is reported.
pub const ROUNDS: usize = 5;

/// Each round's rates and their ratio, then the median ratio. Beside them, CPU time per
/// event and its ratio (bare over ours): on a busy two-core machine the steadier figure, and
/// the ratio the rates tend to when every core is busy.
pub fn report(what: &str, baseline: &str, rounds: &[(Run, Run)]) {
    for (i, (ours, bare)) in rounds.iter().enumerate() {
        println!(
            "{what:<13} round {}: ours {:>9.0} ev/s   {baseline} {:>9.0} ev/s   ratio {:.2}   cpu {:.1} vs {:.1} us/ev",
            i + 1,
            ours.rate,
            bare.rate,
            ours.rate / bare.rate,
            ours.cpu_us,
            bare.cpu_us,
        );
    }
    println!(
        "{what:<13} median ratio {:.2}   cpu per event, bare/ours: median {:.2}",
        median(rounds.iter().map(|(o, b)| o.rate / b.rate).collect()),
        median(rounds.iter().map(|(o, b)| b.cpu_us / o.cpu_us).collect()),
    );
}

/// Sink names of the rounds, a warm-up round first: each drains the whole backlog from
/// position 0.
pub fn round_sinks(kind: &str) -> Vec<String> {
    (0..=ROUNDS).map(|r| format!("{kind}-{r}")).collect()
}
