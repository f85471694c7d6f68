//! The console's pages on the bench's trail: a real node started on the store the queries
//! ran on, signed in with the bench's token, then the Trail page filtered by the actor and
//! by the hour, and the Subject page of the subject, each requested many times. The figure is
//! the node's own time to make each page (its `Server-Timing`), beside the time to the page's
//! last byte on loopback. Target: p99 server time <= 50 ms.

use std::path::Path;
use std::time::{Duration, Instant};

use ankusa::audit::Filter;
use serde_json::json;

use crate::figures::percentile;
use crate::node::{Node, TOKEN};

/// Requests of each page.
const REQUESTS: usize = 200;

/// One page's figures: the node's times and the client's, each sorted.
pub struct Served {
    pub name: &'static str,
    pub server: Vec<Duration>,
    pub client: Vec<Duration>,
}

/// The console path that answers `filter` (one of the queries' questions).
fn path(filter: &Filter) -> String {
    let rfc3339 = |ms: u64| {
        chrono::DateTime::from_timestamp_millis(ms as i64)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    if let Some(subject) = &filter.subject {
        q.append_pair("resource", subject);
        return format!("/console/subject?{}", q.finish());
    }
    if let Some(actor) = &filter.actor {
        q.append_pair("actor", actor);
    }
    if let (Some(from), Some(until)) = (filter.from, filter.until) {
        q.append_pair("from", &rfc3339(from));
        q.append_pair("until", &rfc3339(until));
    }
    format!("/console/trail?{}", q.finish())
}

/// Serve the console from a node on the store at `data_dir` and time its pages for
/// `questions`.
pub fn run(data_dir: &Path, questions: &[(&'static str, Filter, u64)]) -> Vec<Served> {
    let node = Node::start(|v| {
        v["node"]["data_dir"] = json!(data_dir);
        v["api"]["console"] = json!("on");
    });
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let served = client.block_on(async {
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let login = http
            .post(format!("{}/console/login", node.base))
            .form(&[("token", TOKEN)])
            .send()
            .await
            .unwrap();
        assert_eq!(login.status(), reqwest::StatusCode::SEE_OTHER, "signed in");
        let cookie = login.headers()["set-cookie"].to_str().unwrap();
        let cookie = cookie.split(';').next().unwrap().to_owned();
        let mut served = Vec::new();
        for (name, filter, _) in questions {
            let url = format!("{}{}", node.base, path(filter));
            let (mut server, mut client) = (Vec::new(), Vec::new());
            for _ in 0..REQUESTS {
                let started = Instant::now();
                let r = http
                    .get(&url)
                    .header("cookie", &cookie)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), reqwest::StatusCode::OK, "{url}");
                let timing = r.headers()["server-timing"].to_str().unwrap().to_owned();
                let page = r.text().await.unwrap();
                client.push(started.elapsed());
                assert!(page.contains("/console/trail/"), "{url}: a page of rows");
                let ms: f64 = timing.trim_start_matches("app;dur=").parse().unwrap();
                server.push(Duration::from_secs_f64(ms / 1000.0));
            }
            server.sort();
            client.sort();
            served.push(Served {
                name,
                server,
                client,
            });
        }
        served
    });
    node.stop();
    served
}

/// Print each page's p50 and p99, the node's and the client's.
pub fn print(served: &[Served]) {
    let ms = |d: &[Duration], p| percentile(d, p).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
    println!("console pages, {REQUESTS} requests each (target: server p99 <= 50 ms):");
    for s in served {
        println!(
            "  {:<12} server p50 {:>6.2} ms  p99 {:>6.2} ms   to last byte p50 {:>6.2} ms  p99 {:>6.2} ms",
            s.name,
            ms(&s.server, 0.50),
            ms(&s.server, 0.99),
            ms(&s.client, 0.50),
            ms(&s.client, 0.99)
        );
    }
}
