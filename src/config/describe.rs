//! figment's errors in an operator's terms: where the value came from (the file, or the
//! environment variable), the key as the operator wrote it, and what is wrong with it, but
//! never the value. A value under a key of the wrong type may be a secret (webhook secrets
//! written as one string, a numeric `sasl.password` from the environment), and start-up
//! errors end up in logs that many people read.
//!
//! So each message is built here from the error's kind, never from figment's `Display`,
//! which prints the value found (`found string "lots"`) and names the key with its profile
//! (`default.audit.max_rows`) or, for the environment, as dotted upper case, which is
//! neither what the file says nor the variable's name.
//!
//! A sink's table is read by serde's buffering of internally tagged enums, which forgets
//! the path below the table: `locate` finds the key again by looking, under the table, for
//! the one value of the kind the error reports (its payload serves to match, never to print).

use figment::error::{Actual, Kind};
use figment::value::Value;
use figment::{Figment, Metadata, Source};

/// figment's errors, one line each, joined by `; `. `env_name` is the environment
/// provider's metadata name, `prefix` its variables' prefix.
pub(super) fn describe(
    error: figment::Error,
    figment: &Figment,
    env_name: &str,
    prefix: &str,
) -> String {
    // The merged values, to find a key and its source; none when a layer failed to parse.
    let root = figment.find_value("").ok();
    error
        .into_iter()
        .map(|e| {
            let path = locate(&e, root.as_ref());
            let found = root.as_ref().and_then(|r| lookup(r, &path));
            let metadata = found
                .and_then(|v| figment.get_metadata(v.tag()))
                .or(e.metadata.as_ref());
            let from_env = metadata.is_some_and(|m| m.name == env_name);
            let (source, key) = if from_env {
                env_names(prefix, &path)
            } else {
                (metadata.map(source_name), dotted(&path))
            };
            let what = what(&e.kind, !e.path.is_empty(), found);
            [source, key, Some(what)]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The path of the value `e` is about. For a wrong type or value reported at a table (or
/// array) that does not itself have that type, the one value under it that does; when
/// several do, the path they share.
fn locate(e: &figment::Error, root: Option<&Value>) -> Vec<String> {
    let (Kind::InvalidType(actual, _) | Kind::InvalidValue(actual, _)) = &e.kind else {
        return e.path.clone();
    };
    let Some(at) = root.and_then(|r| lookup(r, &e.path)) else {
        return e.path.clone();
    };
    if at.to_actual() == *actual {
        return e.path.clone();
    }
    let mut found = Vec::new();
    matching(at, actual, &mut e.path.clone(), &mut found);
    let Some(first) = found.first() else {
        return e.path.clone();
    };
    let shared = found.iter().fold(first.len(), |n, p| {
        n.min(first.iter().zip(p).take_while(|(a, b)| a == b).count())
    });
    first[..shared].to_vec()
}

/// Collect into `found` the paths of the values under `value` (at `path`) that are `actual`.
fn matching(value: &Value, actual: &Actual, path: &mut Vec<String>, found: &mut Vec<Vec<String>>) {
    let children: Vec<(String, &Value)> = match value {
        Value::Dict(_, dict) => dict.iter().map(|(k, v)| (k.clone(), v)).collect(),
        Value::Array(_, items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        _ => Vec::new(),
    };
    for (key, child) in children {
        path.push(key);
        if child.to_actual() == *actual {
            found.push(path.clone());
        }
        matching(child, actual, path, found);
        path.pop();
    }
}

/// The value at `path` under `root` (array items by index).
fn lookup<'v>(root: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(root, |value, key| match value {
        Value::Dict(_, dict) => dict.get(key),
        Value::Array(_, items) => items.get(key.parse::<usize>().ok()?),
        _ => None,
    })
}

/// Where a value came from, for a layer other than the environment.
fn source_name(m: &Metadata) -> String {
    match &m.source {
        // The path as it was given (figment's own text makes it relative to the working
        // directory when that is shorter).
        Some(Source::File(path)) => path.display().to_string(),
        Some(source) => source.to_string(),
        None if m.name.contains("source string") => "the embedded default".into(),
        None => m.name.to_string(),
    }
}

/// The environment variable that set `path`, and the key below it when the variable holds
/// a table or an array (`ANKUSA_X__PROPS={"a.b"=1}`). Without such a variable (a key it
/// lacks), the variable that would set it.
fn env_names(prefix: &str, path: &[String]) -> (Option<String>, Option<String>) {
    if path.is_empty() {
        return (None, None);
    }
    let key = path.join(".");
    let set = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter_map(|name| {
            let rest = name.get(prefix.len()..)?;
            if !name[..prefix.len()].eq_ignore_ascii_case(prefix) || !rest.contains("__") {
                return None;
            }
            let sets = rest.to_ascii_lowercase().replace("__", ".");
            let covers = key == sets || key.starts_with(&format!("{sets}."));
            covers.then_some((name, sets.len()))
        })
        .max_by_key(|(_, len)| *len);
    match set {
        Some((name, len)) if len == key.len() => (Some(name), None),
        Some((name, _)) => (Some(name), dotted(path)),
        None => {
            let upper: Vec<String> = path.iter().map(|k| k.to_ascii_uppercase()).collect();
            (Some(format!("{prefix}{}", upper.join("__"))), None)
        }
    }
}

/// `path` as a TOML file writes it: dotted, a key that is not bare in quotes.
fn dotted(path: &[String]) -> Option<String> {
    let bare = |k: &str| {
        !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    let keys: Vec<String> = path
        .iter()
        .map(|k| match bare(k) {
            true => k.clone(),
            false => format!("{k:?}"),
        })
        .collect();
    (!keys.is_empty()).then(|| keys.join("."))
}

/// What is wrong, from the error's kind alone: the expected type and the kind of value
/// found, never its payload. `at_key`: the error is about a value (not a whole layer);
/// `found` is that value.
fn what(kind: &Kind, at_key: bool, found: Option<&Value>) -> String {
    match kind {
        Kind::InvalidType(actual, expected) => {
            format!("invalid type: expected {expected}, found {}", a(actual))
        }
        Kind::InvalidValue(actual, expected) => {
            format!("invalid value: expected {expected}, found {}", a(actual))
        }
        Kind::InvalidLength(len, expected) => {
            format!("invalid length {len}, expected {expected}")
        }
        Kind::UnknownVariant(_, expected) => {
            format!("unknown variant, expected {}", one_of(expected))
        }
        Kind::UnknownField(field, expected) => {
            format!(
                "unknown field: found `{field}`, expected {}",
                one_of(expected)
            )
        }
        Kind::MissingField(field) => format!("missing field `{field}`"),
        Kind::DuplicateField(field) => format!("duplicate field `{field}`"),
        Kind::ISizeOutOfRange(_) | Kind::USizeOutOfRange(_) => "integer out of range".into(),
        Kind::Unsupported(actual) => format!("unsupported type: {}", a(actual)),
        Kind::UnsupportedKey(actual, expected) => {
            format!("unsupported key type {}, expected {expected}", a(actual))
        }
        Kind::Message(message) if at_key => without_value(message, found),
        Kind::Message(message) => without_snippets(message),
    }
}

/// The kind of value `actual` is, with an article and without its payload.
fn a(actual: &Actual) -> &'static str {
    match actual {
        Actual::Bool(_) => "a boolean",
        Actual::Signed(v) if *v < 0 => "a negative integer",
        Actual::Unsigned(_) | Actual::Signed(_) => "an integer",
        Actual::Float(_) => "a float",
        Actual::Char(_) => "a character",
        Actual::Str(_) => "a string",
        Actual::Bytes(_) => "bytes",
        Actual::Unit => "a unit",
        Actual::Option => "an option",
        Actual::NewtypeStruct => "a newtype struct",
        Actual::Seq => "a sequence",
        Actual::Map => "a map",
        Actual::Enum => "an enum",
        Actual::UnitVariant
        | Actual::NewtypeVariant
        | Actual::TupleVariant
        | Actual::StructVariant => "an enum variant",
        Actual::Other(_) => "another kind of value",
    }
}

/// The names a key or variant may take: "`a`", "`a` or `b`", "one of `a`, `b`, `c`".
fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.as_slice() {
        [] => "none".into(),
        [one] => one.clone(),
        [a, b] => format!("{a} or {b}"),
        all => format!("one of {}", all.join(", ")),
    }
}

/// A deserializer's own message about a value, which may quote it (humantime's
/// `unknown time unit "lots"`) or repeat it: quoted spans and the value itself removed.
fn without_value(message: &str, found: Option<&Value>) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quote = None;
    for c in message.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '`' => quote = Some(c),
            None => out.push(c),
        }
    }
    let text = found.and_then(|v| match v.to_actual() {
        Actual::Str(s) => Some(s),
        Actual::Unsigned(n) => Some(n.to_string()),
        Actual::Signed(n) => Some(n.to_string()),
        Actual::Float(n) => Some(n.to_string()),
        _ => None,
    });
    if let Some(text) = text.filter(|t| !t.is_empty()) {
        out = out.replace(&text, "");
    }
    tidy(&out)
}

/// A layer's message (a file's syntax error) without the lines the TOML parser quotes from
/// the file: the line it stopped at may hold a secret.
fn without_snippets(message: &str) -> String {
    let kept: Vec<&str> = message
        .lines()
        .filter(|line| {
            let digits = line
                .trim_start()
                .trim_start_matches(|c: char| c.is_ascii_digit());
            !digits.trim_start().starts_with('|')
        })
        .collect();
    tidy(&kept.join(": "))
}

/// `text` on one line, its runs of white space single, no space before a comma or at the
/// end (where a quoted span was).
fn tidy(text: &str) -> String {
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let words = words.replace(" ,", ",");
    words.trim_end_matches([',', ':', ' ']).to_owned()
}
