//! The writer's side of checkpoints: a group ends with a signed checkpoint row when
//! `audit.checkpoint_rows` rows came since the last one, or when the checkpoint timer (or a
//! caller) asks and any row did.
//!
//! The checkpoint row is a system row (`trail.checkpoint`) of the tree as the group's rows
//! leave it, so it is itself the next leaf, published like any flagged row. Its own row does
//! not count towards the next checkpoint: an idle trail is not checkpointed again and again.

use serde_json::{Map, Value};

use super::group::Group;
use super::stage::Staged;
use super::Writer;
use crate::audit::context::Context;
use crate::audit::row::{Change, Row};
use crate::audit::tree::checkpoint::CheckpointKey;
use crate::audit::tree::verify::{CHECKPOINT_ACTION, CHECKPOINT_RESOURCE};
use crate::store::{keys, keys::meta, Cf};

/// What the writer signs checkpoints with.
pub(crate) struct Signing {
    pub key: CheckpointKey,
    /// The origin of this incarnation's checkpoints.
    pub origin: String,
    /// `audit.checkpoint_rows`.
    pub every: u64,
}

impl Writer {
    /// End group `g` with a checkpoint row if one is due (`asked`: the timer or a caller asks
    /// for one). Returns the row.
    pub(super) fn checkpoint(&mut self, g: &mut Group, at: u64, asked: bool) -> Option<Box<Row>> {
        let signing = self.signing.as_ref()?;
        let tree = g.tree.as_ref()?;
        let since = g.seq - g.checkpointed;
        if since == 0 || (since < signing.every && !asked) {
            return None;
        }
        let signed = signing.key.sign(&signing.origin, tree.size(), tree.root());
        let entity = serde_json::to_value(&signed).expect("a checkpoint always serializes");
        let detail = match &entity {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        };
        let change = Change {
            action: CHECKPOINT_ACTION.into(),
            resource: CHECKPOINT_RESOURCE.into(),
            detail,
            ..Change::default()
        }
        .entity(entity);
        let staged = Staged::new(self.stamper(), g.next_seq(), at, &Context::system(), change);
        let row = self.append(g, staged);
        g.checkpointed = row.seq;
        g.batch.put_cf(
            self.store.cf(Cf::Audit),
            keys::meta_key(meta::CHECKPOINT),
            signed.encode(),
        );
        Some(row)
    }
}
