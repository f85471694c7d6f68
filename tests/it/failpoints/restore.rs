//! A forced restore cut short: the replaced store cannot be moved aside.

use ankusa::store::Store;

use crate::restore::store::{backed_up_with_one_source, restore_into};
use crate::support::trail::{all_rows, create_source, ctx};

/// A forced restore whose last step (moving the replaced store to its `.replaced-` name)
/// fails is done all the same, and the replaced store is kept where it is, whole.
#[tokio::test]
async fn a_replaced_store_that_cannot_be_moved_aside_is_kept_whole() {
    let scenario = fail::FailScenario::setup();
    let (dir, path, backups, trail) = backed_up_with_one_source().await;
    create_source(&trail, ctx("a"), "s2", "x").await.unwrap();
    trail.shutdown().await;
    drop(trail);
    fail::cfg("restore::aside", "return").unwrap();
    let restored = restore_into(&backups, None, &path, true);
    let kept = restored.replaced.expect("where the replaced store is");
    assert!(
        kept.to_string_lossy().contains(".restore-"),
        "under its temporary name: {}",
        kept.display()
    );
    assert_eq!(all_rows(&Store::open(&kept).unwrap()).len(), 2);
    assert_eq!(all_rows(&Store::open(&path).unwrap()).len(), 1);
    scenario.teardown();
    drop(dir);
}
