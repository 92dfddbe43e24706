//! The eval task file: JSONL, one task a line (blank lines and lines
//! starting with `//` or `#` skipped), parsed and validated once into
//! [`Task`]s, each with its [`Check`] ready to grade (regexes and JSON
//! Schemas compiled). Every error names the 1-based line and what is
//! wrong with it; the input is bounded ([`MAX_TASKS`], [`MAX_LINE`]).

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value, json};

mod checks;

/// The most tasks one file may hold.
pub const MAX_TASKS: usize = 100_000;
/// The longest line (one task), in bytes, without its line break.
pub const MAX_LINE: usize = 1024 * 1024;
/// The check kinds, as the file spells them.
pub const KINDS: &[&str] = &[
    "exact",
    "normalized",
    "regex",
    "number",
    "choice",
    "contains",
    "json_schema",
    "judge",
];
/// A task's fields.
/// `meta` is free-form, a place for a task's own labels; its `group` (a
/// string) names the task's row in the report's per-group accuracy.
const FIELDS: &[&str] = &["id", "messages", "input", "check", "answer", "meta"];

/// One task: what to send, how to grade the reply.
#[derive(Debug, Clone)]
pub struct Task {
    pub id: String,
    /// OpenAI chat messages (`input` becomes one user message).
    pub messages: Vec<Value>,
    pub check: Check,
    /// The reference answer: shown to a judge, used by simulated models.
    pub answer: Option<String>,
    /// `meta.group`: which group the report counts the task in (else its
    /// check's kind).
    pub group: Option<String>,
    /// The task's 1-based line in its file.
    pub line: usize,
}

impl Task {
    /// The report's group: `meta.group`, else the check's kind.
    pub fn group(&self) -> &str {
        self.group.as_deref().unwrap_or(self.check.kind())
    }
}

/// How an answer is graded.
#[derive(Debug, Clone)]
pub enum Check {
    /// Equal after trimming surrounding whitespace.
    Exact { expected: String },
    /// Equal after lowercasing, dropping punctuation, collapsing whitespace.
    Normalized { expected: String },
    /// The pattern matches anywhere in the answer.
    Regex { pattern: regex::Regex },
    /// The answer's last number is within `tolerance` of `expected`.
    Number { expected: f64, tolerance: f64 },
    /// The answer chooses this letter (A–Z).
    Choice { expected: char },
    /// Every string appears in the answer, ignoring case.
    Contains { expected: Vec<String> },
    /// The answer's JSON satisfies `schema`, and its fields equal
    /// `expected`'s.
    JsonSchema {
        schema: Value,
        expected: Option<Map<String, Value>>,
        /// `schema`, compiled.
        validator: Arc<jsonschema::Validator>,
    },
    /// A model (`route`) grades the answer by `rubric`.
    Judge { route: String, rubric: String },
}

impl Check {
    /// The kind, as the task file spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Check::Exact { .. } => "exact",
            Check::Normalized { .. } => "normalized",
            Check::Regex { .. } => "regex",
            Check::Number { .. } => "number",
            Check::Choice { .. } => "choice",
            Check::Contains { .. } => "contains",
            Check::JsonSchema { .. } => "json_schema",
            Check::Judge { .. } => "judge",
        }
    }
}

/// What is wrong with a task file.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("no tasks")]
    Empty,
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// An error in the file `path` (reads `tasks.jsonl line 7: ...`).
    #[error("{path}{}", InFile(inner))]
    File { path: String, inner: Box<TaskError> },
}

/// How a file's error follows its path.
struct InFile<'a>(&'a TaskError);

impl fmt::Display for InFile<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            TaskError::Line { .. } => write!(f, " {}", self.0),
            other => write!(f, ": {other}"),
        }
    }
}

fn at(line: usize, reason: impl Into<String>) -> TaskError {
    TaskError::Line {
        line,
        reason: reason.into(),
    }
}

/// Parses a task file's text.
pub fn parse_tasks(text: &str) -> Result<Vec<Task>, TaskError> {
    let mut tasks = Tasks::default();
    for (i, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.len() > MAX_LINE {
            return Err(too_long(i + 1));
        }
        tasks.line(i + 1, line)?;
    }
    tasks.finish()
}

/// Reads and parses the task file at `path`, a line at a time (a line is
/// never read past [`MAX_LINE`]); errors start with the path.
pub fn read_tasks(path: &Path) -> Result<Vec<Task>, TaskError> {
    let shown = path.display().to_string();
    let in_file = |inner| TaskError::File {
        path: shown.clone(),
        inner: Box::new(inner),
    };
    let io = |source| TaskError::Read {
        path: shown.clone(),
        source,
    };
    let mut reader = BufReader::new(std::fs::File::open(path).map_err(io)?);
    let mut tasks = Tasks::default();
    let mut buf = Vec::new();
    for n in 1.. {
        buf.clear();
        let limit = (MAX_LINE + 2) as u64;
        let read = (&mut reader)
            .take(limit)
            .read_until(b'\n', &mut buf)
            .map_err(io)?;
        if read == 0 {
            break;
        }
        let ended = buf.last() == Some(&b'\n');
        let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        if body.len() > MAX_LINE || (!ended && read as u64 == limit) {
            return Err(in_file(too_long(n)));
        }
        let text = std::str::from_utf8(body).map_err(|_| in_file(at(n, "not UTF-8")))?;
        tasks.line(n, text).map_err(in_file)?;
    }
    tasks.finish().map_err(in_file)
}

fn too_long(line: usize) -> TaskError {
    at(
        line,
        format!("longer than {MAX_LINE} bytes (1 MiB, the limit per task)"),
    )
}

/// The tasks read so far, and where each id was first seen.
#[derive(Default)]
struct Tasks {
    tasks: Vec<Task>,
    ids: HashMap<String, usize>,
}

impl Tasks {
    fn line(&mut self, n: usize, text: &str) -> Result<(), TaskError> {
        let text = if n == 1 {
            text.trim_start_matches('\u{feff}')
        } else {
            text
        };
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.starts_with("//") || trimmed.starts_with('#') {
            return Ok(());
        }
        if self.tasks.len() == MAX_TASKS {
            return Err(at(n, format!("more than {MAX_TASKS} tasks (the limit)")));
        }
        let task = parse_task(n, trimmed)?;
        if let Some(first) = self.ids.get(&task.id) {
            return Err(at(
                n,
                format!("duplicate id {:?} (first on line {first})", task.id),
            ));
        }
        self.ids.insert(task.id.clone(), n);
        self.tasks.push(task);
        Ok(())
    }

    fn finish(self) -> Result<Vec<Task>, TaskError> {
        if self.tasks.is_empty() {
            return Err(TaskError::Empty);
        }
        Ok(self.tasks)
    }
}

/// One line's task.
fn parse_task(n: usize, text: &str) -> Result<Task, TaskError> {
    let value: Value = serde_json::from_str(text).map_err(|e| at(n, format!("not JSON: {e}")))?;
    let Value::Object(mut obj) = value else {
        return Err(at(n, "not a JSON object"));
    };
    if let Some(key) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(at(
            n,
            format!("unknown field {key:?} (expected {})", FIELDS.join(", ")),
        ));
    }
    let id = match obj.remove("id") {
        Some(Value::String(id)) if !id.trim().is_empty() => id,
        Some(Value::String(_)) => return Err(at(n, "\"id\" is empty")),
        Some(_) => return Err(at(n, "\"id\" must be a string")),
        None => return Err(at(n, "no \"id\"")),
    };
    let messages = match (obj.remove("messages"), obj.remove("input")) {
        (Some(_), Some(_)) => {
            return Err(at(n, "both \"messages\" and \"input\" (give one of them)"));
        }
        (None, None) => return Err(at(n, "no \"messages\" or \"input\"")),
        (None, Some(Value::String(input))) if !input.trim().is_empty() => {
            vec![json!({"role": "user", "content": input})]
        }
        (None, Some(Value::String(_))) => return Err(at(n, "\"input\" is empty")),
        (None, Some(_)) => return Err(at(n, "\"input\" must be a string")),
        (Some(messages), None) => messages_of(messages).map_err(|r| at(n, r))?,
    };
    let answer = match obj.remove("answer") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    };
    let group = match obj.get("meta").and_then(|m| m.get("group")) {
        None | Some(Value::Null) => None,
        Some(Value::String(g)) if !g.trim().is_empty() => Some(g.trim().to_string()),
        Some(_) => return Err(at(n, "\"meta.group\" must be a non-empty string")),
    };
    let check = match obj.remove("check") {
        Some(Value::Object(c)) => checks::parse(c).map_err(|r| at(n, r))?,
        Some(_) => return Err(at(n, "\"check\" must be an object")),
        None => return Err(at(n, "no \"check\"")),
    };
    Ok(Task {
        id,
        messages,
        check,
        answer,
        group,
        line: n,
    })
}

/// `messages`: a non-empty list of objects, each with a string `role`.
fn messages_of(value: Value) -> Result<Vec<Value>, String> {
    let Value::Array(list) = value else {
        return Err("\"messages\" must be a list of chat messages".into());
    };
    if list.is_empty() {
        return Err("\"messages\" is empty".into());
    }
    for (i, m) in list.iter().enumerate() {
        if !m.get("role").is_some_and(Value::is_string) {
            return Err(format!("message {} has no string \"role\"", i + 1));
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests;
