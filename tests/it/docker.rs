//! The Docker files, checked the way CI can without a Docker daemon: what
//! the Dockerfile copies exists, the configs it puts in /etc/conclave pass
//! `conclave check` after its own `sed` rewrite, `docker run -p 4000:4000
//! IMAGE` serves one of them on 0.0.0.0:4000 through `CONCLAVE_CONFIG` and
//! `CONCLAVE_LISTEN` (which the binary really reads), and the compose files
//! serve configs that are in the image or mounted from files that exist.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The environment `config/example.toml` names (its secrets).
const EXAMPLE_ENV: [(&str, &str); 4] = [
    ("CONCLAVE_KEY_TEAM_A", "k-a"),
    ("CONCLAVE_KEY_OPS", "k-ops"),
    ("OPENAI_API_KEY", "sk-o"),
    ("ANTHROPIC_API_KEY", "sk-a"),
];

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The final stage's instructions, continuation lines joined, comments
/// dropped: (INSTRUCTION, rest).
fn final_stage(dockerfile: &str) -> Vec<(String, String)> {
    let mut all = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let t = line.trim();
        if current.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(t);
        let (op, rest) = current.split_once(' ').unwrap_or((&current, ""));
        all.push((op.to_uppercase(), rest.trim().to_string()));
        current.clear();
    }
    let last_from = all.iter().rposition(|(op, _)| op == "FROM").unwrap();
    all.split_off(last_from)
}

/// `ENV A=1 B=2` (the form the Dockerfile uses).
fn env_of(stage: &[(String, String)]) -> BTreeMap<String, String> {
    stage
        .iter()
        .filter(|(op, _)| op == "ENV")
        .flat_map(|(_, rest)| rest.split_whitespace())
        .map(|pair| {
            let (k, v) = pair
                .split_once('=')
                .unwrap_or_else(|| panic!("ENV {pair}: use K=V"));
            (k.to_string(), v.trim_matches('"').to_string())
        })
        .collect()
}

/// A JSON-array instruction (`CMD [...]`, compose's `command: [...]`).
fn json_args(text: &str) -> Vec<String> {
    let start = text
        .find('[')
        .unwrap_or_else(|| panic!("not an array: {text}"));
    let end = text
        .rfind(']')
        .unwrap_or_else(|| panic!("not an array: {text}"));
    let inner = &text[start + 1..end];
    inner
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).map(String::as_str)
}

fn conclave(args: &[&str], env: &[(&str, &str)], dir: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(args)
        .current_dir(dir)
        .env_remove("CONCLAVE_CONFIG")
        .env_remove("CONCLAVE_LISTEN")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The image's /etc/conclave, rebuilt in `dir`: every file the final stage
/// copies there from the repository, then the Dockerfile's own `sed`.
/// Returns the image paths it holds.
fn image_etc(stage: &[(String, String)], dir: &Path) -> BTreeSet<String> {
    let mut held = BTreeSet::new();
    for (op, rest) in stage.iter().filter(|(op, _)| op == "COPY") {
        if rest.starts_with("--from") {
            continue;
        }
        let words: Vec<&str> = rest.split_whitespace().collect();
        let (dest, sources) = words.split_last().unwrap();
        for src in sources {
            let from = Path::new(ROOT).join(src);
            assert!(from.is_file(), "{op} {src}: not in the repository");
            if let Some(etc) = dest.strip_prefix("/etc/conclave/") {
                assert!(etc.is_empty(), "COPY into /etc/conclave/: keep the names");
                let name = from.file_name().unwrap().to_str().unwrap().to_string();
                std::fs::copy(&from, dir.join(&name)).unwrap();
                held.insert(format!("/etc/conclave/{name}"));
            }
        }
    }
    // The rewrite that moves relative event logs and state out of
    // /etc/conclave (not the conclave user's to write), run as written.
    let run = stage
        .iter()
        .find(|(op, rest)| op == "RUN" && rest.contains("sed -i"))
        .map(|(_, rest)| rest.as_str())
        .expect("the Dockerfile rewrites relative paths with sed");
    let script = run
        .split('\'')
        .nth(1)
        .expect("sed's script in single quotes");
    for path in &held {
        let file = dir.join(path.trim_start_matches("/etc/conclave/"));
        let status = Command::new("sed")
            .args(["-i", "-E", script])
            .arg(&file)
            .status()
            .unwrap();
        assert!(status.success(), "sed on {path}");
    }
    held
}

#[test]
fn the_image_serves_the_demo_on_every_interface_and_its_configs_pass_check() {
    let stage = final_stage(&read("Dockerfile"));
    let etc = tempfile::tempdir().unwrap();
    let held = image_etc(&stage, etc.path());
    assert!(held.contains("/etc/conclave/demo.toml"), "{held:?}");

    for path in &held {
        let file = etc.path().join(path.trim_start_matches("/etc/conclave/"));
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let key = line.split('=').next().unwrap_or("").trim();
            if key == "event_log" || key == "state_path" {
                assert!(
                    line.contains("\"/var/lib/conclave/"),
                    "{path}: {line} would write under /etc/conclave"
                );
            }
        }
        let (code, out) = conclave(
            &["check", "--config", file.to_str().unwrap()],
            &EXAMPLE_ENV,
            etc.path(),
        );
        assert_eq!(code, 0, "{path} in the image fails check:\n{out}");
    }

    // What `docker run IMAGE` runs: ENTRYPOINT + CMD, with the image's ENV.
    let env = env_of(&stage);
    let entry = stage.iter().rfind(|(op, _)| op == "ENTRYPOINT").unwrap();
    assert_eq!(json_args(&entry.1), ["conclave"]);
    let cmd = json_args(&stage.iter().rfind(|(op, _)| op == "CMD").unwrap().1);
    assert_eq!(cmd.first().map(String::as_str), Some("serve"), "{cmd:?}");
    let config = flag(&cmd, "--config")
        .or(env.get("CONCLAVE_CONFIG").map(String::as_str))
        .expect("the default command names a config");
    assert!(
        held.contains(config),
        "{config} is not in the image: {held:?}"
    );
    let listen = flag(&cmd, "--listen")
        .or(env.get("CONCLAVE_LISTEN").map(String::as_str))
        .expect("the default command sets the listen address");
    assert_eq!(listen, "0.0.0.0:4000", "reachable through -p 4000:4000");
    let exposed = stage.iter().find(|(op, _)| op == "EXPOSE").unwrap();
    assert_eq!(exposed.1, "4000");
    let workdir = stage.iter().rfind(|(op, _)| op == "WORKDIR").unwrap();
    assert_eq!(workdir.1, "/var/lib/conclave");

    // The binary takes its config and address from those variables (here
    // the repository's demo, on a free port instead of 0.0.0.0:4000).
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(ROOT).join("config/demo.toml"),
        dir.path().join("demo.toml"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(&cmd)
        .current_dir(dir.path())
        .env("CONCLAVE_CONFIG", dir.path().join("demo.toml"))
        .env("CONCLAVE_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let addr = loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                if let Some(a) = line.split("listening on http://").nth(1) {
                    break a.trim().to_string();
                }
            }
            Err(e) => {
                let _ = child.kill();
                panic!("serve never said where it listens: {e}");
            }
        }
    };
    let answer = (|| -> std::io::Result<String> {
        let mut s = std::net::TcpStream::connect(&addr)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        s.write_all(b"GET /v1/models HTTP/1.0\r\nHost: x\r\n\r\n")?;
        let mut body = String::new();
        s.take(1 << 20).read_to_string(&mut body)?;
        Ok(body)
    })();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !addr.ends_with(":4000"),
        "CONCLAVE_LISTEN was ignored: {addr}"
    );
    let answer = answer.unwrap();
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    assert!(answer.contains("\"review\""), "not the demo: {answer}");
}

#[test]
fn the_compose_files_serve_configs_that_exist() {
    let image_held: BTreeSet<String> = {
        let stage = final_stage(&read("Dockerfile"));
        let etc = tempfile::tempdir().unwrap();
        image_etc(&stage, etc.path())
    };
    let readme = read("README.md");
    for compose in [
        "deploy/replicas/compose.yaml",
        "dashboards/docker-compose.yml",
    ] {
        let text = read(compose);
        let folder = PathBuf::from(ROOT).join(Path::new(compose).parent().unwrap());
        let up = format!("docker compose -f {compose} up --build");
        assert!(text.contains(&up), "{compose}'s header should say `{up}`");
        // Every `- ./src:/target[:ro]` volume: its source exists.
        let mut mounted = BTreeMap::new();
        for line in text.lines() {
            let Some(volume) = line.trim().strip_prefix("- ") else {
                continue;
            };
            let parts: Vec<&str> = volume.split(':').collect();
            if parts.len() < 2 || !parts[0].starts_with('.') {
                continue;
            }
            let source = folder.join(parts[0]);
            assert!(source.exists(), "{compose}: {volume}: no {}", parts[0]);
            mounted.insert(parts[1].to_string(), source);
        }
        let mut commands = 0;
        for line in text.lines() {
            let Some(rest) = line.trim().strip_prefix("command:") else {
                continue;
            };
            // conclave's own commands (one line each); others (the traffic
            // generator's) are not conclave's.
            let rest = rest.trim();
            if !(rest.starts_with("[\"serve\"") || rest.starts_with("[\"mock\"")) {
                continue;
            }
            let args = json_args(rest);
            commands += 1;
            let config = flag(&args, "--config").unwrap_or_else(|| panic!("{compose}: {line}"));
            if let Some(source) = mounted.get(config) {
                let (code, out) = conclave(
                    &["check", "--config", source.to_str().unwrap()],
                    &EXAMPLE_ENV,
                    Path::new(ROOT),
                );
                assert_eq!(code, 0, "{compose}: {config} fails check:\n{out}");
            } else {
                assert!(
                    image_held.contains(config),
                    "{compose}: {config} is neither mounted nor in the image"
                );
            }
        }
        assert!(commands > 0, "{compose}: no conclave command found");
    }
    // What the README says to run is what the compose files say.
    for (i, _) in readme.match_indices("docker compose -f ") {
        let tail: String = readme[i..]
            .chars()
            .take(120)
            .collect::<String>()
            .replace('\n', " ");
        let words: Vec<&str> = tail
            .split_whitespace()
            .map(|w| w.trim_matches(|c| "`().,;".contains(c)))
            .collect();
        assert!(
            Path::new(ROOT).join(words[3]).is_file(),
            "README: {tail}: no such file"
        );
        assert_eq!(
            words.get(4..6).map(|w| w.join(" ")),
            Some("up --build".to_string()),
            "README: {tail}"
        );
    }
}
