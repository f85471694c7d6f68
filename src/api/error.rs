//! The one mapping of errors to HTTP responses for the whole API.
//!
//! Every error a handler or extractor can return is an [`ApiError`], and every `ApiError`
//! becomes a JSON body `{"error": "<code>", "message": "...", "field": "..."}` (`field` only
//! when one input is to blame). Codes are stable for clients; messages are for humans. A 500
//! says nothing about what failed: the detail goes to the log, never to the caller.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::audit::CommitError;
use crate::config::Scope;
use crate::store::StoreError;
use crate::subjects::read::ReadError;
use crate::subjects::SubjectError;
use crate::telemetry;

/// How long a caller refused for the audit backlog should wait, in seconds.
pub const BACKLOG_RETRY_AFTER_SECS: u32 = 60;

/// The `Retry-After` of a watcher refused at `api.max_watchers`: long-polls end within
/// seconds, so a place frees soon.
pub const WATCHERS_RETRY_AFTER_SECS: u32 = 5;

/// An error as the API caller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// 400: the request is malformed (JSON syntax, a header, a path or query parameter).
    BadRequest {
        /// The parameter, header or field to blame, if one is.
        field: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// 422: well-formed input that is not acceptable.
    Invalid {
        /// The field to blame.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// 401: no valid bearer token.
    Unauthorized,
    /// 403: the token lacks the scope.
    Forbidden(Scope),
    /// 404: the subject (or row) does not exist.
    NotFound(String),
    /// 404: no endpoint has this path (its wire code stays `no_route`).
    NoEndpoint,
    /// 405: the path exists, the method does not.
    MethodNotAllowed,
    /// 409: the subject exists, is at another revision, or its state forbids the change.
    Conflict {
        /// `already_exists`, `revision_mismatch` or `conflict`.
        code: &'static str,
        /// What conflicted.
        message: String,
    },
    /// 413: the body is over `api.body_limit`.
    TooLarge,
    /// 415: the body is not JSON.
    UnsupportedMediaType,
    /// 408: the body did not arrive within `api.body_timeout`; nothing was changed.
    BodyTimeout,
    /// 410: a watcher's position cannot be served (`position_gone`): it relists.
    Gone {
        /// Why.
        message: String,
        /// The lowest position served.
        oldest: u64,
        /// The incarnation at `oldest`.
        incarnation: uuid::Uuid,
    },
    /// 503: `api.max_watchers` watch already.
    TooManyWatchers(usize),
    /// 503: the request took longer than `api.request_timeout` (work it started goes on).
    RequestTimeout,
    /// 503: the store cannot take or serve the request.
    StoreUnavailable,
    /// 503: the audit trail is at a ceiling; retry later.
    AuditBacklog,
    /// 503: every connection slot this client may take is taken; on a reserved slot only
    /// probes and authenticated requests are served.
    Busy,
    /// 500: a bug or a corrupt value; details are logged only.
    Internal,
}

impl ApiError {
    /// A 400 blaming `field`.
    pub fn bad(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// A 422 blaming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) | ApiError::NoEndpoint => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::Gone { .. } => StatusCode::GONE,
            ApiError::TooManyWatchers(_)
            | ApiError::StoreUnavailable
            | ApiError::AuditBacklog
            | ApiError::RequestTimeout
            | ApiError::Busy => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest { .. } => "bad_request",
            ApiError::Invalid { .. } => "invalid_input",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::NoEndpoint => "no_route",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Conflict { code, .. } => code,
            ApiError::TooLarge => "too_large",
            ApiError::UnsupportedMediaType => "unsupported_media_type",
            ApiError::BodyTimeout => "body_timeout",
            ApiError::RequestTimeout => "request_timeout",
            ApiError::Gone { .. } => "position_gone",
            ApiError::TooManyWatchers(_) => "too_many_watchers",
            ApiError::StoreUnavailable => "store_unavailable",
            ApiError::AuditBacklog => "audit_backlog",
            ApiError::Busy => "busy",
            ApiError::Internal => "internal",
        }
    }

    /// The JSON body of the answer.
    pub fn body(&self) -> Value {
        let (message, field) = match self {
            ApiError::BadRequest { field, message } => (message.clone(), field.clone()),
            ApiError::Invalid { field, message } => {
                (format!("{field}: {message}"), Some(field.clone()))
            }
            ApiError::Unauthorized => ("a valid bearer token is required".into(), None),
            ApiError::Forbidden(scope) => (
                format!("the token lacks the `{}` scope", scope.as_str()),
                None,
            ),
            ApiError::NotFound(what) => (what.clone(), None),
            ApiError::NoEndpoint => ("no such endpoint".into(), None),
            ApiError::MethodNotAllowed => ("method not allowed on this route".into(), None),
            ApiError::Conflict { message, .. } => (message.clone(), None),
            ApiError::TooLarge => ("the request body is over api.body_limit".into(), None),
            ApiError::UnsupportedMediaType => (
                "the body must be JSON (Content-Type: application/json)".into(),
                None,
            ),
            ApiError::BodyTimeout => (
                "the request body did not arrive within api.body_timeout; nothing was changed"
                    .into(),
                None,
            ),
            // The handler's wait was dropped, not its work: a change on its way to the trail
            // is made and recorded, a backup finished.
            ApiError::RequestTimeout => (
                "the request did not finish within api.request_timeout; a change it started \
                 is still made and recorded: read it back, or look in the audit trail"
                    .into(),
                None,
            ),
            // Usually nothing was changed; a dual write whose store did not answer may have
            // been applied, and settlement records it either way.
            ApiError::StoreUnavailable => (
                "the store is unavailable; the change was not made, or (a route or source \
                 store that did not answer) is settled and recorded later"
                    .into(),
                None,
            ),
            ApiError::AuditBacklog => (
                "the audit trail is at its backlog ceiling; nothing was changed, retry later"
                    .into(),
                None,
            ),
            ApiError::Busy => (
                "every connection this client may hold is in use; retry shortly".into(),
                None,
            ),
            ApiError::Gone { message, .. } => (message.clone(), None),
            ApiError::TooManyWatchers(max) => (
                format!("{max} watchers already (api.max_watchers); retry shortly"),
                None,
            ),
            ApiError::Internal => ("internal error".into(), None),
        };
        let mut body = json!({"error": self.code(), "message": message});
        if let Some(field) = field {
            body["field"] = Value::String(field);
        }
        if let ApiError::Gone {
            oldest,
            incarnation,
            ..
        } = self
        {
            body["oldest"] = json!(oldest);
            body["incarnation"] = json!(incarnation);
        }
        body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(self.body())).into_response();
        let headers = response.headers_mut();
        match self {
            ApiError::AuditBacklog => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(BACKLOG_RETRY_AFTER_SECS),
                );
            }
            ApiError::TooManyWatchers(_) => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(WATCHERS_RETRY_AFTER_SECS),
                );
            }
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            // The rest of the body may still be on its way: the connection cannot be reused.
            // A busy answer frees its reserved slot at once.
            ApiError::BodyTimeout | ApiError::Busy => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }
}

impl From<SubjectError> for ApiError {
    fn from(e: SubjectError) -> Self {
        match e {
            SubjectError::Invalid { field, message } => ApiError::Invalid { field, message },
            SubjectError::NotFound { .. } => ApiError::NotFound(e.to_string()),
            SubjectError::Exists { .. } => ApiError::Conflict {
                code: "already_exists",
                message: e.to_string(),
            },
            SubjectError::RevisionMismatch { .. } => ApiError::Conflict {
                code: "revision_mismatch",
                message: e.to_string(),
            },
            SubjectError::State { .. } => ApiError::Conflict {
                code: "conflict",
                message: e.to_string(),
            },
            SubjectError::Unchanged(_) => {
                telemetry::api::request_failed(&"an unchanged outcome reached the error mapping");
                ApiError::Internal
            }
        }
    }
}

impl ApiError {
    /// The answer to a change that was not committed: its own refusal as `refused` says, the
    /// store's and the trail's as every change answers them.
    pub fn uncommitted<E>(e: CommitError<E>, refused: impl FnOnce(E) -> ApiError) -> ApiError {
        match e {
            CommitError::Refused(e) => refused(e),
            CommitError::StoreUnavailable => ApiError::StoreUnavailable,
            CommitError::AuditBacklog => ApiError::AuditBacklog,
        }
    }
}

impl From<CommitError<SubjectError>> for ApiError {
    fn from(e: CommitError<SubjectError>) -> Self {
        ApiError::uncommitted(e, ApiError::from)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        telemetry::api::request_failed(&e);
        match e {
            StoreError::Corrupt { .. }
            | StoreError::Unencodable { .. }
            | StoreError::Task { .. } => ApiError::Internal,
            _ => ApiError::StoreUnavailable,
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Invalid(e) => e.into(),
            ReadError::Store(e) => e.into(),
        }
    }
}

/// A request's work task (`AppState::finish`) that panicked.
impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> Self {
        telemetry::api::request_failed(&e);
        ApiError::Internal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlog_is_503_with_retry_after() {
        let r = ApiError::from(CommitError::<SubjectError>::AuditBacklog).into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "60");
        let r = ApiError::from(CommitError::<SubjectError>::StoreUnavailable).into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
    }

    #[test]
    fn internals_never_leak() {
        let e = StoreError::Corrupt {
            what: "sources t1/s1".into(),
            detail: "secret stuff".into(),
        };
        let api = ApiError::from(e);
        assert_eq!(api.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            api.body(),
            json!({"error": "internal", "message": "internal error"})
        );
    }

    #[test]
    fn invalid_input_names_the_field() {
        let api = ApiError::from(SubjectError::invalid("rate", "must be 1 to 10"));
        assert_eq!(api.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(api.body()["field"], "rate");
        assert_eq!(api.body()["message"], "rate: must be 1 to 10");
    }
}
