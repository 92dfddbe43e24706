//! `--baselines`: for every strategy route compared, its strongest member
//! alone and a same-model ensemble of that member (Self-MoA: the best
//! model sampled three times, the samples picked by the route's own race
//! judge, or else ranked and synthesised by the model itself), so a
//! strategy is never shown against weaker routes only. They are added to
//! the config's TOML before it is read, as ordinary models and routes.

use toml::{Table, Value};

/// The keys of a strategy route that name its members (not its verifier,
/// judge or synthesis model).
const MEMBERS: &[&str] = &[
    "tiers",
    "candidates",
    "panel",
    "members",
    "contestants",
    "default",
    "model",
    "oracle",
];

/// The config text with the baselines added, the routes to compare
/// (`routes` and then the baselines) and one line per baseline saying
/// what it is.
pub fn add(text: &str, routes: &[String]) -> Result<(String, Vec<String>, Vec<String>), String> {
    let mut doc: Table = text.parse().map_err(|e| format!("{e}"))?;
    let models = doc
        .get("models")
        .and_then(Value::as_table)
        .cloned()
        .unwrap_or_default();
    let table = doc
        .get("routes")
        .and_then(Value::as_table)
        .cloned()
        .unwrap_or_default();
    let mut all = routes.to_vec();
    let mut notes = Vec::new();
    let mut new_models = Table::new();
    let mut new_routes = Table::new();
    for name in routes {
        let Some(route) = table.get(name).and_then(Value::as_table) else {
            continue;
        };
        let Some(best) = strongest(route, &models) else {
            continue;
        };
        if !all.contains(&best) {
            all.push(best.clone());
            notes.push(format!("`{best}`: the strongest member of `{name}`, alone"));
        }
        // A race with a judge is matched by the same judge picking among
        // the samples; any other strategy by the model synthesising them.
        let judge = route.get("judge").filter(|_| is(route, "race"));
        let moa = match judge {
            Some(_) => format!("self-moa-{best}"),
            None => format!("self-moa-{best}-synth"),
        };
        if all.contains(&moa) || table.contains_key(&moa) {
            continue;
        }
        let Some(model) = models.get(&best).cloned() else {
            continue;
        };
        let samples: Vec<String> = (2..=3).map(|i| format!("{best}-sample-{i}")).collect();
        for s in &samples {
            new_models.insert(s.clone(), model.clone());
        }
        let mut members = vec![Value::from(best.clone())];
        members.extend(samples.iter().cloned().map(Value::from));
        let mut spec = Table::new();
        if let Some(judge) = judge {
            spec.insert("strategy".into(), "race".into());
            spec.insert("candidates".into(), Value::Array(members));
            spec.insert("judge".into(), judge.clone());
            for k in ["rubric", "baseline_tokens_per_run", "judge_max_tokens"] {
                if let Some(v) = route.get(k) {
                    spec.insert(k.into(), v.clone());
                }
            }
            notes.push(format!(
                "`{moa}`: `{best}` three times, the best picked by `{name}`'s judge (Self-MoA)"
            ));
        } else {
            spec.insert("strategy".into(), "judge".into());
            spec.insert("panel".into(), Value::Array(members));
            spec.insert("synthesis".into(), best.clone().into());
            spec.insert("default".into(), best.clone().into());
            notes.push(format!(
                "`{moa}`: `{best}` three times, ranked and answered by `{best}` itself (Self-MoA)"
            ));
        }
        new_routes.insert(moa.clone(), Value::Table(spec));
        all.push(moa);
    }
    for (section, added) in [("models", new_models), ("routes", new_routes)] {
        if added.is_empty() {
            continue;
        }
        let t = doc
            .entry(section)
            .or_insert_with(|| Value::Table(Table::new()));
        if let Value::Table(t) = t {
            t.extend(added);
        }
    }
    let text = toml::to_string(&doc).map_err(|e| format!("{e}"))?;
    Ok((text, all, notes))
}

fn is(route: &Table, strategy: &str) -> bool {
    route.get("strategy").and_then(Value::as_str) == Some(strategy)
}

/// The concrete member with the highest price (output, then input).
fn strongest(route: &Table, models: &Table) -> Option<String> {
    let mut names = Vec::new();
    for key in MEMBERS {
        match route.get(*key) {
            Some(Value::String(s)) => names.push(s.clone()),
            Some(Value::Array(a)) => {
                names.extend(a.iter().filter_map(Value::as_str).map(str::to_string));
            }
            _ => {}
        }
    }
    let price = |m: &str, k: &str| {
        models
            .get(m)
            .and_then(|t| t.get("price"))
            .and_then(|p| p.get(k))
            .and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)))
            .unwrap_or(0.0)
    };
    names
        .into_iter()
        .filter(|n| models.contains_key(n))
        .max_by(|a, b| {
            let pa = (price(a, "output_per_mtok"), price(a, "input_per_mtok"));
            let pb = (price(b, "output_per_mtok"), price(b, "input_per_mtok"));
            pa.0.total_cmp(&pb.0).then(pa.1.total_cmp(&pb.1))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
[models.small]
upstream = "u"
price = { input_per_mtok = 0.1, output_per_mtok = 0.4 }
[models.large]
upstream = "u"
price = { input_per_mtok = 3, output_per_mtok = 15 }
[models.verifier]
upstream = "u"
price = { input_per_mtok = 30, output_per_mtok = 60 }
[routes.cascade]
strategy = "chain"
tiers = ["small", "large"]
verifier = "verifier"
[routes.race]
strategy = "race"
candidates = ["small", "large"]
judge = "verifier"
rubric = { judge = 1.0 }
"#;

    #[test]
    fn the_strongest_member_and_its_ensemble_are_added() {
        let routes = vec!["cascade".to_string(), "race".to_string()];
        let (text, all, notes) = add(CONFIG, &routes).unwrap();
        // The verifier is dearer, but it is not a member.
        assert_eq!(
            all,
            [
                "cascade",
                "race",
                "large",
                "self-moa-large-synth",
                "self-moa-large"
            ]
        );
        assert_eq!(notes.len(), 3);
        let doc: Table = text.parse().unwrap();
        let moa = &doc["routes"]["self-moa-large-synth"];
        // The chain has no race judge: the model ranks its own samples.
        assert_eq!(moa["strategy"].as_str(), Some("judge"));
        assert_eq!(moa["synthesis"].as_str(), Some("large"));
        assert_eq!(
            doc["models"]["large-sample-3"]["price"]["output_per_mtok"].as_integer(),
            Some(15)
        );

        let (text, _, _) = add(CONFIG, &["race".to_string()]).unwrap();
        let doc: Table = text.parse().unwrap();
        let moa = &doc["routes"]["self-moa-large"];
        assert_eq!(moa["strategy"].as_str(), Some("race"));
        assert_eq!(moa["judge"].as_str(), Some("verifier"));
        assert_eq!(moa["candidates"].as_array().map(Vec::len), Some(3));
    }
}
