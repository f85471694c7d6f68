//! The trail row the benches that build a store write: a source update of about 430 bytes,
//! as a node writes it.

use ankusa::audit::{Row, RowResult, ROW_FORMAT};

/// Row `seq`, committed at `at`, of source `sources/<id>`.
pub fn source_row(seq: u64, at: u64, id: &str) -> Row {
    Row {
        v: ROW_FORMAT,
        seq,
        at,
        actor: "ops-automation".into(),
        remote_ip: Some("10.20.30.40".into()),
        request_id: Some(format!("req-{seq:012}")),
        action: "source.update".into(),
        tenant: Some("tenant-0001".into()),
        resource: format!("sources/{id}"),
        detail: serde_json::Map::from_iter([("fields".to_string(), serde_json::json!(3))]),
        before_hash: Some("ab".repeat(32)),
        after_hash: Some("cd".repeat(32)),
        revision: Some(seq),
        result: RowResult::Ok,
        publish: true,
        refresh: false,
        version: None,
        store: None,
        snapshot: None,
        traceparent: None,
        tracestate: None,
    }
}
