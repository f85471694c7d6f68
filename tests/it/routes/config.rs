//! `[routes]`, `[sources]` and `[settlement]`: the defaults, and bad values refused by name.

use std::time::Duration;

use ankusa::config::{Config, ConfigError, RemoteStoreKind, SourceStoreKind};

fn load(toml: &str) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, toml).unwrap();
    Config::load_from(Some(&path), "ANKUSA_TEST_NONE_")
}

#[test]
fn defaults_keep_routes_in_memory_and_sources_local() {
    let c = load("").unwrap();
    assert_eq!(c.routes.store, RemoteStoreKind::Memory);
    assert_eq!(c.sources.store, SourceStoreKind::Local);
    assert_eq!(c.routes.key_prefix, "ankusa:");
    assert_eq!(c.settlement.interval, Duration::from_secs(1));
    assert_eq!(c.settlement.window, Duration::from_secs(60));
    let c = load(
        "[routes]\nstore = \"redis\"\nredis_url = \"redis://10.1.2.3:6380/2\"\n\
         [sources]\nstore = \"redis\"\n[settlement]\ninterval = \"250ms\"\nwindow = \"5s\"\n",
    )
    .unwrap();
    assert_eq!(c.routes.store, RemoteStoreKind::Redis);
    assert_eq!(c.sources.store, SourceStoreKind::Redis);
    assert_eq!(c.settlement.options().interval, Duration::from_millis(250));
}

#[test]
fn bad_values_are_refused_by_name() {
    let cases = [
        (
            "[routes]\nstore = \"redis\"\nredis_url = \"http://h\"\n",
            "routes.redis_url",
        ),
        ("[routes]\nstore = \"etcd\"\n", "store"),
        ("[routes]\nkey_prefix = \"a{b}\"\n", "routes.key_prefix"),
        ("[routes]\nredis_timeout = \"0s\"\n", "routes.redis_timeout"),
        ("[routes]\nstor = \"memory\"\n", "stor"),
        (
            "[sources]\nstore = \"redis\"\nredis_url = \"nope\"\n",
            "sources.redis_url",
        ),
        ("[sources]\nstore = \"memory\"\n", "store"),
        (
            "[settlement]\ninterval = \"1s\"\nwindow = \"10ms\"\n",
            "settlement.window",
        ),
        ("[settlement]\ninterval = \"1ms\"\n", "settlement.interval"),
    ];
    for (toml, key) in cases {
        let err = load(toml).unwrap_err().to_string();
        assert!(err.contains(key), "{toml}: {err}");
    }
}
