//! The configuration reference (`docs/configuration.md`) names every key
//! and value the config loader accepts, so the two cannot drift apart. The
//! loader itself is asked: a table given an unknown key answers with the
//! list of keys it expects.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

const PROBE: &str = "zz_probe";

/// The names a table accepts, read from the loader's "unknown field"
/// (or "unknown variant") error for `toml`.
fn accepted(toml: &str) -> Vec<String> {
    let errs = match conclave::config::parse(
        toml,
        "probe.toml",
        &|_| Some("secret".into()),
        &conclave::strategy::ALL,
    ) {
        Ok(_) => panic!("the probe was accepted:\n{toml}"),
        Err(e) => e.errors,
    };
    let msg = errs
        .iter()
        .map(|e| e.message.as_str())
        .find(|m| m.contains(PROBE))
        .unwrap_or_else(|| panic!("no error about the probe in {errs:?}\n{toml}"));
    let expected = msg
        .split_once("expected")
        .unwrap_or_else(|| panic!("no list of expected names in: {msg}"))
        .1;
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_config_key_is_in_the_reference() {
    let up = "[upstreams.u]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n";
    let mock = "[upstreams.m]\nkind = \"mock\"\n";
    let model = "[models.a]\nupstream = \"u\"\n";
    let probes = [
        format!("[server]\n{PROBE} = 1\n"),
        format!("[[keys]]\nname = \"k\"\nkey_env = \"K\"\n{PROBE} = 1\n"),
        format!("{up}{PROBE} = 1\n"),
        format!("{mock}{PROBE} = 1\n"),
        format!("{mock}[upstreams.m.models.x]\n{PROBE} = 1\n"),
        format!("{mock}[upstreams.m.models.x]\nreply = {{ {PROBE} = 1 }}\n"),
        format!(
            "{mock}[upstreams.m.models.x]\nreply = {{ tool_call = {{ name = \"f\", {PROBE} = 1 }} }}\n"
        ),
        format!(
            "{mock}[upstreams.m.models.x]\nusage = {{ prompt_tokens = 1, completion_tokens = 1, {PROBE} = 1 }}\n"
        ),
        format!("{mock}[upstreams.m.models.x]\nfail = \"{PROBE}\"\n"),
        format!(
            "{mock}[[upstreams.m.models.x.rules]]\nwhen_call = [1]\nthen = {{}}\n{PROBE} = 1\n"
        ),
        format!("{up}lane = \"{PROBE}\"\n"),
        format!("{up}{model}{PROBE} = 1\n"),
        format!("{up}{model}price = {{ {PROBE} = 1 }}\n"),
        format!("{up}{model}[routes.p]\nstrategy = \"passthrough\"\nmodel = \"a\"\n{PROBE} = 1\n"),
        format!("{up}{model}[routes.c]\nstrategy = \"chain\"\ntiers = [\"a\"]\n{PROBE} = 1\n"),
        format!(
            "{up}{model}[routes.c]\nstrategy = \"chain\"\ntiers = [\"a\"]\non_exhausted = \"{PROBE}\"\n"
        ),
    ];
    let mut names = BTreeSet::new();
    for p in &probes {
        let got = accepted(p);
        assert!(!got.is_empty(), "no names for:\n{p}");
        names.extend(got);
    }
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !doc.contains(&format!("`{n}`")) && !doc.contains(&format!("\"{n}\"")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not mention: {missing:?}"
    );
    // The strategies and upstream kinds the loader knows are there too.
    for word in ["passthrough", "chain", "openai", "mock"] {
        assert!(doc.contains(&format!("\"{word}\"")), "{word}");
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
