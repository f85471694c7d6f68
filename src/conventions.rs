//! Conventions the code keeps, checked by reading the sources (tests only). Each fails when
//! a file breaks its convention; clippy cannot express these.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir` of this crate's directory (`src`, `sinks/src`), with its path
/// from the crate's directory and its text.
fn sources(dir: &str) -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join(dir), &mut files);
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (path.strip_prefix(root).unwrap().display().to_string(), text)
        })
        .collect()
}

/// `code` without whitespace, so that a call reads the same however it was formatted.
fn flat(code: &str) -> String {
    code.split_whitespace().collect()
}

/// The key argument of each `put_cf(cf, key, value)` call in `flat` code.
fn put_keys(flat: &str) -> Vec<&str> {
    let mut keys = Vec::new();
    for (at, call) in flat.match_indices("put_cf(") {
        let args = &flat[at + call.len()..];
        let (mut depth, mut commas) = (0i32, Vec::new());
        for (i, c) in args.char_indices() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' if depth == 0 => break,
                ')' | ']' | '}' => depth -= 1,
                ',' if depth == 0 => commas.push(i),
                _ => {}
            }
        }
        if let [first, second, ..] = commas[..] {
            keys.push(&args[first + 1..second]);
        }
    }
    keys
}

/// The trail's invariant (next seq, tree, outbox, usage, ceilings) is kept in one place only
/// if no other code puts a row key or an outbox key into a batch, directly or through a
/// binding: every row goes through `Writer::admit` or `Writer::append` to
/// `audit/writer/stage.rs`. Test code (after `#[cfg(test)]`, or in `tests.rs`) is not held.
#[test]
fn no_row_enters_a_batch_but_through_the_writers_append_path() {
    let mut found = Vec::new();
    for (path, text) in sources("src") {
        if path.ends_with("tests.rs") || path.ends_with("conventions.rs") {
            continue;
        }
        let flat = flat(text.split("#[cfg(test)]").next().unwrap_or(""));
        let bound: Vec<&str> = ["row_key(", "outbox_key("]
            .iter()
            .flat_map(|f| flat.match_indices(f).map(|(at, _)| &flat[..at]))
            .filter_map(|before| before.rsplit_once("let")?.1.split_once('='))
            .map(|(name, _)| name.trim_start_matches("mut"))
            .collect();
        for key in put_keys(&flat) {
            let key = key.trim_start_matches('&');
            let key = key.split('.').next().unwrap_or(key);
            if key.contains("row_key(") || key.contains("outbox_key(") || bound.contains(&key) {
                found.push((path.clone(), key.to_owned()));
            }
        }
    }
    let here = |p: &str| p.ends_with("audit/writer/stage.rs");
    assert!(
        found.iter().all(|(p, _)| here(p)),
        "rows put into a batch outside writer/stage.rs: {found:?}"
    );
    assert_eq!(
        found.len(),
        2,
        "the row and its outbox entity, in stage.rs: {found:?}"
    );
}

/// Log lines are named events in `src/telemetry/` and the sinks' `telemetry.rs` (one place
/// for their names, levels and fields, and no secret in a field): no other file calls
/// tracing's log macros or imports them. (clippy's `disallowed-macros` would refuse them too,
/// but its `allow` has no effect on tracing's macros, so it could not let these files be.)
#[test]
fn log_lines_are_named_events_in_telemetry() {
    let macros = ["error", "warn", "info", "debug", "trace", "event"];
    let mut found = Vec::new();
    for (path, text) in sources("src").into_iter().chain(sources("sinks/src")) {
        if path.starts_with("src/telemetry/")
            || path == "sinks/src/telemetry.rs"
            || path.ends_with("conventions.rs")
        {
            continue;
        }
        let flat = flat(&text);
        let called = macros
            .iter()
            .any(|m| flat.contains(&format!("tracing::{m}!")));
        let imported = flat.split("usetracing::").skip(1).any(|used| {
            let used = &used[..used.find(';').unwrap_or(used.len())];
            used.trim_matches(|c| c == '{' || c == '}')
                .split(',')
                .any(|item| macros.contains(&item))
        });
        if called || imported {
            found.push(path);
        }
    }
    assert!(found.is_empty(), "log macros outside telemetry: {found:?}");
}

/// `TrailOptions::bench_without_index` exists for the audit benchmark only: no code of the
/// node sets it but the options' default (`false`), so no config key or path of the node can
/// leave a row's index entries out.
#[test]
fn only_the_audit_benchmark_leaves_index_entries_out() {
    let setting: Vec<String> = sources("src")
        .into_iter()
        .filter(|(path, _)| !path.ends_with("conventions.rs"))
        .filter(|(_, text)| flat(text).contains("bench_without_index:"))
        .map(|(path, _)| path)
        .collect();
    assert_eq!(setting, ["src/audit/mod.rs"], "set outside its default");
    let (_, options) = sources("src/audit")
        .into_iter()
        .find(|(path, _)| path == "src/audit/mod.rs")
        .unwrap();
    assert!(flat(&options).contains("bench_without_index:false,"));
}
