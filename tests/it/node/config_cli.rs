//! `ankusa config check | show` through the real binary: every shipped configuration passes
//! the check, a bad one is named (never its value), `show` redacts every secret, and
//! `check --connect` reaches each sink and store.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ankusa_sinks::test_support::{Broker, Receiver};

use crate::support::redis::RedisServer;

fn config(args: &[&str], file: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ankusa"));
    if let Some(file) = file {
        command.arg("--config").arg(file);
    }
    if file.is_some_and(|f| f.ends_with("config/compose.toml")) {
        // Its webhook secret is the deployment's, given as docker-compose.yml gives it.
        command.env(
            "ANKUSA_LIFECYCLE__SINK__WEBHOOK__SECRETS",
            r#"["whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n"]"#,
        );
    }
    command
        .arg("config")
        .args(args)
        .env_remove("ANKUSA_CONFIG")
        .output()
        .expect("run ankusa config")
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn write(dir: &Path, toml: &str) -> PathBuf {
    let path = dir.join("ankusa.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

#[test]
fn every_shipped_config_passes_the_check() {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut seen = 0;
    for entry in std::fs::read_dir(shipped).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let out = config(&["check"], Some(&path));
            assert!(out.status.success(), "{}: {}", path.display(), text(&out));
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("configuration ok: {}\n", path.display())
            );
            seen += 1;
        }
    }
    assert!(seen >= 2);
    let out = config(&["check"], None);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "configuration ok: the embedded default\n"
    );
}

#[test]
fn a_bad_value_is_named_without_showing_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "[lifecycle.sink.hook]\nkind = \"webhook\"\nurl = \"https://h.test/\"\nsecrets = [\"whsec_hunter2\"]\nmax_in_flight = \"many-hunter2\"\n",
    );
    let out = config(&["check"], Some(&path));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("lifecycle.sink.hook.max_in_flight"), "{said}");
    assert!(!said.contains("hunter2"), "{said}");
}

#[test]
fn show_prints_the_effective_configuration_with_secrets_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        r#"
[routes]
store = "redis"
redis_url = "redis://:hunter2@127.0.0.1:6390/0"

[lifecycle]
sinks = ["hook", "kafka"]

[lifecycle.sink.hook]
kind = "webhook"
url = "https://h.test/"
secrets = ["whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n"]

[lifecycle.sink.kafka]
kind = "kafka"
brokers = "127.0.0.1:9092"
topic = "t"
properties = { "sasl.password" = "hunter2", "sasl.username" = "svc" }
"#,
    );
    let out = config(&["show"], Some(&path));
    assert!(out.status.success(), "{}", text(&out));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sink = &shown["lifecycle"]["sink"];
    assert_eq!(sink["hook"]["secrets"], "[redacted]");
    assert_eq!(sink["kafka"]["properties"]["sasl.password"], "[redacted]");
    assert_eq!(sink["kafka"]["properties"]["sasl.username"], "svc");
    assert_eq!(
        shown["routes"]["redis_url"],
        "redis://[redacted]@127.0.0.1:6390/0"
    );
    // The layers merged: the file's keys over the embedded default's.
    assert_eq!(shown["routes"]["store"], "redis");
    assert_eq!(shown["lifecycle"]["batch"], 1000);
    let all = String::from_utf8_lossy(&out.stdout);
    assert!(
        !all.contains("hunter2") && !all.contains("MfKQ9r8"),
        "{all}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_reaches_each_sink_and_store() {
    let receiver = Receiver::answering(200).await;
    let redis = RedisServer::start();
    let broker = Broker::start();
    broker.create_topic("present", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let healthy = format!(
        "[routes]\nstore = \"redis\"\nredis_url = \"{}\"\n\n[lifecycle]\nsinks = [\"hook\", \"kafka\"]\n\n[lifecycle.sink.kafka]\nkind = \"kafka\"\nbrokers = \"{}\"\ntopic = \"present\"\nhealthcheck_timeout = \"5s\"\n\n[lifecycle.sink.hook]\nkind = \"webhook\"\nurl = \"{}\"\nhealthcheck_url = \"{}\"\nsecrets = [\"whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n\"]\n",
        redis.url(),
        broker.address,
        receiver.url(),
        receiver.url()
    );
    let path = write(dir.path(), &healthy);
    let out = config(&["check", "--connect"], Some(&path));
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("ok      lifecycle sink hook\n"), "{said}");
    assert!(said.contains("ok      lifecycle sink kafka\n"), "{said}");
    assert!(said.contains("ok      route store (redis)\n"), "{said}");

    // A closed port for the webhook's healthcheck and for Redis: both named, exit 1.
    let closed = crate::fleet::procs::free_port();
    let broken = healthy
        .replace(&redis.url(), &format!("redis://127.0.0.1:{closed}"))
        .replace(
            &format!("healthcheck_url = \"{}\"", receiver.url()),
            &format!("healthcheck_url = \"http://127.0.0.1:{closed}/\""),
        )
        .replace("topic = \"present\"", "topic = \"absent\"");
    let path = write(dir.path(), &broken);
    let out = config(&["check", "--connect"], Some(&path));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("failed  lifecycle sink hook: "), "{said}");
    assert!(said.contains("failed  route store (redis): "), "{said}");
    assert!(said.contains("failed  lifecycle sink kafka: "), "{said}");
    assert!(
        said.contains("3 of the configured destinations failed"),
        "{said}"
    );
}

/// `check --connect` reaches a store behind Sentinel through its sentinels, and names a
/// primary name the sentinels do not know.
#[tokio::test]
async fn connect_reaches_a_store_behind_sentinel() {
    let primary = RedisServer::start();
    let sentinel = crate::support::redis::SentinelServer::start("ankusa", primary.port, 1000);
    let dir = tempfile::tempdir().unwrap();
    let toml = |master: &str| {
        format!(
            "[routes]\nstore = \"redis\"\nsentinels = [\"127.0.0.1:{}\"]\nsentinel_master = \"{master}\"\n",
            sentinel.port
        )
    };
    let out = config(
        &["check", "--connect"],
        Some(&write(dir.path(), &toml("ankusa"))),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ok      route store (redis)\n"),
        "{}",
        text(&out)
    );
    let out = config(
        &["check", "--connect"],
        Some(&write(dir.path(), &toml("other"))),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("failed  route store (redis): "),
        "{}",
        text(&out)
    );
}
