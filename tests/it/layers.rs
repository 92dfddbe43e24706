//! The crate's layering, read from its source. `src/lib.rs` holds the
//! module map as a numbered table of layers, bottom to top; this suite
//! reads that table and checks every `crate::` and `super::` path in
//! `src/` against it:
//!
//! - no module imports from a higher layer;
//! - no import circle between sibling modules at any depth (`api::relay`
//!   and `api::render` may not use each other; a parent and its own
//!   children may);
//! - every module of the crate is in the table, once;
//! - the shared state's client (Redis) is named only under `src/store/`;
//! - only the allocator's adapter (`src/alloc.rs`) allows `unsafe` code.
//!
//! Unit tests (`tests.rs`, `#[cfg(test)] mod tests`) may use anything.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// One source file: its module path and its code, with comments, string
/// literals and unit tests taken out.
struct Source {
    file: String,
    module: Module,
    code: String,
}

fn sources() -> Vec<Source> {
    let mut files = Vec::new();
    walk(&src(), &mut files);
    let mut out = Vec::new();
    for path in files {
        let rel = path
            .strip_prefix(src())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let mut module: Module = rel
            .trim_end_matches(".rs")
            .split('/')
            .map(str::to_owned)
            .collect();
        if matches!(
            module.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            module.pop();
        }
        // Unit tests may use anything (they build real graphs and configs).
        if module.iter().any(|m| m == "tests") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        out.push(Source {
            file: format!("src/{rel}"),
            module,
            code: without_tests(&strip(&text)),
        });
    }
    assert!(out.len() > 100, "read only {} files under src/", out.len());
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code without comments and string literals (kept as `""`, so line
/// numbers stay).
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            i += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            out.extend(rest[..end].chars().filter(|c| *c == '\n'));
            i += end;
        } else if let Some(hashes) = raw_string_start(rest) {
            let open = 2 + hashes;
            let close = format!("\"{}", "#".repeat(hashes));
            let end = rest[open..]
                .find(&close)
                .map_or(rest.len(), |e| open + e + close.len());
            out.push_str("\"\"");
            out.extend(rest[..end].chars().filter(|c| *c == '\n'));
            i += end;
        } else if rest.starts_with('"') && !prev_is_ident(b, i) {
            let mut j = 1;
            let rb = rest.as_bytes();
            while j < rb.len() && rb[j] != b'"' {
                j += if rb[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            out.push_str("\"\"");
            out.extend(rest[..end].chars().filter(|c| *c == '\n'));
            i += end;
        } else if rest.starts_with("'\"'") {
            i += 3;
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn prev_is_ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// `r"`, `r#"`, `br##"`…: how many `#`.
fn raw_string_start(rest: &str) -> Option<usize> {
    let r = rest.strip_prefix('b').unwrap_or(rest).strip_prefix('r')?;
    let hashes = r.len() - r.trim_start_matches('#').len();
    r[hashes..].starts_with('"').then_some(hashes)
}

/// The code before its inline unit tests (`#[cfg(test)]` then `mod`).
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut lines = code.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|l| l.trim_start().starts_with("mod "))
        {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Every path a line names from `crate::` or `super::`, use-groups
/// expanded: (line, absolute path).
fn paths(source: &Source) -> Vec<(usize, Module)> {
    let mut out = Vec::new();
    let code = &source.code;
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let rest = &code[i..];
        let starts = (rest.starts_with("crate::") || rest.starts_with("super::"))
            && !prev_is_ident(b, i)
            && !(i > 0 && b[i - 1] == b'$');
        if !starts {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let line = code[..i].matches('\n').count() + 1;
        let mut base: Module = Vec::new();
        let mut j = i;
        if rest.starts_with("crate::") {
            j += "crate::".len();
        } else {
            // `super::` in `a/b.rs` (module a::b) is `a`; in `a/b/mod.rs`
            // (also a::b) it is `a` too: the file's module's parent.
            base = source.module.clone();
            while code[j..].starts_with("super::") {
                base.pop();
                j += "super::".len();
            }
        }
        let (trees, end) = use_tree(code, j);
        for t in trees {
            let mut p = base.clone();
            p.extend(t);
            out.push((line, p));
        }
        i = end.max(i + 1);
    }
    out
}

/// The paths of a use tree at `at` (`a::b`, `a::{b, c::d}`, `{x, y}`), and
/// where it ends.
fn use_tree(code: &str, mut at: usize) -> (Vec<Module>, usize) {
    let b = code.as_bytes();
    let mut prefix: Module = Vec::new();
    loop {
        while at < b.len() && b[at].is_ascii_whitespace() {
            at += 1;
        }
        if at < b.len() && b[at] == b'{' {
            let mut out = Vec::new();
            at += 1;
            loop {
                let (subs, end) = use_tree(code, at);
                for s in subs {
                    let mut p = prefix.clone();
                    p.extend(s);
                    out.push(p);
                }
                at = end;
                while at < b.len() && (b[at].is_ascii_whitespace() || b[at] == b',') {
                    at += 1;
                }
                if at >= b.len() || b[at] == b'}' {
                    return (out, at + 1);
                }
            }
        }
        let start = at;
        while at < b.len() && (b[at].is_ascii_alphanumeric() || b[at] == b'_') {
            at += 1;
        }
        if start == at {
            return (vec![prefix], at);
        }
        prefix.push(code[start..at].to_owned());
        if code[at..].starts_with("::") {
            at += 2;
        } else {
            return (vec![prefix], at);
        }
    }
}

/// The deepest module of the crate a path names (`a::b::Item` → `a::b`).
fn module_of(path: &Module, modules: &BTreeSet<Module>) -> Option<Module> {
    (1..=path.len())
        .rev()
        .map(|k| path[..k].to_vec())
        .find(|m| modules.contains(m))
}

/// The layer table in `src/lib.rs`: lines `//! N. ` naming modules as
/// `` [`name`] `` or `` `name` ``.
fn layer_table() -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut table = BTreeMap::new();
    let mut layer = 0;
    for line in text.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            continue;
        };
        let doc = doc.trim_start();
        let Some((num, rest)) = doc.split_once(". ") else {
            continue;
        };
        let Ok(n) = num.parse::<usize>() else {
            continue;
        };
        assert_eq!(n, layer + 1, "lib.rs: layer {n} after layer {layer}");
        layer = n;
        // The names before the description (`: …`).
        let names = rest.split(": ").next().unwrap();
        for name in names.split('`').skip(1).step_by(2) {
            assert!(
                table.insert(name.to_owned(), n).is_none(),
                "lib.rs names `{name}` in two layers"
            );
        }
    }
    assert!(
        layer >= 5,
        "lib.rs has no layer table (`//! 1. [`wire`], …`)"
    );
    table
}

fn declared_modules() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in std::fs::read_to_string(src().join("lib.rs"))
        .unwrap()
        .lines()
    {
        let l = line.trim();
        let l = l.strip_prefix("pub ").unwrap_or(l);
        if let Some(name) = l.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            out.insert(name.to_owned());
        }
    }
    out
}

#[test]
fn every_module_is_in_the_layer_table_once() {
    let table = layer_table();
    let declared = declared_modules();
    let missing: Vec<_> = declared
        .iter()
        .filter(|m| !table.contains_key(*m))
        .collect();
    let extra: Vec<_> = table
        .keys()
        .filter(|m| !declared.contains(*m) && *m != "main")
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "lib.rs's layer table lacks {missing:?} and names modules that do not exist: {extra:?}"
    );
}

#[test]
fn no_module_imports_from_a_higher_layer() {
    let table = layer_table();
    let sources = sources();
    let modules: BTreeSet<Module> = sources.iter().map(|s| s.module.clone()).collect();
    let layer = |m: &Module| -> usize {
        let top = m.first().map_or("main", String::as_str);
        *table
            .get(top)
            .unwrap_or_else(|| panic!("`{top}` is not in lib.rs's layer table"))
    };
    let mut bad = Vec::new();
    for s in &sources {
        if s.module.is_empty() {
            continue; // lib.rs and main.rs are the top
        }
        for (line, path) in paths(s) {
            let Some(to) = module_of(&path, &modules) else {
                continue;
            };
            if to.is_empty() || to[0] == s.module[0] {
                continue;
            }
            if layer(&to) > layer(&s.module) {
                bad.push(format!(
                    "{}:{line}: {} (layer {}) uses {} (layer {})",
                    s.file,
                    s.module.join("::"),
                    layer(&s.module),
                    path.join("::"),
                    layer(&to)
                ));
            }
        }
    }
    assert!(bad.is_empty(), "imports up the layers:\n{}", bad.join("\n"));
}

#[test]
fn no_import_circle_between_sibling_modules() {
    let sources = sources();
    let modules: BTreeSet<Module> = sources.iter().map(|s| s.module.clone()).collect();
    // An edge between the two siblings under the pair's common parent.
    let mut edges: BTreeMap<Module, BTreeMap<Module, String>> = BTreeMap::new();
    for s in &sources {
        for (line, path) in paths(s) {
            let Some(to) = module_of(&path, &modules) else {
                continue;
            };
            let from = &s.module;
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue; // a parent and its own child
            }
            let (a, b) = (from[..=common].to_vec(), to[..=common].to_vec());
            edges
                .entry(a)
                .or_default()
                .entry(b)
                .or_insert_with(|| format!("{}:{line}", s.file));
        }
    }
    let circles = circles(&edges);
    let shown: Vec<String> = circles
        .iter()
        .map(|c| {
            let names: Vec<String> = c.iter().map(|m| m.join("::")).collect();
            let why: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    edges[a]
                        .iter()
                        .filter(|(b, _)| c.contains(*b))
                        .map(move |(b, at)| {
                            format!("    {} -> {} ({at})", a.join("::"), b.join("::"))
                        })
                })
                .collect();
            format!("{}\n{}", names.join(" <-> "), why.join("\n"))
        })
        .collect();
    assert!(circles.is_empty(), "import circles:\n{}", shown.join("\n"));
}

/// The strongly connected parts of more than one module (Tarjan).
fn circles(edges: &BTreeMap<Module, BTreeMap<Module, String>>) -> Vec<Vec<Module>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Module, BTreeMap<Module, String>>,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on: BTreeSet<Module>,
        out: Vec<Vec<Module>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: &Module) {
            let n = self.index.len();
            self.index.insert(v.clone(), n);
            self.low.insert(v.clone(), n);
            self.stack.push(v.clone());
            self.on.insert(v.clone());
            let next: Vec<Module> = self
                .edges
                .get(v)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            for w in next {
                if !self.index.contains_key(&w) {
                    self.visit(&w);
                    let l = self.low[v].min(self.low[&w]);
                    self.low.insert(v.clone(), l);
                } else if self.on.contains(&w) {
                    let l = self.low[v].min(self.index[&w]);
                    self.low.insert(v.clone(), l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut part = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(&w);
                    let done = &w == v;
                    part.push(w);
                    if done {
                        break;
                    }
                }
                if part.len() > 1 {
                    self.out.push(part);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

/// The request context and telemetry meet only through the sinks:
/// neither imports the other, though they share a layer.
#[test]
fn the_request_context_and_telemetry_do_not_import_each_other() {
    let mut bad = Vec::new();
    for s in sources() {
        let other = match s.module.first().map(String::as_str) {
            Some("context") => "telemetry",
            Some("telemetry") => "context",
            _ => continue,
        };
        for (line, path) in paths(&s) {
            if path.first().is_some_and(|m| m == other) {
                bad.push(format!("{}:{line}: {}", s.file, path.join("::")));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "context and telemetry meet:\n{}",
        bad.join("\n")
    );
}

/// Whether to use a shared Redis or local state is decided once, in the
/// store's backend: no code outside `src/store/` names the Redis client
/// or a Redis type.
#[test]
fn redis_is_named_only_under_the_store() {
    let mut bad = Vec::new();
    for s in sources() {
        if s.module.first().is_some_and(|m| m == "store") {
            continue;
        }
        for (i, line) in s.code.lines().enumerate() {
            let named = line.match_indices("edis").any(|(at, _)| {
                let b = line.as_bytes();
                at > 0 && (b[at - 1] == b'R' || b[at - 1] == b'r') && !prev_is_ident(b, at - 1)
            });
            if named {
                bad.push(format!("{}:{}: {}", s.file, i + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "Redis named outside src/store/:\n{}",
        bad.join("\n")
    );
}

/// `unsafe` is denied crate-wide; the allocator's adapter is the one
/// module allowed it, so no other file (source, test or bench) may name
/// the lint in any attribute (`allow`, `expect`, `warn`, a list).
#[test]
fn unsafe_code_is_allowed_only_in_the_allocator() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches"] {
        walk(&root.join(dir), &mut files);
    }
    let this = root.join(file!());
    let lifted: Vec<String> = files
        .iter()
        .filter(|f| **f != this)
        .filter(|f| std::fs::read_to_string(f).unwrap().contains("unsafe_code"))
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert_eq!(
        lifted,
        ["src/alloc.rs"],
        "files that name the unsafe_code lint"
    );
}

/// The checker reads what it must: a circle and an up-import written in
/// its own input language are found.
#[test]
fn the_checker_finds_a_planted_circle_and_group_imports() {
    let s = Source {
        file: "x".into(),
        module: vec!["api".into(), "relay".into()],
        code: without_tests(&strip(
            "use super::{render::Frame, respond};\n// crate::nope\nlet s = \"crate::strategy\";\nuse crate::graph::{a::B, c};\n#[cfg(test)]\nmod tests { use crate::eval; }\n",
        )),
    };
    let got: Vec<String> = paths(&s)
        .into_iter()
        .map(|(l, p)| format!("{l}:{}", p.join("::")))
        .collect();
    assert_eq!(
        got,
        [
            "1:api::render::Frame",
            "1:api::respond",
            "4:graph::a::B",
            "4:graph::c"
        ]
    );
    let m = |s: &str| -> Module { s.split("::").map(str::to_owned).collect() };
    let mut edges: BTreeMap<Module, BTreeMap<Module, String>> = BTreeMap::new();
    edges
        .entry(m("a::x"))
        .or_default()
        .insert(m("a::y"), String::new());
    edges
        .entry(m("a::y"))
        .or_default()
        .insert(m("a::z"), String::new());
    edges
        .entry(m("a::z"))
        .or_default()
        .insert(m("a::x"), String::new());
    edges
        .entry(m("a::z"))
        .or_default()
        .insert(m("a::w"), String::new());
    let found = circles(&edges);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].len(), 3);
}
