//! Forward walks over one key prefix: step to a near key, seek a far one, so that
//! several can walk side by side (the outbox reader's rows beside their entities).

use crate::store::StoreError;

/// A forward walk over one key prefix of a column family (see [`Store::walk`]). Keys
/// and values are lent, not copied: they are valid until the walk moves.
pub struct Walk<'a> {
    pub(super) iter: rocksdb::DBRawIterator<'a>,
    pub(super) prefix: Vec<u8>,
    /// Whether the walk was ever placed (by a seek).
    pub(super) placed: bool,
}

impl Walk<'_> {
    /// How many entries [`advance_to`](Walk::advance_to) steps over before a seek is
    /// cheaper.
    const MAX_STEPS: usize = 8;

    /// Place the walk on the first entry at or after `key`.
    pub fn seek(&mut self, key: &[u8]) {
        self.iter.seek(key);
        self.placed = true;
    }

    /// Move forward to the first entry at or after `key`. When it is a few entries ahead
    /// (dense lookups in key order, the common case) the walk steps to it, which costs a
    /// fraction of a seek; farther away, or before the walk was placed, it seeks. Never
    /// moves back: a `key` behind the walk leaves it where it is.
    pub fn advance_to(&mut self, key: &[u8]) {
        if !self.placed {
            return self.seek(key);
        }
        for _ in 0..Self::MAX_STEPS {
            match self.iter.key() {
                Some(k) if k < key => self.iter.next(),
                Some(_) => return,
                // Past the last entry, or failed: a seek tells which (see `finish`).
                None => break,
            }
        }
        if self.iter.key().is_none_or(|k| k < key) {
            self.iter.seek(key);
        }
    }

    /// Step to the next entry.
    pub fn next(&mut self) {
        self.iter.next();
    }

    /// The entry under the walk; `None` past the last entry of the prefix (or on an error,
    /// which [`finish`](Walk::finish) reports).
    pub fn entry(&self) -> Option<(&[u8], &[u8])> {
        match (self.iter.key(), self.iter.value()) {
            (Some(k), Some(v)) if k.starts_with(&self.prefix) => Some((k, v)),
            _ => None,
        }
    }

    /// The error that stopped the walk, if one did.
    pub fn finish(&self) -> Result<(), StoreError> {
        Ok(self.iter.status()?)
    }
}
