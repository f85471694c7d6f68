//! Connection slots: how many connections are served at once, how many one peer may hold,
//! and a few kept for the requests that must get through when the rest are taken.
//!
//! A slot is taken *before* accepting (as mini-redis does): with every slot taken, a
//! connection waits in the listen queue and is served once one frees. General slots are
//! capped per peer address (trusted proxies excepted: many clients stand behind one), so one
//! client cannot take them all. A connection that finds no general slot for it takes a
//! *reserved* one, where the server answers only probes and authenticated requests (the
//! caller says which, see [`Reserved`](super::Reserved)), one request per connection and
//! with a short head timeout, so a reserved slot is never taken for long.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use ipnet::IpNet;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A free slot, not yet given to a connection.
pub enum Free {
    /// A general slot.
    General(OwnedSemaphorePermit),
    /// A reserved slot.
    Reserved(OwnedSemaphorePermit),
}

/// General slots taken, by peer address.
type PerPeer = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// Every slot of a server.
pub struct Slots {
    general: Arc<Semaphore>,
    reserved: Arc<Semaphore>,
    /// General slots taken, by peer; a std mutex, taken to count only.
    per_peer: PerPeer,
    max_per_peer: usize,
    /// Peers the per-peer cap does not apply to.
    uncapped: Vec<IpNet>,
}

/// The slot a connection holds until it closes.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    /// The peer counted for it, for a general slot of a capped peer.
    counted: Option<(IpAddr, PerPeer)>,
    /// Whether it is a reserved slot.
    pub reserved: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((peer, per_peer)) = self.counted.take() {
            let mut counts = per_peer.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(taken) = counts.get_mut(&peer) {
                *taken -= 1;
                if *taken == 0 {
                    counts.remove(&peer);
                }
            }
        }
    }
}

impl Slots {
    /// `general` slots, at most `max_per_peer` of them for one peer outside `uncapped`, and
    /// `reserved` more.
    pub fn new(
        general: usize,
        max_per_peer: usize,
        reserved: usize,
        uncapped: Vec<IpNet>,
    ) -> Slots {
        Slots {
            general: Arc::new(Semaphore::new(general)),
            reserved: Arc::new(Semaphore::new(reserved)),
            per_peer: Arc::default(),
            max_per_peer,
            uncapped,
        }
    }

    /// The next free slot, general first.
    pub async fn free(&self) -> Free {
        if let Ok(permit) = self.general.clone().try_acquire_owned() {
            return Free::General(permit);
        }
        let (general, reserved) = (self.general.clone(), self.reserved.clone());
        // Neither semaphore is ever closed.
        tokio::select! {
            biased;
            Ok(permit) = general.acquire_owned() => Free::General(permit),
            Ok(permit) = reserved.acquire_owned() => Free::Reserved(permit),
        }
    }

    /// The slot a connection from `peer` takes with `free`: a general one while the peer is
    /// under its cap, else a reserved one if there is one; `None`: close it.
    pub fn assign(&self, free: Free, peer: IpAddr) -> Option<Slot> {
        let permit = match free {
            Free::Reserved(permit) => return Some(Slot::reserved(permit)),
            Free::General(permit) => permit,
        };
        if self.uncapped.iter().any(|net| net.contains(&peer)) {
            return Some(Slot {
                _permit: permit,
                counted: None,
                reserved: false,
            });
        }
        let mut counts = self.per_peer.lock().unwrap_or_else(|p| p.into_inner());
        let taken = counts.entry(peer).or_default();
        if *taken < self.max_per_peer {
            *taken += 1;
            return Some(Slot {
                _permit: permit,
                counted: Some((peer, self.per_peer.clone())),
                reserved: false,
            });
        }
        if *taken == 0 {
            counts.remove(&peer);
        }
        drop(counts);
        drop(permit);
        self.reserved
            .clone()
            .try_acquire_owned()
            .ok()
            .map(Slot::reserved)
    }
}

impl Slot {
    fn reserved(permit: OwnedSemaphorePermit) -> Slot {
        Slot {
            _permit: permit,
            counted: None,
            reserved: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    async fn take(slots: &Slots, peer: IpAddr) -> Option<Slot> {
        let free = slots.free().await;
        slots.assign(free, peer)
    }

    #[tokio::test]
    async fn a_peer_past_its_cap_gets_a_reserved_slot_then_none() {
        let slots = Slots::new(4, 2, 1, vec![]);
        let a1 = take(&slots, ip(1)).await.unwrap();
        let a2 = take(&slots, ip(1)).await.unwrap();
        assert!(!a1.reserved && !a2.reserved);
        let a3 = take(&slots, ip(1)).await.unwrap();
        assert!(a3.reserved, "over the cap: the reserve");
        assert!(take(&slots, ip(1)).await.is_none(), "the reserve is taken");
        // Another peer still gets the general slots left.
        let b = take(&slots, ip(2)).await.unwrap();
        assert!(!b.reserved);
        drop(a1);
        let a4 = take(&slots, ip(1)).await.unwrap();
        assert!(!a4.reserved, "a closed connection frees its peer's count");
        assert_eq!(slots.per_peer.lock().unwrap()[&ip(1)], 2);
        drop((a2, a3, a4, b));
        assert!(slots.per_peer.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn with_every_general_slot_taken_the_reserve_serves_then_the_queue_waits() {
        let slots = Slots::new(2, 8, 1, vec!["10.0.0.0/8".parse().unwrap()]);
        let taken: Vec<Slot> = vec![
            take(&slots, ip(1)).await.unwrap(),
            take(&slots, ip(2)).await.unwrap(),
        ];
        let r = take(&slots, ip(3)).await.unwrap();
        assert!(r.reserved);
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), slots.free());
        assert!(waiting.await.is_err(), "nothing free: wait");
        drop(taken);
        assert!(matches!(slots.free().await, Free::General(_)));
    }

    #[tokio::test]
    async fn an_uncapped_peer_takes_any_general_slot() {
        let slots = Slots::new(3, 1, 0, vec!["10.0.0.0/24".parse().unwrap()]);
        let taken: Vec<Slot> = futures::future::join_all((0..3).map(|_| take(&slots, ip(7))))
            .await
            .into_iter()
            .map(Option::unwrap)
            .collect();
        assert!(taken.iter().all(|s| !s.reserved));
    }
}
