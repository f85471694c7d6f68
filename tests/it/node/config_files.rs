//! Every configuration file shipped in `config/` loads and validates, so the examples and the
//! docker-compose configuration cannot rot.

use std::path::Path;

use ankusa::config::Config;

#[test]
fn every_shipped_config_loads() {
    let mut seen = 0;
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("config")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let config = Config::load_from(Some(&path), "ANKUSA_TEST_NONE_")
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for name in &config.lifecycle.sinks {
                assert!(
                    config.lifecycle.sink.contains_key(name),
                    "{}: sink {name}",
                    path.display()
                );
            }
            seen += 1;
        }
    }
    assert!(seen >= 2, "default.toml and compose.toml at least");
}

#[test]
fn compose_config_publishes_to_kafka_and_the_webhook_receiver() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/compose.toml");
    let config = Config::load_from(Some(&path), "ANKUSA_TEST_NONE_").unwrap();
    assert_eq!(
        config.lifecycle.sinks,
        vec!["kafka".to_owned(), "webhook".to_owned()]
    );
    assert_eq!(config.lifecycle.sink["kafka"].kind(), "kafka");
    assert_eq!(config.lifecycle.sink["webhook"].kind(), "webhook");
}
