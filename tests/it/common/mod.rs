//! Test harness: servers on 127.0.0.1:0 with a temporary config, talked to
//! over HTTP: in-process ([`Srv`]), or the real `conclave` binary (`serve`
//! or `mock`) where the process is the point ([`Proc`]).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod billing;
pub mod evil;
pub mod fake;
pub mod inproc;
pub mod logs;
pub mod redis;
pub mod srv;
pub mod vendor;
pub mod world;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub use srv::Srv;

/// A server a test talks HTTP to, in-process ([`Srv`]) or not ([`Proc`]).
#[allow(async_fn_in_trait)]
pub trait Served {
    /// `http://127.0.0.1:PORT`
    fn base(&self) -> &str;

    /// Its temp dir (`{dir}` in its config).
    fn dir(&self) -> &Path;

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base())
    }

    /// The OpenAI base URL (`…/v1`).
    fn v1(&self) -> String {
        self.url("/v1")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    /// The JSONL event log at `{dir}/events.jsonl` without the `request`
    /// line that closes each request, once `n` such lines are in.
    async fn events(&self, n: usize) -> Vec<Value> {
        self.events_of(&[], n).await
    }

    /// The log's events of the given kinds, once there are at least `n` of
    /// them; with no kinds, every event but `request` ([`events_in`]).
    async fn events_of(&self, kinds: &[&str], n: usize) -> Vec<Value> {
        events_in(&self.path("events.jsonl"), kinds, n).await
    }

    /// `GET /metrics` as text.
    async fn metrics(&self) -> String {
        client()
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Waits (up to 20 s) until the gateway has `n` requests in flight;
    /// fails the test with its metrics if it never does.
    async fn wait_in_flight(&self, n: f64) {
        let in_flight = eventually(10, || async {
            samples(&self.metrics().await, "conclave_inflight_requests", &[])
                .iter()
                .sum::<f64>()
                == n
        })
        .await;
        assert!(in_flight, "{}", self.metrics().await);
    }

    /// What a mock server received (`GET /mock/requests`).
    async fn received(&self) -> Vec<Value> {
        let v = get_json(&client(), &self.url("/mock/requests")).await;
        v["requests"].as_array().cloned().unwrap_or_default()
    }

    /// The bodies a mock server received for `model`.
    async fn asked(&self, model: &str) -> Vec<Value> {
        self.received()
            .await
            .into_iter()
            .filter(|q| q["model"] == model)
            .map(|q| q["body"].clone())
            .collect()
    }

    /// A mock server's counters (`GET /mock/stats`).
    async fn stats(&self) -> Value {
        get_json(&client(), &self.url("/mock/stats")).await
    }
}

/// A running `conclave` process; killed when dropped.
pub struct Proc {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub dir: tempfile::TempDir,
}

impl Proc {
    /// `conclave serve` with `toml` (`{dir}` is replaced by a temp dir).
    pub fn gateway(toml: &str) -> Proc {
        Proc::gateway_env(toml, &[])
    }

    pub fn gateway_env(toml: &str, env: &[(&str, &str)]) -> Proc {
        Proc::start(&["serve", "--listen", "127.0.0.1:0"], toml, env)
    }

    /// `conclave mock` serving the `kind = "mock"` upstream in `toml`.
    pub fn mock(toml: &str) -> Proc {
        Proc::start(&["mock", "--listen", "127.0.0.1:0"], toml, &[])
    }

    pub fn start(args: &[&str], toml: &str, env: &[(&str, &str)]) -> Proc {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("conclave.toml");
        let text = toml.replace("{dir}", &dir.path().display().to_string());
        std::fs::write(&config, text).unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        // Capped at 4 GiB of address space, so a regression that makes the
        // gateway allocate without bound fails its test instead of taking
        // the machine's memory (`sh` execs the binary: same pid).
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("ulimit -v 4194304 && exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_conclave"))
            .args(args)
            .arg("--config")
            .arg(&config)
            .envs(env.iter().copied())
            .env("RUST_LOG", "conclave=debug,warn")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let Some(base) = line
            .trim()
            .rsplit(' ')
            .next()
            .filter(|b| b.starts_with("http://"))
        else {
            let _ = child.wait();
            let err = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
            panic!("conclave {args:?} did not start: {line}\n{err}");
        };
        Proc {
            base: base.to_owned(),
            child,
            dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How many file descriptors the process has open; panics when it has
    /// exited (a dead process must not pass a "nothing leaked" check).
    pub fn open_fds(&self) -> usize {
        let pid = self.pid();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(") ").next().and_then(|r| r.chars().next());
        if matches!(state, None | Some('Z' | 'X')) {
            panic!("conclave (pid {pid}) has exited:\n{}", self.stderr());
        }
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or_else(|e| panic!("cannot read the open files of pid {pid}: {e}"))
    }

    /// Sends a signal (`HUP`, `TERM`, `INT`, …) to the process.
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{name} failed");
    }

    /// Waits up to `secs` for the process to exit; its exit code.
    pub fn wait_exit(&mut self, secs: u64) -> Option<i32> {
        for _ in 0..secs * 50 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code().or(Some(-1));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.path("stderr.log")).unwrap_or_default()
    }
}

impl Served for Proc {
    fn base(&self) -> &str {
        &self.base
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The events of the JSONL log at `path` of the given kinds, once there
/// are at least `n` of them (waiting up to 20 s: the log is written off the
/// request path, and a busy machine may take a while); with no kinds, every
/// event but `request`.
pub async fn events_in(path: &Path, kinds: &[&str], n: usize) -> Vec<Value> {
    // 2,000 looks 10 ms apart: 20 s.
    let mut looks = 0;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // Only whole lines: the writer may be mid-line.
        let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        let lines: Vec<Value> = whole
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| match kinds {
                [] => e["event"] != "request",
                _ => kinds.iter().any(|k| e["event"] == *k),
            })
            .collect();
        if lines.len() >= n {
            return lines;
        }
        looks += 1;
        assert!(looks < 2000, "fewer than {n} events in the log:\n{text}");
        // The log's writer is a thread of its own: wait for it in real
        // time, off the runtime (which keeps a paused clock where it is).
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(10)))
            .await
            .unwrap();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// A response read whole: status, headers and body.
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The SSE `data:` payloads, in order (comments skipped).
    pub fn data_events(&self) -> Vec<String> {
        sse_data(&self.text)
    }
}

pub fn sse_data(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter_map(|ev| {
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

/// Sends a request built by the caller and reads the response whole.
pub async fn send(req: reqwest::RequestBuilder) -> Resp {
    let r = req.send().await.unwrap();
    Resp {
        status: r.status().as_u16(),
        headers: r.headers().clone(),
        text: r.text().await.unwrap_or_default(),
    }
}

/// `GET url` as JSON.
pub async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

/// POSTs raw bytes to `/v1/chat/completions` with extra headers.
pub async fn post_raw(
    base: &str,
    body: impl Into<reqwest::Body>,
    headers: &[(&str, &str)],
) -> Resp {
    post_via(&client(), base, body, headers).await
}

/// `post_raw` with a given HTTP client.
pub async fn post_via(
    http: &reqwest::Client,
    base: &str,
    body: impl Into<reqwest::Body>,
    headers: &[(&str, &str)],
) -> Resp {
    let mut req = http
        .post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    // A broken connection is a result to report, not a panic that hides
    // every other finding of a table-driven test.
    let r = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            return Resp {
                status: 0,
                headers: reqwest::header::HeaderMap::new(),
                text: format!("transport error: {e:?}"),
            };
        }
    };
    Resp {
        status: r.status().as_u16(),
        headers: r.headers().clone(),
        text: r.text().await.unwrap_or_default(),
    }
}

pub async fn post(base: &str, body: &Value) -> Resp {
    post_raw(base, body.to_string(), &[]).await
}

pub async fn post_with(base: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
    post_raw(base, body.to_string(), headers).await
}

/// The samples of `name` whose labels include every `labels` pair.
pub fn samples(metrics: &str, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (lbls, value) = rest.rsplit_once("} ")?;
            labels
                .iter()
                .all(|(k, v)| lbls.contains(&format!("{k}=\"{v}\"")))
                .then(|| value.trim().parse().ok())?
        })
        .collect()
}

/// A chat request for `model` with one user message.
pub fn chat(model: &str, text: &str) -> Value {
    serde_json::json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

pub fn chat_stream(model: &str, text: &str) -> Value {
    let mut v = chat(model, text);
    v["stream"] = Value::Bool(true);
    v
}

/// The least time [`eventually`] gives a check: every use waits for
/// something that should come in milliseconds, and only a failing check
/// waits it out, so a busy machine never fails a test that is right.
const LEAST_WAIT: u64 = 20;

/// Polls `check` until it holds, for up to `secs` seconds (at least
/// [`LEAST_WAIT`]). Only for "until it holds": a deadline never proves
/// that something did not happen.
pub async fn eventually<F, Fut>(secs: u64, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let secs = secs.max(LEAST_WAIT);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A config for a gateway in front of the mock at `mock_v1`, with the
/// models `names` (same name upstream) and an event log in `{dir}`.
pub fn front_of(mock_v1: &str, names: &[&str], extra: &str) -> String {
    let mut t = format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n[upstreams.up]\nkind = \"openai\"\nbase_url = \"{mock_v1}\"\ntimeout = \"5s\"\n\n"
    );
    for n in names {
        t.push_str(&format!("[models.{n}]\nupstream = \"up\"\n\n"));
    }
    t.push_str(extra);
    t
}

/// Waits (at most 10 s) until `gw`'s `/readyz` answers 200.
pub async fn ready(gw: &Srv) {
    let ok = eventually(10, || async {
        reqwest::get(gw.url("/readyz"))
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(ok, "{} never became ready", gw.url(""));
}

/// A chat `body` to `gw` as API key `key`.
pub async fn chat_as(gw: &Srv, body: &Value, key: &str) -> Resp {
    let auth = format!("Bearer {key}");
    post_with(&gw.url(""), body, &[("authorization", auth.as_str())]).await
}

/// Key `name`'s line of `GET /v1/keys/usage` on `gw`, read with the
/// admin key `admin`.
pub async fn key_usage(gw: &impl Served, admin: &str, name: &str) -> Value {
    let r = send(client().get(gw.url("/v1/keys/usage")).bearer_auth(admin)).await;
    key_entry(&r, name)
}

/// Key `name`'s line of a `GET /v1/keys/usage` answer, which must be a 200.
pub fn key_entry(r: &Resp, name: &str) -> Value {
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no key {name}: {}", r.text))
}

/// Serves `app` on a free loopback port for the rest of the test: its
/// base URL.
pub async fn serve_app(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A chat route that counts its calls and answers each with `answer` of
/// the request's JSON (`null` for a body that is none): the route, and
/// the count.
pub fn counted_chat<F>(
    answer: F,
) -> (
    axum::routing::MethodRouter,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
)
where
    F: Fn(Value) -> axum::response::Response + Clone + Send + Sync + 'static,
{
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = calls.clone();
    let chat = move |body: axum::body::Bytes| {
        let (n, answer) = (n.clone(), answer.clone());
        async move {
            n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            answer(serde_json::from_slice(&body).unwrap_or_default())
        }
    };
    (axum::routing::post(chat), calls)
}
