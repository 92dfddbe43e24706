//! A simulated model that answers the tasks of a `conclave eval` task
//! file: the task's reference answer with a set probability, otherwise a
//! plausible wrong one, drawn from a seeded hash so runs repeat. Each
//! time the same model is asked the same task it draws again (a repeat,
//! or a race's candidates, can differ), in a sequence fixed by the seed
//! and the request's `user` (which `conclave eval` sets per task, route
//! and repeat, so concurrent routes do not shift each other's draws).
//! With `unsure`, a wrong answer says it is unsure with that
//! probability: the signal a verifier or a scorer of the demo reads (how
//! well calibrated a small model is). The task is found by the text of
//! the latest user message that is one of the file's prompts, so a
//! strategy's added messages (a verifier's feedback) do not hide it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::wire::content_text;

/// `reply = { solve = { tasks = "eval/tasks.jsonl", accuracy = 0.8 } }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SolveSpec {
    /// The task file (relative to the config file's folder).
    pub tasks: PathBuf,
    /// The chance of answering a task right, 0 to 1.
    pub accuracy: f64,
    #[serde(default)]
    pub seed: u64,
    /// The chance that a wrong answer ends with " (not sure)", 0 to 1.
    #[serde(default)]
    pub unsure: f64,
}

/// What a wrong answer ends with when it admits it.
pub const UNSURE: &str = " (not sure)";
/// Keeps the draw of `unsure` apart from the draw of `accuracy`.
const UNSURE_SALT: u64 = 0x05ee_d0fd_00b7;

/// Task files read so far: prompt text → reference answer.
type Answers = Arc<HashMap<String, String>>;
static FILES: OnceLock<DashMap<PathBuf, Result<Answers, String>>> = OnceLock::new();
/// How many times each (seed, model, prompt) was asked.
static ASKED: OnceLock<DashMap<(u64, String, String), u64>> = OnceLock::new();

/// The reply of `model` to the chat request `req`.
pub(super) fn reply(spec: &SolveSpec, req: &Value, model: &str) -> String {
    let answers = match answers(spec) {
        Ok(a) => a,
        Err(e) => return format!("(cannot read the task file: {e})"),
    };
    let mut users = req
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .rev()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| content_text(m.get("content")));
    let Some((prompt, reference)) = users.find_map(|t| find(&answers, &t)) else {
        return "I do not know this task.".into();
    };
    // `conclave eval` names each run of a task in `user`: the draws of
    // one run do not depend on what other routes asked first.
    let user = req.get("user").and_then(Value::as_str).unwrap_or_default();
    let asked = format!("{user}\n{prompt}");
    let key = (spec.seed, model.to_string(), asked.clone());
    let nth = {
        let mut n = ASKED.get_or_init(DashMap::new).entry(key).or_insert(0);
        *n += 1;
        *n
    };
    let draw = unit(spec.seed, model, &asked, nth);
    if draw < spec.accuracy {
        reference
    } else {
        let wrong = wrong(&reference, nth);
        if unit(spec.seed ^ UNSURE_SALT, model, &asked, nth) < spec.unsure {
            format!("{wrong}{UNSURE}")
        } else {
            wrong
        }
    }
}

/// The task whose prompt is `text`, or begins it (a chain joins its
/// verifier's feedback to the last user message, after a blank line).
fn find(answers: &HashMap<String, String>, text: &str) -> Option<(String, String)> {
    let ends = text.match_indices('\n').map(|(i, _)| i).chain([text.len()]);
    ends.rev().find_map(|end| {
        let prompt = text.get(..end)?.trim();
        Some((prompt.to_string(), answers.get(prompt)?.clone()))
    })
}

fn answers(spec: &SolveSpec) -> Result<Answers, String> {
    let files = FILES.get_or_init(DashMap::new);
    if let Some(got) = files.get(&spec.tasks) {
        return got.clone();
    }
    let read = load(&spec.tasks);
    files.insert(spec.tasks.clone(), read.clone());
    read
}

/// Prompt (`input`, or the last user message of `messages`) → `answer`.
fn load(path: &PathBuf) -> Result<Answers, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut map = HashMap::new();
    for line in text.lines() {
        let Ok(task) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let prompt = task.get("input").and_then(Value::as_str).or_else(|| {
            task.get("messages")?
                .as_array()?
                .iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?
                .get("content")?
                .as_str()
        });
        let answer = match task.get("answer") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Null) | None => None,
            Some(other) => Some(other.to_string()),
        };
        if let (Some(prompt), Some(answer)) = (prompt, answer) {
            map.insert(prompt.trim().to_string(), answer);
        }
    }
    Ok(Arc::new(map))
}

/// A number in [0, 1) from the seed, the model, the prompt and the draw.
fn unit(seed: u64, model: &str, prompt: &str, nth: u64) -> f64 {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(model.as_bytes());
    h.update([0]);
    h.update(prompt.as_bytes());
    h.update(nth.to_le_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

/// A wrong answer of the same shape as `reference`.
fn wrong(reference: &str, nth: u64) -> String {
    let r = reference.trim();
    if let Ok(n) = r.parse::<f64>() {
        let off = if n.abs() >= 10.0 {
            (n * 0.1).round()
        } else {
            1.0
        };
        let w = n + off * if nth.is_multiple_of(2) { -1.0 } else { 1.0 };
        return if n.fract() == 0.0 {
            format!("{w:.0}")
        } else {
            format!("{w:.2}")
        };
    }
    let mut chars = r.chars();
    if let (Some(c @ 'A'..='Z'), None) = (chars.next(), chars.next()) {
        let next = (((c as u8 - b'A') + 1 + (nth % 3) as u8) % 4 + b'A') as char;
        return if next == c {
            'A'.to_string()
        } else {
            next.to_string()
        };
    }
    if let Ok(Value::Object(mut obj)) = serde_json::from_str::<Value>(r) {
        if let Some((_, v)) = obj.iter_mut().next() {
            *v = match v {
                Value::Number(n) => Value::from(n.as_f64().unwrap_or(0.0) + 1.0),
                _ => Value::from("unknown"),
            };
        }
        return Value::Object(obj).to_string();
    }
    "I am not able to answer that.".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_answers_keep_the_shape_and_differ() {
        assert_eq!(wrong("42", 1), "46");
        assert_eq!(wrong("3", 2), "2");
        assert_eq!(wrong("2.50", 1), "3.50");
        assert_ne!(wrong("B", 1), "B");
        assert_ne!(wrong("D", 3), "D");
        assert_eq!(
            wrong(r#"{"name":"Ada","age":36}"#, 1),
            r#"{"name":"unknown","age":36}"#
        );
    }

    #[test]
    fn draws_repeat_with_the_seed_and_match_the_accuracy() {
        assert_eq!(unit(1, "m", "p", 1), unit(1, "m", "p", 1));
        assert_ne!(unit(1, "m", "p", 1), unit(2, "m", "p", 1));
        let hits = (0..10_000)
            .filter(|i| unit(7, "m", &i.to_string(), 1) < 0.7)
            .count();
        assert!((6_800..7_200).contains(&hits), "{hits}");
    }
}
