//! The publisher cut short: a redrive whose row cannot be written.

use std::time::Duration;

use ankusa::lifecycle::dead_letters;
use ankusa::store::keys::meta;
use ankusa_sinks::test_support::Receiver;

use crate::lifecycle::publisher::{options, webhook_sink};
use crate::support::eventually;
use crate::support::publisher::Running;
use crate::support::trail::*;

/// A redrive whose removal row cannot be written after it already removed letters stops and
/// says why, with what it did: the letter delivered without its row is kept, for the next
/// redrive to send again with the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_cut_short_by_the_store_reports_what_it_did() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["hook"]);
    let receiver = Receiver::answering(400).await;
    let url = receiver.url();
    for id in ["s1", "s2"] {
        create_source(&trail, ctx("a"), id, "x").await.unwrap();
    }
    let p = Running::start(&trail, vec![webhook_sink(&url)], options()).await;
    eventually("two dead letters", Duration::from_secs(60), async || {
        p.statuses()[0].dead_lettered == 2
    })
    .await;
    eventually("the position", Duration::from_secs(60), async || {
        trail
            .store()
            .meta_u64(&meta::sink_position("hook"))
            .unwrap()
            == 2
    })
    .await;
    receiver.answer(200);
    let scenario = fail::FailScenario::setup();
    // Every write through the syncer; the first (letter 1's row) lands, the next fails.
    fail::cfg("audit::inline", "return").unwrap();
    fail::cfg("audit::write", "1*off->return").unwrap();
    let report = dead_letters::redrive(
        &trail,
        ctx("ops"),
        &p.letter_count("hook").unwrap(),
        &*p.sink("hook").unwrap(),
    )
    .await
    .unwrap();
    scenario.teardown();
    assert_eq!(
        report,
        dead_letters::Redriven {
            delivered: 1,
            remaining: 1,
            stopped: Some("store_unavailable"),
        }
    );
    assert_eq!(receiver.sequences(), vec![1, 2]);
    let kept = dead_letters::list(trail.store(), "hook", 0, 10).unwrap();
    assert_eq!(kept.iter().map(|l| l.seq).collect::<Vec<_>>(), vec![2]);
    let last = all_rows(trail.store()).pop().unwrap();
    assert_eq!(
        (last.action.as_str(), last.resource.as_str()),
        ("dead_letter.redrive", "sinks/hook/dead-letters/1")
    );
    p.stop().await;
    trail.shutdown().await;
}
