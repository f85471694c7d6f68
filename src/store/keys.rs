//! Every key layout of the `audit` column family, in one place.
//!
//! Keys are binary and big-endian so that RocksDB's bytewise order is numeric order: iterating
//! `a`-keys from `a`+N visits rows in seq order, which is commit order (the writer hands out seq
//! and commits in that order). One byte prefix per kind; a prefix is never renumbered, since
//! stores outlive the code that wrote them.
//!
//! | key                    | value                                     |
//! |------------------------|-------------------------------------------|
//! | `a` seq:u64 at:u64     | a trail row (JSON)                        |
//! | `p` id:u64             | a pending row: begun, not finished (JSON) |
//! | `q` id:u64             | the redacted entity of pending delete id  |
//! | `o` seq:u64            | the redacted lifecycle entity of row seq  |
//! | `l` tile:u64           | leaf hashes of the trail's Merkle tree    |
//! | `t` index:u64          | a node of the trail's Merkle tree (32 B)  |
//! | `i` kind ... seq:u64   | a row's secondary index entry (empty; see [`Index`]) |
//! | `m:<name>`             | meta (see [`meta`])                       |

/// Prefix of a trail row key.
pub const ROW: u8 = b'a';
/// Prefix of a pending row key.
pub const PENDING: u8 = b'p';
/// Prefix of a pending row's entity key (beside the pending row, never in it).
pub const PENDING_ENTITY: u8 = b'q';
/// Prefix of a lifecycle outbox entity key.
pub const OUTBOX: u8 = b'o';
/// Prefix of a tile of Merkle tree leaves: tile n holds leaves 16n.. (see `audit::tree`).
pub const TILE: u8 = b'l';
/// Prefix of a Merkle tree node key: its stored-hash index (see `audit::tree`).
pub const TREE: u8 = b't';
/// Prefix of a secondary index entry of a row (see [`Index`]).
pub const INDEX: u8 = b'i';
/// Prefix of every meta key.
pub const META: &[u8] = b"m:";

/// Length of a trail row key: prefix, seq, at.
pub const ROW_KEY_LEN: usize = 17;
/// Length of a pending or outbox key: prefix, seq.
pub const SEQ_KEY_LEN: usize = 9;

/// The names of the meta keys (`m:<name>`).
pub mod meta {
    /// 32 random bytes keying every before/after hash; made once per store, never exposed.
    pub const AUDIT_KEY: &str = "audit_key";
    /// The last seq handed out (u64, big-endian).
    pub const AUDIT_SEQ: &str = "audit_seq";
    /// The last seq every configured lifecycle sink confirmed (u64, big-endian).
    pub const LIFECYCLE_CURSOR: &str = "lifecycle_cursor";
    /// The history of incarnations: JSON `[{"from": seq, "id": uuid}, ...]`.
    pub const INCARNATION: &str = "incarnation";
    /// The prefix of one sink's position: `m:lifecycle_cursor:<sink>` (a stored name, kept as
    /// it is so that existing stores read the same).
    pub const SINK_POSITION_PREFIX: &str = "lifecycle_cursor:";
    /// Left by a restore: the next boot must open a new incarnation.
    pub const INCARNATION_PENDING: &str = "incarnation_pending";
    /// Rows and bytes of the trail, and the seq they are valid for (JSON).
    pub const AUDIT_USAGE: &str = "audit_usage";
    /// The last pending id handed out (u64, big-endian): pending rows (`p`+id) count apart
    /// from the trail's seq, so that a begun change never holds a trail seq.
    pub const PENDING_SEQ: &str = "pending_seq";
    /// Left by the boot that opened a restored store's new incarnation (in the same batch),
    /// holding that incarnation's first seq (u64, big-endian): the subjects kept outside the
    /// store (routes, Redis sources) were not rolled back with the trail, so every one whose
    /// present state differs from what the trail says gets a state-refresh row. Deleted, by
    /// the writer, only once every remote kind is refreshed; until then every boot redoes it.
    pub const REFRESH_PENDING: &str = "refresh_pending";

    /// The Merkle tree over the trail: JSON `{"origin": seq}`, the seq of its leaf 0.
    pub const TREE: &str = "tree";
    /// The checkpoints' Ed25519 key: JSON `{"signer", "verifier"}`, the signed-note key
    /// texts; made once per store, the signer never exposed.
    pub const CHECKPOINT_KEY: &str = "checkpoint_key";
    /// The newest checkpoint, signed: JSON (see `audit::tree::checkpoint`).
    pub const CHECKPOINT: &str = "checkpoint";
    /// How far the wall clock was ahead of the time the writer trusts, ms (u64 BE; see
    /// `audit::clock::ClockGuard`).
    pub const CLOCK_AHEAD: &str = "clock_ahead";
    /// The format of the rows' secondary index entries the trail holds for every row (one
    /// byte); absent: a store written before them, whose boot builds them.
    pub const INDEX: &str = "index";

    /// `m:remote:<kind>`: what the node knows of the shared store of `kind` (its name, the
    /// greatest version it issued or read there; JSON), kept across restarts.
    pub fn remote(kind: &str) -> String {
        format!("remote:{kind}")
    }

    /// The meta name of sink `sink`'s position (the last seq it confirmed).
    pub fn sink_position(sink: &str) -> String {
        format!("{SINK_POSITION_PREFIX}{sink}")
    }
}

/// The key of trail row `seq`, committed at `at` (unix milliseconds).
pub fn row_key(seq: u64, at: u64) -> [u8; ROW_KEY_LEN] {
    let mut k = [0u8; ROW_KEY_LEN];
    k[0] = ROW;
    k[1..9].copy_from_slice(&seq.to_be_bytes());
    k[9..17].copy_from_slice(&at.to_be_bytes());
    k
}

/// The smallest key a trail row of seq `seq` or later can have: seek here to resume a scan.
pub fn row_seek(seq: u64) -> [u8; SEQ_KEY_LEN] {
    seq_key(ROW, seq)
}

/// Decode a trail row key into `(seq, at)`; `None` for any other key.
pub fn decode_row_key(key: &[u8]) -> Option<(u64, u64)> {
    if key.len() != ROW_KEY_LEN || key[0] != ROW {
        return None;
    }
    let seq = u64::from_be_bytes(key[1..9].try_into().ok()?);
    let at = u64::from_be_bytes(key[9..17].try_into().ok()?);
    Some((seq, at))
}

/// The key of pending row `id` (pending ids count apart from trail seqs, in
/// `m:pending_seq`).
pub fn pending_key(id: u64) -> [u8; SEQ_KEY_LEN] {
    seq_key(PENDING, id)
}

/// The key of the redacted entity of pending row `id`.
pub fn pending_entity_key(id: u64) -> [u8; SEQ_KEY_LEN] {
    seq_key(PENDING_ENTITY, id)
}

/// The key of the lifecycle entity of row `seq`.
pub fn outbox_key(seq: u64) -> [u8; SEQ_KEY_LEN] {
    seq_key(OUTBOX, seq)
}

/// The key of sink `sink`'s dead letter for row `seq`, in the `dead_letters` column family:
/// the sink's name, a NUL, then the seq, so one sink's letters sort together in seq order.
pub fn dead_letter_key(sink: &str, seq: u64) -> Vec<u8> {
    let mut k = dead_letter_prefix(sink);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The prefix of every dead letter of sink `sink`.
pub fn dead_letter_prefix(sink: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(sink.len() + 9);
    k.extend_from_slice(sink.as_bytes());
    k.push(0);
    k
}

/// Decode a dead-letter key of sink `sink` into its seq.
pub fn decode_dead_letter_key(sink: &str, key: &[u8]) -> Option<u64> {
    let rest = key.strip_prefix(dead_letter_prefix(sink).as_slice())?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

/// Decode a pending or outbox key of the given prefix into its seq.
pub fn decode_seq_key(prefix: u8, key: &[u8]) -> Option<u64> {
    if key.len() != SEQ_KEY_LEN || key[0] != prefix {
        return None;
    }
    Some(u64::from_be_bytes(key[1..9].try_into().ok()?))
}

/// The key of Merkle tree node `index` (a stored-hash index).
pub fn tree_key(index: u64) -> [u8; SEQ_KEY_LEN] {
    seq_key(TREE, index)
}

/// The key of tile `n` of Merkle tree leaves.
pub fn tile_key(n: u64) -> [u8; SEQ_KEY_LEN] {
    seq_key(TILE, n)
}

/// What a row's secondary index entry is keyed by. Each entry is `i`, the kind's byte, its
/// value, then the row's seq (8 bytes, big-endian), with an empty value: the entries of one
/// value sort together in seq order, so a query walks them from a seq on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Index<'a> {
    /// Who made the change (`a`, then the name's length as 2 bytes big-endian, then it).
    Actor(&'a str),
    /// The subject (`s`, length, resource).
    Subject(&'a str),
    /// The subject's tenant (`n`, length, tenant).
    Tenant(&'a str),
    /// The commit time (`t`, unix ms, 8 bytes big-endian).
    Time(u64),
    /// A change that did not simply take effect (`r`, 1 failed or 2 interrupted).
    Result(u8),
}

impl Index<'_> {
    /// Every entry of this value starts with this: walk it from [`Index::key`] of a seq on.
    /// `None` for a text longer than 65,535 bytes, which no entry holds.
    pub fn prefix(&self) -> Option<Vec<u8>> {
        let mut k = Vec::with_capacity(32);
        k.push(INDEX);
        match *self {
            Index::Actor(text) | Index::Subject(text) | Index::Tenant(text) => {
                k.push(match self {
                    Index::Actor(_) => b'a',
                    Index::Subject(_) => b's',
                    _ => b'n',
                });
                k.extend_from_slice(&u16::try_from(text.len()).ok()?.to_be_bytes());
                k.extend_from_slice(text.as_bytes());
            }
            Index::Time(at) => {
                k.push(b't');
                k.extend_from_slice(&at.to_be_bytes());
            }
            Index::Result(result) => k.extend_from_slice(&[b'r', result]),
        }
        Some(k)
    }

    /// The entry of row `seq` under this value.
    pub fn key(&self, seq: u64) -> Option<Vec<u8>> {
        let mut k = self.prefix()?;
        k.extend_from_slice(&seq.to_be_bytes());
        Some(k)
    }
}

/// The seq of an index entry (its last 8 bytes).
pub fn decode_index_seq(key: &[u8]) -> Option<u64> {
    let tail = key
        .len()
        .checked_sub(8)
        .filter(|_| key.first() == Some(&INDEX))?;
    Some(u64::from_be_bytes(key[tail..].try_into().ok()?))
}

/// The key of meta entry `name` (one of [`meta`]).
pub fn meta_key(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(META.len() + name.len());
    k.extend_from_slice(META);
    k.extend_from_slice(name.as_bytes());
    k
}

fn seq_key(prefix: u8, seq: u64) -> [u8; SEQ_KEY_LEN] {
    let mut k = [0u8; SEQ_KEY_LEN];
    k[0] = prefix;
    k[1..9].copy_from_slice(&seq.to_be_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn row_key_round_trips(seq: u64, at: u64) {
            prop_assert_eq!(decode_row_key(&row_key(seq, at)), Some((seq, at)));
        }

        #[test]
        fn seq_keys_round_trip(seq: u64) {
            prop_assert_eq!(decode_seq_key(PENDING, &pending_key(seq)), Some(seq));
            prop_assert_eq!(decode_seq_key(OUTBOX, &outbox_key(seq)), Some(seq));
            prop_assert_eq!(decode_seq_key(OUTBOX, &pending_key(seq)), None);
        }

        #[test]
        fn row_key_order_is_seq_then_at_order(a: (u64, u64), b: (u64, u64)) {
            prop_assert_eq!(row_key(a.0, a.1) < row_key(b.0, b.1), a < b);
        }

        #[test]
        fn dead_letter_keys_round_trip_and_sort_by_seq(a: u64, b: u64) {
            prop_assert_eq!(decode_dead_letter_key("k", &dead_letter_key("k", a)), Some(a));
            prop_assert_eq!(decode_dead_letter_key("kafka", &dead_letter_key("k", a)), None);
            prop_assert_eq!(dead_letter_key("k", a) < dead_letter_key("k", b), a < b);
        }

        #[test]
        fn index_entries_of_one_value_sort_by_seq_and_name_their_seq(
            name in ".{0,40}", other in ".{0,40}", a: u64, b: u64, at: u64
        ) {
            for index in [Index::Actor(&name), Index::Subject(&name), Index::Tenant(&name), Index::Time(at), Index::Result(1)] {
                let (ka, kb) = (index.key(a).unwrap(), index.key(b).unwrap());
                prop_assert_eq!(ka < kb, a < b);
                prop_assert_eq!(decode_index_seq(&ka), Some(a));
                prop_assert!(ka.starts_with(&index.prefix().unwrap()));
            }
            // Another name's entries never fall among these (the length comes first).
            if name != other {
                let theirs = Index::Actor(&other).key(a).unwrap();
                prop_assert!(!theirs.starts_with(&Index::Actor(&name).prefix().unwrap()));
            }
        }

        #[test]
        fn seq_key_order_is_numeric(a: u64, b: u64) {
            prop_assert_eq!(outbox_key(a) < outbox_key(b), a < b);
            prop_assert_eq!(pending_key(a) < pending_key(b), a < b);
        }

        #[test]
        fn seek_key_precedes_every_row_of_that_seq(seq: u64, at: u64) {
            prop_assert!(row_seek(seq).as_slice() <= row_key(seq, at).as_slice());
            if seq < u64::MAX {
                prop_assert!(row_key(seq, at).as_slice() < row_seek(seq + 1).as_slice());
            }
        }
    }

    #[test]
    fn kinds_do_not_interleave() {
        // Every row key sorts before every meta, outbox and pending key, and meta keys
        // sort together, so a scan of one kind never walks into another.
        let last_row = row_key(u64::MAX, u64::MAX);
        assert!(last_row.as_slice() < tile_key(0).as_slice());
        assert!(tile_key(u64::MAX).as_slice() < meta_key(meta::AUDIT_KEY).as_slice());
        assert!(meta_key(meta::AUDIT_USAGE).as_slice() < outbox_key(0).as_slice());
        assert!(outbox_key(u64::MAX).as_slice() < pending_key(0).as_slice());
        assert!(pending_entity_key(u64::MAX).as_slice() < tree_key(0).as_slice());
        assert_eq!(decode_row_key(&meta_key(meta::AUDIT_SEQ)), None);
    }
}
