//! Queries answered from the rows' index entries give exactly the rows a full scan with the
//! same filter gives, in the same order and pages: on random trails (actors, tenants,
//! subjects, results, commit times), with random filters, page sizes and budgets.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};

use crate::support::trail::*;
use ankusa::audit::{
    page_within, Change, CommitError, Filter, Finish, ManualClock, Row, RowResult, Trail,
    TrailOptions,
};
use ankusa::store::Store;

const ACTORS: [&str; 3] = ["alice", "bob", "system"];
const TENANTS: [Option<&str>; 3] = [Some("t1"), Some("t2"), None];
const SUBJECTS: [&str; 4] = ["routes/r1", "routes/r2", "sources/s1", "overrides/k"];
const T0: u64 = 1_700_000_000_000;

/// One change of a random trail: who, which tenant and subject, how it ended, how much later.
#[derive(Debug, Clone)]
struct Step {
    actor: usize,
    tenant: usize,
    subject: usize,
    result: RowResult,
    later_ms: u64,
}

fn step() -> impl Strategy<Value = Step> {
    let result = prop_oneof![
        6 => Just(RowResult::Ok),
        1 => Just(RowResult::Failed),
        1 => Just(RowResult::Interrupted),
    ];
    (0..3usize, 0..3usize, 0..4usize, result, 0..5_000u64).prop_map(
        |(actor, tenant, subject, result, later_ms)| Step {
            actor,
            tenant,
            subject,
            result,
            later_ms,
        },
    )
}

fn filter() -> impl Strategy<Value = Filter> {
    (
        proptest::option::of(0..3usize),
        proptest::option::of(0..3usize),
        proptest::option::of(0..4usize),
        proptest::option::of(prop_oneof![
            Just(RowResult::Ok),
            Just(RowResult::Failed),
            Just(RowResult::Interrupted)
        ]),
        proptest::option::of(0..150_000u64),
        proptest::option::of(0..150_000u64),
        any::<bool>(),
    )
        .prop_map(
            |(actor, tenant, subject, result, from, until, by_action)| Filter {
                actor: actor.map(|a| ACTORS[a].to_owned()),
                tenant: tenant.and_then(|t| TENANTS[t]).map(str::to_owned),
                subject: subject.map(|s| SUBJECTS[s].to_owned()),
                result,
                from: from.map(|f| T0 + f),
                until: until.map(|u| T0 + u),
                action: by_action.then(|| "route.update".to_owned()),
                ..Filter::default()
            },
        )
}

/// Commit `steps` on a trail whose clock moves by each step's `later_ms`.
async fn build(trail: &Trail, clock: &ManualClock, steps: &[Step]) {
    let mut now = T0;
    for s in steps {
        now += s.later_ms;
        clock.set(now);
        let mut change = Change::new("route.update", SUBJECTS[s.subject]);
        if let Some(t) = TENANTS[s.tenant] {
            change = change.tenant(t);
        }
        match s.result {
            RowResult::Ok => {
                trail
                    .commit(ctx(ACTORS[s.actor]), move |_tx| {
                        Ok::<_, CommitError<()>>((change, ()))
                    })
                    .await
                    .unwrap();
            }
            how => {
                let pending = trail
                    .begin::<()>(ctx(ACTORS[s.actor]), change)
                    .await
                    .unwrap();
                let finish = match how {
                    RowResult::Failed => Finish::NotApplied,
                    _ => Finish::Unknown,
                };
                trail.finish(pending, finish).await.unwrap();
            }
        }
    }
}

/// What a full scan with `filter` gives, written here apart from the node's code.
fn expected(rows: &[Row], f: &Filter) -> Vec<u64> {
    rows.iter()
        .filter(|r| f.actor.as_ref().is_none_or(|a| &r.actor == a))
        .filter(|r| {
            f.tenant
                .as_ref()
                .is_none_or(|t| r.tenant.as_ref() == Some(t))
        })
        .filter(|r| f.subject.as_ref().is_none_or(|s| &r.resource == s))
        .filter(|r| f.result.is_none_or(|x| r.result == x))
        .filter(|r| f.from.is_none_or(|t| r.at >= t))
        .filter(|r| f.until.is_none_or(|t| r.at < t))
        .filter(|r| f.action.as_ref().is_none_or(|a| &r.action == a))
        .map(|r| r.seq)
        .collect()
}

/// Every page of `filter`, `limit` rows at a time within `budget`, as a client pages.
fn paged(store: &Store, filter: &Filter, limit: usize, budget: usize) -> Vec<u64> {
    let (mut seqs, mut after, mut calls) = (Vec::new(), 0, 0);
    loop {
        calls += 1;
        assert!(calls < 10_000, "paging does not end");
        let page = page_within(store, after, limit + 1, filter, budget).unwrap();
        let mut rows = page.rows;
        let next = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(|r| r.seq)
        } else {
            page.cut_at
        };
        seqs.extend(rows.iter().map(|r| r.seq));
        match next {
            Some(next) => after = next,
            None => return seqs,
        }
    }
}

#[test]
fn indexed_queries_answer_what_a_full_scan_answers() {
    let config = ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    };
    let strategy = (
        proptest::collection::vec(step(), 1..60),
        proptest::collection::vec((filter(), 1..8usize, 1..20usize), 12),
    );
    TestRunner::new(config)
        .run(&strategy, |(steps, queries)| {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let dir = tempfile::tempdir().unwrap();
            let clock = Arc::new(ManualClock::new(T0));
            let options = TrailOptions::default();
            let trail =
                Trail::start(Store::open(dir.path()).unwrap(), options, clock.clone()).unwrap();
            rt.block_on(build(&trail, &clock, &steps));
            let store = trail.store().clone();
            let rows = all_rows(&store);
            for (filter, limit, budget) in &queries {
                let want = expected(&rows, filter);
                prop_assert_eq!(
                    &paged(&store, filter, *limit, *budget),
                    &want,
                    "{:?}",
                    filter
                );
                let whole = page_within(&store, 0, usize::MAX, filter, usize::MAX).unwrap();
                let got: Vec<u64> = whole.rows.iter().map(|r| r.seq).collect();
                prop_assert_eq!(got, want);
            }
            rt.block_on(trail.shutdown());
            Ok(())
        })
        .unwrap();
}
