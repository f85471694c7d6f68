//! A real headless Chromium, driven through chromedriver (WebDriver), for the console's
//! tests: both from Debian's packages (`chromium`, `chromium-driver`), installed by
//! scripts/deps. A test that fails leaves a screenshot and the page's HTML in
//! `target/console-screenshots/` (or `$ANKUSA_SCREENSHOTS`); with `ANKUSA_SCREENSHOTS_ALL=1`
//! a test that passes leaves its last page there too, to look at.

use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use futures::FutureExt as _;
use serde_json::json;

use crate::support::eventually;

/// A browser and its driver, for one test.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

fn screenshots() -> PathBuf {
    std::env::var_os("ANKUSA_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots")
        })
}

impl Browser {
    /// Start chromedriver on a free port and open a headless Chromium through it.
    pub async fn start() -> Browser {
        let port = ankusa_sinks::test_support::free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; scripts/deps installs it)");
        let profile = tempfile::tempdir().expect("a profile dir");
        let mut options = json!({
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1024", format!("--user-data-dir={}", profile.path().display()),
            ],
        });
        if std::path::Path::new("/usr/bin/chromium").exists() {
            options["binary"] = json!("/usr/bin/chromium");
        }
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), options);
        let url = format!("http://127.0.0.1:{port}");
        let mut client = None;
        for _ in 0..100 {
            let mut builder =
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
            match builder.capabilities(caps.clone()).connect(&url).await {
                Ok(c) => {
                    client = Some(c);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        Browser {
            client: client.expect("a WebDriver session within 10 s"),
            driver,
            _profile: profile,
        }
    }

    /// Run `test` with this browser; if it fails, keep a screenshot and the page's HTML as
    /// `<name>.png` and `<name>.html`, then fail. The browser is closed either way.
    pub async fn run<F, Fut>(name: &str, test: F)
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut browser = Browser::start().await;
        let outcome = std::panic::AssertUnwindSafe(test(browser.client.clone()))
            .catch_unwind()
            .await;
        if outcome.is_err() || std::env::var_os("ANKUSA_SCREENSHOTS_ALL").is_some() {
            let dir = screenshots();
            let _ = std::fs::create_dir_all(&dir);
            if let Ok(png) = browser.client.screenshot().await {
                let _ = std::fs::write(dir.join(format!("{name}.png")), png);
            }
            if let Ok(html) = browser.client.source().await {
                let _ = std::fs::write(dir.join(format!("{name}.html")), html);
            }
            eprintln!(
                "console test {name} failed: screenshot in {}",
                dir.display()
            );
        }
        let _ = browser.client.clone().close().await;
        let _ = browser.driver.kill();
        let _ = browser.driver.wait();
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Sign in at `base` with `token`.
pub async fn sign_in(c: &Client, base: &str, token: &str) {
    c.goto(&format!("{base}/console/login")).await.unwrap();
    c.find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    c.find(Locator::Id("sign-in"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Id("who"))
        .await
        .expect("signed in");
}

/// The text of the element with id `id`, once there.
pub async fn text(c: &Client, id: &str) -> String {
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Id(id))
        .await
        .unwrap_or_else(|e| panic!("#{id}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Wait until the element `id`'s text satisfies `ok`; its text.
pub async fn text_until(c: &Client, id: &str, ok: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    let seen = async || {
        last = text(c, id).await;
        ok(&last)
    };
    eventually(&format!("#{id}'s text"), Duration::from_secs(15), seen).await;
    last
}

/// The seqs of the rows table on the page.
pub async fn listed_seqs(c: &Client) -> Vec<u64> {
    let cells = c
        .find_all(Locator::Css("#rows tbody tr td:first-child"))
        .await
        .unwrap();
    let mut seqs = Vec::new();
    for cell in cells {
        seqs.push(cell.text().await.unwrap().parse().unwrap());
    }
    seqs
}
