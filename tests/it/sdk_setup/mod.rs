//! Setup shared by the real-client tests (`tests/it/sdk.rs`,
//! `tests/it/anthropic_sdk.rs`, `tests/it/claude_code.rs`): bounded child
//! processes, the Python venv with the pinned SDKs (`target/sdk-venv` from
//! `tests/sdk/requirements.txt`), npm-installed CLIs under `target/`, and
//! running one `tests/sdk/*.py` script. A setup that fails panics: the
//! tests never skip.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod anthropic;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use parking_lot::Mutex;
use std::time::Duration;

use tokio::time::Instant;

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The cargo target directory (`CARGO_TARGET_TMPDIR` is `<target>/tmp`).
pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// What a bounded child did.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    pub fn show(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` with its output in files (no pipe to fill) and no stdin; past
/// `limit` it is sent SIGTERM, then SIGKILL, by its own pid only.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<Ran, String> {
    let out = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    let err = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out.reopen().map_err(|e| e.to_string())?)
        .stderr(err.reopen().map_err(|e| e.to_string())?)
        .spawn()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            std::thread::sleep(Duration::from_secs(2));
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let ran = Ran {
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(out.path()).unwrap_or_default(),
        stderr: std::fs::read_to_string(err.path()).unwrap_or_default(),
    };
    match status {
        Some(_) => Ok(ran),
        None => Err(format!(
            "{cmd:?} still running after {limit:?}, killed\n{}",
            ran.show()
        )),
    }
}

/// Makes `dir` once, under an exclusive file lock (other test binaries may
/// be making it too), unless its stamp already reads `stamp`.
pub fn once_stamped(
    dir: &Path,
    stamp: &str,
    make: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    let target = target_dir();
    std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
    let lock_path = dir.with_extension("lock");
    let lock = File::create(&lock_path).map_err(|e| format!("{lock_path:?}: {e}"))?;
    fs4::FileExt::lock(&lock).map_err(|e| format!("lock {lock_path:?}: {e}"))?;
    let stamp_path = dir.join("conclave-stamp");
    if std::fs::read_to_string(&stamp_path).ok().as_deref() == Some(stamp) {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(dir);
    let t = Instant::now();
    make()?;
    std::fs::write(&stamp_path, stamp).map_err(|e| e.to_string())?;
    eprintln!("made {} in {:.1?}", dir.display(), t.elapsed());
    Ok(())
}

/// `target/sdk-venv` with `tests/sdk/requirements.txt` installed.
pub fn venv() -> &'static Path {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let made = VENV.get_or_init(|| {
        let dir = target_dir().join("sdk-venv");
        let reqs = root().join("tests/sdk/requirements.txt");
        let wanted = std::fs::read_to_string(&reqs).map_err(|e| format!("{reqs:?}: {e}"))?;
        once_stamped(&dir, &wanted, || {
            let venv = run_bounded(
                Command::new("python3").arg("-m").arg("venv").arg(&dir),
                Duration::from_secs(120),
            )?;
            if !venv.ok() {
                return Err(format!(
                    "`python3 -m venv` failed (Debian: apt-get install python3-venv)\n{}",
                    venv.show()
                ));
            }
            let pip = run_bounded(
                Command::new(dir.join("bin/python"))
                    .args(["-m", "pip", "install", "--disable-pip-version-check", "-q"])
                    .arg("-r")
                    .arg(&reqs),
                Duration::from_secs(600),
            )?;
            if !pip.ok() {
                return Err(format!("pip install failed\n{}", pip.show()));
            }
            Ok(())
        })?;
        Ok(dir)
    });
    match made {
        Ok(p) => p,
        Err(e) => panic!("the SDK venv could not be made: {e}"),
    }
}

/// `target/DIR` with npm's `PACKAGE@VERSION` installed (within 10
/// minutes); the path of its executable `bin`.
pub fn npm_tool(dir: &str, package: &str, version: &str, bin: &str) -> PathBuf {
    static MADE: OnceLock<Mutex<HashMap<String, Result<PathBuf, String>>>> = OnceLock::new();
    let mut made = MADE.get_or_init(Default::default).lock();
    let got = made
        .entry(dir.to_owned())
        .or_insert_with(|| {
            let path = target_dir().join(dir);
            once_stamped(&path, version, || {
                std::fs::create_dir_all(&path).map_err(|e| e.to_string())?;
                let npm = run_bounded(
                    Command::new("npm")
                        .args(["install", "--no-audit", "--no-fund", "--prefix"])
                        .arg(&path)
                        .arg(format!("{package}@{version}")),
                    Duration::from_secs(600),
                )?;
                if !npm.ok() {
                    return Err(format!("npm install failed\n{}", npm.show()));
                }
                Ok(())
            })?;
            Ok(path.join("node_modules/.bin").join(bin))
        })
        .clone();
    match got {
        Ok(p) => p,
        Err(e) => panic!("{package}@{version} could not be installed: {e}"),
    }
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `tests/sdk/SCRIPT` with the venv's Python and `env` (plus
/// `MODEL = route`), within 120 s; its stdout, or why not.
pub fn python_script(script: &str, route: &str, env: &[(&str, String)]) -> Result<String, String> {
    let python = venv().join("bin/python");
    let ran = run_bounded(
        Command::new(python)
            .arg(root().join("tests/sdk").join(script))
            .current_dir(root().join("tests/sdk"))
            .envs(env.iter().map(|(k, v)| (k, v)))
            // The scripts pass their key themselves: none from the outside.
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .env("MODEL", route)
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        Duration::from_secs(120),
    )?;
    if ran.ok() {
        Ok(ran.stdout)
    } else {
        Err(format!("{script} on {route}: {}", ran.show()))
    }
}
