//! What a watcher asked to see: event types (exact, or prefixes ending in `*`) and a tenant.
//!
//! Applied before delivery, on the type and tenant kept beside each built event, so a
//! filtered watcher costs no parse of what it does not see.

use super::Served;

/// Most types one filter may name: a watcher names kinds, not a catalogue.
pub const MAX_TYPES: usize = 32;

/// Longest type or tenant a filter may name.
pub const MAX_LEN: usize = 256;

/// A type pattern: the exact type, or every type that starts with a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Exact(String),
    Prefix(String),
}

/// The events a watcher sees (every event when empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    types: Vec<Pattern>,
    tenant: Option<String>,
}

/// Why a filter was refused: the parameter and what is wrong, in the caller's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FilterError {
    /// `types` or `tenant`.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

impl Filter {
    /// The filter of `types` (comma-separated; `io.ankusa.route.*` is a prefix) and `tenant`.
    pub fn parse(types: Option<&str>, tenant: Option<&str>) -> Result<Filter, FilterError> {
        let bad = |field, message: String| FilterError { field, message };
        let mut patterns = Vec::new();
        for ty in types.into_iter().flat_map(|t| t.split(',')) {
            // `*` alone is every type; else a name, a final `*` making it a prefix.
            let (name, prefix) = match ty.strip_suffix('*') {
                Some(name) => (name, true),
                None => (ty, false),
            };
            let every = name.is_empty() && prefix;
            if !every && !is_text(name) || name.contains('*') {
                return Err(bad(
                    "types",
                    format!(
                        "each type must be `*`, or 1 to {MAX_LEN} characters without control \
                         characters, commas or `*`, then an optional final `*`"
                    ),
                ));
            }
            patterns.push(match prefix {
                true => Pattern::Prefix(name.to_owned()),
                false => Pattern::Exact(name.to_owned()),
            });
        }
        if patterns.len() > MAX_TYPES {
            return Err(bad("types", format!("at most {MAX_TYPES} types")));
        }
        if tenant.is_some_and(|t| !is_text(t)) {
            return Err(bad(
                "tenant",
                format!("must be 1 to {MAX_LEN} characters without control characters"),
            ));
        }
        Ok(Filter {
            types: patterns,
            tenant: tenant.map(str::to_owned),
        })
    }

    /// Whether the watcher sees `event`.
    pub fn admits(&self, event: &Served) -> bool {
        let tenant = match &self.tenant {
            Some(t) => event.tenant.as_deref() == Some(t.as_str()),
            None => true,
        };
        tenant
            && (self.types.is_empty()
                || self.types.iter().any(|p| match p {
                    Pattern::Exact(ty) => event.ty == *ty,
                    Pattern::Prefix(prefix) => event.ty.starts_with(prefix.as_str()),
                }))
    }
}

/// 1 to [`MAX_LEN`] characters, none a control character.
fn is_text(s: &str) -> bool {
    !s.is_empty() && s.chars().count() <= MAX_LEN && !s.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(ty: &str, tenant: Option<&str>) -> Served {
        Served {
            seq: 1,
            ty: ty.to_owned(),
            tenant: tenant.map(str::to_owned),
            json: serde_json::value::to_raw_value(&1).unwrap(),
        }
    }

    #[test]
    fn types_match_exactly_or_by_prefix_and_the_tenant_exactly() {
        let routes =
            Filter::parse(Some("io.ankusa.route.*,io.ankusa.source.deleted"), None).unwrap();
        assert!(routes.admits(&served("io.ankusa.route.created", None)));
        assert!(routes.admits(&served("io.ankusa.source.deleted", Some("t"))));
        assert!(!routes.admits(&served("io.ankusa.source.created", None)));
        assert!(!routes.admits(&served("io.ankusa.routes.created", None)));
        let tenant = Filter::parse(None, Some("t1")).unwrap();
        assert!(tenant.admits(&served("io.ankusa.route.created", Some("t1"))));
        assert!(!tenant.admits(&served("io.ankusa.route.created", Some("t10"))));
        assert!(!tenant.admits(&served("io.ankusa.snapshot.started", None)));
        assert!(Filter::default().admits(&served("anything", None)));
        assert!(Filter::parse(Some("*"), None)
            .unwrap()
            .admits(&served("anything", None)));
    }

    #[test]
    fn malformed_filters_are_refused_with_their_parameter() {
        for (types, tenant, field) in [
            (Some("io.*.route"), None, "types"),
            (Some("a,,b"), None, "types"),
            (Some("**"), None, "types"),
            (Some(""), None, "types"),
            (Some("a\u{85}"), None, "types"),
            (None, Some(""), "tenant"),
            (None, Some("t\n"), "tenant"),
        ] {
            assert_eq!(
                Filter::parse(types, tenant).unwrap_err().field,
                field,
                "{types:?}"
            );
        }
        let many = vec!["a"; MAX_TYPES + 1].join(",");
        assert!(Filter::parse(Some(&many), None).is_err());
    }
}
