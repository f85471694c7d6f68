//! Extractors whose refusals are [`ApiError`]s: JSON bodies, path and query parameters, and
//! the `If-Match` header.
//!
//! axum's own extractors answer with plain-text bodies; these wrap them (or replace them, for
//! JSON) so that every refusal has the API's JSON shape and names the field to blame. A body
//! over `api.body_limit` is a 413 (axum's `DefaultBodyLimit`, installed on the router), one
//! not in by `api.body_timeout` a 408 (the deadline `api::limits` sets); bad
//! JSON syntax is a 400; a well-formed body of the wrong shape (unknown field, wrong type,
//! missing field) is a 422 naming the field. Messages never echo a value the caller sent:
//! that value could be a secret.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::error::Category;

use super::error::ApiError;
use super::limits::BodyDeadline;
use crate::subjects::IfMatch;

/// A JSON request body.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(request.headers()) {
            return Err(ApiError::UnsupportedMediaType);
        }
        parse(&body(request, state).await?).map(ApiJson)
    }
}

/// An optional JSON request body: `None` when the body is empty; otherwise as [`ApiJson`].
#[derive(Debug)]
pub struct OptionalJson<T>(pub Option<T>);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let json = is_json(request.headers());
        let bytes = body(request, state).await?;
        match (bytes.is_empty(), json) {
            (true, _) => Ok(OptionalJson(None)),
            (false, false) => Err(ApiError::UnsupportedMediaType),
            (false, true) => parse(&bytes).map(|v| OptionalJson(Some(v))),
        }
    }
}

/// The request body, within `api.body_limit` (413 `too_large` past it) and by its
/// [`BodyDeadline`] (408 `body_timeout` past it).
async fn body<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, ApiError> {
    let deadline = request.extensions().get::<BodyDeadline>().copied();
    let read = Bytes::from_request(request, state);
    let read = match deadline {
        Some(BodyDeadline(at)) => tokio::time::timeout_at(at, read)
            .await
            .map_err(|_| ApiError::BodyTimeout)?,
        None => read.await,
    };
    read.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge
        } else {
            ApiError::bad("body", "the request body could not be read")
        }
    })
}

/// Decode `bytes` as one JSON object of type `T`.
///
/// Every request body of this API is an object. serde's derived structs also take an array
/// of their fields in order (so `[]` would pass as an empty struct): a well-formed array is
/// refused here as the wrong type.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.trim_ascii_start().starts_with(b"[") {
        parse_any::<serde::de::IgnoredAny>(bytes)?;
        return Err(ApiError::invalid(
            "body",
            "invalid type: array, expected a JSON object",
        ));
    }
    parse_any(bytes)
}

fn parse_any<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(json_error)?;
    de.end()
        .map_err(|e| ApiError::bad("body", format!("malformed JSON: {e}")))?;
    Ok(value)
}

fn json_error(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    match inner.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::bad("body", format!("malformed JSON: {inner}"))
        }
        Category::Data => {
            let message = without_values(&inner.to_string());
            // The path names an unknown field itself; a missing one only in the message.
            let field = match (path.as_str(), named_field(&message)) {
                (".", Some(name)) => name,
                (".", None) => "body".to_owned(),
                (_, Some(name)) if message.starts_with("missing") => format!("{path}.{name}"),
                _ => path,
            };
            ApiError::invalid(field, message)
        }
    }
}

/// The field named by serde's "unknown field `x`" or "missing field `x`" message.
fn named_field(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("missing field `"))?;
    Some(rest.split('`').next()?.to_owned())
}

/// serde's "invalid type: string \"hunter2\", expected u32" without the value.
fn without_values(message: &str) -> String {
    for (prefix, label) in [
        ("invalid type: ", "invalid type"),
        ("invalid value: ", "invalid value"),
        ("invalid length ", "invalid length"),
    ] {
        if let Some(rest) = message.strip_prefix(prefix) {
            if let Some((found, expected)) = rest.split_once(", expected ") {
                let what = found.split_whitespace().next().unwrap_or("value");
                return format!("{label}: {what}, expected {expected}");
            }
        }
    }
    message.to_owned()
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Path parameters.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| ApiPath(v))
            .map_err(|r| ApiError::BadRequest {
                field: None,
                message: r.body_text(),
            })
    }
}

/// Query parameters (unknown ones are refused by the target type's `deny_unknown_fields`).
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(v)| ApiQuery(v))
            .map_err(|r| ApiError::BadRequest {
                field: None,
                message: r.body_text(),
            })
    }
}

/// The `If-Match` precondition: `"<revision>"`, `<revision>` or `*`.
#[derive(Debug)]
pub struct IfMatchHeader(pub Option<IfMatch>);

impl<S: Send + Sync> FromRequestParts<S> for IfMatchHeader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        if_match(&parts.headers).map(IfMatchHeader)
    }
}

fn if_match(headers: &HeaderMap) -> Result<Option<IfMatch>, ApiError> {
    let mut values = headers.get_all(header::IF_MATCH).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = || ApiError::bad("If-Match", "must be one revision, as \"<n>\" or <n>, or *");
    if values.next().is_some() {
        return Err(bad());
    }
    let text = value.to_str().map_err(|_| bad())?.trim();
    if text == "*" {
        return Ok(Some(IfMatch::Any));
    }
    let unquoted = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    if unquoted.is_empty() || !unquoted.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    unquoted
        .parse()
        .map(|r| Some(IfMatch::Revision(r)))
        .map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        rate: u32,
        inner: Option<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        a: u32,
    }

    #[test]
    fn json_errors_name_the_field_and_never_echo_values() {
        let e = parse::<Body>(br#"{"rate": 1, "bogus": 2}"#).unwrap_err();
        assert!(
            matches!(&e, ApiError::Invalid { field, .. } if field == "bogus"),
            "{e:?}"
        );
        let e = parse::<Body>(br#"{"rate": 1, "inner": {"a": 1, "b": 2}}"#).unwrap_err();
        assert!(
            matches!(&e, ApiError::Invalid { field, .. } if field == "inner.b"),
            "{e:?}"
        );
        let e = parse::<Body>(br#"{"rate": "hunter2"}"#).unwrap_err();
        let ApiError::Invalid { field, message } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(field, "rate");
        assert!(!message.contains("hunter2"), "{message}");
        assert!(
            message.starts_with("invalid type: string, expected u32"),
            "{message}"
        );
        let e = parse::<Body>(br#"{"rate": 1"#).unwrap_err();
        assert!(matches!(e, ApiError::BadRequest { .. }));
        let e = parse::<Body>(br#"{"rate": 1} x"#).unwrap_err();
        assert!(matches!(e, ApiError::BadRequest { .. }));
        let e = parse::<Body>(b" [1, null]").unwrap_err();
        assert!(
            matches!(&e, ApiError::Invalid { field, message } if field == "body" && message.contains("array")),
            "{e:?}"
        );
        let e = parse::<Body>(b"[1, ").unwrap_err();
        assert!(matches!(e, ApiError::BadRequest { .. }), "{e:?}");
        let e = parse::<Body>(br#"{}"#).unwrap_err();
        assert!(
            matches!(&e, ApiError::Invalid { field, .. } if field == "rate"),
            "{e:?}"
        );
    }

    #[test]
    fn if_match_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(if_match(&h).unwrap(), None);
        for (v, want) in [
            ("\"3\"", IfMatch::Revision(3)),
            ("7", IfMatch::Revision(7)),
            ("*", IfMatch::Any),
        ] {
            h.insert(header::IF_MATCH, HeaderValue::from_static(v));
            assert_eq!(if_match(&h).unwrap(), Some(want));
        }
        for bad in ["W/\"3\"", "\"\"", "-1", "3, 4", "99999999999999999999999"] {
            h.insert(header::IF_MATCH, HeaderValue::from_static(bad));
            assert!(if_match(&h).is_err(), "{bad}");
        }
    }
}
