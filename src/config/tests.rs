//! Loading the layers: defaults, files, the environment, and errors that name the key.

use std::path::Path;
use std::time::Duration;

use super::*;

fn load_str(toml: &str) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, toml).unwrap();
    Config::load_from(Some(&path), "ANKUSA_TEST_NONE_")
}

#[test]
fn embedded_default_loads() {
    let c = Config::load_from(None, "ANKUSA_TEST_NONE_").unwrap();
    assert_eq!(c.api.listen, "127.0.0.1:8080".parse().unwrap());
    assert!(c.lifecycle.enabled);
    assert_eq!(c.log.format, LogFormat::Text);
}

#[test]
fn the_console_is_on_by_default_on_loopback_only() {
    let on = |toml: &str| load_str(toml).unwrap().api.console_enabled();
    assert!(on(""));
    assert!(on("[api]\nlisten = \"[::1]:9000\"\n"));
    assert!(!on("[api]\nlisten = \"0.0.0.0:9000\"\n"));
    assert!(on("[api]\nlisten = \"0.0.0.0:9000\"\nconsole = \"on\"\n"));
    assert!(!on("[api]\nconsole = \"off\"\n"));
    let err = load_str("[api]\nconsole = \"yes\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("api.console"), "{err}");
}

#[test]
fn file_overrides_defaults() {
    let c = load_str("[api]\nlisten = \"127.0.0.1:9000\"\n").unwrap();
    assert_eq!(c.api.listen.port(), 9000);
    assert_eq!(c.node.uri, "urn:ankusa:node:local");
}

#[test]
fn unknown_key_is_refused_by_name() {
    let err = load_str("[api]\nlisen = \"127.0.0.1:9000\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("lisen"), "{err}");
    let err = load_str("[apii]\nlisten = \"127.0.0.1:9000\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("apii"), "{err}");
}

#[test]
fn bad_value_is_refused_by_name() {
    let err = load_str("[api]\nlisten = \"nowhere\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("api.listen") || err.contains("listen"),
        "{err}"
    );
    let err = load_str("[lifecycle]\nenabled = \"yes\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("enabled"), "{err}");
    let err = load_str("[node]\nuri = \"has space\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("node.uri"), "{err}");
    let err = load_str("[log]\nformat = \"xml\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("format"), "{err}");
}

#[test]
fn backups_inside_the_store_are_refused_however_the_path_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let root = dir.path().display();
    for backups in [
        format!("{root}/data/backups"),
        format!("{root}/./data/backups"),
        format!("{root}/other/../data/backups"),
        format!("{root}/data"),
    ] {
        let toml = format!(
            "[node]\ndata_dir = \"{}\"\nbackup_dir = \"{backups}\"\n",
            data.display()
        );
        let err = load_str(&toml).unwrap_err().to_string();
        assert!(err.contains("node.backup_dir"), "{backups}: {err}");
    }
    let toml = format!(
        "[node]\ndata_dir = \"{}\"\nbackup_dir = \"{root}/data-backups\"\n",
        data.display()
    );
    load_str(&toml).unwrap();
    assert!(within(Path::new("./data/b"), Path::new("data")));
    assert!(!within(Path::new("data-b"), Path::new("data")));
}

#[test]
fn parse_errors_name_the_file_and_the_key_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[audit]\nmax_rows = \"lots\"\n").unwrap();
    let err = Config::load_from(Some(&path), "ANKUSA_TEST_NONE_")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "configuration: {}: audit.max_rows: invalid type: expected u64, found a string",
            path.display()
        )
    );
    let missing = dir.path().join("missing.toml");
    let err = Config::load_from(Some(&missing), "ANKUSA_TEST_NONE_")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "configuration: {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
}

const DIGEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

#[test]
fn api_defaults_and_tokens_load() {
    let c = Config::load_from(None, "ANKUSA_TEST_NONE_").unwrap();
    assert_eq!(c.api.body_limit, 1 << 20);
    assert!(c.api.trusted_proxies.is_empty());
    assert!(c.api.tokens.is_empty());
    assert_eq!(c.api.header_timeout, std::time::Duration::from_secs(10));
    assert_eq!(c.api.body_timeout, std::time::Duration::from_secs(10));
    assert_eq!(c.api.request_timeout, std::time::Duration::from_secs(60));
    assert_eq!(c.api.max_connections, 256);
    assert_eq!(c.api.max_connections_per_peer, 64);
    assert_eq!(c.api.reserved_connections, 16);
    assert_eq!(c.api.write_timeout, std::time::Duration::from_secs(10));
    assert_eq!(c.api.shutdown_grace, std::time::Duration::from_secs(10));
    let c = load_str(&format!(
        "[api]\nbody_limit = 4096\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\n\
         [[api.tokens]]\nname = \"ops\"\nsha256 = \"{DIGEST}\"\n\
         scopes = [\"admin:read\", \"audit:read\"]\n"
    ))
    .unwrap();
    assert_eq!(c.api.body_limit, 4096);
    assert!(c.api.trusted_proxies[0].contains("10.1.2.3".parse().unwrap()));
    assert!(!c.api.trusted_proxies[0].contains("11.1.2.3".parse().unwrap()));
    assert!(c.api.trusted_proxies[1].contains("::1".parse().unwrap()));
    assert_eq!(
        c.api.tokens[0].scopes,
        vec![Scope::AdminRead, Scope::AuditRead]
    );
}

#[test]
fn bad_api_keys_are_refused_by_name() {
    let cases = [
        ("[api]\nbody_limt = 10\n", "body_limt"),
        ("[api]\nbody_limit = 10\n", "api.body_limit"),
        ("[api]\nbody_limit = \"big\"\n", "body_limit"),
        ("[api]\ntrusted_proxies = [\"10.0.0.0/33\"]\n", "trusted_proxies"),
        ("[api]\nheader_timeout = \"10ms\"\n", "api.header_timeout"),
        ("[api]\nrequest_timeout = \"2h\"\n", "api.request_timeout"),
        ("[api]\nbody_timeout = \"90s\"\n", "api.body_timeout"),
        ("[api]\nmax_connections = 0\n", "api.max_connections"),
        ("[api]\nwrite_timeout = \"0s\"\n", "api.write_timeout"),
        ("[api]\nmax_connections_per_peer = 0\n", "api.max_connections_per_peer"),
        ("[api]\nreserved_connections = 5000\n", "api.reserved_connections"),
        ("[api]\nshutdown_grace = \"2h\"\n", "api.shutdown_grace"),
        ("[api]\ntrusted_proxies = [\"proxy.local\"]\n", "trusted_proxies"),
        (
            "[[api.tokens]]\nname = \"a\"\nsha256 = \"00\"\nscopes = [\"admin:read\"]\n",
            "api.tokens.sha256",
        ),
        (
            &format!("[[api.tokens]]\nname = \"a\"\nsha256 = \"{DIGEST}\"\nscopes = [\"root\"]\n"),
            "scopes",
        ),
        (
            &format!("[[api.tokens]]\nname = \"a\"\nsha256 = \"{DIGEST}\"\nscopes = []\n"),
            "api.tokens.scopes",
        ),
        (
            &format!("[[api.tokens]]\nname = \"a b\"\nsha256 = \"{DIGEST}\"\nscopes = [\"admin:read\"]\n"),
            "api.tokens.name",
        ),
        (
            &format!("[[api.tokens]]\nname = \"system\"\nsha256 = \"{DIGEST}\"\nscopes = [\"admin:read\"]\n"),
            "api.tokens.name",
        ),
        (
            &format!("[[api.tokens]]\nname = \"a\"\nsha256 = \"{DIGEST}\"\nscopes = [\"admin:read\"]\ntoken = \"x\"\n"),
            "token",
        ),
        (
            &format!("[[api.tokens]]\nname = \"a\"\nsha256 = \"{DIGEST}\"\nscopes = [\"admin:read\"]\n\
                      [[api.tokens]]\nname = \"a\"\nsha256 = \"{DIGEST}\"\nscopes = [\"admin:read\"]\n"),
            "api.tokens.name",
        ),
    ];
    for (toml, key) in cases {
        let err = load_str(toml).unwrap_err().to_string();
        assert!(err.contains(key), "{toml}: {err}");
    }
}

#[test]
fn sentinels_are_addresses_with_a_primary_name() {
    let c = load_str("[routes]\nstore = \"redis\"\n").unwrap();
    assert!(c.routes.sentinels.is_empty() && c.routes.sentinel_master.is_empty());
    let c = load_str(
        "[routes]\nstore = \"redis\"\nsentinels = [\"10.0.0.1:26379\", \"s2:26379\"]\n\
         sentinel_master = \"ankusa\"\n[sources]\nstore = \"redis\"\n\
         sentinels = [\"s1:26379\"]\nsentinel_master = \"m\"\nsentinel_password = \"pw\"\n",
    )
    .unwrap();
    assert_eq!(c.routes.redis().sentinels.len(), 2);
    assert_eq!(c.sources.redis().sentinel_password, Some("pw"));
    for (toml, key) in [
        (
            "[routes]\nstore = \"redis\"\nsentinels = [\"s1\"]\nsentinel_master = \"m\"\n",
            "routes.sentinels",
        ),
        (
            "[routes]\nstore = \"redis\"\nsentinels = [\":26379\"]\nsentinel_master = \"m\"\n",
            "routes.sentinels",
        ),
        (
            "[routes]\nstore = \"redis\"\nsentinels = [\"s1:26379\"]\n",
            "routes.sentinels",
        ),
        (
            "[sources]\nstore = \"redis\"\nsentinels = [\"s1:x\"]\nsentinel_master = \"m\"\n",
            "sources.sentinels",
        ),
        (
            "[routes]\nstore = \"redis\"\nmin_replicas = 1\nmin_replicas_timeout = \"2s\"\n",
            "routes.min_replicas_timeout",
        ),
    ] {
        let err = load_str(toml).unwrap_err().to_string();
        assert!(err.contains(key), "{toml}: {err}");
    }
}

#[test]
fn a_published_webhook_secret_is_refused_and_a_fresh_one_taken() {
    let sink = |secret: &str| {
        format!(
            "[lifecycle]\nsinks = [\"hook\"]\n[lifecycle.sink.hook]\nkind = \"webhook\"\n\
             url = \"https://h.test/\"\nsecrets = [\"whsec_Zm9v\", \"{secret}\"]\n"
        )
    };
    for published in [
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
    ] {
        let err = load_str(&sink(published)).unwrap_err().to_string();
        assert!(
            err.contains("lifecycle.sink.secrets") && err.contains("sink `hook`: secret #1"),
            "{err}"
        );
        assert!(!err.contains(published), "the secret is not echoed: {err}");
    }
    load_str(&sink("whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n")).unwrap();
}

#[test]
fn audit_defaults_load_and_bad_values_are_refused_by_name() {
    let c = Config::load_from(None, "ANKUSA_TEST_NONE_").unwrap();
    let limits = c.audit.limits();
    assert_eq!(
        limits,
        crate::audit::Limits::default(),
        "default.toml and Limits agree"
    );
    assert_eq!(c.audit.retention_days, 365);
    assert_eq!(c.audit.sweep_interval, Duration::from_secs(3600));
    let c = load_str("[audit]\nretention_days = 30\nsweep_interval = \"15m\"\n").unwrap();
    assert_eq!(c.audit.limits().retention, Duration::from_secs(30 * 86_400));
    assert_eq!(c.audit.sweep_interval, Duration::from_secs(900));
    let cases = [
        ("[audit]\nretention_days = 0\n", "audit.retention_days"),
        ("[audit]\nsweep_interval = \"0s\"\n", "audit.sweep_interval"),
        ("[audit]\nsweep_interval = \"soon\"\n", "sweep_interval"),
        ("[audit]\nsweep_batch = 0\n", "audit.sweep_batch"),
        ("[audit]\nmax_rows = 10\n", "audit.max_rows"),
        ("[audit]\nmax_bytes = 1024\n", "audit.max_bytes"),
        (
            "[audit]\noutbox_max_backlog = 0\n",
            "audit.outbox_max_backlog",
        ),
        (
            "[audit]\nmax_rows = 20000\noutbox_max_backlog = 30000\n",
            "audit.outbox_max_backlog",
        ),
        ("[audit]\nretention = 3\n", "retention"),
    ];
    for (toml, key) in cases {
        let err = load_str(toml).unwrap_err().to_string();
        assert!(err.contains(key), "{toml}: {err}");
    }
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
fn environment_overrides_file() {
    figment::Jail::expect_with(|jail| {
        jail.create_file("c.toml", "[api]\nlisten = \"127.0.0.1:9000\"\n")?;
        jail.set_env("ANKUSA_API__LISTEN", "127.0.0.1:9100");
        jail.set_env("ANKUSA_CONFIG", "c.toml");
        let c = Config::load(Some(Path::new("c.toml"))).map_err(|e| e.to_string())?;
        assert_eq!(c.api.listen.port(), 9100);
        jail.set_env("ANKUSA_API__BOGUS", "1");
        let err = Config::load(Some(Path::new("c.toml")))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("configuration: ANKUSA_API__BOGUS: "),
            "{err}"
        );
        assert!(err.contains("unknown field: found `bogus`"), "{err}");
        jail.clear_env();
        jail.set_env("ANKUSA_AUDIT__MAX_ROWS", "lots");
        let err = Config::load(Some(Path::new("c.toml")))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "configuration: ANKUSA_AUDIT__MAX_ROWS: invalid type: expected u64, found a string"
        );
        Ok(())
    });
}

/// The sink `x` of `[lifecycle.sink.x]`, a Kafka sink, as a file's text.
const KAFKA_SINK: &str =
    "[lifecycle.sink.x]\nkind = \"kafka\"\nbrokers = \"b:9092\"\ntopic = \"t\"\n";

/// Assert that `err` names every one of `names` and contains none of `values`.
fn assert_names_without_values(err: &str, names: &[&str], values: &[&str]) {
    for name in names {
        assert!(err.contains(name), "{name} not named: {err}");
    }
    for value in values {
        assert!(!err.contains(value), "{value} echoed: {err}");
    }
}

#[test]
fn a_wrong_typed_secret_in_a_file_is_named_not_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let toml =
        format!("{KAFKA_SINK}[lifecycle.sink.x.properties]\n\"sasl.password\" = 123456789\n");
    std::fs::write(&path, toml).unwrap();
    let err = Config::load_from(Some(&path), "ANKUSA_TEST_NONE_")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "configuration: {}: lifecycle.sink.x.properties.\"sasl.password\": invalid type: \
             expected a string, found an integer",
            path.display()
        )
    );
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
fn a_numeric_secret_from_the_environment_is_named_not_echoed() {
    figment::Jail::expect_with(|jail| {
        jail.create_file("c.toml", KAFKA_SINK)?;
        // The only way to give a dotted librdkafka property from the environment: a dict.
        jail.set_env(
            "ANKUSA_LIFECYCLE__SINK__X__PROPERTIES",
            "{\"sasl.password\"=987654321}",
        );
        let err = Config::load(Some(Path::new("c.toml")))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "configuration: ANKUSA_LIFECYCLE__SINK__X__PROPERTIES: \
             lifecycle.sink.x.properties.\"sasl.password\": invalid type: expected a string, \
             found an integer"
        );
        jail.clear_env();
        // A whole sink from the environment, its password a number.
        for (key, value) in [
            ("KIND", "kafka"),
            ("BROKERS", "b:9092"),
            ("TOPIC", "t"),
            ("PROPERTIES__PASSWORD", "987654321"),
        ] {
            jail.set_env(format!("ANKUSA_LIFECYCLE__SINK__Y__{key}"), value);
        }
        let err = Config::load(None).unwrap_err().to_string();
        assert_eq!(
            err,
            "configuration: ANKUSA_LIFECYCLE__SINK__Y__PROPERTIES__PASSWORD: invalid type: \
             expected a string, found an integer"
        );
        Ok(())
    });
}

#[test]
fn wrong_typed_webhook_secrets_are_named_not_echoed() {
    let hook = "[lifecycle.sink.w]\nkind = \"webhook\"\nurl = \"http://h/\"\n";
    let cases = [
        (
            format!("{hook}secrets = \"whsec_c2VjcmV0c2VjcmV0\"\n"),
            "lifecycle.sink.w.secrets: invalid type: expected a sequence, found a string",
            "c2VjcmV0c2VjcmV0",
        ),
        (
            format!("{hook}secrets = [\"whsec_c2VjcmV0c2VjcmV0\", 42424242]\n"),
            "lifecycle.sink.w.secrets.1: invalid type: expected a string, found an integer",
            "42424242",
        ),
        (
            format!("{hook}secrets = [true]\n"),
            "lifecycle.sink.w.secrets.0: invalid type: expected a string, found a boolean",
            "true",
        ),
    ];
    for (toml, message, value) in cases {
        let err = load_str(&toml).unwrap_err().to_string();
        assert_names_without_values(&err, &["c.toml", message], &[value]);
    }
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
fn a_string_where_a_number_goes_is_named_not_echoed() {
    let err = load_str("[audit]\nmax_rows = \"lots\"\n")
        .unwrap_err()
        .to_string();
    assert_names_without_values(
        &err,
        &["c.toml", "audit.max_rows", "expected u64, found a string"],
        &["lots"],
    );
    let err = load_str("[audit]\nmax_rows = -123457\n")
        .unwrap_err()
        .to_string();
    assert_names_without_values(
        &err,
        &["c.toml", "audit.max_rows", "invalid value: expected u64"],
        &["123457"],
    );
    figment::Jail::expect_with(|jail| {
        jail.set_env("ANKUSA_AUDIT__MAX_ROWS", "lots");
        let err = Config::load(None).unwrap_err().to_string();
        assert_names_without_values(&err, &["ANKUSA_AUDIT__MAX_ROWS", "u64"], &["lots"]);
        Ok(())
    });
}

#[test]
fn no_other_kind_of_error_echoes_the_value() {
    let cases = [
        // A TOML syntax error: the parser quotes the line it stopped at.
        (
            format!(
                "{KAFKA_SINK}[lifecycle.sink.x.properties]\n\"sasl.password\" = \"hunter2xyz\n"
            ),
            &["c.toml", "line 6"][..],
            "hunter2xyz",
        ),
        (
            "[api]\ntrusted_proxies = [\"hunter2xyz\"]\n".to_owned(),
            &[
                "c.toml",
                "api.trusted_proxies.0",
                "neither an IP address nor a CIDR",
            ][..],
            "hunter2xyz",
        ),
        (
            "[log]\nformat = \"hunter2xyz\"\n".to_owned(),
            &[
                "c.toml",
                "log.format",
                "unknown variant",
                "`text` or `json`",
            ][..],
            "hunter2xyz",
        ),
        (
            "[lifecycle.sink.x]\nkind = \"hunter2xyz\"\n".to_owned(),
            &[
                "c.toml",
                "lifecycle.sink.x.kind",
                "`kafka`, `webhook`, `file`",
            ][..],
            "hunter2xyz",
        ),
        (
            "[audit]\nsweep_interval = \"10hunter2xyz\"\n".to_owned(),
            &[
                "c.toml",
                "audit.sweep_interval",
                "expected a duration, found a string",
            ][..],
            "hunter2xyz",
        ),
        (
            "[api]\nlisten = \"hunter2xyz\"\n".to_owned(),
            &["c.toml", "api.listen"][..],
            "hunter2xyz",
        ),
    ];
    for (toml, names, value) in cases {
        let err = load_str(&toml).unwrap_err().to_string();
        assert_names_without_values(&err, names, &[value]);
    }
}

#[test]
fn validation_errors_never_echo_a_secret_bearing_value() {
    let token =
        "[[api.tokens]]\nname = \"a\"\nsha256 = \"hunter2xyz\"\nscopes = [\"admin:read\"]\n";
    let cases = [
        (
            "[routes]\nstore = \"redis\"\nredis_url = \"http://:hunter2xyz@h\"\n",
            "routes.redis_url",
        ),
        (
            "[sources]\nstore = \"redis\"\nredis_url = \"hunter2xyz\"\n",
            "sources.redis_url",
        ),
        (token, "api.tokens.sha256"),
    ];
    for (toml, key) in cases {
        let err = load_str(toml).unwrap_err();
        assert!(matches!(err, ConfigError::Invalid { .. }), "{err}");
        assert_names_without_values(&err.to_string(), &[key], &["hunter2xyz"]);
    }
}

#[test]
fn otlp_endpoint_is_off_by_default_and_checked_by_name() {
    let c = Config::load_from(None, "ANKUSA_TEST_NONE_").unwrap();
    assert_eq!(c.telemetry.otlp_endpoint, None);
    assert_eq!(c.telemetry.traces_url(), None);
    for (endpoint, url) in [
        ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
        (
            "https://otel.example:4318/",
            "https://otel.example:4318/v1/traces",
        ),
        ("http://gw.example/otlp", "http://gw.example/otlp/v1/traces"),
    ] {
        let c = load_str(&format!("[telemetry]\notlp_endpoint = \"{endpoint}\"\n")).unwrap();
        assert_eq!(c.telemetry.traces_url().as_deref(), Some(url), "{endpoint}");
    }
    for (endpoint, why) in [
        (
            "collector:4318",
            "must be an http:// or https:// URL with a host",
        ),
        ("not a url", "is not a URL"),
        (
            "grpc://127.0.0.1:4317",
            "must be an http:// or https:// URL with a host",
        ),
        (
            "http://user:hunter2@127.0.0.1:4318",
            "must not carry credentials",
        ),
        (
            "http://127.0.0.1:4318/?x=1",
            "must have no query or fragment",
        ),
    ] {
        let err = load_str(&format!("[telemetry]\notlp_endpoint = \"{endpoint}\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("configuration: telemetry.otlp_endpoint: ") && err.contains(why),
            "{endpoint}: {err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
    }
    let err = load_str("[telemetry]\notlp_endpoit = \"http://127.0.0.1:4318\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("otlp_endpoit"), "{err}");
}
