//! The replica file: exact bytes, reload, atomic replacement, damage.

use serde_json::json;

use super::*;
use crate::replica::event::{Change, Kind, Meaning};
use crate::replica::version::Version;

fn sample() -> ReplicaFile {
    let mut replica = Replica::default();
    let change = Change {
        kind: Kind::Route,
        store: "redis:a".into(),
        key: "t/routes/r1".into(),
        version: Version(3),
        entity: Some(json!({"id": "r1", "enabled": true})),
        snapshot: None,
    };
    replica.apply(Meaning::Change(change));
    let progress = Progress {
        kafka: Some(KafkaProgress {
            topic: "events".into(),
            next: [(0, 12), (1, 0)].into(),
        }),
        http: BTreeMap::new(),
    };
    ReplicaFile {
        format: FORMAT,
        progress,
        replica,
    }
}

#[test]
fn the_file_is_this_json_and_reloads_equal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replica.json");
    assert_eq!(load(&path).unwrap(), None, "no file: a new replica");
    save(&path, &sample()).unwrap();
    let expected = concat!(
        r#"{"format":1,"progress":{"kafka":{"topic":"events","next":{"0":12,"1":0}}},"#,
        r#""replica":{"subjects":{"redis:a":{"t/routes/r1":{"kind":"route","#,
        r#""version":"00000000000000000003","entity":{"enabled":true,"id":"r1"}}}},"#,
        r#""snapshots":{},"completed":[]}}"#,
        "\n"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), expected);
    assert_eq!(load(&path).unwrap(), Some(sample()));
}

#[test]
fn a_crash_before_the_rename_leaves_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replica.json");
    save(&path, &ReplicaFile::default()).unwrap();
    let staged = stage(&path, &encode(&sample())).unwrap();
    // What a kill -9 between the write and the rename leaves: the temporary file, in place.
    let left = staged.temp.into_temp_path().keep().unwrap();
    assert!(left.is_file());
    assert_eq!(load(&path).unwrap(), Some(ReplicaFile::default()));
    // The next write replaces the file all the same.
    save(&path, &sample()).unwrap();
    assert_eq!(load(&path).unwrap(), Some(sample()));
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "the file and the crash's leftover only: {names:?}"
    );
    assert!(names
        .iter()
        .any(|n| n.starts_with(".replica.json.") && n.ends_with(".tmp")));
}

#[test]
fn a_damaged_file_is_an_error_never_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replica.json");
    let good = String::from_utf8(encode(&sample())).unwrap();
    let cases = [
        (good[..good.len() / 2].to_owned(), "EOF while parsing"),
        (
            good.replace("\"format\":1", "\"format\":2"),
            "format 2, this build reads 1",
        ),
        (
            good.replace("00000000000000000003", "3"),
            "replica.subjects.redis:a.t/routes/r1.version",
        ),
        (good.replace("\"next\"", "\"nxt\""), "unknown field `nxt`"),
        (format!("{good}{{}}"), "trailing characters"),
        (String::new(), "EOF"),
    ];
    for (text, says) in cases {
        std::fs::write(&path, &text).unwrap();
        let e = load(&path).unwrap_err();
        assert!(matches!(e, FileError::Damaged { .. }), "{e}");
        let shown = e.to_string();
        assert!(shown.contains(says), "{shown} should say {says}");
        assert!(shown.contains("replica.json"), "{shown}");
    }
}

#[test]
fn a_bare_file_name_is_written_in_the_current_directory() {
    assert_eq!(directory(Path::new("replica.json")), Path::new("."));
    assert_eq!(directory(Path::new("/a/replica.json")), Path::new("/a"));
    let e = save(Path::new("/"), &sample()).unwrap_err();
    assert!(matches!(e, FileError::Io { .. }), "{e}");
}

/// A replica kept by `follow http` from two nodes.
fn watched() -> ReplicaFile {
    let mut file = sample();
    file.progress.kafka = None;
    let at = |position, incarnation: &str| WatchPosition {
        position,
        incarnation: incarnation.into(),
    };
    file.progress.http = [
        ("http://a:8080".to_owned(), at(42, "0b6e")),
        ("http://b:8080".to_owned(), at(7, "91fa")),
    ]
    .into();
    file
}

#[test]
fn http_positions_are_this_json_and_reload_equal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replica.json");
    save(&path, &watched()).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let expected = concat!(
        r#"{"format":1,"progress":{"http":{"#,
        r#""http://a:8080":{"position":42,"incarnation":"0b6e"},"#,
        r#""http://b:8080":{"position":7,"incarnation":"91fa"}}},"#
    );
    assert!(text.starts_with(expected), "{text}");
    assert_eq!(load(&path).unwrap(), Some(watched()));
}

#[test]
fn a_file_without_http_positions_reads_and_writes_as_before() {
    // Written before the section existed (a Kafka replica), or by the webhook receiver.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replica.json");
    let before = String::from_utf8(encode(&sample())).unwrap();
    assert!(!before.contains("http"), "an empty section is left out");
    std::fs::write(&path, &before).unwrap();
    let read = load(&path).unwrap().unwrap();
    assert!(read.progress.http.is_empty());
    assert_eq!(String::from_utf8(encode(&read)).unwrap(), before);
    let webhook = "{\"format\":1,\"progress\":{},\"replica\":{\"subjects\":{}}}";
    std::fs::write(&path, webhook).unwrap();
    assert_eq!(load(&path).unwrap(), Some(ReplicaFile::default()));
}

#[test]
fn a_damaged_http_position_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replica.json");
    let good = String::from_utf8(encode(&watched())).unwrap();
    let cases = [
        (
            good.replace(r#""position":42,"#, ""),
            "progress.http.http://a:8080: missing field `position`",
        ),
        (
            good.replace(r#","incarnation":"91fa""#, ""),
            "missing field `incarnation`",
        ),
        (
            good.replace(r#""position":7"#, r#""position":-7"#),
            "progress.http.http://b:8080.position",
        ),
    ];
    for (text, says) in cases {
        std::fs::write(&path, &text).unwrap();
        let shown = load(&path).unwrap_err().to_string();
        assert!(shown.contains(says), "{shown} should say {says}");
    }
}
