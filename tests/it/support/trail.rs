//! Trails on fresh stores, the changes the tests commit through them, and what a store
//! holds, read back.

use std::path::Path;
use std::sync::Arc;

use ankusa::audit::{
    page, Change, CommitError, Committed, Context, Filter, Row, SystemClock, Trail, TrailOptions,
};
use ankusa::store::{Cf, Store};
use serde_json::{json, Value};

/// A trail on a fresh store in `dir`.
pub fn open_trail(dir: &Path, lifecycle: bool) -> Trail {
    open_trail_with(
        dir,
        TrailOptions {
            lifecycle,
            ..TrailOptions::default()
        },
    )
}

/// A trail on a fresh store in `dir`, with lifecycle sinks `sinks` configured.
pub fn open_trail_with_sinks(dir: &Path, sinks: &[&str]) -> Trail {
    open_trail_with(
        dir,
        TrailOptions {
            lifecycle: true,
            sinks: sinks.iter().map(|s| s.to_string()).collect(),
            ..TrailOptions::default()
        },
    )
}

/// A trail on a fresh store in `dir` with `options`, on the system clock.
pub fn open_trail_with(dir: &Path, options: TrailOptions) -> Trail {
    let store = Store::open(dir).expect("open store");
    Trail::start(store, options, Arc::new(SystemClock)).expect("start trail")
}

/// The RocksDB of the stopped store in `dir`, opened directly with every column family, for
/// tests that damage a store the way a bug or a disk could.
pub fn open_stopped(dir: &Path) -> rocksdb::DB {
    let names: Vec<&str> = Cf::ALL.iter().map(|cf| cf.name()).collect();
    rocksdb::DB::open_cf(&rocksdb::Options::default(), dir, names).expect("open stopped store")
}

/// An operator context.
pub fn ctx(actor: &str) -> Context {
    Context::new(
        actor,
        Some("192.0.2.7".into()),
        Some(format!("req-{actor}")),
    )
}

/// Why a test change was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum TestRefusal {
    Exists,
    Missing,
}

/// Create source `id` with `secret` unless it exists: the shape of every local-subject change.
pub async fn create_source(
    trail: &Trail,
    ctx: Context,
    id: &str,
    secret: &str,
) -> Result<Committed<Value>, CommitError<TestRefusal>> {
    let id = id.to_owned();
    let secret = secret.to_owned();
    trail
        .commit(ctx, move |tx| {
            let key = format!("t1/{id}").into_bytes();
            if tx.get(Cf::Sources, &key)?.is_some() {
                return Err(CommitError::Refused(TestRefusal::Exists));
            }
            let subject = json!({"id": id, "tenant": "t1", "secret": secret, "revision": 1});
            tx.put_json(Cf::Sources, key, &subject)?;
            let change = Change::new("source.create", format!("sources/{id}"))
                .tenant("t1")
                .detail("fields", 3)
                .states(None, Some(subject.clone()))
                .revision(1)
                .entity(json!({"id": id, "tenant": "t1", "revision": 1}));
            Ok((change, subject))
        })
        .await
}

/// Set source `id`'s secret, bumping its revision.
pub async fn update_secret(
    trail: &Trail,
    ctx: Context,
    id: &str,
    secret: &str,
) -> Result<Committed<Value>, CommitError<TestRefusal>> {
    update_secret_then(trail, ctx, id, secret, || {}).await
}

/// [`update_secret`], calling `prepared` on the writer thread once the change is prepared
/// (validated and staged in its group, not yet written).
pub async fn update_secret_then(
    trail: &Trail,
    ctx: Context,
    id: &str,
    secret: &str,
    prepared: impl FnOnce() + Send + 'static,
) -> Result<Committed<Value>, CommitError<TestRefusal>> {
    let id = id.to_owned();
    let secret = secret.to_owned();
    trail
        .commit(ctx, move |tx| {
            let staged = stage_secret(tx, &id, &secret);
            prepared();
            staged
        })
        .await
}

/// The staging of [`update_secret`]: source `id` of `t1` gets `secret` and its next revision.
fn stage_secret(
    tx: &mut ankusa::audit::Tx<'_>,
    id: &str,
    secret: &str,
) -> Result<(Change, Value), CommitError<TestRefusal>> {
    let key = format!("t1/{id}").into_bytes();
    let before: Value = tx
        .get_json(Cf::Sources, &key)?
        .ok_or(CommitError::Refused(TestRefusal::Missing))?;
    let revision = before["revision"].as_u64().unwrap_or(0) + 1;
    let mut after = before.clone();
    after["secret"] = json!(secret);
    after["revision"] = json!(revision);
    tx.put_json(Cf::Sources, key, &after)?;
    let change = Change::new("source.update", format!("sources/{id}"))
        .tenant("t1")
        .states(Some(before), Some(after.clone()))
        .revision(revision)
        .entity(json!({"id": id, "tenant": "t1", "revision": revision}));
    Ok((change, after))
}

/// Source `id` of tenant `t1` as stored.
#[cfg(feature = "failpoints")]
pub fn stored_source(store: &Store, id: &str) -> Value {
    let bytes = store
        .get(Cf::Sources, format!("t1/{id}").as_bytes())
        .expect("read source")
        .unwrap_or_else(|| panic!("source {id} is not stored"));
    serde_json::from_slice(&bytes).expect("source JSON")
}

/// Every row of the trail, in seq order.
pub fn all_rows(store: &Store) -> Vec<Row> {
    page(store, 0, usize::MAX, &Filter::default()).expect("page")
}

/// Every key of a column family.
pub fn all_keys(store: &Store, cf: Cf) -> Vec<Vec<u8>> {
    let mut keys = vec![];
    store
        .scan(cf, b"", b"", |k, _| {
            keys.push(k.to_vec());
            true
        })
        .expect("scan");
    keys
}

/// The index entries the trail must hold: each row's, computed here from the rows as the
/// key layout says (actor, subject, tenant, time, and a result other than `ok`).
pub fn expected_index(store: &Store) -> std::collections::BTreeSet<Vec<u8>> {
    use ankusa::audit::RowResult;
    use ankusa::store::keys::Index;
    let mut expected = std::collections::BTreeSet::new();
    for row in all_rows(store) {
        let result = match row.result {
            RowResult::Ok => None,
            RowResult::Failed => Some(Index::Result(1)),
            RowResult::Interrupted => Some(Index::Result(2)),
        };
        let indexes = [
            Some(Index::Actor(&row.actor)),
            Some(Index::Subject(&row.resource)),
            row.tenant.as_deref().map(Index::Tenant),
            Some(Index::Time(row.at)),
            result,
        ];
        expected.extend(indexes.iter().flatten().map(|i| i.key(row.seq).unwrap()));
    }
    expected
}

/// The index entries the trail holds.
pub fn stored_index(store: &Store) -> std::collections::BTreeSet<Vec<u8>> {
    all_keys(store, Cf::Audit)
        .into_iter()
        .filter(|k| k.first() == Some(&ankusa::store::keys::INDEX))
        .collect()
}

/// Every row has its index entries and every entry its row.
pub fn assert_index_exact(store: &Store) {
    let (stored, expected) = (stored_index(store), expected_index(store));
    let extra: Vec<_> = stored.difference(&expected).map(hex::encode).collect();
    let missing: Vec<_> = expected.difference(&stored).map(hex::encode).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "index entries without their row: {extra:?}; rows without their entries: {missing:?}"
    );
}
