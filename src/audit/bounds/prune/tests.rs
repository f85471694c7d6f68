//! The head of the trail under the ceilings and the sweep, groups in flight, and a failed batch.

use super::*;

/// A store of rows 1..=n at `at` = seq * 10, even seqs with an entity, with its
/// counters and head as the writer holds them.
struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    usage: Usage,
    head: Head,
}

impl Fixture {
    fn with(n: u64) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut batch = WriteBatch::default();
        for seq in 1..=n {
            batch.put_cf(store.cf(Cf::Audit), keys::row_key(seq, seq * 10), b"row");
            if seq % 2 == 0 {
                batch.put_cf(store.cf(Cf::Audit), keys::outbox_key(seq), b"entity");
            }
        }
        store.write(batch, false).unwrap();
        let usage = Usage::recount(&store, n).unwrap();
        let head = Head::new(usage.from);
        Fixture {
            _dir: dir,
            store,
            usage,
            head,
        }
    }

    /// Prepare a group that deletes with `prune`, below `below`, and hand it over, as
    /// the writer does; its batch, and what `prune` returned.
    fn group<T>(&mut self, below: u64, prune: impl FnOnce(&mut Pruning) -> T) -> (WriteBatch, T) {
        let mut batch = WriteBatch::default();
        let out = prune(&mut Pruning {
            head: &mut self.head,
            store: &self.store,
            batch: &mut batch,
            usage: &mut self.usage,
            below,
            tree: None,
        });
        self.head.handed_over();
        (batch, out)
    }

    /// Write the oldest group's batch, as the syncer does, and tell the head.
    fn write(&mut self, batch: WriteBatch) {
        self.store.write(batch, false).unwrap();
        self.head.written();
    }

    /// A batch failed: the writer forgets every group not yet written and rolls its
    /// counters back to the last written (`usage`).
    fn fail(&mut self, usage: Usage) {
        self.head.unwritten();
        self.usage = usage;
    }

    /// The counters match a full count of the store.
    fn assert_counted(&self, last_seq: u64) {
        assert_eq!(self.usage, Usage::recount(&self.store, last_seq).unwrap());
    }
}

#[test]
fn sweep_deletes_oldest_first_below_the_bound_and_counts_exactly() {
    let mut t = Fixture::with(600);
    let (batch, (first, second)) = t.group(400, |p| {
        // Expired are seqs < 300; the bound is 400: stops at the first fresh row.
        (p.sweep(3_000, 250).unwrap(), p.sweep(3_000, 250).unwrap())
    });
    assert_eq!((first.pruned, first.more), (250, true));
    assert_eq!((second.pruned, second.more), (49, false));
    t.write(batch);
    t.assert_counted(600);
    assert_eq!(t.usage.from, 300);
    // Past the freshness limit, the bound holds.
    let (batch, done) = t.group(400, |p| p.sweep(u64::MAX, 1000).unwrap());
    assert_eq!(done.pruned, 100);
    t.write(batch);
    t.assert_counted(600);
    assert_eq!(t.usage.from, 400);
}

#[test]
fn make_room_stops_at_the_bound_and_an_unwritten_batch_is_forgotten() {
    let mut t = Fixture::with(10);
    let limits = Limits {
        max_rows: 5,
        ..Limits::default()
    };
    let before = t.usage;
    let (_, (bounded, never_fits)) = t.group(4, |p| {
        (
            p.make_room(10, &limits).unwrap(),
            p.make_room(1 << 40, &limits).unwrap(),
        )
    });
    assert_eq!(bounded, (3, false));
    assert_eq!(never_fits, (0, false));
    t.fail(before);
    let (batch, room) = t.group(11, |p| p.make_room(10, &limits).unwrap());
    assert_eq!(room, (6, true));
    t.write(batch);
    t.assert_counted(10);
    assert_eq!(t.usage.rows, 4);
}

/// A group that prunes while the one before it, which pruned too, is not yet written:
/// it deletes the rows after those, both are written in order, and the counters match.
/// When the first is not written, neither is the second, and the head forgets both.
#[test]
fn groups_in_flight_each_delete_the_rows_after_the_last_ones() {
    let mut t = Fixture::with(20);
    let before = t.usage;
    for _ in 0..2 {
        let (_, done) = t.group(21, |p| p.sweep(u64::MAX, 5).unwrap());
        assert_eq!(done.pruned, 5);
    }
    assert_eq!(t.usage.from, 11, "the second group took rows 6 to 10");
    // The first batch fails: the second, prepared on it, is abandoned too.
    t.fail(before);
    let (first, done) = t.group(21, |p| p.sweep(u64::MAX, 3).unwrap());
    assert_eq!(done.pruned, 3);
    assert_eq!(t.usage.from, 4, "rows 1 to 3 again");
    let (second, done) = t.group(21, |p| p.sweep(u64::MAX, 4).unwrap());
    assert_eq!(done.pruned, 4);
    t.write(first);
    t.write(second);
    t.assert_counted(20);
    assert_eq!(t.usage.from, 8);
    // The head goes on from there.
    let (batch, done) = t.group(21, |p| p.sweep(u64::MAX, 100).unwrap());
    assert_eq!(done.pruned, 13);
    t.write(batch);
    t.assert_counted(20);
    assert_eq!(t.usage.rows, 0);
}
