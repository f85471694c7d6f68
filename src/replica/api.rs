//! A reader of a node's admin API lists, for [`verify`](super::verify): every page of a
//! tenant's routes or sources, joined by `after`/`next`.
//!
//! The token goes in the `Authorization` header only; errors name the path and the status,
//! never the token.

use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::Value;

use super::verify::VerifyError;

/// The largest page the API gives.
const PAGE: &str = "1000";
/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// One page of a list.
#[derive(Deserialize)]
struct Page {
    items: Vec<Value>,
    next: Option<String>,
}

/// A client of one node's admin API.
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: String,
}

impl Client {
    /// A client of the node at `url` (`http://host:port`), authenticated by `token`.
    pub fn new(url: &str, token: &str) -> Result<Client, VerifyError> {
        let base = Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
            .ok_or_else(|| VerifyError::Url(url.to_owned()))?;
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| VerifyError::Request {
                path: url.to_owned(),
                detail: e.to_string(),
            })?;
        Ok(Client {
            http,
            base,
            token: token.to_owned(),
        })
    }

    /// Every item of `GET /admin/v1/tenants/{tenant}/{plural}`, in id order.
    pub async fn list(&self, tenant: &str, plural: &str) -> Result<Vec<Value>, VerifyError> {
        let mut items = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.page(tenant, plural, after.as_deref()).await?;
            items.extend(page.items);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(items),
            }
        }
    }

    async fn page(
        &self,
        tenant: &str,
        plural: &str,
        after: Option<&str>,
    ) -> Result<Page, VerifyError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| VerifyError::Url(self.base.to_string()))?
            .pop_if_empty()
            .extend(["admin", "v1", "tenants", tenant, plural]);
        url.query_pairs_mut().append_pair("limit", PAGE);
        if let Some(after) = after {
            url.query_pairs_mut().append_pair("after", after);
        }
        let path = url.path().to_owned();
        let err = |detail: String| VerifyError::Request {
            path: path.clone(),
            detail,
        };
        let response = self
            .http
            .get(url.clone())
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| err(e.without_url().to_string()))?;
        match response.status() {
            StatusCode::OK => {}
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                return Err(err(format!(
                    "{}: the token was refused (it needs admin:read)",
                    response.status()
                )))
            }
            status => return Err(err(format!("answered {status}"))),
        }
        response
            .json::<Page>()
            .await
            .map_err(|e| err(format!("not a page of the API: {}", e.without_url())))
    }
}
