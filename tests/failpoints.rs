//! Failures injected at named points (the `failpoints` feature). Kept in their own test
//! binary: a failpoint is process-wide, and must not hit tests running beside it.
#![cfg(feature = "failpoints")]

mod common;

use ankusa::audit::CommitError;
use ankusa::store::{keys::meta, Cf};
use common::*;

#[tokio::test]
async fn a_store_that_cannot_be_written_refuses_the_change_and_applies_nothing() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    fail::cfg("audit::write", "return").unwrap();
    let mut tasks = vec![];
    for i in 0..10 {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            create_source(&trail, ctx("f"), &format!("s{i}"), "x").await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap_err(), CommitError::StoreUnavailable);
    }
    assert!(all_rows(trail.store()).is_empty());
    assert!(all_keys(trail.store(), Cf::Sources).is_empty());
    assert_eq!(trail.store().meta_u64(meta::AUDIT_SEQ).unwrap(), 0);
    fail::remove("audit::write");
    // The unwritten group consumed no seq.
    assert_eq!(
        create_source(&trail, ctx("f"), "s0", "x")
            .await
            .unwrap()
            .seq,
        1
    );
    trail.shutdown().await;
    scenario.teardown();
}
