//! The command line: `conclave check` prints the graph or every error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

/// The variables `config/example.toml` reads its secrets from.
const EXAMPLE_VARS: [&str; 4] = [
    "CONCLAVE_KEY_TEAM_A",
    "CONCLAVE_KEY_OPS",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
];

/// Runs `conclave args` with `env` set, and none of [`EXAMPLE_VARS`]
/// inherited from the test's own environment.
fn conclave(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_conclave"));
    for var in EXAMPLE_VARS {
        cmd.env_remove(var);
    }
    let out = cmd
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_accepts_the_demo_and_prints_the_graph() {
    let (code, out, err) = conclave(&["check", "--config", "config/demo.toml"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("config/demo.toml: ok"), "{out}");
    assert!(
        out.contains("review: chain qwen-small (verified) -> gemma-large (verified) -> frontier (self-certifies) ; verifier verifier"),
        "{out}"
    );
    assert!(
        out.contains("failover: chain flaky (fallback) -> frontier (fallback)"),
        "{out}"
    );
}

#[test]
fn check_accepts_the_example_once_its_secrets_are_set() {
    let env = [
        ("CONCLAVE_KEY_TEAM_A", "k-a"),
        ("CONCLAVE_KEY_OPS", "k-ops"),
        ("OPENAI_API_KEY", "sk-o"),
        ("ANTHROPIC_API_KEY", "sk-a"),
    ];
    let (code, out, err) = conclave(&["check", "--config", "config/example.toml"], &env);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !out.contains("sk-o") && !out.contains("k-ops"),
        "secrets printed: {out}"
    );
    assert!(!out.contains("is not set"), "{out}");
}

/// `check` validates the file, not the environment: an unset variable is
/// a warning naming it (exit status 0), and `serve` refuses to start on it.
#[test]
fn check_warns_of_unset_secrets_and_serve_refuses_them() {
    let (code, out, err) = conclave(
        &["check", "--config", "config/example.toml"],
        &[("OPENAI_API_KEY", "sk-o"), ("ANTHROPIC_API_KEY", "  ")],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("config/example.toml: ok"), "{out}");
    for var in [
        "CONCLAVE_KEY_TEAM_A",
        "CONCLAVE_KEY_OPS",
        "ANTHROPIC_API_KEY",
    ] {
        let line = format!(
            "warning: environment variable {var} is not set: `conclave serve` refuses to start without it"
        );
        assert_eq!(out.matches(&line).count(), 1, "{out}");
    }
    assert!(!out.contains("OPENAI_API_KEY is not set"), "{out}");
    assert!(!out.contains("unset.invalid"), "placeholder shown: {out}");
    // Something else wrong still fails, and names the variables too.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    let text = std::fs::read_to_string("config/example.toml").unwrap()
        + "
[models.orphan]
upstream = \"nowhere\"\n";
    std::fs::write(&bad, text).unwrap();
    let (code, out, err) = conclave(&["check", "--config", bad.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("models.orphan.upstream"), "{err}");
    // `serve`, and `check --probe` (which calls the upstreams with their
    // keys), name every missing variable and go no further.
    for args in [&["serve"][..], &["check", "--probe"]] {
        let args = [args, &["--config", "config/example.toml"]].concat();
        let (code, out, err) = conclave(&args, &[]);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        for var in EXAMPLE_VARS {
            assert!(
                err.contains(&format!("environment variable {var} is not set")),
                "{args:?}: {err}"
            );
        }
    }
}

#[test]
fn check_lists_every_error_with_its_key_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        r#"
[upstreams.sim]
kind = "mock"

[models.qwen]
upstream = "sim"
temperature = 0.2

[routes.review]
strategy = "chain"
tiers = ["qwen", "gemma4", "gemma5"]
verifier = "sonnet"
"#,
    )
    .unwrap();
    let p = path.display().to_string();
    let (code, out, err) = conclave(&["check", "--config", &p], &[]);
    assert_eq!(code, 2, "{out}");
    for line in [
        format!("{p}: models.qwen.temperature: unknown field `temperature`"),
        format!("{p}: routes.review.tiers[1]: unknown model \"gemma4\""),
        format!("{p}: routes.review.tiers[2]: unknown model \"gemma5\""),
        format!("{p}: routes.review.verifier: unknown model \"sonnet\""),
    ] {
        assert!(err.contains(&line), "missing {line:?} in:\n{err}");
    }
    assert!(err.contains("4 error(s)"), "{err}");

    // `serve` refuses the same file with the same messages.
    let (code, _, err2) = conclave(&["serve", "--config", &p], &[]);
    assert_eq!(code, 2);
    assert!(
        err2.contains("routes.review.tiers[2]: unknown model \"gemma5\""),
        "{err2}"
    );
}

#[test]
fn a_missing_config_file_is_a_clear_error() {
    let (code, _, err) = conclave(&["check", "--config", "no/such/file.toml"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no/such/file.toml: cannot read the file"),
        "{err}"
    );
}

/// Secrets too plain to tell apart from text are never redacted from
/// answers: `check` says which, by where they come from, never by value.
#[test]
fn check_warns_about_secrets_too_plain_to_redact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.toml");
    std::fs::write(
        &path,
        r#"
[upstreams.llama]
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
api_key_env = "LLAMA_KEY"

[upstreams.vllm]
kind = "openai"
base_url = "http://127.0.0.1:2/v1"
api_key_env = "VLLM_KEY"

[upstreams.real]
kind = "openai"
base_url = "http://127.0.0.1:3/v1"
api_key_env = "REAL_KEY"

[models.a]
upstream = "llama"
[models.b]
upstream = "vllm"
[models.c]
upstream = "real"

[[keys]]
name = "team"
key_env = "TEAM_KEY"
"#,
    )
    .unwrap();
    let env = [
        ("LLAMA_KEY", "sk-no-key-required"),
        ("VLLM_KEY", "EMPTY"),
        ("REAL_KEY", "sk-proj-7Qz9Xk2Lm4Pn8Rt0Vb6Yc3Hd5Jf1"),
        ("TEAM_KEY", "team-key-8c1f0e7d2b9a4c6e"),
    ];
    let (code, out, err) = conclave(&["check", "--config", &path.display().to_string()], &env);
    assert_eq!(code, 0, "{out}{err}");
    let warnings: Vec<&str> = out.lines().filter(|l| l.starts_with("warning:")).collect();
    assert_eq!(warnings.len(), 2, "{out}");
    assert!(
        warnings[0].contains("upstreams.llama.api_key_env")
            && warnings[0].contains("one kind of character"),
        "{out}"
    );
    assert!(
        warnings[1].contains("upstreams.vllm.api_key_env") && warnings[1].contains("fewer than 12"),
        "{out}"
    );
    for (_, secret) in env {
        assert!(!out.contains(secret) && !err.contains(secret), "{out}{err}");
    }
}

#[test]
fn check_warns_when_a_hung_early_tier_would_use_up_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiers.toml");
    std::fs::write(
        &path,
        r#"
[server]
request_timeout = "60s"

[upstreams.slow]
kind = "mock"
timeout = "60s"

[upstreams.quick]
kind = "mock"
timeout = "10s"

[models.a]
upstream = "slow"
[models.b]
upstream = "quick"
[models.c]
upstream = "slow"

[routes.r]
strategy = "chain"
tiers = ["a", "b", "c"]
"#,
    )
    .unwrap();
    let (code, out, err) = conclave(&["check", "--config", &path.display().to_string()], &[]);
    assert_eq!(code, 0, "{err}");
    let warnings: Vec<&str> = out.lines().filter(|l| l.starts_with("warning:")).collect();
    // Only the first tier: the second's upstream is quick, the last may hang.
    assert_eq!(warnings.len(), 1, "{out}");
    assert!(
        warnings[0].contains("routes.r.tiers[0]") && warnings[0].contains("upstreams.slow.timeout"),
        "{out}"
    );
}

#[test]
fn check_reports_every_error_of_every_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.toml");
    std::fs::write(
        &path,
        r#"
[server]
listne = "127.0.0.1:4000"
request_timout = "5s"
max_body_bytes = "big"

[upstreams.m]
kind = "mock"
timeout = 30

[models.qwen]
upstream = "m"
temperature = 0.2
price = { input_per_mtok = "free" }

[routes.r]
strategy = "chain"
tiers = ["qwen"]
keepalive = "soon"
"#,
    )
    .unwrap();
    let p = path.display().to_string();
    let (code, _, err) = conclave(&["check", "--config", &p], &[]);
    assert_eq!(code, 2);
    for want in [
        "server.listne: unknown field `listne`",
        "server.request_timout: unknown field `request_timout`",
        "server.max_body_bytes: invalid type",
        "upstreams.m.timeout: invalid type: integer `30`, expected a duration (a duration is a string like \"200ms\", \"30s\" or \"5m\")",
        "models.qwen.temperature: unknown field",
        "models.qwen.price.input_per_mtok: invalid type",
        "routes.r.keepalive: invalid value: string \"soon\", expected a duration (a duration is",
    ] {
        assert!(
            err.contains(&format!("{p}: {want}")),
            "missing {want:?} in:\n{err}"
        );
    }
    // A table with errors still defines its name: no follow-on errors.
    assert!(!err.contains("unknown upstream"), "{err}");
    assert!(!err.contains("unknown model"), "{err}");
    assert!(err.contains("7 error(s)"), "{err}");
}

#[test]
fn serve_without_a_config_says_how_to_start_the_demo() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_conclave"))
        .arg("serve")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("conclave serve --config config/demo.toml"),
        "{err}"
    );
}

#[test]
fn check_warns_about_a_verifier_that_is_never_called() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.toml");
    std::fs::write(
        &path,
        "[upstreams.c]\nkind = \"mock\"\n[models.a]\nupstream = \"c\"\n[models.v]\nupstream = \"c\"\n[routes.r]\nstrategy = \"chain\"\ntiers = [\"a\"]\nverifier = \"v\"\n",
    )
    .unwrap();
    let (code, out, _) = conclave(&["check", "--config", &path.display().to_string()], &[]);
    assert_eq!(code, 0);
    assert!(
        out.contains("warning: routes.r.verifier: every tier self-certifies"),
        "{out}"
    );
}

/// `serve` opens everything that can fail (the state store here) before
/// it binds the port and says "listening on": a store it cannot open is
/// a clear error, a non-zero exit, and a port nobody ever held.
#[test]
fn serve_with_a_state_store_it_cannot_open_never_listens() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a_u8; 64 * 1024]).unwrap();
    for state in [dir.path().to_path_buf(), garbage] {
        let config = dir.path().join("c.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\nstate_path = \"{}\"\n\n[upstreams.sim]\nkind = \"mock\"\n\n[models.m]\nupstream = \"sim\"\n",
                state.display()
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_conclave"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--config")
            .arg(&config)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut held = false;
        let mut waited = 0;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            // While it runs, the port must stay free.
            held |= std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
            waited += 1;
            // About 20 s.
            if waited > 4000 {
                let _ = child.kill();
                panic!("serve with state_path {} did not exit", state.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let out = child.wait_with_output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(status.code(), Some(1), "{stdout}{stderr}");
        assert!(
            !stdout.contains("listening on") && !stderr.contains("listening on"),
            "{}: {stdout}{stderr}",
            state.display()
        );
        assert!(stderr.contains("the state store"), "{stderr}");
        assert!(!held, "port {port} was bound");
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }
}

/// Issue 40: a config's relative paths are relative to its folder, and a
/// file it names that is not there is an error `check` reports by key.
#[test]
fn check_reads_paths_relative_to_the_config_and_reports_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tasks.jsonl"), "").unwrap();
    let config = dir.path().join("c.toml");
    let write = |tasks: &str, log: &str| {
        std::fs::write(
            &config,
            format!(
                "[server]\nevent_log = \"{log}\"\n\n[upstreams.sim]\nkind = \"mock\"\n\n\
                 [upstreams.sim.models.m]\nreply = {{ solve = {{ tasks = \"{tasks}\", accuracy = 1.0 }} }}\n\n\
                 [[upstreams.sim.models.m.rules]]\nwhen_contains = \"x\"\n\
                 then = {{ reply = {{ solve = {{ tasks = \"{tasks}\", accuracy = 0.5 }} }} }}\n\n\
                 [models.m]\nupstream = \"sim\"\n"
            ),
        )
        .unwrap();
    };
    // Run from the repository root, not the config's folder.
    write("tasks.jsonl", "events.jsonl");
    let path = config.to_str().unwrap();
    let (code, out, err) = conclave(&["check", "--config", path], &[]);
    assert_eq!(code, 0, "{out}{err}");
    write("missing.jsonl", "events.jsonl");
    let (code, out, err) = conclave(&["check", "--config", path], &[]);
    assert_ne!(code, 0, "{out}{err}");
    let all = format!("{out}{err}");
    for key in [
        "upstreams.sim.models.m.reply.solve.tasks",
        "upstreams.sim.models.m.rules[0].then.reply.solve.tasks",
    ] {
        assert!(all.contains(key), "{key}: {all}");
    }
    assert!(all.contains("missing.jsonl does not exist"), "{all}");
}
