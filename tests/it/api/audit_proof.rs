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
    let key = std::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["audit", "key", "--store"])
        .arg(node.data_dir())
        .env_remove("ANKUSA_CONFIG")
        .output()
        .unwrap();
    let key = String::from_utf8(key.stdout).unwrap();
    let (_, signed_size, root) = check_note(checkpoint["checkpoint"].as_str().unwrap(), key.trim());
    assert_eq!(signed_size, size);
    let digest = sha2_011::digest::Output::<sha2_011::Sha256>::try_from(root.as_slice()).unwrap();
    let root = ct_merkle::RootHash::<sha2_011::Sha256>::new(digest, size);
    for seq in 1..=size {
        let row = node
            .call(
                Method::GET,
                &format!("/admin/v1/audit/{seq}"),
                AUDITOR,
                None,
            )
            .await
            .json();
        let proof = node
            .call(
                Method::GET,
                &format!("/admin/v1/audit/{seq}/proof?size={size}"),
                AUDITOR,
                None,
            )
            .await
            .json();
        let input = BASE64_STANDARD
            .decode(proof["leaf_input"].as_str().unwrap())
            .unwrap();
        // The key: `a`, the seq, the commit time; then the row as served.
        assert_eq!(input[0], b'a');
        assert_eq!(u64::from_be_bytes(input[1..9].try_into().unwrap()), seq);
        let at = u64::from_be_bytes(input[9..17].try_into().unwrap());
        assert_eq!(json!(at), row["at"]);
        let stored: Value = serde_json::from_slice(&input[17..]).unwrap();
        assert_eq!(stored, row);
        // The leaf and its path, by another RFC 6962 implementation.
        let path: Vec<u8> = proof["proof"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|h| BASE64_STANDARD.decode(h.as_str().unwrap()).unwrap())
            .collect();
        let path = ct_merkle::InclusionProof::<sha2_011::Sha256>::try_from_bytes(path).unwrap();
        let index = proof["index"].as_u64().unwrap();
        root.verify_inclusion(&input, index, &path)
            .expect("ct-merkle accepts the leaf and its path");
        // A row changed in any byte no longer verifies.
        let mut forged = input.clone();
        let last = forged.len() - 2;
        forged[last] ^= 1;
        assert!(root.verify_inclusion(&forged, index, &path).is_err());
    }
    node.stop().await;
}
