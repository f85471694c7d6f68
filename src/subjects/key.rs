//! Names and key layout of the local subjects: `<tenant>/<id>` bytes in the subject kind's
//! column family.
//!
//! Tenants and ids come from URLs and bodies, and end up in keys, in a row's `resource` and
//! in event subjects. So they are checked here, once, against an allow-list: 1 to 128 bytes
//! of `A-Z a-z 0-9 . _ - : @`, never `.` alone and never containing `..`. A `/` can
//! therefore never be part of a name, which is what makes `<tenant>/` an exact prefix of one
//! tenant's keys and makes path traversal impossible. Key order is byte order, so a page of
//! one tenant's subjects comes back sorted by id.

use super::SubjectError;

/// The longest tenant or id, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// The separator between tenant and id in a key. Never allowed inside a name.
const SEP: u8 = b'/';

/// Check a tenant or id named `field`: 1 to 128 bytes of `A-Z a-z 0-9 . _ - : @`, not `.`,
/// no `..`.
pub fn check_name(field: &str, value: &str) -> Result<(), SubjectError> {
    let invalid = |why: &str| {
        Err(SubjectError::invalid(
            field,
            format!("{why} (1 to {MAX_NAME_LEN} characters of A-Z a-z 0-9 . _ - : @, no '..')"),
        ))
    };
    if value.is_empty() {
        return invalid("must not be empty");
    }
    if value.len() > MAX_NAME_LEN {
        return invalid("is too long");
    }
    if !value.bytes().all(allowed) {
        return invalid("has a character that is not allowed");
    }
    if value == "." || value.contains("..") {
        return invalid("must not be '.' or contain '..'");
    }
    Ok(())
}

fn allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':' | b'@')
}

/// The key of subject `id` of `tenant`. Both must have passed [`check_name`].
pub fn subject_key(tenant: &str, id: &str) -> Vec<u8> {
    let mut key = tenant_prefix(tenant);
    key.extend_from_slice(id.as_bytes());
    key
}

/// The prefix every key of `tenant` starts with (`<tenant>/`).
pub fn tenant_prefix(tenant: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(tenant.len() + 1 + MAX_NAME_LEN);
    key.extend_from_slice(tenant.as_bytes());
    key.push(SEP);
    key
}

/// The id part of a key of `tenant`, if the key belongs to it.
pub fn id_of<'k>(key: &'k [u8], tenant: &str) -> Option<&'k str> {
    let rest = key.strip_prefix(tenant.as_bytes())?.strip_prefix(&[SEP])?;
    std::str::from_utf8(rest).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hostile_names_are_refused() {
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in [
            "", ".", "..", "../..", "a/b", "/", "a..b", "..a", "a\0b", "a\nb", "a b", "é", "a%2Fb",
            "a\\b", &long,
        ] {
            let err = check_name("id", bad).unwrap_err();
            assert!(err.to_string().starts_with("id: "), "{bad:?}: {err}");
        }
        for good in ["s1", "a.b", "A-Z_0:9@x", &"a".repeat(MAX_NAME_LEN)] {
            check_name("id", good).unwrap();
        }
    }

    #[test]
    fn key_round_trips_and_stays_in_its_tenant() {
        let key = subject_key("t1", "s1");
        assert_eq!(key, b"t1/s1");
        assert_eq!(id_of(&key, "t1"), Some("s1"));
        assert_eq!(id_of(&key, "t"), None);
        assert!(!subject_key("t1-x", "s1").starts_with(&tenant_prefix("t1")));
    }

    fn name() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_:@-]{1,16}"
    }

    proptest! {
        #[test]
        fn key_order_is_id_order(t in name(), a in name(), b in name()) {
            prop_assert_eq!(subject_key(&t, &a) < subject_key(&t, &b), a < b);
            let key = subject_key(&t, &a);
            prop_assert_eq!(id_of(&key, &t), Some(a.as_str()));
        }
    }
}
