//! The console in a real browser (headless Chromium through WebDriver): sign in, filter the
//! trail by actor and time, open a row and Verify it (and see Verify fail on a tampered
//! proof and on a key that did not sign), enable a disabled sink (its row appears), and a
//! token without `admin:write` sees no write control and has a forged POST refused.

use std::time::Duration;

use fantoccini::{Client, Locator};
use reqwest::Method;
use serde_json::{json, Value};

use super::browser::{listed_seqs, sign_in, text, text_until, Browser};
use crate::api::audit_proof::verifier_key;
use crate::api::lifecycle::{create_source, hook_sink, read_until};
use crate::support::node::*;
use ankusa_sinks::test_support::Receiver;

/// Creates source `id` of tenant t1 as `token`'s caller.
async fn create_as(node: &TestNode, token: &str, id: &str) -> Value {
    let source = json!({"id": id, "kind": "webhook", "config": {}});
    let r = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1/sources",
            token,
            Some(source),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    node.row(r.seq().unwrap()).await
}

/// Wait until the page's script runs (it shows the Verify button), so that it does not
/// overwrite what the test types.
async fn verify_ready(c: &Client) {
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#verify:not([hidden])"))
        .await
        .expect("Verify's script ran");
}

/// Click Verify and wait for its verdict.
async fn verify(c: &Client) -> String {
    c.find(Locator::Id("verify"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    text_until(c, "verify-result", |t| {
        t.starts_with("Proved") || t.starts_with("Not")
    })
    .await
}

/// Change what the page hands Verify (`j`: the row, its proof and the checkpoint) with
/// `change`, as a node that lies would serve it.
async fn tamper(c: &Client, change: &str) {
    let script = format!(
        "const d = document.getElementById('proof-data'); const j = JSON.parse(d.textContent); \
         {change} d.textContent = JSON.stringify(j);"
    );
    c.execute(&script, vec![]).await.unwrap();
}

/// A verifier key named `name` (signed-note text) for an Ed25519 public key no one holds.
fn other_key(name: &str) -> String {
    use base64::prelude::*;
    use sha2::Digest as _;
    // Its base64 holds `+`, as about half of real keys' do: the key's part of the text.
    let mut raw = vec![1u8];
    raw.extend([0xbe_u8; 32]);
    let mut id = sha2::Sha256::new();
    id.update(format!("{name}\n").as_bytes());
    id.update(&raw);
    let id = hex::encode(&id.finalize()[..4]);
    format!("{name}+{id}+{}", BASE64_STANDARD.encode(&raw))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auditor_filters_opens_a_row_and_verifies_it_in_the_browser() {
    let node = TestNode::start_with(|v| v["audit"]["checkpoint_rows"] = json!(4)).await;
    // alice and writer take turns; the node signs a checkpoint (a row of its own) every four.
    for i in 0..4 {
        create_as(&node, ADMIN, &format!("a{i}")).await;
        create_as(&node, WRITER, &format!("w{i}")).await;
    }
    let checkpoint = read_until(&node, "/admin/v1/audit/checkpoint", |c| {
        c["size"].as_u64() >= Some(8)
    })
    .await;
    let size = checkpoint["size"].as_u64().unwrap();
    let rows = node.rows().await;
    let seq = |r: &Value| r["seq"].as_u64().unwrap();
    let alices: Vec<&Value> = rows.iter().filter(|r| r["actor"] == "alice").collect();
    assert_eq!(alices.len(), 4);
    let rfc3339 = |r: &Value| {
        chrono::DateTime::from_timestamp_millis(r["at"].as_i64().unwrap())
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };
    // Alice's rows from her second row's commit time to before her fourth's (the time
    // index selects by `at`, from inclusive, until exclusive).
    let (from, until) = (rfc3339(alices[1]), rfc3339(alices[3]));
    let (lo, hi) = (&alices[1]["at"], &alices[3]["at"]);
    let expected: Vec<u64> = alices
        .iter()
        .filter(|r| r["at"].as_u64() >= lo.as_u64() && r["at"].as_u64() < hi.as_u64())
        .map(|r| seq(r))
        .collect();
    assert!(expected.contains(&seq(alices[1])) && expected.contains(&seq(alices[2])));
    let all: Vec<u64> = rows.iter().map(seq).take(50).collect();
    let shown = seq(alices[2]);
    assert!(shown <= size, "row {shown} is in the checkpoint of {size}");
    let key = verifier_key(&node);
    let base = node.base.clone();
    Browser::run("auditor_verifies", |c: Client| async move {
        sign_in(&c, &base, AUDITOR).await;
        assert_eq!(listed_seqs(&c).await, all);
        // The auditor may not see the sinks: no link to them.
        assert!(c.find(Locator::LinkText("Delivery")).await.is_err());
        c.find(Locator::Id("actor"))
            .await
            .unwrap()
            .send_keys("alice")
            .await
            .unwrap();
        c.find(Locator::Id("from"))
            .await
            .unwrap()
            .send_keys(&from)
            .await
            .unwrap();
        c.find(Locator::Id("until"))
            .await
            .unwrap()
            .send_keys(&until)
            .await
            .unwrap();
        c.find(Locator::Id("apply"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        // The filtered page, not the one the click left.
        let navigated = async || {
            c.current_url()
                .await
                .unwrap()
                .as_str()
                .contains("actor=alice")
        };
        crate::support::eventually("the filtered page", Duration::from_secs(10), navigated).await;
        text_until(&c, "summary", |t| t.contains("row")).await;
        assert_eq!(listed_seqs(&c).await, expected);
        assert!(c
            .current_url()
            .await
            .unwrap()
            .as_str()
            .contains("actor=alice"));

        // Alice's third row: who, what; Verify proves it against the pinned key.
        c.find(Locator::LinkText(&shown.to_string()))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        assert_eq!(text(&c, "row-actor").await.split(' ').next(), Some("alice"));
        assert_eq!(text(&c, "row-action").await, "source.create");
        verify_ready(&c).await;
        let pin = c.find(Locator::Id("pinned-key")).await.unwrap();
        pin.send_keys(&key).await.unwrap();
        let proved = verify(&c).await;
        let claim = format!(
            "Proved: row {shown}, as shown, is leaf {} of the {size}-row tree",
            shown - 1
        );
        assert!(proved.starts_with(&claim), "{proved}");
        assert!(
            proved.ends_with(&format!(
                "signed by the pinned key {}.",
                key.split('+').next().unwrap()
            )),
            "{proved}"
        );

        // The pin is kept in this browser: a reload still has it.
        c.refresh().await.unwrap();
        verify_ready(&c).await;
        let kept = c
            .find(Locator::Id("pinned-key"))
            .await
            .unwrap()
            .prop("value")
            .await
            .unwrap();
        assert_eq!(kept.as_deref(), Some(key.as_str()));

        // One hash of the audit path changed: not proved.
        tamper(
            &c,
            "j.proof.proof[0] = btoa(String.fromCharCode(...new Array(32).fill(7)));",
        )
        .await;
        let refused = verify(&c).await;
        assert_eq!(
            refused,
            "Not proved: the proof does not lead to the checkpoint's root."
        );

        // The row shown changed (the stored bytes still say alice): not proved.
        c.refresh().await.unwrap();
        verify_ready(&c).await;
        tamper(&c, "j.row.actor = 'mallory';").await;
        let refused = verify(&c).await;
        assert_eq!(
            refused,
            "Not proved: the leaf's row differs from the row shown."
        );

        // A well-formed key of the same name that did not sign: not proved.
        c.refresh().await.unwrap();
        verify_ready(&c).await;
        let other = other_key(key.split('+').next().unwrap());
        let pin = c.find(Locator::Id("pinned-key")).await.unwrap();
        pin.clear().await.unwrap();
        pin.send_keys(&other).await.unwrap();
        let refused = verify(&c).await;
        assert_eq!(
            refused,
            "Not proved: the checkpoint carries no signature by the pinned key."
        );
    })
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_enables_a_disabled_sink_and_a_reader_cannot() {
    let (receiver, node) = crate::api::lifecycle::with_a_disabled_sink().await;
    receiver.answer(204);
    let base = node.base.clone();

    // A reader sees the sink, no write control; a POST it makes anyway is refused.
    let reader_base = base.clone();
    Browser::run("reader_cannot_enable", |c: Client| async move {
        sign_in(&c, &reader_base, READER).await;
        assert_eq!(text(&c, "state-hook").await, "disabled");
        assert!(c.find(Locator::Id("enable-hook")).await.is_err());
        assert!(c.find(Locator::Css("form[action$='/enable']")).await.is_err());
        // A form the page never offered, posted with the session's own CSRF token.
        c.execute(
            "const f = document.createElement('form'); f.method = 'post'; \
             f.action = '/console/delivery/hook/enable'; const i = document.createElement('input'); \
             i.name = 'csrf'; i.value = document.querySelector('input[name=csrf]').value; \
             f.appendChild(i); document.body.appendChild(f); f.submit();",
            vec![],
        )
        .await
        .unwrap();
        let refused = text(&c, "refused").await;
        assert_eq!(refused, "Your token lacks the `admin:write` scope this page needs.");
    })
    .await;
    assert_eq!(node.rows().await.len(), 2, "no row for the refused POST");

    Browser::run("operator_enables", |c: Client| async move {
        sign_in(&c, &base, ADMIN).await;
        c.find(Locator::LinkText("Delivery"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        assert_eq!(text(&c, "state-hook").await, "disabled");
        c.find(Locator::Id("enable-hook"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let notice = text(&c, "notice").await;
        assert_eq!(notice, "Enabled sink hook (audit row 3).");
        // The sink delivers again; the page says so once its state is read anew.
        let running = async || {
            c.refresh().await.unwrap();
            text(&c, "state-hook").await == "running"
        };
        crate::support::eventually("the sink to run", Duration::from_secs(15), running).await;
        // The enable's row, on the trail page, by alice.
        c.goto(&format!("{base}/console/trail?action=sink.enable"))
            .await
            .unwrap();
        assert_eq!(listed_seqs(&c).await, vec![3]);
    })
    .await;
    let row = node.row(3).await;
    assert_eq!(
        (
            &row["action"],
            &row["resource"],
            &row["actor"],
            &row["result"]
        ),
        (
            &json!("sink.enable"),
            &json!("sinks/hook"),
            &json!("alice"),
            &json!("ok")
        )
    );
    node.stop().await;
}

/// Every control of `page` has a label, and the first Tab reaches the skip link.
async fn accessible(c: &Client, page: &str) {
    let unlabelled = c
        .execute(
            "return [...document.querySelectorAll('input:not([type=hidden]), select, textarea')] \
             .filter(e => e.labels.length === 0).map(e => e.id || e.name);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(unlabelled, json!([]), "{page}: controls without a label");
    let untitled = c
        .execute(
            "return [...document.querySelectorAll('svg')].filter(s => s.getAttribute('role') !== 'img' \
             || !s.querySelector('title')).length;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(untitled, json!(0), "{page}: a picture without a text");
    c.execute(
        "document.activeElement && document.activeElement.blur();",
        vec![],
    )
    .await
    .unwrap();
    c.active_element()
        .await
        .unwrap()
        .send_keys(&char::from(fantoccini::key::Key::Tab).to_string())
        .await
        .unwrap();
    let focused = c
        .execute("return document.activeElement.textContent;", vec![])
        .await
        .unwrap();
    assert_eq!(focused, json!("Skip to content"), "{page}: the first Tab");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_work_by_keyboard_with_labels_and_both_themes() {
    let receiver = Receiver::answering(204).await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| hook_sink(v, json!(["hook"]), &url)).await;
    create_source(&node, "s1").await;
    let base = node.base.clone();
    Browser::run("keyboard", |c: Client| async move {
        // Signed in by keyboard alone: the token field has the focus, Enter submits.
        c.goto(&format!("{base}/console/login")).await.unwrap();
        let field = c.active_element().await.unwrap();
        assert_eq!(field.attr("id").await.unwrap().as_deref(), Some("token"));
        field
            .send_keys(&format!(
                "{ADMIN}{}",
                char::from(fantoccini::key::Key::Enter)
            ))
            .await
            .unwrap();
        text(&c, "who").await;
        for page in [
            "trail",
            "trail/1",
            "subject?resource=sources%2Fs1",
            "delivery",
            "snapshots",
        ] {
            c.goto(&format!("{base}/console/{page}")).await.unwrap();
            text(&c, "who").await;
            accessible(&c, page).await;
        }
        // A light and a dark palette, chosen by the system's preference.
        let dark = c
            .execute(
                "return [...document.styleSheets].flatMap(s => [...s.cssRules]) \
                 .some(r => r.conditionText === '(prefers-color-scheme: dark)');",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(dark, json!(true));
    })
    .await;
    node.stop().await;
}
