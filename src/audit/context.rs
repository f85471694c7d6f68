//! Who made a change: the `Context` every write carries into its row.

use serde::{Deserialize, Serialize};

/// The actor name of changes the node makes itself.
pub const SYSTEM_ACTOR: &str = "system";

/// Who asked for a change, from where, under which request.
///
/// The admin API fills it from the authenticated token (actor), the peer address or a
/// trusted proxy's header (remote_ip) and `X-Request-Id` (request_id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    /// The token's name, or [`SYSTEM_ACTOR`].
    pub actor: String,
    /// The client's address, when the change came over the network.
    pub remote_ip: Option<String>,
    /// The request's id, echoed to the client, so a row can be matched to a request.
    pub request_id: Option<String>,
    /// A change the node makes itself: never refused by ceilings or backlog.
    #[serde(skip)]
    system: bool,
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
            system: false,
        }
    }

    /// A change the node makes itself (settlement, restores, retention). It is never
    /// refused by the trail's ceilings or the outbox backlog.
    pub fn system() -> Context {
        Context {
            actor: SYSTEM_ACTOR.to_owned(),
            remote_ip: None,
            request_id: None,
            system: true,
        }
    }

    /// Whether this is [`Context::system`].
    pub fn is_system(&self) -> bool {
        self.system
    }
}
