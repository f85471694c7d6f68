//! A subject version (`subjectversion`, a snapshot's `floor`): a 20-digit zero-padded decimal
//! on the wire and in the replica file, a `u64` to compare.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A subject version. Ordered as the contract orders versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version(pub u64);

impl Version {
    /// The version written as `text`: exactly 20 ASCII digits, as the node writes them.
    pub fn parse(text: &str) -> Option<Version> {
        if text.len() != 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        text.parse().ok().map(Version)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:020}", self.0)
    }
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Version::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a 20-digit version")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_digits_round_trip() {
        for v in [0, 7, u64::MAX] {
            let text = Version(v).to_string();
            assert_eq!(text.len(), 20);
            assert_eq!(Version::parse(&text), Some(Version(v)));
        }
        for bad in [
            "7",
            "+0000000000000000007",
            "99999999999999999999",
            "0000000000000000000x",
        ] {
            assert_eq!(Version::parse(bad), None, "{bad}");
        }
        let json = serde_json::to_string(&Version(42)).unwrap();
        assert_eq!(json, "\"00000000000000000042\"");
        assert_eq!(serde_json::from_str::<Version>(&json).unwrap(), Version(42));
        assert!(serde_json::from_str::<Version>("42").is_err());
    }
}
