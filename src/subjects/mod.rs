//! The local subjects: API-managed sources, rate-limit overrides, quarantine entries and
//! replay jobs, kept in this node's RocksDB, each kind in its own column family under
//! `<tenant>/<id>` (see [`key`]).
//!
//! Every change goes through [`Trail::commit`](crate::audit::Trail::commit): the closure that validates the input, checks
//! the subject's revision and stages its ops runs on the writer thread, against the store
//! plus the writes of the changes before it in the same group. So two concurrent updates of
//! one subject can never both pass a revision check, and a change that is refused (bad
//! input, missing subject, stale `If-Match`, nothing to change) writes nothing: no row, no
//! seq.
//!
//! Every subject has a `revision`: 1 on create, +1 on every change. A delete's row carries
//! the deleted subject's last revision + 1, so the revisions of one subject's rows are
//! consecutive from its create to its delete. The row's states are the complete subject as
//! stored (a source's secret only as its salted [`secret::Verifier`]); its `detail` holds
//! counts, filters or a rate, never a secret or a spec. Only sources carry a lifecycle
//! entity, the [`redact`]ed source.
//!
//! Routes ([`routes`]), and sources when `[sources] store = "redis"` ([`sources_remote`]),
//! live outside RocksDB, in a [`remote::RemoteStore`]: their changes are dual writes
//! (`Trail::record`), and their revision is kept by that store.
//!
//! This module knows the trail and the store, never HTTP.

mod change;
pub mod key;
pub mod overrides;
pub mod quarantine;
pub mod read;
pub mod redact;
pub mod remote;
pub mod replay;
pub mod routes;
pub mod secret;
pub mod snapshot;
pub mod sources;
pub mod sources_remote;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::audit::CommitError;
use crate::store::Cf;

pub(crate) use change::{
    apply, commit_change, load, remove, require, snapshot_item, unchanged, Effect,
};

/// A kind of local subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An API-managed source.
    Source,
    /// A rate-limit override.
    Override,
    /// A quarantine entry.
    Quarantine,
    /// A replay job.
    Replay,
}

impl Kind {
    /// The column family the kind lives in.
    pub fn cf(self) -> Cf {
        match self {
            Kind::Source => Cf::Sources,
            Kind::Override => Cf::Overrides,
            Kind::Quarantine => Cf::Quarantine,
            Kind::Replay => Cf::ReplayJobs,
        }
    }

    /// The first half of a row's action (`source` in `source.create`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Source => "source",
            Kind::Override => "override",
            Kind::Quarantine => "quarantine",
            Kind::Replay => "replay",
        }
    }

    /// The collection name: the first half of a row's resource and of the API path.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Source => "sources",
            Kind::Override => "overrides",
            Kind::Quarantine => "quarantine",
            Kind::Replay => "replay-jobs",
        }
    }

    /// The name of the field or path parameter that identifies one subject of the kind.
    pub fn id_field(self) -> &'static str {
        match self {
            Kind::Override => "key",
            Kind::Source | Kind::Quarantine | Kind::Replay => "id",
        }
    }

    /// A row's resource: `<plural>/<id>`, e.g. `sources/s1`.
    pub fn resource(self, id: &str) -> String {
        [self.plural(), "/", id].concat()
    }
}

/// A stored subject.
pub trait Subject: Serialize + DeserializeOwned + PartialEq + Send + 'static {
    /// Its kind.
    const KIND: Kind;
    /// Whether its changes carry a lifecycle entity (sources, and routes elsewhere).
    const LIFECYCLE: bool = false;
    /// The tenant it belongs to.
    fn tenant(&self) -> &str;
    /// Its id within the tenant.
    fn id(&self) -> &str;
    /// Its change counter.
    fn revision(&self) -> u64;
}

/// Why a change to a subject was refused. Nothing of it was written.
#[derive(Debug, thiserror::Error)]
pub enum SubjectError {
    /// The input is not acceptable; `field` names the culprit.
    #[error("{field}: {message}")]
    Invalid {
        /// The field, parameter or header.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The subject does not exist.
    #[error("{resource} does not exist")]
    NotFound {
        /// The subject's resource.
        resource: String,
    },
    /// A create found the subject already there.
    #[error("{resource} already exists")]
    Exists {
        /// The subject's resource.
        resource: String,
    },
    /// `If-Match` named another revision than the subject's.
    #[error("{resource}: If-Match {expected} does not match {}", actual.map_or("a missing subject".to_owned(), |r| format!("revision {r}")))]
    RevisionMismatch {
        /// The subject's resource.
        resource: String,
        /// What the caller expected.
        expected: IfMatch,
        /// The subject's revision (`None`: it does not exist).
        actual: Option<u64>,
    },
    /// The subject's state does not allow the change (e.g. cancelling a finished job).
    #[error("{resource}: {message}")]
    State {
        /// The subject's resource.
        resource: String,
        /// Why.
        message: String,
    },
    /// The change would leave the subject as it is: it is not made and writes no row. The
    /// `commit_change` helper turns this into a successful [`SubjectChange`] without a seq, so it
    /// never reaches a caller as an error.
    #[error("nothing to change")]
    Unchanged(Box<SubjectChange>),
}

impl SubjectError {
    /// An [`SubjectError::Invalid`] of `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> SubjectError {
        SubjectError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<SubjectError> for CommitError<SubjectError> {
    fn from(e: SubjectError) -> Self {
        CommitError::Refused(e)
    }
}

/// What a change returns: the subject's revision and redacted view after it (`None` after
/// a delete), and its row's seq (`None`: nothing changed, no row).
#[derive(Debug, Clone, PartialEq)]
pub struct SubjectChange {
    /// The row's seq, when a row was written.
    pub seq: Option<u64>,
    /// The subject's revision after the change (for a delete: that of its row).
    pub revision: u64,
    /// The subject after the change, redacted and encoded as JSON ([`redact::Redacted::to_json`]).
    pub view: Option<Bytes>,
}

/// The result of a change.
pub type ChangeResult = Result<SubjectChange, CommitError<SubjectError>>;

/// An `If-Match` precondition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfMatch {
    /// `*`: the subject must exist.
    Any,
    /// The subject must be at this revision.
    Revision(u64),
}

impl std::fmt::Display for IfMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IfMatch::Any => f.write_str("*"),
            IfMatch::Revision(r) => write!(f, "{r}"),
        }
    }
}

/// Check an optional precondition against the subject's revision (`None`: missing);
/// `resource` names the subject in the refusal.
pub fn check_if_match(
    expected: Option<IfMatch>,
    resource: impl FnOnce() -> String,
    actual: Option<u64>,
) -> Result<(), SubjectError> {
    let ok = match expected {
        None => true,
        Some(IfMatch::Any) => actual.is_some(),
        Some(IfMatch::Revision(r)) => actual == Some(r),
    };
    match (ok, expected) {
        (true, _) | (_, None) => Ok(()),
        (false, Some(expected)) => Err(SubjectError::RevisionMismatch {
            resource: resource(),
            expected,
            actual,
        }),
    }
}

/// Deserialize an optional field that, when present, must hold a value: `null` is refused as
/// the document refuses it (a field left out is the way to say "none"), rather than read as
/// if the field were absent.
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// A text's length as the API counts it: in characters, as JSON Schema's `maxLength` does,
/// so that a text the document allows is never refused for its bytes.
pub fn char_len(value: &str) -> usize {
    value.chars().count()
}

/// Whether `key` is a key a `config` or `filter` object may have: 1 to 128 characters, no
/// control characters.
pub fn is_object_key(key: &str) -> bool {
    !key.is_empty() && char_len(key) <= 128 && !key.chars().any(char::is_control)
}

/// Check free text named `field`: 1 to `max` characters, no control characters.
pub fn check_text(field: &str, value: &str, max: usize) -> Result<(), SubjectError> {
    if value.is_empty() || char_len(value) > max {
        return Err(SubjectError::invalid(
            field,
            format!("must be 1 to {max} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(SubjectError::invalid(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}
