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

/// A store with `n` rows (seq 1..=n) and their tree nodes, and the frontier after them.
fn store_with_rows(n: u64) -> (tempfile::TempDir, Store, Frontier, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut tree = Frontier::empty(1);
    let mut inputs = Vec::new();
    let mut batch = WriteBatch::default();
    TreeMeta::put_thin(store.cf(Cf::Audit), &mut batch, 1);
    for seq in 1..=n {
        let value = format!("{{\"seq\":{seq}}}").into_bytes();
        Frontier::put_row(
            Some(&mut tree),
            store.cf(Cf::Audit),
            &mut batch,
            (seq, 1000 + seq),
            &value,
        );
        inputs.push(leaf_input(&keys::row_key(seq, 1000 + seq), &value));
    }
    store.write(batch, false).unwrap();
    (dir, store, tree, inputs)
}

/// Whether the thin layout stores the node at `index`.
fn thin(index: u64) -> bool {
    Layout::Thin.stores(tlog_tiles::split_stored_hash_index(index).0)
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
        let want: Vec<u64> = (0..tlog_tiles::stored_hash_count(n)).filter(|&i| thin(i)).collect();
        prop_assert_eq!(stored_indexes(&store), want);
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
    /// retained row, the leaves of the 16 rows it sits in, and the nodes of the rows after
    /// it; every root and proof about the retained rows still reads.
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
        let block = kept >> STORED_LEVEL << STORED_LEVEL;
        want.extend((block..kept).map(|leaf| tlog_tiles::stored_hash_index(0, leaf)));
        want.extend(tlog_tiles::stored_hash_count(kept)..tlog_tiles::stored_hash_count(n));
        want.retain(|&i| thin(i));
        want.sort_unstable();
        want.dedup();
        prop_assert_eq!(stored_indexes(&store), want);
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

/// A store of every node, as written before the thin layout, pruned as it was then: the
/// frontier's roots at the oldest retained row, and every node after it.
fn store_of_every_node(n: u64, kept: u64) -> (tempfile::TempDir, Store, Frontier) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let audit = store.cf(Cf::Audit);
    let mut tree = Frontier::empty(1);
    let mut batch = WriteBatch::default();
    batch.put_cf(audit, keys::meta_key(meta::TREE), br#"{"origin":1}"#);
    let roots = tlog_tiles::sub_tree_index(0, kept, Vec::new());
    for seq in 1..=n {
        let (key, value) = (keys::row_key(seq, 1000 + seq), format!("{{\"seq\":{seq}}}"));
        if seq > kept {
            batch.put_cf(audit, key, &value);
        }
        tree.append(&key, value.as_bytes(), |_, index, hash| {
            if index >= tlog_tiles::stored_hash_count(kept) || roots.contains(&index) {
                batch.put_cf(audit, keys::tree_key(index), hash.0);
            }
        });
    }
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
        assert_eq!(frontier, tree, "{n} {kept}");
        let meta = TreeMeta::read(&store).unwrap().unwrap();
        assert_eq!(meta.layout, Layout::Thin);
        let mut want = tlog_tiles::sub_tree_index(0, kept, Vec::new());
        want.extend(
            (tlog_tiles::stored_hash_count(kept)..tlog_tiles::stored_hash_count(n))
                .filter(|&i| thin(i)),
        );
        want.sort_unstable();
        assert_eq!(stored_indexes(&store), want, "{n} {kept}");
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
        // Started again, it is thin already and reads the same.
        assert_eq!(boot::frontier(&store, n).unwrap(), tree);
    }
}
