//! Names across tables: models and routes share one namespace, every name
//! a route or key refers to exists, and routes do not refer to each other
//! in a cycle.

use std::collections::{HashMap, HashSet};

use indexmap::IndexMap;

use super::{Errors, Key, Model, Route};

/// The names a route refers to, with the key path of each reference.
pub fn references(name: &str, route: &Route) -> Vec<(String, String)> {
    let path = format!("routes.{name}");
    match route {
        Route::Passthrough { model, .. } => vec![(format!("{path}.model"), model.clone())],
        Route::Strategy(spec) => spec
            .references()
            .into_iter()
            .map(|(key, target)| (format!("{path}.{key}"), target))
            .collect(),
    }
}

pub(super) fn check_names(
    models: &IndexMap<String, Model>,
    routes: &IndexMap<String, Route>,
    broken: &HashSet<String>,
    keys: &[Key],
    errs: &mut Errors,
) {
    for name in routes.keys() {
        if models.contains_key(name) {
            errs.push(
                format!("routes.{name}"),
                format!("\"{name}\" is also a model name; models and routes share one namespace"),
            );
        }
    }
    let known = |n: &str| models.contains_key(n) || routes.contains_key(n) || broken.contains(n);
    for (name, route) in routes {
        for (path, target) in references(name, route) {
            if !known(&target) {
                errs.push(path, format!("unknown model \"{target}\""));
            }
        }
    }
    for (i, k) in keys.iter().enumerate() {
        for (j, m) in k.models.iter().flatten().enumerate() {
            if !known(m) {
                errs.push(
                    format!("keys[{i}].models[{j}]"),
                    format!("unknown model \"{m}\""),
                );
            }
        }
    }
}

/// Reports each cycle among routes once, as `a -> b -> a`.
pub(super) fn check_cycles(routes: &IndexMap<String, Route>, errs: &mut Errors) {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    fn visit<'a>(
        n: &'a str,
        edges: &HashMap<&'a str, Vec<&'a str>>,
        marks: &mut HashMap<&'a str, Mark>,
        stack: &mut Vec<&'a str>,
        found: &mut Vec<Vec<&'a str>>,
    ) {
        marks.insert(n, Mark::Active);
        stack.push(n);
        for &m in edges.get(n).into_iter().flatten() {
            match marks.get(m).copied().unwrap_or(Mark::Done) {
                Mark::New => visit(m, edges, marks, stack, found),
                Mark::Active => {
                    if let Some(pos) = stack.iter().position(|s| *s == m) {
                        let mut cycle = stack[pos..].to_vec();
                        cycle.push(m);
                        found.push(cycle);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks.insert(n, Mark::Done);
    }
    let refs: Vec<(&str, Vec<(String, String)>)> = routes
        .iter()
        .map(|(n, r)| (n.as_str(), references(n, r)))
        .collect();
    let mut edges: HashMap<&str, Vec<&str>> = HashMap::new();
    for (n, rs) in &refs {
        let targets = rs
            .iter()
            .filter_map(|(_, t)| routes.get_key_value(t.as_str()).map(|(k, _)| k.as_str()))
            .collect();
        edges.insert(n, targets);
    }
    let mut marks: HashMap<&str, Mark> = routes.keys().map(|k| (k.as_str(), Mark::New)).collect();
    let mut found = Vec::new();
    for n in routes.keys() {
        if marks.get(n.as_str()) == Some(&Mark::New) {
            visit(n, &edges, &mut marks, &mut Vec::new(), &mut found);
        }
    }
    for cycle in found {
        errs.push(
            format!("routes.{}", cycle[0]),
            format!(
                "routes refer to each other in a cycle: {}",
                cycle.join(" -> ")
            ),
        );
    }
}
