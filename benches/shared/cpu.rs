//! CPU time of this process, and of a load generator's threads in it, from Linux's `/proc`:
//! what the node spent per change, apart from a generator that shares the two cores with it.
//! On a busy machine the rates swing with the neighbours and the disk; CPU per change is the
//! steadier figure.

// Each bench includes this file and uses some of it.
#![allow(dead_code)]

use std::time::Duration;

/// Linux's `USER_HZ`: `/proc` counts CPU time in ticks of 10 ms.
const TICK: Duration = Duration::from_millis(10);

/// The process's CPU time (every thread, exited ones too) and that of the threads whose
/// name starts with the generator's prefix (the load generator's runtime names its threads
/// so).
#[derive(Clone, Copy)]
pub struct Cpu {
    process: u64,
    generator: u64,
}

impl Cpu {
    /// Now, or `None` where there is no `/proc`; `generator`: the name prefix of the threads
    /// not to count (`None`: count every thread).
    pub fn now(generator: Option<&str>) -> Option<Cpu> {
        let process = ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        let Some(prefix) = generator else {
            return Some(Cpu {
                process,
                generator: 0,
            });
        };
        let mut generator = 0;
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue; // It exited meanwhile.
            };
            if comm(&stat).is_some_and(|c| c.starts_with(prefix)) {
                generator += ticks(&stat).unwrap_or(0);
            }
        }
        Some(Cpu { process, generator })
    }

    /// The CPU time, apart from the generator's, since `before`, in microseconds per one of
    /// `count` changes.
    pub fn per_change_since(self, before: Option<Cpu>, count: usize) -> f64 {
        self.split_since(before, count).0
    }

    /// The CPU time since `before`, in microseconds per one of `count` changes: the process's
    /// apart from the generator's, and the generator's.
    pub fn split_since(self, before: Option<Cpu>, count: usize) -> (f64, f64) {
        let Some(before) = before else {
            return (f64::NAN, f64::NAN);
        };
        // A generator thread that exited takes its time with it: counted as the node's (the
        // generator's runtime keeps its workers for the whole run).
        let generator = self.generator.saturating_sub(before.generator);
        let node = (self.process - before.process).saturating_sub(generator);
        (per_change(node, count), per_change(generator, count))
    }
}

/// The `comm` of a `stat` line: between the first `(` and the last `)`.
fn comm(stat: &str) -> Option<&str> {
    Some(&stat[stat.find('(')? + 1..stat.rfind(')')?])
}

/// `ticks` of CPU time in microseconds per one of `count` changes.
pub fn per_change(ticks: u64, count: usize) -> f64 {
    (ticks as f64 * TICK.as_secs_f64() * 1e6) / count.max(1) as f64
}

/// utime + stime of a `stat` line (fields 14 and 15; the comm may hold spaces, so they are
/// counted from the last `)`).
pub fn ticks(stat: &str) -> Option<u64> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}
