//! The store's unit tests: meta codec, scans, walks, quiesce.

use super::*;

#[test]
fn prefix_upper_bound_is_tight() {
    assert_eq!(prefix_upper_bound(b"a"), Some(b"b".to_vec()));
    assert_eq!(prefix_upper_bound(b"m:"), Some(b"m;".to_vec()));
    assert_eq!(prefix_upper_bound(&[1, 0xff]), Some(vec![2]));
    assert_eq!(prefix_upper_bound(&[0xff]), None);
}

#[tokio::test]
async fn closing_resolves_once_the_last_clone_is_dropped_and_the_lock_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let reader = store.clone();
    let closing = store.closing();
    let mut waiting = tokio::spawn(closing.wait());
    drop(store);
    let early = tokio::time::timeout(std::time::Duration::from_millis(50), &mut waiting).await;
    assert!(early.is_err(), "resolved while a clone was still open");
    assert!(
        Store::open(dir.path()).is_err(),
        "the lock was free too soon"
    );
    std::thread::spawn(move || drop(reader)).join().unwrap();
    waiting.await.unwrap();
    Store::open(dir.path()).expect("the lock is free once closing resolved");
    // A store already closed resolves at once.
    let store = Store::open(dir.path()).unwrap();
    let closing = store.closing();
    drop(store);
    closing.wait().await;
}

#[test]
fn quiesce_leaves_no_memtable_and_no_compaction_behind() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let audit = store.cf(Cf::Audit);
    let int = |name: &str| {
        store
            .db
            .property_int_value_cf(audit, name)
            .unwrap()
            .unwrap()
    };
    // Eight table files in level 0 (twice the compaction trigger), then a write that
    // is only in the memtable.
    for file in 0u32..8 {
        let mut b = WriteBatch::default();
        for n in 0u32..100 {
            b.put_cf(audit, [file.to_be_bytes(), n.to_be_bytes()].concat(), b"v");
        }
        store.write(b, false).unwrap();
        store.db.flush_cf(audit).unwrap();
    }
    store.db.put_cf(audit, b"last", b"v").unwrap();
    assert_eq!(int("rocksdb.num-entries-active-mem-table"), 1);
    store.quiesce().unwrap();
    assert_eq!(int("rocksdb.num-entries-active-mem-table"), 0);
    assert_eq!(int("rocksdb.compaction-pending"), 0);
    assert_eq!(int("rocksdb.num-running-compactions"), 0);
    assert!(int("rocksdb.num-files-at-level0") < 4);
    assert_eq!(
        store.get(Cf::Audit, b"last").unwrap().as_deref(),
        Some(&b"v"[..])
    );
}

/// The files in the store's directory.
fn files(dir: &Path) -> impl Iterator<Item = std::path::PathBuf> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path())
}

/// The options a fresh store was opened with, as RocksDB writes them to its OPTIONS file:
/// `option(section, name)` is the value of `name` in `section` (`DBOptions`, or
/// `CFOptions "<family>"`).
fn written_options(dir: &Path) -> impl Fn(&str, &str) -> String {
    drop(Store::open(dir).unwrap());
    let written = files(dir)
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("OPTIONS-")
        })
        .max()
        .unwrap();
    let written = std::fs::read_to_string(written).unwrap();
    move |section, name| {
        let body = written.split(&format!("[{section}]")).nth(1).unwrap();
        let body = body.split("\n[").next().unwrap();
        let prefix = format!("{name}=");
        body.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap()
            .to_owned()
    }
}

#[test]
fn only_the_trail_family_keeps_an_insert_hint_per_key_family() {
    let dir = tempfile::tempdir().unwrap();
    let option = written_options(dir.path());
    let hint = |cf: Cf| {
        let section = format!("CFOptions \"{}\"", cf.name());
        option(&section, "memtable_insert_with_hint_prefix_extractor")
    };
    let (_, expected) = options::AUDIT_MEMTABLE.split_once('=').unwrap();
    assert_eq!(hint(Cf::Audit), expected);
    for cf in Cf::ALL.into_iter().filter(|cf| *cf != Cf::Audit) {
        assert_eq!(hint(cf), "nullptr", "{}", cf.name());
    }
}

#[test]
fn batches_that_interleave_key_families_in_any_order_read_back_in_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let audit = store.cf(Cf::Audit);
    let mut expected = std::collections::BTreeMap::new();
    // Each batch moves between families, forward and backward within each, and deletes
    // some keys written by earlier batches: every insert lands away from its hint sometimes.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for batch in 0u64..200 {
        let mut b = WriteBatch::default();
        for _ in 0..12 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let family = [b'a', b'o', b'p', b'q', b't', b'm'][(x % 6) as usize];
            let key = [&[family][..], &((x >> 8) % 500).to_be_bytes()].concat();
            if x.is_multiple_of(5) {
                b.delete_cf(audit, &key);
                expected.remove(&key);
            } else {
                let value = batch.to_be_bytes().to_vec();
                b.put_cf(audit, &key, &value);
                expected.insert(key, value);
            }
        }
        store.write(b, false).unwrap();
    }
    let mut seen = std::collections::BTreeMap::new();
    store
        .scan(Cf::Audit, b"", b"", |k, v| {
            seen.insert(k.to_vec(), v.to_vec());
            true
        })
        .unwrap();
    assert_eq!(seen, expected);
    for (key, value) in &expected {
        assert_eq!(store.get(Cf::Audit, key).unwrap().as_ref(), Some(value));
    }
}

#[test]
fn scan_stays_inside_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut b = WriteBatch::default();
    for k in [&b"a1"[..], b"a2", b"b1", b"m:x"] {
        b.put_cf(store.cf(Cf::Audit), k, b"v");
    }
    store.write(b, true).unwrap();
    let mut seen = vec![];
    store
        .scan(Cf::Audit, b"a", b"a", |k, _| {
            seen.push(k.to_vec());
            true
        })
        .unwrap();
    assert_eq!(seen, vec![b"a1".to_vec(), b"a2".to_vec()]);
}

#[test]
fn cursor_advances_to_the_first_entry_at_or_after_each_target_near_or_far() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let key = |n: u32| [&b"a"[..], &n.to_be_bytes()].concat();
    let mut b = WriteBatch::default();
    // Every even number below 200, then 1000; and an entry past the prefix.
    for n in (0..200).step_by(2).chain([1000]) {
        b.put_cf(store.cf(Cf::Audit), key(n), n.to_be_bytes());
    }
    b.put_cf(store.cf(Cf::Audit), b"b", b"x");
    store.write(b, true).unwrap();
    // Near targets (stepped to), a missing one (lands on the next), far ones (sought),
    // one behind the walk (stays), one past every entry of the prefix (ends the walk).
    let targets = [0u32, 2, 4, 5, 10, 100, 101, 198, 500, 400, 1000, 1001, 1002];
    let mut walk = store.walk(Cf::Audit, b"a");
    let mut seen = vec![];
    for target in targets {
        walk.advance_to(&key(target));
        let found = walk.entry().map(|(k, v)| {
            assert_eq!(&k[1..], v);
            u32::from_be_bytes(v.try_into().unwrap())
        });
        seen.push((target, found));
    }
    walk.finish().unwrap();
    let expected = [
        (0, Some(0)),
        (2, Some(2)),
        (4, Some(4)),
        (5, Some(6)),
        (10, Some(10)),
        (100, Some(100)),
        (101, Some(102)),
        (198, Some(198)),
        (500, Some(1000)),
        (400, Some(1000)),
        (1000, Some(1000)),
        (1001, None),
        (1002, None),
    ];
    assert_eq!(seen, expected);
    // A fresh walk's first move is a seek; `next` walks on inside the prefix only.
    let mut walk = store.walk(Cf::Audit, b"a");
    walk.seek(&key(196));
    let mut walked = vec![];
    while let Some((_, v)) = walk.entry() {
        walked.push(u32::from_be_bytes(v.try_into().unwrap()));
        walk.next();
    }
    assert_eq!(walked, vec![196, 198, 1000]);
}

/// The bytes of the store's WAL files.
fn wal_bytes(dir: &Path) -> u64 {
    files(dir)
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum()
}

#[test]
fn a_family_written_once_does_not_keep_the_wal_past_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    // One override, then the trail's writes alone: the overrides' family has unflushed data
    // in the first WAL, which would keep it and every later one.
    let overrides = store.cf(Cf::Overrides);
    store.db.put_cf(overrides, b"k", b"v").unwrap();
    let audit = store.cf(Cf::Audit);
    let value = vec![b'.'; 1 << 20];
    let mut most = 0;
    // Twice the bound, a MiB a batch.
    for i in 0..(2 * options::MAX_TOTAL_WAL_BYTES) >> 20 {
        let mut b = WriteBatch::default();
        b.put_cf(audit, i.to_be_bytes(), &value);
        store.write(b, false).unwrap();
        most = most.max(wal_bytes(dir.path()));
    }
    // The bound, the WAL written meanwhile and one more while the flush runs.
    let allowed = options::MAX_TOTAL_WAL_BYTES + (64 << 20);
    assert!(
        most <= allowed,
        "the WAL reached {most} bytes, past {allowed}"
    );
    assert_eq!(
        store.get(Cf::Overrides, b"k").unwrap().as_deref(),
        Some(&b"v"[..])
    );
}

#[test]
fn rocksdb_own_logs_roll_at_a_size_and_are_kept_ten_deep() {
    let dir = tempfile::tempdir().unwrap();
    let option = written_options(dir.path());
    let db = |name| option("DBOptions", name).parse::<usize>().unwrap();
    assert_eq!(db("max_log_file_size"), options::INFO_LOG_BYTES);
    assert_eq!(db("keep_log_file_num"), options::INFO_LOGS_KEPT);
}
