//! Where the state lives is decided in one place, the store's `Backend`:
//! no code outside `src/store/` names Redis (the `redis` crate, a
//! `Redis…` type, or `store::redis`). Comments and string literals may
//! (a `[state]` URL is `redis://…`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A line's code: without its `//` comment and the text of its string
/// literals (one line at a time, so a string that spans lines keeps its
/// later lines; none outside the store names Redis in code).
fn code(line: &str) -> String {
    let mut out = String::new();
    let mut in_str = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if in_str => {
                chars.next();
            }
            '"' => in_str = !in_str,
            '/' if !in_str && chars.peek() == Some(&'/') => break,
            _ if in_str => {}
            _ => out.push(c),
        }
    }
    out
}

/// Whether a line of code names Redis: the crate's path, a type whose
/// name starts with `Redis`, or the store's connection module.
fn names_redis(code: &str) -> bool {
    let ident_start = |at: usize| {
        at == 0
            || !code[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
    };
    let crate_path = code.match_indices("redis::").any(|(at, _)| ident_start(at));
    let type_name = code.match_indices("Redis").any(|(at, _)| ident_start(at));
    crate_path || type_name || code.contains("store::redis")
}

#[test]
fn nothing_outside_the_store_names_redis() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let store = src.join("store");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut bad = Vec::new();
    let mut read = 0;
    for f in files.iter().filter(|f| !f.starts_with(&store)) {
        read += 1;
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            if names_redis(&code(line)) {
                let rel = f.strip_prefix(&src).unwrap().display();
                bad.push(format!("src/{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(read > 50, "read only {read} files under {}", src.display());
    assert!(
        bad.is_empty(),
        "Redis named outside src/store/ (ask the store's Backend instead):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_sees_redis_in_code_and_not_in_text() {
    assert!(names_redis(&code("use crate::store::redis::Redis;")));
    assert!(names_redis(&code("    let s = redis::Script::new(X);")));
    assert!(names_redis(&code("fn f(r: Arc<RedisLease>) {}")));
    assert!(!names_redis(&code("//! the shared Redis state")));
    assert!(!names_redis(&code(
        r#"errs.push(p, "is not a redis:// URL (Redis)"); // Redis"#
    )));
    assert!(!names_redis(&code("let predis_count = SharedRedisLike;")));
}
