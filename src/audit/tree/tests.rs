use ct_merkle::mem_backed_tree::MemoryBackedTree;
use proptest::prelude::*;
use rocksdb::WriteBatch;

use super::*;
use crate::store::Cf;

/// The leaves of the RFC 6962 test data (certificate-transparency's merkle tree tests), and
/// the roots of the trees of their first 1..=8.
const LEAVES: [&[u8]; 8] = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    b"\x50\x51\x52\x53\x54\x55\x56\x57",
    b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
];
const ROOTS: [&str; 8] = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
];

#[test]
fn the_frontier_gives_the_rfc_6962_test_roots() {
    let mut tree = Frontier::empty(1);
    assert_eq!(
        hex::encode(tree.root().0),
        hex::encode(tlog_tiles::EMPTY_HASH.0)
    );
    for (leaf, root) in LEAVES.iter().zip(ROOTS) {
        // The leaf input is key then value: an empty key gives the vector's input itself.
        tree.append(b"", leaf, |_, _, _| {});
        assert_eq!(hex::encode(tree.root().0), root);
    }
}

/// Put row (`seq`, `at`, `value`) into `batch` and its nodes beside it, as the writer does.
fn put_row(
    tree: Option<&mut Frontier>,
    audit: &rocksdb::ColumnFamily,
    batch: &mut WriteBatch,
    (seq, at): (u64, u64),
    value: &[u8],
) {
    let key = keys::row_key(seq, at);
    batch.put_cf(audit, key, value);
    if let Some(tree) = tree {
        tree.put_nodes(audit, batch, &key, value);
    }
}

/// A store with `n` rows (seq 1..=n) and their tree nodes, and the frontier after them.
fn store_with_rows(n: u64) -> (tempfile::TempDir, Store, Frontier, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut tree = Frontier::empty(1);
    let mut inputs = Vec::new();
    let mut batch = WriteBatch::default();
    TreeMeta::put(store.cf(Cf::Audit), &mut batch, 1, Layout::Tiles);
    for seq in 1..=n {
        let value = format!("{{\"seq\":{seq}}}").into_bytes();
        put_row(
            Some(&mut tree),
            store.cf(Cf::Audit),
            &mut batch,
            (seq, 1000 + seq),
            &value,
        );
        inputs.push(leaf_input(&keys::row_key(seq, 1000 + seq), &value));
    }
    tree.flush(store.cf(Cf::Audit), &mut batch);
    store.write(batch, false).unwrap();
    (dir, store, tree, inputs)
}

/// Whether the node at `index` has a key of its own in a store of tiles.
fn keyed(index: u64) -> bool {
    Layout::Tiles.keyed(tlog_tiles::split_stored_hash_index(index).0)
}

/// The leaf hash of row `seq` as `store_with_rows` writes it.
fn leaf_of(seq: u64) -> Hash {
    leaf_hash(
        &keys::row_key(seq, 1000 + seq),
        format!("{{\"seq\":{seq}}}").as_bytes(),
    )
}

/// The tiles a store holds: each one's number, first leaf and leaves.
fn stored_tiles(store: &Store) -> Vec<(u64, u8, Vec<Hash>)> {
    let mut out = Vec::new();
    store
        .scan(Cf::Audit, &[keys::TILE], &[keys::TILE], |k, v| {
            let n = keys::decode_seq_key(keys::TILE, k).unwrap();
            let (first, hashes) = Tile::parts(v).unwrap();
            let leaves = hashes
                .chunks(32)
                .map(|h| Hash(h.try_into().unwrap()))
                .collect();
            out.push((n, first as u8, leaves));
            true
        })
        .unwrap();
    out
}

/// The tiles of the leaves `from..to` (leaf numbers) of rows from seq 1.
fn tiles_of(from: u64, to: u64) -> Vec<(u64, u8, Vec<Hash>)> {
    let mut out: Vec<(u64, u8, Vec<Hash>)> = Vec::new();
    for leaf in from..to {
        let n = leaf / TILE_WIDTH;
        match out.last_mut() {
            Some((m, _, leaves)) if *m == n => leaves.push(leaf_of(leaf + 1)),
            _ => out.push((n, (leaf % TILE_WIDTH) as u8, vec![leaf_of(leaf + 1)])),
        }
    }
    out
}

fn stored_indexes(store: &Store) -> Vec<u64> {
    let mut out = Vec::new();
    store
        .scan(Cf::Audit, &[keys::TREE], &[keys::TREE], |k, _| {
            out.push(keys::decode_seq_key(keys::TREE, k).unwrap());
            true
        })
        .unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Roots and proofs of the stored tree agree with ct-merkle, an RFC 6962 implementation
    /// of other authors, for every size and leaf; the stored size reads back.
    #[test]
    fn the_stored_tree_agrees_with_an_independent_implementation(n in 1u64..300) {
        let (_dir, store, tree, inputs) = store_with_rows(n);
        prop_assert_eq!(stored_size(&store).unwrap(), n);
        let want: Vec<u64> = (0..tlog_tiles::stored_hash_count(n)).filter(|&i| keyed(i)).collect();
        prop_assert_eq!(stored_indexes(&store), want);
        prop_assert_eq!(stored_tiles(&store), tiles_of(0, n));
        prop_assert_eq!(Frontier::load(&store, 1, n).unwrap(), tree.clone());
        let mut theirs = MemoryBackedTree::<sha2_011::Sha256, Vec<u8>>::new();
        for (i, input) in inputs.iter().enumerate() {
            theirs.push(input.clone());
            let size = i as u64 + 1;
            let ours = tlog_tiles::tree_hash(size, &Stored(&store)).unwrap();
            prop_assert_eq!(ours.0.to_vec(), theirs.root().as_bytes().to_vec());
        }
        let root = theirs.root();
        prop_assert_eq!(tree.root().0.to_vec(), root.as_bytes().to_vec());
        for seq in [1, n.div_ceil(2), n] {
            let p = proof::inclusion(&store, seq, n, n).unwrap();
            let path: Vec<u8> = p.proof.iter().flat_map(|h| decode(h)).collect();
            let path = ct_merkle::InclusionProof::<sha2_011::Sha256>::try_from_bytes(path).unwrap();
            prop_assert!(root
                .verify_inclusion(&inputs[(seq - 1) as usize], seq - 1, &path)
                .is_ok());
        }
        if n > 1 {
            let from = n / 2;
            let p = proof::consistency(&store, from, n, n).unwrap();
            let old = MemoryBackedTree::<sha2_011::Sha256, Vec<u8>>::new();
            let mut old = old;
            for input in &inputs[..from as usize] {
                old.push(input.clone());
            }
            let bytes: Vec<u8> = p.proof.iter().flat_map(|h| decode(h)).collect();
            let proof =
                ct_merkle::ConsistencyProof::<sha2_011::Sha256>::try_from_bytes(bytes).unwrap();
            prop_assert!(root.verify_consistency(&old.root(), &proof).is_ok());
        }
    }

    /// Pruning the oldest rows leaves exactly the stored roots of the frontier at the oldest
    /// retained row, the tile it sits in, and the nodes of the rows after it; every root and
    /// proof about the retained rows still reads.
    #[test]
    fn pruning_keeps_what_the_retained_rows_need(n in 2u64..300, cut in 0.0f64..1.0) {
        let (_dir, store, tree, _) = store_with_rows(n);
        let first = 1 + ((n - 1) as f64 * cut) as u64;
        let mut batch = WriteBatch::default();
        // Pruned in two batches, as retention does.
        let seqs: Vec<u64> = (1..first).collect();
        let (a, b) = seqs.split_at(seqs.len() / 2);
        prune(store.cf(Cf::Audit), &mut batch, 1, a);
        prune(store.cf(Cf::Audit), &mut batch, 1, b);
        store.write(batch, false).unwrap();
        let kept = first - 1;
        let mut want = tlog_tiles::sub_tree_index(0, kept, Vec::new());
        want.extend(tlog_tiles::stored_hash_count(kept)..tlog_tiles::stored_hash_count(n));
        want.retain(|&i| keyed(i));
        want.sort_unstable();
        want.dedup();
        prop_assert_eq!(stored_indexes(&store), want);
        let tile = kept / TILE_WIDTH * TILE_WIDTH;
        prop_assert_eq!(stored_tiles(&store), tiles_of(tile, n));
        prop_assert_eq!(Frontier::load(&store, 1, n).unwrap().root(), tree.root());
        for seq in first..=n {
            for size in [seq, n] {
                let reader = Stored(&store);
                prop_assert!(tlog_tiles::prove_record(size, seq - 1, &reader).is_ok());
            }
        }
        prop_assert!(tlog_tiles::prove_tree(n, kept.max(1), &Stored(&store)).is_ok());
    }
}

fn decode(h: &str) -> Vec<u8> {
    use base64::prelude::*;
    BASE64_STANDARD.decode(h).unwrap()
}

#[test]
fn a_pruned_tree_refuses_proofs_of_pruned_rows_by_name() {
    let (_dir, store, _, _) = store_with_rows(600);
    let mut batch = WriteBatch::default();
    let pruned: Vec<u64> = (1..=300).collect();
    prune(store.cf(Cf::Audit), &mut batch, 1, &pruned);
    // The rows themselves go with their nodes, as prune.rs deletes them.
    for &seq in &pruned {
        batch.delete_cf(store.cf(Cf::Audit), keys::row_key(seq, 1000 + seq));
    }
    store.write(batch, false).unwrap();
    match proof::inclusion(&store, 2, 600, 600) {
        Err(proof::ProofError::Gone(m)) => assert_eq!(m, "row 2 was pruned"),
        other => panic!("{other:?}"),
    }
    match proof::inclusion(&store, 301, 601, 600) {
        Err(proof::ProofError::OutOfRange(m)) => {
            assert_eq!(m, "size 601 is past the tree's 600 leaves");
        }
        other => panic!("{other:?}"),
    }
    // The leaves of the first 288 rows went with the last row of each 16.
    match proof::consistency(&store, 2, 600, 600) {
        Err(proof::ProofError::Gone(_)) => {}
        other => panic!("{other:?}"),
    }
    for from in [256, 288, 295, 300] {
        assert!(proof::consistency(&store, from, 600, 600).is_ok(), "{from}");
    }
    assert!(proof::inclusion(&store, 301, 301, 600).is_ok());
}

/// A store as an older layout wrote it: `m:tree` as `tree_meta`, the rows from seq 1 to `n` that
/// `row` keeps, and the nodes (seq, level, index) that `node` keeps; the frontier after them,
/// and the batch, unwritten, for more.
fn store_as_written_before(
    tree_meta: &[u8],
    n: u64,
    row: impl Fn(u64) -> bool,
    node: impl Fn(u64, u8, u64) -> bool,
) -> (tempfile::TempDir, Store, Frontier, WriteBatch) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut tree = Frontier::empty(1);
    let mut batch = WriteBatch::default();
    let audit = store.cf(Cf::Audit);
    batch.put_cf(audit, keys::meta_key(meta::TREE), tree_meta);
    for seq in 1..=n {
        let (key, value) = (keys::row_key(seq, 1000 + seq), format!("{{\"seq\":{seq}}}"));
        if row(seq) {
            batch.put_cf(audit, key, &value);
        }
        tree.append(&key, value.as_bytes(), |level, index, hash| {
            if node(seq, level, index) {
                batch.put_cf(audit, keys::tree_key(index), hash.0);
            }
        });
    }
    (dir, store, tree, batch)
}

/// A store of every node, as written before the thin layout, pruned as it was then: the
/// frontier's roots at the oldest retained row, and every node after it. `m:tree` as it was
/// then, without a layout.
fn store_of_every_node(n: u64, kept: u64) -> (tempfile::TempDir, Store, Frontier) {
    let roots = tlog_tiles::sub_tree_index(0, kept, Vec::new());
    let (dir, store, tree, batch) = store_as_written_before(
        br#"{"origin":1}"#,
        n,
        |seq| seq > kept,
        |_, _, index| index >= tlog_tiles::stored_hash_count(kept) || roots.contains(&index),
    );
    store.write(batch, false).unwrap();
    (dir, store, tree)
}

#[test]
fn a_store_of_every_node_is_thinned_out_at_start_and_proves_as_before() {
    for (n, kept) in [
        (300, 0),
        (300, 100),
        (300, 255),
        (300, 263),
        (40, 40),
        (40, 37),
    ] {
        let (_dir, store, tree) = store_of_every_node(n, kept);
        let frontier = boot::frontier(&store, n).unwrap();
        assert_eq!((frontier.size, &frontier.nodes), (tree.size, &tree.nodes));
        let meta = TreeMeta::read(&store).unwrap().unwrap();
        assert_eq!(meta.layout, Layout::Tiles);
        // The frontier's roots at the oldest retained row keep their keys, the leaf among
        // them joins its tile.
        let mut want = tlog_tiles::sub_tree_index(0, kept, Vec::new());
        want.retain(|&i| tlog_tiles::split_stored_hash_index(i).0 > 0);
        want.extend(
            (tlog_tiles::stored_hash_count(kept)..tlog_tiles::stored_hash_count(n))
                .filter(|&i| keyed(i)),
        );
        want.sort_unstable();
        assert_eq!(stored_indexes(&store), want, "{n} {kept}");
        assert_eq!(
            stored_tiles(&store),
            tiles_of(kept - kept % 2, n),
            "{n} {kept}"
        );
        let last = tiles_of((kept - kept % 2).max(n - n % TILE_WIDTH), n).pop();
        let last = last.map(|(_, _, leaves)| leaves);
        assert_eq!(frontier.tile.leaves, last.unwrap_or_default());
        let root = tree.root();
        for index in kept..n {
            let proof = tlog_tiles::prove_record(n, index, &Stored(&store)).unwrap();
            let seq = index + 1;
            let leaf = leaf_hash(
                &keys::row_key(seq, 1000 + seq),
                format!("{{\"seq\":{seq}}}").as_bytes(),
            );
            tlog_tiles::check_record(&proof, n, root, index, leaf).unwrap();
        }
        // Started again, it is tiled already and reads the same.
        assert_eq!(boot::frontier(&store, n).unwrap(), frontier);
    }
}

/// A store of the thin layout (every leaf under its own key), as written before tiles, of
/// rows from seq 1 to `n`; the tiles below `tiled` already made, as a start cut short leaves
/// it.
fn store_of_thin_layout(n: u64, tiled: u64) -> (tempfile::TempDir, Store, Frontier) {
    let (dir, store, tree, mut batch) = store_as_written_before(
        br#"{"origin":1,"layout":"thin"}"#,
        n,
        |_| true,
        |seq, level, _| match level {
            0 => seq > tiled * TILE_WIDTH,
            level => level >= STORED_LEVEL,
        },
    );
    let audit = store.cf(Cf::Audit);
    for (t, first, leaves) in tiles_of(0, n.min(tiled * TILE_WIDTH)) {
        Tile { first, leaves }.put(audit, &mut batch, t);
    }
    batch.put_cf(audit, keys::meta_key(meta::AUDIT_SEQ), n.to_be_bytes());
    checkpoint::CheckpointKey::load_or_make(&store, &mut batch, uuid::Uuid::nil()).unwrap();
    store.write(batch, false).unwrap();
    (dir, store, tree)
}

/// What `verify` finds in `store`: the tree's size and root, or the first bad seq.
fn verified(store: &Store) -> Result<(u64, String), u64> {
    match verify::verify(store, None, &[], &mut |_, _| {}).unwrap() {
        verify::Verification::Verified(s) => Ok((s.size, s.root)),
        verify::Verification::Broken { seq, .. } => Err(seq),
    }
}

#[test]
fn a_store_of_the_thin_layout_is_tiled_at_start_even_when_a_start_was_cut_short() {
    for (n, tiled) in [(300, 0), (300, 7), (40, 2), (40, 3), (16, 1), (1, 0)] {
        let (_dir, store, tree) = store_of_thin_layout(n, tiled);
        // Before the start: the stored tree reads and verifies alike, half tiled or not.
        let root = proof::b64(&tree.root());
        assert_eq!(verified(&store), Ok((n, root.clone())), "{n} {tiled}");
        assert_eq!(stored_size(&store).unwrap(), n, "{n} {tiled}");
        assert_eq!(
            tlog_tiles::tree_hash(n, &Stored(&store)).unwrap(),
            tree.root(),
            "{n} {tiled}"
        );
        let frontier = boot::frontier(&store, n).unwrap();
        assert_eq!((frontier.size, &frontier.nodes), (tree.size, &tree.nodes));
        assert_eq!(
            TreeMeta::read(&store).unwrap().unwrap().layout,
            Layout::Tiles
        );
        let want: Vec<u64> = (0..tlog_tiles::stored_hash_count(n))
            .filter(|&i| keyed(i))
            .collect();
        assert_eq!(stored_indexes(&store), want, "{n} {tiled}");
        assert_eq!(stored_tiles(&store), tiles_of(0, n), "{n} {tiled}");
        for index in 0..n {
            let proof = tlog_tiles::prove_record(n, index, &Stored(&store)).unwrap();
            tlog_tiles::check_record(&proof, n, tree.root(), index, leaf_of(index + 1)).unwrap();
        }
        assert_eq!(verified(&store), Ok((n, root)), "{n} {tiled}");
        // A leaf changed in its tile is named by its row's seq.
        let seq = n.div_ceil(2);
        let t = (seq - 1) / TILE_WIDTH;
        let (_, first, mut leaves) = stored_tiles(&store).remove(t as usize);
        leaves[((seq - 1) % TILE_WIDTH) as usize].0[7] ^= 1;
        let mut batch = WriteBatch::default();
        Tile { first, leaves }.put(store.cf(Cf::Audit), &mut batch, t);
        store.write(batch, false).unwrap();
        assert_eq!(verified(&store), Err(seq), "{n} {tiled}");
    }
}

/// The writer's batches put a tile once, with the leaves so far: a batch of rows that ends
/// mid-tile puts it once, and the next batch puts it again with its own leaves after them.
#[test]
fn a_batch_puts_the_tile_it_ends_in_once() {
    let (_dir, store, mut tree, _) = store_with_rows(20);
    let audit = store.cf(Cf::Audit);
    let mut batch = WriteBatch::default();
    for seq in 21..=40 {
        let value = format!("{{\"seq\":{seq}}}").into_bytes();
        put_row(
            Some(&mut tree),
            audit,
            &mut batch,
            (seq, 1000 + seq),
            &value,
        );
    }
    tree.flush(audit, &mut batch);
    // 20 rows, tile 1 full (rows 17..=32, put once as it fills), tile 2 with rows 33..=40,
    // and the subtree of rows 17..=32 and that of 1..=32.
    assert_eq!(batch.len(), 20 + 2 + 2);
    store.write(batch, false).unwrap();
    assert_eq!(stored_tiles(&store), tiles_of(0, 40));
    assert_eq!(Frontier::load(&store, 1, 40).unwrap(), tree);
}
