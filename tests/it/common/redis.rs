//! A real `redis-server` (Debian's package) on a free loopback port, for
//! the shared-state tests: started empty, without persistence, stopped
//! (by its PID) when dropped, and restartable on the same port.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    /// `requirepass`, if the server takes a password.
    password: Option<String>,
}

impl RedisServer {
    /// Starts a server on a free port (retrying if another process takes
    /// the port first).
    pub fn start() -> RedisServer {
        RedisServer::start_with(None)
    }

    /// A server that takes `password` (`requirepass`).
    pub fn start_with(password: Option<&str>) -> RedisServer {
        let mut dir = tempfile::tempdir().unwrap();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut s = RedisServer {
                child: None,
                port,
                dir,
                password: password.map(str::to_owned),
            };
            if s.spawn() {
                return s;
            }
            dir = s.take_dir();
        }
        panic!("redis-server did not start (is Debian's redis-server installed?)");
    }

    fn take_dir(mut self) -> tempfile::TempDir {
        self.kill();
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }

    /// `redis://[:password@]127.0.0.1:PORT/0`
    pub fn url(&self) -> String {
        match &self.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}/0", self.port),
            None => format!("redis://127.0.0.1:{}/0", self.port),
        }
    }

    /// Starts the server again on its port (after [`RedisServer::stop`]).
    pub fn restart(&mut self) {
        assert!(
            self.spawn(),
            "redis-server did not start again on {}",
            self.port
        );
    }

    /// Kills the server at once (a crash: nothing is saved).
    pub fn stop(&mut self) {
        self.kill();
    }

    /// Runs one command with `redis-cli`; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        if let Some(p) = &self.password {
            cmd.args(["--no-auth-warning", "-a", p]);
        }
        let out = cmd
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn spawn(&mut self) -> bool {
        let log = std::fs::File::create(self.dir.path().join("redis.log")).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(
                self.password
                    .iter()
                    .flat_map(|p| ["--requirepass", p.as_str()]),
            )
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (Debian's redis-server package)");
        self.child = Some(child);
        // Up to 10 s.
        for _ in 0..500 {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return false;
            }
            if ping(self.port) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a server listens on `port` (a `PING` gets `+PONG`, or
/// `-NOAUTH` from one that wants a password).
fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok()
        && s.read_exact(&mut buf).is_ok()
        && (&buf == b"+PONG\r\n" || buf.starts_with(b"-NOAUTH"))
}
