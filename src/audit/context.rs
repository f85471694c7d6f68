//! Who made a change, and how admission treats it: the `Context` every write carries into
//! its row.
//!
//! Who made a change (the row's actor) and whether the ceilings and the outbox backlog may
//! refuse it are two questions: an operator's enable of a stopped sink is the operator's
//! act, and it must not be refused by the backlog it is there to drain. So a `Context`
//! carries an [`Admission`] of its own beside the actor.
//!
//! A change also carries the W3C trace context it was made under ([`Trace`]): its row keeps
//! it, so the change's lifecycle event carries it on every delivery, a redelivery after a
//! crash included. A trace id is no secret; an auditor can find the change's spans by it.

use serde::{Deserialize, Serialize};

/// The actor name of changes the node makes itself.
pub const SYSTEM_ACTOR: &str = "system";

/// How the writer admits a change when the trail is at a ceiling or the outbox backlog is
/// full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Admission {
    /// An operator's change: refused (`AuditBacklog`) when the outbox backlog is full or
    /// pruning cannot make room for its row under the ceilings.
    #[default]
    Bounded,
    /// An operator's act that relieves the backlog (enabling a sink, redriving or dropping
    /// dead letters) or is already done and must be recorded (a backup): refusing it would
    /// keep the backlog full, or un-make the act. Never refused, like the node's own changes.
    Relieving,
    /// A change the node makes itself (settlement, restores, a sink's disable): never
    /// refused.
    System,
}

impl Admission {
    /// Whether the ceilings and the backlog may refuse the change.
    pub fn is_bounded(self) -> bool {
        self == Admission::Bounded
    }
}

/// The W3C trace context of a change, as the propagator writes it: the `traceparent` of the
/// node's span that made the change, and the caller's `tracestate` passed on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    /// `00-<trace id>-<span id>-<flags>`.
    pub traceparent: String,
    /// The vendors' entries, when there are any.
    pub tracestate: Option<String>,
}

/// Who asked for a change, from where, under which request and trace.
///
/// The admin API fills it from the authenticated token (actor), the peer address or a
/// trusted proxy's header (remote_ip), `X-Request-Id` (request_id) and the request's span
/// (trace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    /// The token's name, or [`SYSTEM_ACTOR`].
    pub actor: String,
    /// The client's address, when the change came over the network.
    pub remote_ip: Option<String>,
    /// The request's id, echoed to the client, so a row can be matched to a request.
    pub request_id: Option<String>,
    /// The trace the change was made in: the request's, or the node's own span's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Trace>,
    /// How the writer admits the change; never in a row.
    #[serde(skip)]
    admission: Admission,
}

impl Context {
    /// An operator's change.
    pub fn new(
        actor: impl Into<String>,
        remote_ip: Option<String>,
        request_id: Option<String>,
    ) -> Context {
        Context {
            actor: actor.into(),
            remote_ip,
            request_id,
            trace: None,
            admission: Admission::Bounded,
        }
    }

    /// A change the node makes itself (settlement, restores, retention). It is never
    /// refused by the trail's ceilings or the outbox backlog. It carries the trace of the
    /// node's span it is made in, if there is one.
    pub fn system() -> Context {
        Context {
            actor: SYSTEM_ACTOR.to_owned(),
            remote_ip: None,
            request_id: None,
            trace: crate::telemetry::trace::current(),
            admission: Admission::System,
        }
    }

    /// This change as one made in `trace`.
    pub fn traced(mut self, trace: Option<Trace>) -> Context {
        self.trace = trace;
        self
    }

    /// This operator's change as one that relieves the backlog ([`Admission::Relieving`]):
    /// never refused, its row still the operator's. A system change stays one.
    pub fn relieving(mut self) -> Context {
        if self.admission == Admission::Bounded {
            self.admission = Admission::Relieving;
        }
        self
    }

    /// How the writer admits the change.
    pub fn admission(&self) -> Admission {
        self.admission
    }

    /// Whether this is [`Context::system`].
    pub fn is_system(&self) -> bool {
        self.admission == Admission::System
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relieving_change_keeps_its_actor_and_is_not_bounded() {
        let ctx = Context::new("alice", None, Some("r1".into())).relieving();
        assert_eq!(ctx.actor, "alice");
        assert_eq!(ctx.admission(), Admission::Relieving);
        assert!(!ctx.admission().is_bounded() && !ctx.is_system());
        assert_eq!(Context::system().relieving().admission(), Admission::System);
        assert!(Context::new("bob", None, None).admission().is_bounded());
    }
}
