//! In-process servers on real 127.0.0.1:0 listeners, with [`Proc`]'s
//! surface ([`Served`]: `base`, `dir`, `url`, `events`, `metrics`, `received`, …): a
//! gateway is `conclave::prepare_with` run by `Prepared::run` (the real
//! accept loop of `conclave::server`), a mock is `conclave::mock::server`
//! on a config's `kind = "mock"` upstream, as `conclave mock` serves it.
//! Both run on the test's runtime and stop when dropped. The server's
//! timers are tokio's: under `#[tokio::test(start_paused = true)]` paused
//! time drives its deadlines too (the router alone, on an injected clock:
//! `inproc::Gw`).
//!
//! What stays a process ([`Proc`]): the CLI, signals and reloads, the real
//! SDK clients, docker, a count of the process's file descriptors, and an
//! upstream that misbehaves without bound (the process's 4 GiB cap).
//!
//! The gateway's log (`conclave=debug,warn`, as the process writes it) is
//! captured per test thread ([`logs`]): [`Srv::stderr`] needs the default
//! current-thread runtime of `#[tokio::test]`, where every task of the
//! test's servers runs on the test's thread.
//!
//! [`Proc`]: super::Proc
//! [`Served`]: super::Served

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::logs;

/// A server running in this process; stopped when dropped.
pub struct Srv {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub dir: tempfile::TempDir,
    log: logs::Log,
    stop: Stop,
}

enum Stop {
    Gateway(mpsc::UnboundedSender<conclave::Control>),
    Mock(Option<oneshot::Sender<()>>),
}

impl Srv {
    /// A gateway on `toml` (`{dir}` is replaced by a temp dir).
    pub fn gateway(toml: &str) -> Srv {
        Srv::gateway_env(toml, &[])
    }

    /// A gateway whose config reads `env` before the process environment.
    pub fn gateway_env(toml: &str, env: &[(&str, &str)]) -> Srv {
        let (dir, path) = written(toml);
        let log = logs::capture();
        let text = std::fs::read_to_string(&path).unwrap();
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
                .or_else(|| std::env::var(name).ok())
        };
        let config = conclave::config::parse_file(&text, &path, &lookup, &conclave::strategy::ALL)
            .unwrap_or_else(|e| panic!("the gateway's config: {e}"));
        let prepared = conclave::prepare_with(config, conclave::clock::Clock::system())
            .unwrap_or_else(|e| panic!("the gateway did not start: {e}"));
        let listener = listen();
        let addr = listener.local_addr().unwrap();
        // The start-up line `conclave serve` logs.
        log.line(&format!(
            "INFO conclave: {}",
            prepared.config().summary(addr)
        ));
        let base = format!("http://{addr}");
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            if let Err(e) = prepared.run(listener, Some(path), rx).await {
                tracing::error!("the gateway failed: {e}");
            }
        });
        Srv {
            base,
            dir,
            log,
            stop: Stop::Gateway(tx),
        }
    }

    /// A mock server playing the first `kind = "mock"` upstream of `toml`
    /// (`conclave mock --config`).
    pub fn mock(toml: &str) -> Srv {
        let (dir, path) = written(toml);
        let log = logs::capture();
        let setup = conclave::config::mock_models(&path, None)
            .unwrap_or_else(|e| panic!("the mock's config: {e}"));
        let sim = Arc::new(
            conclave::mock::Simulator::new(setup.models, setup.swap, setup.quirks, false)
                .with_responses(setup.responses)
                .with_api(setup.api),
        );
        let listener = listen();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let stop = async {
                let _ = rx.await;
            };
            if let Err(e) = conclave::mock::server::serve(listener, sim, stop).await {
                tracing::error!("the mock failed: {e}");
            }
        });
        Srv {
            base,
            dir,
            log,
            stop: Stop::Mock(Some(tx)),
        }
    }

    /// Re-reads the config file (`{dir}/conclave.toml`), as SIGHUP does.
    pub fn reload(&self) {
        if let Stop::Gateway(tx) = &self.stop {
            tx.send(conclave::Control::Reload).unwrap();
        }
    }

    /// What this test's servers logged so far (see the module docs).
    pub fn stderr(&self) -> String {
        let flavor = tokio::runtime::Handle::current().runtime_flavor();
        assert_eq!(
            flavor,
            tokio::runtime::RuntimeFlavor::CurrentThread,
            "the log is captured on the test's thread: a multi-thread runtime would lose lines"
        );
        self.log.text()
    }
}

impl super::Served for Srv {
    fn base(&self) -> &str {
        &self.base
    }

    fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for Srv {
    fn drop(&mut self) {
        match &mut self.stop {
            Stop::Gateway(tx) => {
                let _ = tx.send(conclave::Control::Shutdown);
            }
            Stop::Mock(tx) => {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
            }
        }
    }
}

/// `toml` written to `conclave.toml` in a new temp dir, `{dir}` replaced.
fn written(toml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conclave.toml");
    let text = toml.replace("{dir}", &dir.path().display().to_string());
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// A listener on a free port of 127.0.0.1, on the test's runtime.
fn listen() -> tokio::net::TcpListener {
    // Every in-process server's connections (and their clients') are this
    // process's descriptors: the limit is raised as `conclave serve` does.
    static RAISE: std::sync::Once = std::sync::Once::new();
    RAISE.call_once(|| {
        let _ = rlimit::increase_nofile_limit(u64::MAX);
    });
    let std = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std.set_nonblocking(true).unwrap();
    tokio::net::TcpListener::from_std(std).unwrap()
}
