//! The Redis store's reads of many keys: the tenants (a `SCAN` of their index keys), a page
//! of a tenant's subjects (its index, then their hashes in one pipeline), and the decoding of
//! a stored hash, which every read shares.

use std::sync::atomic::Ordering;

use super::RedisStore;
use crate::store::StoreError;
use crate::subjects::remote::{RemoteSubject, Versioned};

impl<T: RemoteSubject> RedisStore<T> {
    /// Every tenant that has a subject, each once.
    pub(super) async fn read_tenants(&self) -> Result<Vec<String>, StoreError> {
        // A tenant has an index key while it has a subject (Redis drops an emptied sorted
        // set). SCAN walks the keyspace in bounded steps and may repeat a key: a set.
        let stem = self.index_stem();
        let pattern = format!("{}*}}", glob_escape(&stem));
        let (mut conn, _) = self.conn().await?;
        let mut tenants = std::collections::BTreeSet::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            for key in keys {
                if let Some(tenant) = key.strip_prefix(&stem).and_then(|k| k.strip_suffix('}')) {
                    tenants.insert(tenant.to_owned());
                }
            }
            if next == 0 {
                return Ok(tenants.into_iter().collect());
            }
            cursor = next;
        }
    }

    /// Up to `limit` subjects of `tenant` with ids after `after`, in id order.
    pub(super) async fn read_list(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Versioned<T>>, StoreError> {
        let (mut conn, _) = self.conn().await?;
        let mut subjects = Vec::with_capacity(limit.min(1024));
        let mut after = after.map(str::to_owned);
        // An id the index lists may be deleted before its hash is read: it is not there, and
        // the index is read on past it so that a page is short only at the end of the tenant.
        while subjects.len() < limit {
            let want = limit - subjects.len();
            let min = after
                .as_ref()
                .map_or_else(|| "-".to_owned(), |a| format!("({a}"));
            let ids: Vec<String> = redis::cmd("ZRANGEBYLEX")
                .arg(self.index_key(tenant))
                .arg(min)
                .arg("+")
                .arg("LIMIT")
                .arg(0)
                .arg(want)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            let Some(last) = ids.last().cloned() else {
                break;
            };
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.add_command(read_fields(&self.key(tenant, id)));
            }
            let found: Vec<Fields> = pipe
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            for (id, fields) in ids.iter().zip(found) {
                if let Some(subject) = decode(&self.key(tenant, id), fields)? {
                    self.floor.fetch_max(subject.version, Ordering::Relaxed);
                    subjects.push(subject);
                }
            }
            if ids.len() < want {
                break;
            }
            after = Some(last);
        }
        Ok(subjects)
    }
}

/// `s` with Redis's glob characters escaped, to match itself in a `SCAN MATCH` pattern.
pub(super) fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A stored hash's `rev`, `ver` and `json`.
pub(super) type Fields = (Option<u64>, Option<u64>, Option<String>);

/// The read of a stored hash's [`Fields`].
pub(super) fn read_fields(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(key).arg("rev").arg("ver").arg("json");
    cmd
}

/// A stored hash as a subject; the store's `rev` is the truth. A hash written before versions
/// existed is at version 0.
pub(super) fn decode<T: RemoteSubject>(
    key: &str,
    (rev, ver, json): Fields,
) -> Result<Option<Versioned<T>>, StoreError> {
    let (Some(rev), Some(json)) = (rev, json) else {
        return Ok(None);
    };
    let mut subject: T = serde_json::from_str(&json).map_err(|e| StoreError::Corrupt {
        what: key.to_owned(),
        detail: e.to_string(),
    })?;
    subject.set_revision(rev);
    Ok(Some(Versioned {
        subject,
        version: ver.unwrap_or(0),
        state: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::glob_escape;

    #[test]
    fn a_prefix_matches_only_itself_in_a_scan_pattern() {
        assert_eq!(glob_escape("ankusa:routes:{"), "ankusa:routes:{");
        assert_eq!(glob_escape(r"a*b?[c]\d"), r"a\*b\?\[c\]\\d");
    }
}
