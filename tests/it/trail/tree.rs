//! The verifiable trail: every row a leaf of the Merkle tree, signed checkpoints, proofs, and
//! `verify` finding every kind of tampering at its first bad seq.
//!
//! The proofs and signatures are checked with implementations the node does not use:
//! ct-merkle (RFC 6962) and ring (Ed25519), and the signed-note text is parsed here by hand.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use base64::prelude::*;
use ct_merkle::mem_backed_tree::MemoryBackedTree;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use serde_json::Value;

use crate::support::trail::*;
use ankusa::audit::tree::checkpoint::{CheckpointKey, SignedCheckpoint};
use ankusa::audit::tree::verify::{self, External, ExternalResult, Verification};
use ankusa::audit::tree::{Layout, TILE_WIDTH};
use ankusa::audit::{Row, SystemClock, Trail, TrailOptions, TreeOptions};
use ankusa::store::{keys, keys::meta, Cf, Store};

type TheirTree = MemoryBackedTree<sha2_011::Sha256, Vec<u8>>;

fn options(checkpoint_rows: u64) -> TrailOptions {
    TrailOptions {
        lifecycle: true,
        tree: TreeOptions {
            checkpoint_rows,
            ..TreeOptions::default()
        },
        ..TrailOptions::default()
    }
}

/// Every row of the store, key and value, in seq order.
fn raw_rows(store: &Store) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    store
        .scan(Cf::Audit, &[keys::ROW], &[keys::ROW], |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
    out
}

fn leaf(k: &[u8], v: &[u8]) -> Vec<u8> {
    [k, v].concat()
}

/// A signed note checked by hand and with ring: (origin, size, root).
pub(crate) fn check_note(note: &str, verifier_key: &str) -> (String, u64, Vec<u8>) {
    // The verifier key: <name>+<8 hex key id>+<base64 of 0x01 and the 32-byte key>.
    let mut parts = verifier_key.splitn(3, '+');
    let (name, id, key) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        BASE64_STANDARD.decode(parts.next().unwrap()).unwrap(),
    );
    assert_eq!(key[0], 1, "an Ed25519 key");
    let (text, sigs) = note.split_once("\n\n").unwrap();
    let text = format!("{text}\n");
    let line = sigs.strip_suffix('\n').unwrap();
    let sig = line
        .strip_prefix(&format!("\u{2014} {name} "))
        .expect("a signature line of the key's name");
    let sig = BASE64_STANDARD.decode(sig).unwrap();
    assert_eq!(hex::encode(&sig[..4]), id);
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &key[1..])
        .verify(text.as_bytes(), &sig[4..])
        .expect("the checkpoint's signature verifies with ring");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "origin, size, root: {text:?}");
    let root = BASE64_STANDARD.decode(lines[2]).unwrap();
    (lines[0].to_owned(), lines[1].parse().unwrap(), root)
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoints_and_proofs_verify_with_implementations_the_node_does_not_use() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with(dir.path(), options(50));
    for i in 0..120 {
        create_source(&trail, ctx("ops"), &format!("s{i}"), "pw")
            .await
            .unwrap();
    }
    // Committed one at a time: checkpoints after 50 rows (row 51, size 50), then 50 rows
    // after that one (row 102, size 101); and one now, of the 122 rows so far.
    assert_eq!(trail.checkpoint_now().await.unwrap(), Some(123));
    assert_eq!(trail.checkpoint_now().await.unwrap(), None, "no row since");
    let store = trail.store().clone();
    let rows = all_rows(&store);
    let checkpoints: Vec<&Row> = rows
        .iter()
        .filter(|r| r.action == "trail.checkpoint")
        .collect();
    assert_eq!(
        checkpoints.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![51, 102, 123]
    );
    let key = CheckpointKey::load(&store).unwrap().unwrap();
    let vkey = key.verifier_key().to_owned();
    let incarnation = trail.history().current().id;
    let raw = raw_rows(&store);
    let mut theirs = TheirTree::new();
    let mut roots = BTreeMap::new();
    for (k, v) in &raw {
        theirs.push(leaf(k, v));
        roots.insert(theirs.len(), theirs.root());
    }
    for row in &checkpoints {
        assert_eq!(row.actor, "system");
        assert_eq!(row.resource, "trail");
        assert!(row.publish, "published as io.ankusa.trail.checkpoint");
        let note = row.detail["checkpoint"].as_str().unwrap();
        let (origin, size, root) = check_note(note, &vkey);
        assert_eq!(origin, format!("ankusa.audit/{incarnation}"));
        assert_eq!(size, row.seq - 1);
        assert_eq!(row.detail["size"], size);
        assert_eq!(row.detail["origin"], origin.as_str());
        assert_eq!(row.detail["root"], BASE64_STANDARD.encode(&root));
        assert_eq!(root.as_slice(), roots[&size].as_bytes().as_slice());
        // The outbox entity is the same object.
        let entity = store
            .get(Cf::Audit, &keys::outbox_key(row.seq))
            .unwrap()
            .unwrap();
        let entity: Value = serde_json::from_slice(&entity).unwrap();
        assert_eq!(Value::Object(row.detail.clone()), entity);
    }
    let newest = trail.newest_checkpoint().await.unwrap().unwrap();
    assert_eq!(newest.size, 122);
    assert_eq!(
        newest.checkpoint,
        checkpoints[2].detail["checkpoint"].as_str().unwrap()
    );

    // Inclusion of every row in the tree of 101 it belongs to, and in the newest.
    for seq in [1, 7, 51, 100, 101] {
        let p = trail.inclusion_proof(seq, Some(101)).await.unwrap();
        assert_eq!((p.seq, p.index, p.size), (seq, seq - 1, 101));
        let path: Vec<u8> = p
            .proof
            .iter()
            .flat_map(|h| BASE64_STANDARD.decode(h).unwrap())
            .collect();
        let path = ct_merkle::InclusionProof::<sha2_011::Sha256>::try_from_bytes(path).unwrap();
        let (k, v) = &raw[(seq - 1) as usize];
        roots[&101]
            .verify_inclusion(&leaf(k, v), seq - 1, &path)
            .expect("ct-merkle accepts the inclusion proof");
        assert_eq!(p.root, BASE64_STANDARD.encode(roots[&101].as_bytes()));
    }
    let p = trail.inclusion_proof(5, None).await.unwrap();
    assert_eq!(p.size, 122, "the newest checkpoint's size by default");
    // Consistency of each checkpoint with the next.
    for (from, to) in [(50, 101), (101, 122), (1, 122)] {
        let c = trail.consistency_proof(from, to).await.unwrap();
        let bytes: Vec<u8> = c
            .proof
            .iter()
            .flat_map(|h| BASE64_STANDARD.decode(h).unwrap())
            .collect();
        let proof = ct_merkle::ConsistencyProof::<sha2_011::Sha256>::try_from_bytes(bytes).unwrap();
        roots[&to]
            .verify_consistency(&roots[&from], &proof)
            .expect("ct-merkle accepts the consistency proof");
    }
    trail.shutdown().await;
    drop((trail, store));

    let store = Store::open(dir.path()).unwrap();
    let external = External {
        name: "witness".into(),
        note: checkpoints[1].detail["checkpoint"].as_str().unwrap().into(),
    };
    match verify::verify(&store, Some(&vkey), &[external], &mut |_, _| {}).unwrap() {
        Verification::Verified(s) => {
            assert_eq!(s.rows, Some((1, 123)));
            assert_eq!((s.size, s.checkpoints), (123, 3));
            assert_eq!(
                s.external,
                vec![
                    ("witness".into(), ExternalResult::Verified { size: 101 }),
                    (
                        "m:checkpoint".into(),
                        ExternalResult::Verified { size: 122 }
                    ),
                ]
            );
        }
        other => panic!("{other:?}"),
    }
}

/// One way of tampering with a stored trail, as someone with the disk (not the key) could.
#[derive(Debug, Clone)]
enum Tamper {
    /// Flip bit 0 of byte `at` (mod its length) of row `seq`'s value.
    Flip { seq: u64, at: usize },
    /// Delete row `seq`.
    Delete { seq: u64 },
    /// Swap the values of rows `a < b`.
    Swap { a: u64, b: u64 },
    /// Delete every row from `seq` on.
    Truncate { seq: u64 },
    /// Delete the oldest `n` rows, beyond what retention deleted.
    Head { n: u64 },
    /// Change row `seq` and write the tree again over it and every row after it.
    Rewrite { seq: u64, at: usize },
}

/// How a checkpoint row names its action, which is how verify knows one.
const CHECKPOINT_MARK: &[u8] = br#""action":"trail.checkpoint""#;

/// Writes to the store: a key and its new value, or its deletion.
type Changes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

struct Fixture {
    db: rocksdb::DB,
    reader: Store,
    rows: Vec<(Vec<u8>, Vec<u8>)>,
    /// The checkpoint sizes, in order.
    sizes: Vec<u64>,
    newest: u64,
}

impl Fixture {
    fn cf(&self) -> &rocksdb::ColumnFamily {
        self.db.cf_handle(Cf::Audit.name()).unwrap()
    }

    fn row(&self, seq: u64) -> &(Vec<u8>, Vec<u8>) {
        &self.rows[(seq - 1) as usize]
    }

    /// Write `changes` (key, value or deletion); returns what they replaced.
    fn apply(&self, changes: Changes) -> Changes {
        let mut undo = Vec::new();
        let mut batch = rocksdb::WriteBatch::default();
        for (k, v) in changes {
            undo.push((k.clone(), self.db.get_cf(self.cf(), &k).unwrap()));
            match v {
                Some(v) => batch.put_cf(self.cf(), &k, v),
                None => batch.delete_cf(self.cf(), &k),
            }
        }
        self.db.write(batch).unwrap();
        undo.reverse();
        undo
    }

    /// The seq `verify` must name for `t`, and the changes that make it.
    fn plan(&self, t: &Tamper) -> (u64, Changes) {
        let flip = |v: &[u8], at: usize| {
            let mut v = v.to_vec();
            let i = at % v.len();
            v[i] ^= 1;
            v
        };
        match *t {
            Tamper::Flip { seq, at } => {
                let (k, v) = self.row(seq);
                (seq, vec![(k.clone(), Some(flip(v, at)))])
            }
            Tamper::Delete { seq } => (seq, vec![(self.row(seq).0.clone(), None)]),
            Tamper::Swap { a, b } => {
                let ((ka, va), (kb, vb)) = (self.row(a), self.row(b));
                (
                    a,
                    vec![
                        (ka.clone(), Some(vb.clone())),
                        (kb.clone(), Some(va.clone())),
                    ],
                )
            }
            Tamper::Truncate { seq } => {
                let last = self.rows.len() as u64;
                (
                    seq,
                    (seq..=last)
                        .map(|s| (self.row(s).0.clone(), None))
                        .collect(),
                )
            }
            Tamper::Head { n } => (1, (1..=n).map(|s| (self.row(s).0.clone(), None)).collect()),
            Tamper::Rewrite { seq, at } => {
                let mut rows = self.rows.clone();
                let i = (seq - 1) as usize;
                rows[i].1 = flip(&rows[i].1, at);
                let mut changes = vec![(rows[i].0.clone(), Some(rows[i].1.clone()))];
                let from = tlog_tiles::stored_hash_index(0, seq - 1);
                for (index, hash) in tree_nodes(&rows) {
                    if index >= from {
                        changes.push((keys::tree_key(index).to_vec(), Some(hash.to_vec())));
                    }
                }
                for (n, tile) in tiles(&rows) {
                    if n >= (seq - 1) / TILE_WIDTH {
                        changes.push((keys::tile_key(n).to_vec(), Some(tile)));
                    }
                }
                // Only the checkpoints can tell: the first seq the last one before it left
                // out. A checkpoint row whose bit flipped in its action no longer reads as a
                // checkpoint, and vouches for nothing.
                let disguised = |c: u64| {
                    c == seq - 1
                        && !rows[i]
                            .1
                            .windows(CHECKPOINT_MARK.len())
                            .any(|w| w == CHECKPOINT_MARK)
                };
                let vouched = self
                    .sizes
                    .iter()
                    .copied()
                    .filter(|&c| c < seq && !disguised(c))
                    .max()
                    .unwrap_or(0);
                (vouched + 1, changes)
            }
        }
    }
}

/// The tiles of leaves over `rows`, as stored: a byte for the first leaf's place (0), then
/// the leaf hashes, computed with tlog_tiles.
fn tiles(rows: &[(Vec<u8>, Vec<u8>)]) -> BTreeMap<u64, Vec<u8>> {
    let mut tiles: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for (n, (k, v)) in rows.iter().enumerate() {
        let tile = tiles
            .entry(n as u64 / TILE_WIDTH)
            .or_insert_with(|| vec![0]);
        tile.extend_from_slice(&tlog_tiles::record_hash(&leaf(k, v)).0);
    }
    tiles
}

/// Every node of the tree over `rows` stored under a key of its own, computed with
/// tlog_tiles.
fn tree_nodes(rows: &[(Vec<u8>, Vec<u8>)]) -> BTreeMap<u64, [u8; 32]> {
    struct Map<'a>(&'a BTreeMap<u64, [u8; 32]>);
    impl tlog_tiles::HashReader for Map<'_> {
        fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<tlog_tiles::Hash>, tlog_tiles::Error> {
            Ok(indexes
                .iter()
                .map(|i| tlog_tiles::Hash(self.0[i]))
                .collect())
        }
    }
    let mut nodes = BTreeMap::new();
    for (n, (k, v)) in rows.iter().enumerate() {
        let n = n as u64;
        let hashes = tlog_tiles::stored_hashes(n, &leaf(k, v), &Map(&nodes)).unwrap();
        let start = tlog_tiles::stored_hash_index(0, n);
        for (i, h) in hashes.into_iter().enumerate() {
            nodes.insert(start + i as u64, h.0);
        }
    }
    nodes.retain(|&i, _| Layout::Tiles.keyed(tlog_tiles::split_stored_hash_index(i).0));
    nodes
}

fn tamper(rows: u64, newest: u64) -> impl Strategy<Value = Tamper> {
    prop_oneof![
        (1..=rows, any::<usize>()).prop_map(|(seq, at)| Tamper::Flip { seq, at }),
        (1..=rows).prop_map(|seq| Tamper::Delete { seq }),
        (1..rows).prop_flat_map(move |a| ((a + 1)..=rows).prop_map(move |b| Tamper::Swap { a, b })),
        (2..=rows).prop_map(|seq| Tamper::Truncate { seq }),
        (1..rows).prop_map(|n| Tamper::Head { n }),
        (1..=newest, any::<usize>()).prop_map(|(seq, at)| Tamper::Rewrite { seq, at }),
    ]
}

/// A stopped store of about 10,000 rows, committed 32 at a time, checkpointed every 500.
async fn ten_thousand_rows(dir: &Path) {
    let trail = open_trail_with(dir, options(500));
    let mut tasks = Vec::new();
    for w in 0..32 {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..320 {
                create_source(&trail, ctx("ops"), &format!("w{w}-{i}"), "pw")
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    trail.checkpoint_now().await.unwrap();
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_names_the_first_bad_seq_of_a_thousand_random_tamperings() {
    let dir = tempfile::tempdir().unwrap();
    ten_thousand_rows(dir.path()).await;
    let db = open_stopped(dir.path());
    let scratch = tempfile::tempdir().unwrap();
    let reader = Store::open_secondary(dir.path(), scratch.path()).unwrap();
    let rows = raw_rows(&reader);
    let sizes: Vec<u64> = rows
        .iter()
        .filter(|(_, v)| {
            let row: Row = serde_json::from_slice(v).unwrap();
            row.action == "trail.checkpoint"
        })
        .map(|(k, _)| keys::decode_row_key(k).unwrap().0 - 1)
        .collect();
    let n = rows.len() as u64;
    assert!(n > 10_000, "{n} rows");
    // Every 500 rows or a little more (a checkpoint ends the group that reaches 500).
    assert!(sizes.len() >= 18, "{sizes:?}");
    let newest = *sizes.last().unwrap();
    assert_eq!(newest, n - 1, "the store ends with a checkpoint");
    let f = Fixture {
        db,
        reader,
        rows,
        sizes,
        newest,
    };
    let check = |f: &Fixture| {
        f.reader.catch_up().unwrap();
        verify::verify(&f.reader, None, &[], &mut |_, _| {}).unwrap()
    };
    assert!(
        matches!(check(&f), Verification::Verified(_)),
        "{:?}",
        check(&f)
    );
    let named = |t: &Tamper| {
        let (want, changes) = f.plan(t);
        let undo = f.apply(changes);
        let outcome = check(&f);
        f.apply(undo);
        (want, outcome)
    };
    // A rewrite whose flipped bit lands in a checkpoint row's action hides that checkpoint:
    // the rows it vouched for are named from the one before it on.
    let seq = f.sizes[f.sizes.len() / 2] + 1;
    let value = &f.row(seq).1;
    let mark = value
        .windows(CHECKPOINT_MARK.len())
        .position(|w| w == CHECKPOINT_MARK)
        .expect("a checkpoint row names its action");
    let hidden = Tamper::Rewrite {
        seq,
        at: mark + CHECKPOINT_MARK.len() - 2,
    };
    let before = f.sizes[f.sizes.len() / 2 - 1];
    match named(&hidden) {
        (want, Verification::Broken { seq, .. }) => {
            assert_eq!((seq, want), (before + 1, before + 1))
        }
        (_, outcome) => panic!("{hidden:?}: {outcome:?}"),
    }
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&tamper(n, f.newest), |t| {
            let (want, outcome) = named(&t);
            match outcome {
                Verification::Broken { seq, .. } => {
                    prop_assert_eq!(seq, want, "{:?}: {:?}", t, outcome)
                }
                Verification::Verified(_) => prop_assert!(false, "{:?} was not found", t),
            }
            Ok(())
        })
        .unwrap();
    assert!(
        matches!(check(&f), Verification::Verified(_)),
        "every tampering undone"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untampered_trail_verifies_after_sweeps_ceilings_and_a_restore() {
    use super::retention::{limits, DAY, T0};
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ankusa::audit::ManualClock::new(T0));
    let mut limits = limits(1, 7);
    limits.max_rows = 10_000;
    let trail = super::retention::open(dir.path(), &[], limits, &clock);
    super::retention::create_sources(&trail, 0..40).await;
    trail.checkpoint_now().await.unwrap();
    clock.set(T0 + 2 * DAY);
    super::retention::create_sources(&trail, 40..60).await;
    // The sweep deletes the first 41 rows in batches of 7, with their nodes.
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.pruned, 41);
    trail.checkpoint_now().await.unwrap();
    // Some rows over the ceiling of 10,000: the oldest are pruned to make room.
    let many: Vec<_> = (0..10_000)
        .map(|i| {
            let trail = trail.clone();
            tokio::spawn(async move {
                create_source(&trail, ctx("ops"), &format!("c{i}"), "pw")
                    .await
                    .unwrap();
            })
        })
        .collect();
    for t in many {
        t.await.unwrap();
    }
    trail.checkpoint_now().await.unwrap();
    let first = all_rows(trail.store())[0].seq;
    assert!(first > 42, "the ceiling pruned rows: {first}");
    let store = trail.store().clone();
    let vkey = CheckpointKey::load(&store)
        .unwrap()
        .unwrap()
        .verifier_key()
        .to_owned();
    let old = SignedCheckpoint::newest(&store).unwrap().unwrap();
    let backup_dir = tempfile::tempdir().unwrap();
    let mut backups = ankusa::store::backup::BackupDir::create(backup_dir.path()).unwrap();
    backups.back_up(&store, T0).unwrap();
    drop(backups);
    // Rows after the backup, and a checkpoint of them a witness keeps: the restore rolls
    // them back.
    super::retention::create_sources(&trail, 100..110).await;
    trail.checkpoint_now().await.unwrap();
    let lost = SignedCheckpoint::newest(&store).unwrap().unwrap();
    trail.shutdown().await;
    drop((trail, store));
    let s = assert_verified(dir.path(), &vkey, &[("old", &old)]);
    let old_verified = ExternalResult::Verified { size: old.size };
    assert_eq!(result(&s, "old"), &old_verified);

    let restored = tempfile::tempdir().unwrap();
    let target = restored.path().join("store");
    let req = ankusa::store::restore::RestoreRequest {
        from: backup_dir.path(),
        id: None,
        target: &target,
        force: false,
        carry: &[],
    };
    ankusa::store::restore::restore(&req, T0, &|_| {}).unwrap();
    let trail = Trail::start(
        Store::open(&target).unwrap(),
        options(500),
        Arc::new(SystemClock),
    )
    .unwrap();
    create_source(&trail, ctx("ops"), "after", "pw")
        .await
        .unwrap();
    trail.checkpoint_now().await.unwrap();
    trail.shutdown().await;
    drop(trail);
    let s = assert_verified(&target, &vkey, &[("old", &old), ("lost", &lost)]);
    assert_eq!(result(&s, "old"), &old_verified);
    assert_eq!(
        result(&s, "lost"),
        &ExternalResult::RolledBack {
            ended: old.size + 1
        }
    );
}

fn result<'a>(s: &'a verify::Summary, name: &str) -> &'a ExternalResult {
    &s.external
        .iter()
        .find(|(n, _)| n == name)
        .expect("a result for every checkpoint")
        .1
}

fn assert_verified(
    dir: &Path,
    vkey: &str,
    external: &[(&str, &SignedCheckpoint)],
) -> verify::Summary {
    let store = Store::open(dir).unwrap();
    let external: Vec<External> = external
        .iter()
        .map(|(name, c)| External {
            name: (*name).into(),
            note: c.checkpoint.clone(),
        })
        .collect();
    match verify::verify(&store, Some(vkey), &external, &mut |_, _| {}).unwrap() {
        Verification::Verified(s) => s,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_store_without_the_tree_is_caught_up_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut off = options(500);
        off.tree.enabled = false;
        let trail = open_trail_with(dir.path(), off);
        for i in 0..30 {
            create_source(&trail, ctx("ops"), &format!("s{i}"), "pw")
                .await
                .unwrap();
        }
        trail.shutdown().await;
    });
    {
        let store = Store::open(dir.path()).unwrap();
        assert!(store.meta(meta::TREE).unwrap().is_none());
        assert!(matches!(
            verify::verify(&store, None, &[], &mut |_, _| {}),
            Err(verify::VerifyError::NoTree)
        ));
    }
    rt.block_on(async {
        let trail = open_trail_with(dir.path(), options(500));
        create_source(&trail, ctx("ops"), "s30", "pw")
            .await
            .unwrap();
        assert_eq!(trail.checkpoint_now().await.unwrap(), Some(32));
        trail.shutdown().await;
    });
    let store = Store::open(dir.path()).unwrap();
    match verify::verify(&store, None, &[], &mut |_, _| {}).unwrap() {
        Verification::Verified(s) => {
            assert_eq!((s.rows, s.size, s.checkpoints), (Some((1, 32)), 32, 1))
        }
        other => panic!("{other:?}"),
    }
}
