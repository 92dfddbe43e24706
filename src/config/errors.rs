//! Collecting config errors: [`ConfigError`] (where and what), and
//! [`Errors`], which reads each table so that *every* unknown key, bad type
//! and bad value is reported, not only the first serde stops at.

use std::fmt;

use serde::de::DeserializeOwned;

/// One problem: where in the file, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

/// Every problem found in one config file.
#[derive(Debug)]
pub struct ConfigErrors {
    pub file: String,
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            if e.path.is_empty() {
                write!(f, "{}: {}", self.file, e.message)?;
            } else {
                write!(f, "{}: {}: {}", self.file, e.path, e.message)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Collects errors while a config is read.
#[derive(Default)]
pub(crate) struct Errors(pub(crate) Vec<ConfigError>);

impl Errors {
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Deserialises one table, reporting *every* failure under `path`:
    /// serde stops at the first, so after each one the offending key is
    /// taken out (unknown keys) or stood in for by a placeholder value
    /// (bad types and values, missing keys) and the table is read again.
    pub(crate) fn parse<T: DeserializeOwned>(
        &mut self,
        path: &str,
        value: toml::Value,
    ) -> Option<T> {
        let mut value = value;
        let mut failed = false;
        // The key currently holding a placeholder, and which one.
        let mut stand_in: Option<(Vec<Seg>, usize)> = None;
        for _ in 0..MAX_ROUNDS {
            let err = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
                Ok(v) => return (!failed).then_some(v),
                Err(e) => e,
            };
            let at = segments(&err.path().to_string());
            let message = hint(err.into_inner().message());
            failed = true;
            if let Some((key, i)) = &mut stand_in
                && *key == at
            {
                // The placeholder did not fit either: try the next one.
                *i += 1;
                let Some(p) = PLACEHOLDERS.get(*i) else { break };
                put(&mut value, key, p());
                continue;
            }
            self.push(join(path, &at), message.clone());
            if let Some(field) = missing_field(&message) {
                let mut key = at;
                key.push(Seg::Key(field));
                put(&mut value, &key, PLACEHOLDERS[0]());
                stand_in = Some((key, 0));
            } else if message.starts_with("unknown field") {
                if !remove(&mut value, &at) {
                    break;
                }
            } else if put(&mut value, &at, PLACEHOLDERS[0]()) {
                stand_in = Some((at, 0));
            } else {
                break;
            }
        }
        None
    }
}

/// How many errors one table may report before the rest is left unread.
const MAX_ROUNDS: usize = 64;

/// Values tried in place of a bad one until the table reads.
const PLACEHOLDERS: &[fn() -> toml::Value] = &[
    || toml::Value::String(String::new()),
    || toml::Value::Integer(0),
    || toml::Value::Boolean(false),
    || toml::Value::Array(Vec::new()),
    || toml::Value::Table(toml::Table::new()),
    || toml::Value::String("1s".into()),
    || toml::Value::String("text".into()),
];

/// One step of a key path: a table key or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// `a.b[2].c` as segments (`.` alone is the table itself).
fn segments(path: &str) -> Vec<Seg> {
    let mut out = Vec::new();
    if path == "." || path.is_empty() {
        return out;
    }
    for part in path.split('.') {
        let (key, rest) = part.split_once('[').unwrap_or((part, ""));
        if !key.is_empty() {
            out.push(Seg::Key(key.to_owned()));
        }
        for idx in rest.split('[') {
            if let Ok(i) = idx.trim_end_matches(']').parse() {
                out.push(Seg::Index(i));
            }
        }
    }
    out
}

fn join(path: &str, at: &[Seg]) -> String {
    let mut out = path.to_owned();
    for s in at {
        match s {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn parent<'v>(value: &'v mut toml::Value, at: &[Seg]) -> Option<&'v mut toml::Value> {
    let mut cur = value;
    for s in at {
        cur = match (s, cur) {
            (Seg::Key(k), toml::Value::Table(t)) => t.get_mut(k)?,
            (Seg::Index(i), toml::Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Removes the key at `at`; false when there is nothing to remove.
fn remove(value: &mut toml::Value, at: &[Seg]) -> bool {
    let Some((Seg::Key(last), init)) = at.split_last() else {
        return false;
    };
    match parent(value, init) {
        Some(toml::Value::Table(t)) => t.remove(last).is_some(),
        _ => false,
    }
}

/// Sets the value at `at`; false when its parent is not there.
fn put(value: &mut toml::Value, at: &[Seg], new: toml::Value) -> bool {
    let Some((last, init)) = at.split_last() else {
        return false;
    };
    match (last, parent(value, init)) {
        (Seg::Key(k), Some(toml::Value::Table(t))) => {
            t.insert(k.clone(), new);
            true
        }
        (Seg::Index(i), Some(toml::Value::Array(a))) if *i < a.len() => {
            a[*i] = new;
            true
        }
        _ => false,
    }
}

fn missing_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_owned())
}

/// A duration error says what a good duration looks like.
fn hint(message: &str) -> String {
    const DURATION: &[&str] = &[
        "expected a duration",
        "time unit",
        "expected number at",
        "invalid character at",
        "value was empty",
    ];
    if DURATION.iter().any(|d| message.contains(d)) {
        format!("{message} (a duration is a string like \"200ms\", \"30s\" or \"5m\")")
    } else {
        message.to_owned()
    }
}

/// Reports a duration that is set to zero.
pub(crate) fn positive(d: Option<std::time::Duration>, path: &str, errs: &mut Errors) {
    if d.is_some_and(|d| d.is_zero()) {
        errs.push(path, "must be greater than 0");
    }
}
