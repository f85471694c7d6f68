//! The auditor's questions answered two ways on the same trail, in turns: through the index
//! entries, as `GET /admin/v1/audit` reads them (`Trail::page`, its limit and budget, paged
//! on with `next` until the answer is whole), and by a full scan of the rows applying the
//! same `Filter::matches` (what every filter cost before the indexes: the scan path of
//! `audit::page_within`). Both must find the same rows, as many as the trail was made with.

use std::time::{Duration, Instant};

use ankusa::audit::{decode_row, Filter, Trail};
use ankusa::store::{keys, Cf, Store};

use crate::figures::percentile;

/// The largest page `GET /admin/v1/audit` serves (`api::subject::page_limit`).
const LIMIT: usize = 1_000;
/// The rows or index entries one request reads at most (`api/audit.rs`'s `SCAN_BUDGET`).
const SCAN_BUDGET: usize = 50_000;

/// One question's times, each sorted.
pub struct Answered {
    pub name: &'static str,
    pub rows: usize,
    pub index: Vec<Duration>,
    pub scan: Vec<Duration>,
}

impl Answered {
    /// p50 and p99 of the index's answers, in ms.
    pub fn index_ms(&self) -> (f64, f64) {
        (ms(&self.index, 0.50), ms(&self.index, 0.99))
    }

    /// p50 and p99 of the scans, in ms.
    pub fn scan_ms(&self) -> (f64, f64) {
        (ms(&self.scan, 0.50), ms(&self.scan, 0.99))
    }
}

fn ms(sorted: &[Duration], p: f64) -> f64 {
    percentile(sorted, p).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

/// The seqs that answer `filter`, read as a client of `GET /admin/v1/audit` reads them: a
/// page of up to [`LIMIT`] rows (one more asked, to know whether more follow), then the next
/// from its `next`, until there is none.
pub async fn through_index(trail: &Trail, filter: &Filter) -> Vec<u64> {
    let (mut seqs, mut after) = (vec![], 0);
    loop {
        let page = trail
            .page(after, LIMIT + 1, filter.clone(), SCAN_BUDGET)
            .await
            .unwrap();
        let mut rows = page.rows;
        let next = match rows.len() > LIMIT {
            true => {
                rows.truncate(LIMIT);
                rows.last().map(|r| r.seq)
            }
            false => page.cut_at,
        };
        seqs.extend(rows.iter().map(|r| r.seq));
        match next {
            Some(seq) => after = seq,
            None => return seqs,
        }
    }
}

/// The seqs that answer `filter`, by decoding every row and matching it.
pub fn by_scan(store: &Store, filter: &Filter) -> Vec<u64> {
    let mut seqs = vec![];
    store
        .scan(Cf::Audit, &[keys::ROW], &keys::row_seek(1), |k, v| {
            let row = decode_row(k, v).unwrap();
            if filter.matches(&row) {
                seqs.push(row.seq);
            }
            true
        })
        .unwrap();
    seqs
}

/// Each question answered in `rounds` rounds of one scan and `per_round` index answers, the
/// questions taking turns within a round, so that both ways see the same machine. The first
/// round's answers are checked against each other and against `expected`.
pub fn answer(
    runtime: &tokio::runtime::Runtime,
    trail: &Trail,
    questions: &[(&'static str, Filter, u64)],
    (rounds, per_round): (usize, usize),
) -> Vec<Answered> {
    let mut answered: Vec<Answered> = questions
        .iter()
        .map(|&(name, _, _)| Answered {
            name,
            rows: 0,
            index: vec![],
            scan: vec![],
        })
        .collect();
    for round in 0..rounds {
        for ((name, filter, expected), a) in questions.iter().zip(&mut answered) {
            let started = Instant::now();
            let scanned = by_scan(trail.store(), filter);
            a.scan.push(started.elapsed());
            for _ in 0..per_round {
                let started = Instant::now();
                let indexed = runtime.block_on(through_index(trail, filter));
                a.index.push(started.elapsed());
                if round == 0 {
                    assert_eq!(indexed, scanned, "{name}: the index and the scan agree");
                    assert_eq!(indexed.len() as u64, *expected, "{name}: the rows made");
                    a.rows = indexed.len();
                }
            }
        }
    }
    for a in &mut answered {
        a.index.sort();
        a.scan.sort();
    }
    answered
}

/// Print each question's figures: p50 and p99 of both ways and their ratios.
pub fn print(answered: &[Answered]) {
    println!(
        "{:>12} {:>6} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11}",
        "question",
        "rows",
        "index p50",
        "index p99",
        "scan p50",
        "scan p99",
        "scan/index",
        "(p99s)"
    );
    for a in answered {
        let ((i50, i99), (s50, s99)) = (a.index_ms(), a.scan_ms());
        println!(
            "{:>12} {:>6} {:>8.2}ms {:>8.2}ms {:>8.0}ms {:>8.0}ms {:>10.0}x {:>10.0}x",
            a.name,
            a.rows,
            i50,
            i99,
            s50,
            s99,
            s50 / i50,
            s99 / i99
        );
    }
    println!(
        "targets: scan/index >= 100x (the p50s), index p99 <= 20 ms; {} index answers and {} \
         scans per question",
        answered[0].index.len(),
        answered[0].scan.len()
    );
}
