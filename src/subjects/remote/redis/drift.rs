//! The Redis store's half of the drift check (see `remote/drift.rs`): every write signs the
//! subject's JSON with the fleet's secret (the hash's `mac`), a scan holds every subject's hash
//! against it, and a subject found otherwise is adopted at a new version; a second pass finds
//! the ids a tenant's index lists whose hash is gone (deleted by hand).
//!
//! What no node of the fleet wrote carries no MAC that matches: a hand edit of the JSON or of
//! `rev`, a hash made by hand, a copy from another store. A node whose secret differs from the
//! fleet's would take every subject for drift: the store keeps what the secret signs a fixed
//! text to (`<prefix><kind>:fleet`), and such a node is refused at its connection.

use std::sync::atomic::Ordering;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::RedisStore;
use crate::audit::Stamp;
use crate::store::StoreError;
use crate::subjects::remote::drift::{DriftPage, Drifted};
use crate::subjects::remote::{Cas, RemoteSubject};

/// The fleet's secret as an HMAC key.
#[derive(Clone)]
pub(super) struct Signer(Hmac<Sha256>);

impl Signer {
    /// The signer of `secret` (empty: the MAC is a checksum, which finds hand edits but not
    /// one made to look like the fleet's).
    pub(super) fn new(secret: &str) -> Signer {
        Signer(Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key"))
    }

    /// The hex MAC of `parts`, each ended by a NUL (no part holds one: kinds, checked names,
    /// JSON).
    fn sign(&self, parts: &[&str]) -> String {
        let mut mac = self.0.clone();
        for part in parts {
            mac.update(part.as_bytes());
            mac.update(&[0]);
        }
        hex::encode(mac.finalize().into_bytes())
    }

    /// What the secret signs `ankusa fleet <kind>` to: the same on every node of a fleet.
    pub(super) fn fingerprint(&self, kind: &str) -> String {
        self.sign(&["ankusa fleet", kind])
    }
}

/// A scanned hash's `rev`, `ver`, `json`, `mac` and `drift`, as stored (text: a hand edit
/// may have put anything there).
type Stored = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

impl<T: RemoteSubject> RedisStore<T> {
    /// The MAC of subject `id` of `tenant` whose JSON is `json`.
    pub(super) fn mac(&self, tenant: &str, id: &str, json: &str) -> String {
        self.signer.sign(&[T::KIND, tenant, id, json])
    }

    /// `<prefix><kind>:fleet`.
    pub(super) fn fleet_key(&self) -> String {
        [&self.prefix, T::KIND, ":fleet"].concat()
    }

    /// The subject's tenant and id, from its hash's key.
    fn located<'k>(&self, key: &'k str) -> Option<(&'k str, &'k str)> {
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix(T::KIND)?;
        rest.strip_prefix(":{")?.split_once("}:")
    }

    /// One page of the scan: up to about `count` hashes from `from` (Redis's SCAN position).
    pub(super) async fn scan_drift(
        &self,
        from: u64,
        count: usize,
    ) -> Result<DriftPage<T>, StoreError> {
        let (mut conn, _) = self.conn().await?;
        let pattern = format!(
            "{}*",
            super::read::glob_escape(&[&self.prefix, T::KIND, ":{"].concat())
        );
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(from)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(count.max(1))
            .arg("TYPE")
            .arg("hash")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        let mut page = DriftPage {
            next,
            scanned: 0,
            drifted: Vec::new(),
        };
        if keys.is_empty() {
            return Ok(page);
        }
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("HMGET")
                .arg(key)
                .arg("rev")
                .arg("ver")
                .arg("json")
                .arg("mac")
                .arg("drift");
        }
        let stored: Vec<Stored> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        for (key, stored) in keys.iter().zip(stored) {
            // A key that is not a subject's (its name says so) is not the store's.
            let Some((tenant, id)) = self.located(key) else {
                continue;
            };
            page.scanned += 1;
            if let Some(drifted) = self.check_one(tenant, id, stored) {
                page.drifted.push(drifted);
            }
        }
        Ok(page)
    }

    /// Subject `id` of `tenant` as stored, if it drifted: a MAC that does not match, a JSON
    /// that is not this subject or names another revision than `rev`, or a drift mark.
    fn check_one(&self, tenant: &str, id: &str, stored: Stored) -> Option<Drifted<T>> {
        let (rev, ver, json, mac, mark) = stored;
        let actual = self.mac(tenant, id, json.as_deref().unwrap_or(""));
        // A JSON of another subject (a hash copied under another key) is not this one.
        let revision = rev.as_deref().and_then(|r| r.parse::<u64>().ok());
        let subject = json
            .as_deref()
            .and_then(|json| serde_json::from_str::<T>(json).ok())
            .filter(|s| s.tenant() == tenant && s.id() == id && revision.is_some());
        let exact = subject
            .as_ref()
            .is_some_and(|s| revision == Some(s.revision()));
        let marked = mark.is_some();
        if exact && mac.as_deref() == Some(actual.as_str()) && !marked {
            return None;
        }
        Some(Drifted {
            tenant: tenant.to_owned(),
            id: id.to_owned(),
            subject,
            rev,
            json,
            version: ver.and_then(|v| v.parse().ok()).unwrap_or(0),
            expected: mac,
            actual: Some(actual),
            marked,
        })
    }

    /// Adopt `drifted` at a new version, if it is still as found: its JSON says the stored
    /// revision, signed, marked until its rows are written. `None`: it changed meanwhile.
    pub(super) async fn adopt_drift(
        &self,
        drifted: &Drifted<T>,
    ) -> Result<Option<Stamp>, StoreError> {
        let (Some(subject), Some(rev), Some(json)) =
            (&drifted.subject, &drifted.rev, &drifted.json)
        else {
            return Ok(None);
        };
        let mut subject = subject.clone();
        subject.set_revision(rev.parse().unwrap_or(0));
        let signed =
            serde_json::to_string(&subject).map_err(crate::subjects::remote::unencodable::<T>)?;
        let key = self.key(&drifted.tenant, &drifted.id);
        let mut invocation = self.adopt.key(&key);
        invocation
            .key(self.index_key(&drifted.tenant))
            .key(self.counter_key())
            .arg(rev)
            .arg(json)
            .arg(&signed)
            .arg(self.mac(&drifted.tenant, &drifted.id, &signed))
            .arg(&drifted.id)
            .arg(drifted.expected.as_deref().unwrap_or(""));
        match self.write(&key, &mut invocation).await? {
            Cas::Written(stamp) => Ok(Some(stamp)),
            Cas::Conflict { .. } => Ok(None),
        }
    }

    /// The ids of a page of `tenant`'s index after `after` whose subject is gone (deleted
    /// around the fleet), and the last id looked at (`None`: the index is done).
    pub(super) async fn scan_gone(
        &self,
        tenant: &str,
        after: Option<&str>,
        count: usize,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        let (mut conn, _) = self.conn().await?;
        let from = after.map_or_else(|| "-".to_owned(), |a| format!("({a}"));
        let stem = [&self.prefix, T::KIND, ":{", tenant, "}:"].concat();
        let (last, gone): (String, Vec<String>) = self
            .gone
            .key(self.index_key(tenant))
            .arg(from)
            .arg(count.max(1))
            .arg(stem)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        Ok((gone, Some(last).filter(|l| !l.is_empty())))
    }

    /// Drop `id` from `tenant`'s index if its subject is still gone: its rows are written.
    pub(super) async fn drop_gone(&self, tenant: &str, id: &str) -> Result<(), StoreError> {
        let (mut conn, _) = self.conn().await?;
        self.unindex
            .key(self.key(tenant, id))
            .key(self.index_key(tenant))
            .arg(id)
            .invoke_async::<i64>(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// Drop the drift mark of `drifted`, adopted at `version`: its rows are written.
    pub(super) async fn unmark_drift(
        &self,
        drifted: &Drifted<T>,
        version: u64,
    ) -> Result<(), StoreError> {
        let (mut conn, _) = self.conn().await?;
        self.unmark
            .key(self.key(&drifted.tenant, &drifted.id))
            .arg(version)
            .invoke_async::<i64>(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        // A version read is a floor, as every other.
        self.floor.fetch_max(version, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Signer;

    #[test]
    fn a_signature_covers_every_part_and_the_secret() {
        let signer = Signer::new("s");
        let mac = signer.sign(&["route", "t1", "r1", "{}"]);
        assert_eq!(mac.len(), 64);
        assert_eq!(mac, Signer::new("s").sign(&["route", "t1", "r1", "{}"]));
        for other in [
            signer.sign(&["source", "t1", "r1", "{}"]),
            signer.sign(&["route", "t2", "r1", "{}"]),
            signer.sign(&["route", "t1", "r2", "{}"]),
            signer.sign(&["route", "t1", "r1", "{ }"]),
            // Parts end with a NUL: moving a character across a boundary is another text.
            signer.sign(&["route", "t1r", "1", "{}"]),
            Signer::new("t").sign(&["route", "t1", "r1", "{}"]),
        ] {
            assert_ne!(mac, other);
        }
        assert_ne!(
            signer.fingerprint("route"),
            Signer::new("t").fingerprint("route")
        );
    }
}
