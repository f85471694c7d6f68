//! A row checked without the node, as an auditor handed a proof would: the proof's
//! `leaf_input` names the row served by `GET /admin/v1/audit/{seq}`, its leaf and path verify
//! against the checkpoint's root with ct-merkle (RFC 6962), and the checkpoint's signature with
//! ring (Ed25519): implementations the node does not use.

use base64::prelude::*;
use reqwest::Method;
use serde_json::{json, Value};

use crate::api::lifecycle::create_source;
use crate::support::node::*;
use crate::trail::tree::check_note;

/// An RFC 6962 root of `size` leaves, as ct-merkle takes it.
pub(crate) type Root = ct_merkle::RootHash<sha2_011::Sha256>;

/// The store's checkpoint verifier key, as `ankusa audit key` prints it.
pub(crate) fn verifier_key(node: &TestNode) -> String {
    let key = std::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["audit", "key", "--store"])
        .arg(node.data_dir())
        .env_remove("ANKUSA_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&key.stderr);
    assert!(key.status.success(), "ankusa audit key: {stderr}");
    String::from_utf8(key.stdout).unwrap().trim().to_owned()
}

/// The root `checkpoint` (as `GET /admin/v1/audit/checkpoint` serves it) signs, once its
/// signature verified with ring against `key`.
pub(crate) fn signed_root(checkpoint: &Value, key: &str) -> Root {
    let (origin, size, root) = check_note(checkpoint["checkpoint"].as_str().unwrap(), key);
    assert_eq!(json!(origin), checkpoint["origin"]);
    assert_eq!(json!(size), checkpoint["size"]);
    assert_eq!(json!(BASE64_STANDARD.encode(&root)), checkpoint["root"]);
    let digest = sha2_011::digest::Output::<sha2_011::Sha256>::try_from(root.as_slice()).unwrap();
    Root::new(digest, size)
}

/// `leaf_input` (base64) decoded, once it is checked to be row `row`'s key and value: `a`,
/// the seq, the commit time, then the row as served.
pub(crate) fn leaf_input_of(leaf_input: &Value, row: &Value) -> Vec<u8> {
    let input = BASE64_STANDARD
        .decode(leaf_input.as_str().unwrap())
        .unwrap();
    assert_eq!(input[0], b'a');
    assert_eq!(
        json!(u64::from_be_bytes(input[1..9].try_into().unwrap())),
        row["seq"]
    );
    let at = u64::from_be_bytes(input[9..17].try_into().unwrap());
    assert_eq!(json!(at), row["at"]);
    let stored: Value = serde_json::from_slice(&input[17..]).unwrap();
    assert_eq!(&stored, row);
    input
}

/// Whether ct-merkle (another RFC 6962 implementation) accepts `input` at leaf `index` with
/// the base64 audit path `proof` against `root`.
pub(crate) fn proves(root: &Root, input: &[u8], index: u64, proof: &Value) -> bool {
    let path: Vec<u8> = proof
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|h| BASE64_STANDARD.decode(h.as_str().unwrap()).unwrap())
        .collect();
    let path = ct_merkle::InclusionProof::<sha2_011::Sha256>::try_from_bytes(path).unwrap();
    root.verify_inclusion(&input, index, &path).is_ok()
}

/// `input` with one byte of the row's JSON changed.
pub(crate) fn tampered(input: &[u8]) -> Vec<u8> {
    let mut forged = input.to_vec();
    let last = forged.len() - 2;
    forged[last] ^= 1;
    forged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rows_leaf_is_recomputed_from_what_the_api_serves() {
    let node = TestNode::start_with(|v| v["audit"]["checkpoint_rows"] = json!(4)).await;
    for i in 1..=5 {
        create_source(&node, &format!("s{i}")).await;
    }
    // Row 5 is the checkpoint of the 4 rows before it.
    let checkpoint = node
        .call(Method::GET, "/admin/v1/audit/checkpoint", AUDITOR, None)
        .await
        .json();
    let size = checkpoint["size"].as_u64().unwrap();
    assert_eq!(size, 4);
    let root = signed_root(&checkpoint, &verifier_key(&node));
    for seq in 1..=size {
        let row = node.row(seq).await;
        let proof = node
            .call(
                Method::GET,
                &format!("/admin/v1/audit/{seq}/proof?size={size}"),
                AUDITOR,
                None,
            )
            .await
            .json();
        let input = leaf_input_of(&proof["leaf_input"], &row);
        let index = proof["index"].as_u64().unwrap();
        assert!(
            proves(&root, &input, index, &proof["proof"]),
            "ct-merkle accepts the leaf and its path"
        );
        // A row changed in any byte no longer verifies.
        assert!(!proves(&root, &tampered(&input), index, &proof["proof"]));
    }
    node.stop().await;
}
