//! The references cannot drift from the code. `docs/configuration.md`
//! names every key of every table the config loader accepts, in that
//! table's section, and every value of every key that takes one of a set
//! (`lane`, `mode`, `quirks`, …). Nothing is listed by hand: the loader
//! itself is asked. A table given an unknown key (`zz_probe`) answers with
//! the keys it expects, a key given an unknown value with the values it
//! expects, and a key given a table of an unknown key with that table's
//! keys, so nested tables (`price`, `webhook`, a mock's `reply`, `rules`)
//! are found too. The tables themselves come from the same answers: the
//! top-level tables, the upstream kinds and the strategies. And the module
//! map at the top of `src/lib.rs` lists every module `lib.rs` declares.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};

const PROBE: &str = "zz_probe";
/// How deep nested tables are followed (`rules[].then.reply.tool_call`).
const DEPTH: usize = 4;

fn read(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The names the loader expects instead of the probe in `toml`, if it
/// says (`unknown field \`zz_probe\`, expected one of \`a\`, \`b\``,
/// `unknown strategy "zz_probe" (expected one of a, b)`, `expected "a" or
/// "b"`); `None` when it accepts `toml` or says nothing of the probe.
fn expected(toml: &str) -> Option<Vec<String>> {
    let errs = errors(toml);
    let msg = errs
        .iter()
        .filter(|(path, message)| path.contains(PROBE) || message.contains(PROBE))
        .map(|(_, message)| message.as_str())
        .find(|m| m.contains("unknown") && m.contains("expected"))?;
    let list = msg.rsplit_once("expected").map(|(_, l)| l)?;
    let list = list.split(')').next().unwrap_or_default();
    let list = list.trim().trim_start_matches("one of").trim();
    let names: Vec<String> = list
        .split(", ")
        .flat_map(|n| n.split(" or "))
        .map(|n| n.trim().trim_matches(|c| c == '`' || c == '"').to_owned())
        .filter(|n| !n.is_empty())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')),
        "not a list of names: {msg}"
    );
    Some(names)
}

/// One table of the config, as the probes write it.
struct Table {
    /// What the failure message calls it.
    name: String,
    /// The tables it needs around it (an upstream for a model).
    preamble: String,
    /// `[server]`, `[[keys]]`, `[routes.r]`.
    header: String,
    /// The keys it needs (`kind = "mock"`), left out when probed themselves.
    body: Vec<(String, String)>,
    /// The heading of its section in docs/configuration.md.
    section: String,
}

impl Table {
    /// The table with `line` in it (and without `key`'s own line).
    fn with(&self, key: &str, line: &str) -> String {
        let mut out = format!("{}\n{}\n", self.preamble, self.header);
        for (k, v) in self.body.iter().filter(|(k, _)| k != key) {
            out.push_str(&format!("{k} = {v}\n"));
        }
        out.push_str(line);
        out.push('\n');
        out
    }
}

/// The errors of `toml`: (key path, message).
fn errors(toml: &str) -> Vec<(String, String)> {
    match conclave::config::parse(
        toml,
        "probe.toml",
        &|_| Some("secret".into()),
        &conclave::strategy::ALL,
    ) {
        Ok(_) => Vec::new(),
        Err(e) => e.errors.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

/// `table` with its required keys set (each a name, or a list of two
/// names, whichever the loader takes), so that its checks past the raw
/// table run too (a race's `rubric` signals are checked once the route
/// reads).
fn fill(mut table: Table) -> Table {
    for _ in 0..10 {
        let errs = errors(&table.with("", ""));
        let Some(key) = errs.iter().find_map(|(_, m)| {
            m.strip_prefix("missing field `")
                .and_then(|k| k.split('`').next())
                .map(str::to_owned)
        }) else {
            break;
        };
        table.body.push((key.clone(), "\"a\"".into()));
        let wrong = errors(&table.with("", ""))
            .iter()
            .any(|(p, m)| p.ends_with(&key) && m.contains("invalid type"));
        if wrong {
            table.body.pop();
            table.body.push((key, "[\"a\", \"b\"]".into()));
        }
    }
    table
}

/// What the probes found: keys by section, and the values of keys that
/// take one of a set.
#[derive(Default)]
struct Found {
    keys: BTreeMap<String, BTreeSet<String>>,
    values: BTreeSet<String>,
}

/// `key.nested… = leaf` as one TOML line; each step after the first says
/// whether the value holding it is an array of tables (`rules`).
fn line(path: &[(String, bool)], leaf: &str) -> String {
    let mut v = leaf.to_owned();
    for (key, in_array) in path[1..].iter().rev() {
        let inner = format!("{{ {key} = {v} }}");
        v = if *in_array {
            format!("[{inner}]")
        } else {
            inner
        };
    }
    format!("{} = {v}", path[0].0)
}

/// Every key of `table` (and of the tables nested in its keys) and every
/// value set of its keys, into `found`.
fn explore(table: &Table, found: &mut Found) {
    let keys = expected(&table.with("", &format!("{PROBE} = 1")))
        .unwrap_or_else(|| panic!("{}: no list of keys for an unknown key", table.name));
    for key in keys {
        nested(table, &[(key, false)], found);
    }
}

fn nested(table: &Table, path: &[(String, bool)], found: &mut Found) {
    found
        .keys
        .entry(table.section.clone())
        .or_default()
        .insert(path[path.len() - 1].0.clone());
    if path.len() > DEPTH {
        return;
    }
    let top = &path[0].0;
    for leaf in [format!("\"{PROBE}\""), format!("[\"{PROBE}\"]")] {
        if let Some(values) = expected(&table.with(top, &line(path, &leaf))) {
            found.values.extend(values);
        }
    }
    for in_array in [false, true] {
        let leaf = if in_array {
            format!("[{{ {PROBE} = 1 }}]")
        } else {
            format!("{{ {PROBE} = 1 }}")
        };
        if let Some(keys) = expected(&table.with(top, &line(path, &leaf))) {
            for key in keys {
                let mut deeper = path.to_vec();
                deeper.push((key, in_array));
                nested(table, &deeper, found);
            }
        }
    }
}

/// The text of the section under `heading` (up to the next heading of its
/// level or above).
fn section<'d>(doc: &'d str, heading: &str) -> &'d str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = doc
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("docs/configuration.md has no heading {heading}"))
        + 1;
    let body = &doc[start..];
    let end = body
        .match_indices("\n#")
        .map(|(i, _)| i)
        .find(|i| {
            let h = body[i + 1..].chars().take_while(|c| *c == '#').count();
            h > 0 && h <= level
        })
        .unwrap_or(body.len());
    &body[..end]
}

/// The words written as code (in backticks) or quoted in `text`.
fn code_words(text: &str) -> BTreeSet<String> {
    let quoted = text.split('"').skip(1).step_by(2);
    let code = text.split('`').skip(1).step_by(2);
    quoted
        .chain(code)
        .flat_map(|s| s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Every table of the config: the top-level ones, each upstream kind,
/// each strategy's routes, and a mock upstream's simulated models.
fn tables(doc: &str) -> Vec<Table> {
    let up = "[upstreams.u]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n";
    let model = "[models.a]\nupstream = \"u\"\n\n[models.b]\nupstream = \"u\"\n";
    let top = expected(&format!("{PROBE} = 1\n")).expect("no list of top-level tables");
    let mut out = Vec::new();
    let q = |s: &str| format!("\"{s}\"");
    for t in &top {
        // Its section: the `##` heading that names it (`[server]`,
        // `[[keys]]`, `[models.NAME]`).
        let names = [format!("[{t}]"), format!("[{t}."), format!("[[{t}]]")];
        let intro = doc.split("\n## ").next().unwrap_or_default();
        assert!(
            names.iter().any(|n| intro.contains(n.as_str())),
            "the list of tables atop docs/configuration.md lacks [{t}]"
        );
        let section = doc
            .lines()
            .find(|l| l.starts_with("## `[") && names.iter().any(|n| l.contains(n.as_str())))
            .unwrap_or_else(|| panic!("docs/configuration.md has no section for [{t}]"))
            .to_owned();
        let table = |header: String, preamble: &str, body: Vec<(&str, String)>| Table {
            name: header.clone(),
            preamble: preamble.to_owned(),
            header,
            body: body.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            section: section.clone(),
        };
        match t.as_str() {
            "keys" => out.push(table(
                "[[keys]]".into(),
                "",
                vec![("name", q("k")), ("key_env", q("K"))],
            )),
            "upstreams" => {
                let kinds = expected(&format!("[upstreams.u]\nkind = \"{PROBE}\"\n"))
                    .expect("no list of upstream kinds");
                for kind in kinds {
                    out.push(table("[upstreams.u]".into(), "", vec![("kind", q(&kind))]));
                }
            }
            "models" => out.push(table("[models.a]".into(), up, vec![("upstream", q("u"))])),
            "routes" => {
                let strategies =
                    expected(&format!("{up}{model}[routes.r]\nstrategy = \"{PROBE}\"\n"))
                        .expect("no list of strategies");
                for s in strategies {
                    out.push(Table {
                        section: format!("### `strategy = \"{s}\"`"),
                        ..table(
                            "[routes.r]".into(),
                            &format!("{up}{model}"),
                            vec![("strategy", q(&s))],
                        )
                    });
                }
            }
            _ => out.push(table(format!("[{t}]"), "", Vec::new())),
        }
    }
    // A mock upstream's simulated models (`[upstreams.NAME.models.MODEL]`),
    // a free-form table of tables.
    out.push(Table {
        name: "[upstreams.m.models.x]".into(),
        preamble: "[upstreams.m]\nkind = \"mock\"\n".into(),
        header: "[upstreams.m.models.x]".into(),
        body: Vec::new(),
        section: "## Simulated models (`kind = \"mock\"`)".into(),
    });
    out.into_iter()
        .map(fill)
        .map(|mut t| {
            let body: Vec<String> = t.body.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            t.name = format!("{} ({})", t.name, body.join(", "));
            t
        })
        .collect()
}

#[test]
fn every_config_key_is_in_its_tables_section() {
    let doc = read("docs/configuration.md");
    let mut found = Found::default();
    let tables = tables(&doc);
    for t in &tables {
        explore(t, &mut found);
    }
    let mut missing = Vec::new();
    for (heading, keys) in &found.keys {
        let documented = code_words(section(&doc, heading));
        for k in keys.iter().filter(|k| !documented.contains(*k)) {
            missing.push(format!("{heading}: `{k}`"));
        }
    }
    let everywhere = code_words(&doc);
    for v in found.values.iter().filter(|v| !everywhere.contains(*v)) {
        missing.push(format!("the value `{v}`"));
    }
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not document:\n{}",
        missing.join("\n")
    );
    // The probes reached every kind of table.
    let keys: usize = found.keys.values().map(BTreeSet::len).sum();
    assert!(tables.len() >= 12, "{} tables", tables.len());
    assert!(keys >= 150, "only {keys} keys found");
    for v in [
        "local",
        "best",
        "balanced",
        "system",
        "no_stream_usage",
        "hang",
    ] {
        assert!(found.values.contains(v), "the value {v} was not found");
    }
    for (heading, k) in [
        ("## `[telemetry]`", "otlp_endpoint"),
        ("### `strategy = \"race\"`", "latency"),
        ("### `strategy = \"race\"`", "url"),
        ("## `[models.NAME]`", "input_per_mtok"),
        ("## Simulated models (`kind = \"mock\"`)", "when_call"),
        ("## Simulated models (`kind = \"mock\"`)", "arguments"),
    ] {
        assert!(
            found.keys.get(heading).is_some_and(|s| s.contains(k)),
            "{k} was not found in {heading}"
        );
    }
}

#[test]
fn the_readme_links_the_references_and_not_outside_the_repository() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for doc in [
        "docs/configuration.md",
        "docs/http.md",
        "docs/metrics.md",
        "docs/events.md",
        "docs/eval.md",
    ] {
        assert!(readme.contains(doc), "README.md does not link {doc}");
        assert!(
            std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/"))
                .join(doc)
                .exists(),
            "{doc} is missing"
        );
    }
    assert!(
        !readme.contains("../shared"),
        "README.md points outside the repository"
    );
}
