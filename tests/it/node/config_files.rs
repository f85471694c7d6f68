//! Every configuration file shipped in `config/` loads and validates, so the examples and the
//! docker-compose configuration cannot rot. The compose config takes its webhook secret from
//! the environment, as docker-compose.yml gives it.

use std::path::Path;

use ankusa::config::Config;

/// The variables' prefix in these tests, and the compose webhook secret as compose sets it.
const PREFIX: &str = "ANKUSA_TEST_COMPOSE_";

fn with_compose_secret() {
    // Each test runs in a process of its own (nextest): no other thread reads the environment.
    std::env::set_var(
        format!("{PREFIX}LIFECYCLE__SINK__WEBHOOK__SECRETS"),
        r#"["whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n"]"#,
    );
    std::env::set_var(
        format!("{PREFIX}ROUTES__FLEET_SECRET"),
        "the fleet's secret",
    );
}

#[test]
fn every_shipped_config_loads() {
    with_compose_secret();
    let mut seen = 0;
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("config")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            // The compose config's secret is the environment's, as compose gives it.
            let compose = path.ends_with("compose.toml");
            let prefix = if compose { PREFIX } else { "ANKUSA_TEST_NONE_" };
            let config = Config::load_from(Some(&path), prefix)
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
    let unset = Config::load_from(Some(&path), "ANKUSA_TEST_NONE_").unwrap_err();
    assert!(unset.to_string().contains("secrets"), "{unset}");
    with_compose_secret();
    let config = Config::load_from(Some(&path), PREFIX).unwrap();
    assert_eq!(
        config.lifecycle.sinks,
        vec!["kafka".to_owned(), "webhook".to_owned()]
    );
    assert_eq!(config.lifecycle.sink["kafka"].kind(), "kafka");
    let ankusa_sinks::SinkConfig::Webhook(webhook) = &config.lifecycle.sink["webhook"] else {
        panic!("the webhook sink is a webhook");
    };
    assert_eq!(
        webhook.secrets,
        vec!["whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n".to_owned()]
    );
    // The routes in Redis are signed with the secret compose gives every node.
    assert_eq!(config.routes.fleet_secret, "the fleet's secret");
}
