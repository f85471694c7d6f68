//! What a run measures: its rate and the process's CPU time per event, and the process's
//! memory figures.

use std::time::{Duration, Instant};

/// A timed run: events per second, and the process's CPU time per event (every thread of
/// this process, so on two cores the figure that bounds the rate; a broker in another
/// process is not in it).
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub rate: f64,
    pub cpu_us: f64,
}

impl Run {
    /// The line a process mode prints: `<what> <rate> ev/s, <cpu> us cpu/ev`.
    pub fn print(&self, what: &str) {
        println!("{what} {:.0} ev/s, {:.1} us cpu/ev", self.rate, self.cpu_us);
    }
}

/// Wall time and process CPU time from `start` to `stop`.
pub struct Clock {
    pub wall: Instant,
    pub cpu: Duration,
}

impl Clock {
    pub fn start() -> Clock {
        Clock {
            wall: Instant::now(),
            cpu: process_cpu(),
        }
    }

    pub fn stop(self, events: u64) -> Run {
        let (wall, cpu) = (self.wall.elapsed(), process_cpu() - self.cpu);
        Run {
            rate: events as f64 / wall.as_secs_f64(),
            cpu_us: cpu.as_secs_f64() * 1e6 / events as f64,
        }
    }
}

/// User and system CPU time of this process so far (`/proc/self/stat`, in 10 ms ticks).
pub fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name (which may hold spaces): utime and stime are the 12th
    // and 13th.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// A `/proc/self/status` figure in KiB (`VmHWM`, `VmRSS`, `RssFile`...).
pub fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| {
            l.strip_prefix(field)
                .is_some_and(|rest| rest.starts_with(':'))
        })
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
