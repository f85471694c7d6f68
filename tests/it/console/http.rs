//! The console's rules over plain HTTP: a token is traded for an HttpOnly, SameSite=Strict
//! cookie; every answer carries the strict Content-Security-Policy; a form without the
//! session's CSRF token, from another origin, or from a token without the scope is refused
//! and writes no row; `api.console = "off"` serves nothing.

use reqwest::{redirect, StatusCode};
use serde_json::json;

use crate::api::lifecycle::{create_source, hook_sink, read_until};
use crate::support::node::*;
use ankusa_sinks::test_support::Receiver;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap()
}

/// Sign in with `token`: the session cookie (`name=value`).
async fn session(node: &TestNode, token: &str) -> String {
    let r = client()
        .post(node.url("/console/login"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        set.ends_with("; Path=/console; HttpOnly; SameSite=Strict"),
        "{set}"
    );
    set.split(';').next().unwrap().to_owned()
}

/// A page's HTML, read with `cookie`.
async fn page(node: &TestNode, cookie: &str, path: &str) -> (StatusCode, String) {
    let r = client()
        .get(node.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

/// The CSRF token a page's forms carry.
fn csrf(html: &str) -> String {
    let at = html
        .find(r#"name="csrf" value=""#)
        .expect("a form with a CSRF token")
        + 19;
    html[at..].split('"').next().unwrap().to_owned()
}

async fn post(
    node: &TestNode,
    cookie: &str,
    path: &str,
    csrf: &str,
    origin: Option<&str>,
) -> (StatusCode, String) {
    let mut rb = client()
        .post(node.url(path))
        .header("cookie", cookie)
        .form(&[("csrf", csrf)]);
    if let Some(origin) = origin {
        rb = rb.header("origin", origin);
    }
    let r = rb.send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_headers_and_forged_posts() {
    let (_receiver, node) = crate::api::lifecycle::with_a_disabled_sink().await;

    // Without a session: sent to sign in. A wrong token: 401, no cookie.
    let r = client()
        .get(node.url("/console/trail"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/console/login");
    let r = client()
        .post(node.url("/console/login"))
        .form(&[("token", "tok-nobody")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.headers().get("set-cookie").is_none());
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.starts_with("default-src 'none'; script-src 'self'; style-src 'self'"),
        "{csp}"
    );
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    assert_eq!(r.headers()["cache-control"], "no-store");
    let timing = r.headers()["server-timing"].to_str().unwrap();
    assert!(timing.starts_with("app;dur="), "{timing}");
    // A bearer token is no session.
    let r = client()
        .get(node.url("/console/trail"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);

    let admin = session(&node, ADMIN).await;
    let (status, html) = page(&node, &admin, "/console/delivery").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains(r#"id="enable-hook""#));
    let token = csrf(&html);

    // Forged: no token, another session's token, another site's origin. No row for any.
    let reader = session(&node, READER).await;
    let (_, reader_html) = page(&node, &reader, "/console/delivery").await;
    assert!(
        !reader_html.contains("enable-hook"),
        "a reader sees no write control"
    );
    let reader_token = csrf(&reader_html);
    assert_ne!(reader_token, token);
    let enable = "/console/delivery/hook/enable";
    for (cookie, csrf, origin, why) in [
        (&admin, "", None, "This form did not come"),
        (
            &admin,
            reader_token.as_str(),
            None,
            "This form did not come",
        ),
        (
            &admin,
            token.as_str(),
            Some("http://evil.example"),
            "This form did not come",
        ),
        (
            &reader,
            reader_token.as_str(),
            None,
            "lacks the `admin:write` scope",
        ),
    ] {
        let (status, html) = post(&node, cookie, enable, csrf, origin).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{why}");
        assert!(html.contains(why), "{html}");
    }
    assert_eq!(node.rows().await.len(), 2, "no refused POST wrote a row");

    // The real form: one row, by alice, from this client.
    let (status, _) = post(&node, &admin, enable, &token, Some(&node.base)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let row = node.row(3).await;
    assert_eq!(
        (&row["action"], &row["actor"]),
        (&json!("sink.enable"), &json!("alice"))
    );
    assert_eq!(row["remote_ip"], "127.0.0.1");

    // An auditor reads the trail, not the sinks.
    let auditor = session(&node, AUDITOR).await;
    assert_eq!(
        page(&node, &auditor, "/console/trail").await.0,
        StatusCode::OK
    );
    let (status, html) = page(&node, &auditor, "/console/delivery").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(html.contains("lacks the `admin:read` scope"));
    // A bad filter is shown beside the form.
    let (status, html) = page(&node, &auditor, "/console/trail?from=yesterday").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(html.contains("from: not an RFC 3339 time"), "{html}");

    // Signing out ends the session: its cookie is nothing any more.
    let (_, html) = page(&node, &auditor, "/console/trail").await;
    let (status, _) = post(&node, &auditor, "/console/logout", &csrf(&html), None).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(
        page(&node, &auditor, "/console/trail").await.0,
        StatusCode::SEE_OTHER
    );
    node.stop().await;
}

#[tokio::test]
async fn the_console_can_be_turned_off() {
    let node = TestNode::start_with(|v| v["api"]["console"] = json!("off")).await;
    let r = client()
        .get(node.url("/console/login"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = client()
        .get(node.url("/console/assets/verify.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_snapshot_and_redrive_pages_work_without_javascript() {
    // A receiver that refuses for good: the source's event becomes a dead letter.
    let receiver = Receiver::answering(400).await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| hook_sink(v, json!(["hook"]), &url)).await;
    create_source(&node, "s1").await;
    let patch = json!({"kind": "kafka"});
    let r = node
        .send(
            node.req(
                reqwest::Method::PATCH,
                "/admin/v1/tenants/t1/sources/s1",
                Some(ADMIN),
            )
            .header("if-match", "\"1\"")
            .json(&patch),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    read_until(&node, "/admin/v1/lifecycle/sinks/hook/dead-letters", |l| {
        l["dead_letters"].as_array().is_some_and(|l| l.len() == 2)
    })
    .await;
    let admin = session(&node, ADMIN).await;

    // The subject's history, oldest first, each line linking its row.
    let (status, html) = page(
        &node,
        &admin,
        "/console/subject?resource=sources%2Fs1&tenant=t1",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let create = html
        .find(r#"<a href="/console/trail/1">row 1</a>"#)
        .expect("row 1");
    let update = html
        .find(r#"<a href="/console/trail/2">row 2</a>"#)
        .expect("row 2");
    assert!(create < update, "oldest first");
    assert!(html.contains("<strong>source.create</strong> by alice in t1, ok"));
    assert!(html.contains("<strong>source.update</strong> by alice in t1, ok"));

    // Snapshots: the incarnation the API lists, and the checkpoint section.
    let status_json = node
        .call(reqwest::Method::GET, "/admin/v1/lifecycle", ADMIN, None)
        .await
        .json();
    let incarnation = status_json["incarnations"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, html) = page(&node, &admin, "/console/snapshots").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains(&incarnation), "{html}");

    // Delivery lists both dead letters; a redrive once the receiver takes them delivers
    // both, with one row each by alice.
    let (_, html) = page(&node, &admin, "/console/delivery").await;
    assert!(html.contains("Dead letters (2)"), "{html}");
    // The plot of the sink's backlog from the node's own samples (the first at its start).
    assert!(
        html.contains(r#"<polyline class="line" points="0.0,"#),
        "{html}"
    );
    assert!(html.contains("samples from"), "{html}");
    receiver.answer(204);
    let r = client()
        .post(node.url("/console/delivery/hook/redrive"))
        .header("cookie", &admin)
        .form(&[("csrf", csrf(&html))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let back = r.headers()["location"].to_str().unwrap().to_owned();
    let (_, html) = page(&node, &admin, &back).await;
    assert!(
        html.contains("Redrove sink hook&#39;s dead letters: 2 delivered, 0 remaining."),
        "{html}"
    );
    // A link cannot make the page say anything else.
    let forged = "/console/delivery?sink=hook&done=You+are+signed+out";
    assert!(!page(&node, &admin, forged)
        .await
        .1
        .contains("You are signed out"));
    assert!(html.contains("Dead letters (0)"), "{html}");
    let rows = node.rows().await;
    let redriven: Vec<_> = rows
        .iter()
        .filter(|r| r["action"] == "dead_letter.redrive")
        .map(|r| {
            (
                r["resource"].as_str().unwrap(),
                r["actor"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        redriven,
        vec![
            ("sinks/hook/dead-letters/1", "alice"),
            ("sinks/hook/dead-letters/2", "alice")
        ]
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_signs_everyone_out_and_sign_in_works_again() {
    let node = TestNode::start().await;
    let before = session(&node, AUDITOR).await;
    assert_eq!(
        page(&node, &before, "/console/trail").await.0,
        StatusCode::OK
    );
    let node = TestNode::start_on(node.stop().await, |_| {}).await;
    // The old cookie names no session of the new process: back to sign-in, not an error.
    let r = client()
        .get(node.url("/console/trail"))
        .header("cookie", &before)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/console/login");
    let after = session(&node, AUDITOR).await;
    assert_ne!(after, before);
    assert_eq!(
        page(&node, &after, "/console/trail").await.0,
        StatusCode::OK
    );
    node.stop().await;
}
