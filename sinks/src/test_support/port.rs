//! Ports for the child processes of tests and benchmarks (nodes, followers, brokers, Redis) to
//! listen on.
//!
//! A port from `bind("127.0.0.1:0")` lies in the kernel's ephemeral range, where outgoing
//! connections take their local ports. Between the choice and the child's own bind, or while
//! a child is killed and started again on the same port, any connection on the machine may
//! take it, and the child fails to bind. A port below that range is only ever taken by a bind
//! that names it. Each process starts at a random place below the range and walks on from
//! there, so that test processes running side by side seldom try the same ports.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The lowest port handed out: above the registered ports that services commonly use.
const LOW: u32 = 20_000;

/// Where the kernel's ephemeral range starts when it cannot be read (Linux's default).
const EPHEMERAL_DEFAULT: u32 = 32_768;

/// A port on 127.0.0.1 that was free when chosen, outside the ephemeral range: for a child
/// process to listen on, and to listen on again after a restart.
pub fn free_port() -> u16 {
    let high = ephemeral_low();
    if high < LOW + 1_000 {
        // An unusual range leaves no room below it: take one of the kernel's.
        return ephemeral_port();
    }
    let span = high - LOW;
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let next = NEXT.get_or_init(|| AtomicU32::new(rand::random_range(0..span)));
    pick(next, span).unwrap_or_else(|| panic!("no free port on 127.0.0.1 between {LOW} and {high}"))
}

/// The first port from `next` on (counting from [`LOW`], wrapping at `span`) that a listener
/// can take, moving `next` past it.
fn pick(next: &AtomicU32, span: u32) -> Option<u16> {
    (0..span).find_map(|_| {
        let port = LOW + next.fetch_add(1, Ordering::Relaxed) % span;
        let port = u16::try_from(port).ok()?;
        TcpListener::bind(("127.0.0.1", port))
            .is_ok()
            .then_some(port)
    })
}

/// The first port of the kernel's ephemeral range.
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(EPHEMERAL_DEFAULT)
}

/// A port the kernel picks.
fn ephemeral_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_below_the_ephemeral_range_and_differ() {
        let high = ephemeral_low();
        let ports: Vec<u16> = (0..20).map(|_| free_port()).collect();
        for port in &ports {
            assert!((LOW..high).contains(&u32::from(*port)), "{port}");
            // Free when handed out: a listener can take it.
            TcpListener::bind(("127.0.0.1", *port)).expect("a free port");
        }
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }

    #[test]
    fn a_taken_port_is_passed_over() {
        let taken = free_port();
        let _held = TcpListener::bind(("127.0.0.1", taken)).unwrap();
        let start = u32::from(taken) - LOW;
        let next = AtomicU32::new(start);
        let picked = pick(&next, ephemeral_low() - LOW).unwrap();
        assert_ne!(picked, taken);
        // It tried the taken port first, then went on.
        assert!(next.load(Ordering::Relaxed) >= start + 2);
    }
}
