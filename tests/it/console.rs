//! The web console (`/console`): who gets it (a disabled console is a
//! 404; a gateway without keys serves loopback clients only unless
//! `console.open`), the strict Content-Security-Policy on every file, and
//! the pages themselves in a real browser: `tests/console/console.py`
//! drives Debian's chromium through chromium-driver with selenium (pinned
//! in `tests/sdk/requirements.txt`, installed into `target/sdk-venv`)
//! against a gateway on the demo config with keys: a battle of three
//! streamed, ranked, revealed and on the leaderboard; six columns at 50
//! tokens/s; a battle where one contestant fails; a chain's rejected draft and a panel's ranking in the
//! playground; a cache hit there; the requests list; a non-admin key refused on admin pages;
//! four XSS payloads inert; a 100k-character answer; a wrong key. It takes
//! the README's screenshots as it goes: into `target/console-shots`, or
//! `$CONCLAVE_SHOTS` (`CONCLAVE_SHOTS=docs/img` refreshes the README's).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;

use crate::common::inproc::Gw;
use crate::common::{Served, Srv};
use crate::sdk_setup::{root, run_bounded, target_dir, venv};

const ADMIN: &str = "sk-console-admin-0123456789";
const USER: &str = "sk-console-alice-0123456789";

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'";

const SMALL: &str = "[upstreams.sim]\nkind = \"mock\"\n\n[models.a]\nupstream = \"sim\"\n";

async fn page(gw: &Gw, path: &str) -> (u16, String, Option<String>) {
    let r = gw
        .send(Request::get(path).body(Body::empty()).unwrap())
        .await;
    let csp = r
        .headers
        .get("content-security-policy")
        .map(|v| v.to_str().unwrap().to_owned());
    (r.status, r.text, csp)
}

#[tokio::test]
async fn every_console_file_carries_the_strict_policy_and_a_keyed_gateway_serves_it_to_anyone() {
    let keyed = format!("{SMALL}\n[[keys]]\nname = \"a\"\nkey_env = \"K\"\n");
    let gw = Gw::start_with(&keyed, &[("K", ADMIN)], std::time::SystemTime::now());
    for path in [
        "/console",
        "/console/",
        "/console/app.js",
        "/console/style.css",
    ] {
        let (status, body, csp) = page(&gw, path).await;
        assert_eq!(status, 200, "{path}: {body}");
        let csp = csp.unwrap_or_default();
        assert!(csp.starts_with(CSP), "{path}: {csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
    }
    let (_, html, _) = page(&gw, "/console").await;
    assert!(html.contains("data-keyed=\"true\""), "{html}");
    assert!(html.contains("data-testid=\"key-input\""));
    let (status, body, _) = page(&gw, "/console/secrets.txt").await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("unknown_url"), "{body}");
}

#[tokio::test]
async fn a_disabled_console_is_a_404() {
    let off = format!("{SMALL}\n[console]\nenabled = false\n");
    let gw = Gw::start(&off);
    for path in ["/console", "/console/app.js"] {
        let (status, body, _) = page(&gw, path).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.contains("unknown_url"), "{body}");
    }
    // The API is still there.
    assert_eq!(gw.get("/v1/models").await.status, 200);
}

#[tokio::test]
async fn without_keys_only_loopback_clients_get_the_console_unless_it_is_open() {
    // Over a real socket from 127.0.0.1: served.
    let srv = Srv::gateway(SMALL);
    let r = reqwest::get(srv.url("/console")).await.unwrap();
    assert_eq!(r.status(), 200);
    let html = r.text().await.unwrap();
    assert!(html.contains("data-keyed=\"false\""), "{html}");
    // A client whose address is not loopback (the router with no peer
    // address: nothing says it is local).
    let gw = Gw::start(SMALL);
    let (status, body, _) = page(&gw, "/console").await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("loopback_only") && body.contains("console.open"),
        "{body}"
    );
    let open = Gw::start(&format!(
        "{SMALL}\n[console]\nopen = true\ngrafana_url = \"https://grafana.example/d/x?a=1&b=\\\"\"\n"
    ));
    let (status, html, _) = page(&open, "/console").await;
    assert_eq!(status, 200, "{html}");
    // Written into an attribute, escaped.
    assert!(
        html.contains("data-grafana=\"https://grafana.example/d/x?a=1&amp;b=&quot;\""),
        "{html}"
    );
}

/// The demo config with two keys, the ring on, and the test's own models:
/// six contestants at 50 tokens/s, four XSS payloads, a 100k-character
/// answer.
fn world() -> String {
    let demo = std::fs::read_to_string(root().join("config/demo.toml"))
        .unwrap()
        .replace("\"conclave-events.jsonl\"", "\"{dir}/events.jsonl\"");
    let mut t = demo;
    t.push_str(
        "\n[console]\nrecent_requests = 500\n\n\
         [[keys]]\nname = \"ops\"\nkey_env = \"ADMIN_KEY\"\nadmin = true\n\n\
         [[keys]]\nname = \"alice\"\nkey_env = \"USER_KEY\"\n\n\
         [upstreams.extra]\nkind = \"mock\"\n\n",
    );
    let words = |n: usize| vec!["token"; n].join(" ");
    let mut six = Vec::new();
    for i in 1..=6 {
        t.push_str(&format!(
            "[upstreams.extra.models.six-{i}-sim]\nreply = {{ text = \"{}\" }}\n\
             ttft = \"100ms\"\ntokens_per_second = 50\n\n\
             [models.six-{i}]\nupstream = \"extra\"\nmodel = \"six-{i}-sim\"\n\n",
            words(100)
        ));
        six.push(format!("\"six-{i}\""));
    }
    t.push_str(&format!(
        "[routes.six]\nstrategy = \"arena\"\ncontestants = [{}]\n\n",
        six.join(", ")
    ));
    // A battle where one of three fails before it answers.
    t.push_str(
        "[upstreams.extra.models.broken-sim]\nstatus = 500\nerror_message = \"down\"\n\n\
         [models.broken]\nupstream = \"extra\"\nmodel = \"broken-sim\"\n\n\
         [routes.partial]\nstrategy = \"arena\"\ncontestants = [\"six-1\", \"six-2\", \"broken\"]\n\n",
    );
    let payloads = [
        ("xss-script", "<script>window.pwned = 'script'</script>"),
        ("xss-img", "<img src=x onerror=\"window.pwned = 'img'\">"),
        (
            "xss-link",
            "[click me](javascript:window.pwned='link') and <a href=\"javascript:window.pwned='a'\">this</a>",
        ),
        (
            "xss-svg",
            "<svg onload=\"window.pwned = 'svg'\"><script>window.pwned = 'svg2'</script></svg>",
        ),
    ];
    t.push_str("[upstreams.extra.models.xss-sim]\nreply = { text = \"plain\" }\n\n");
    for (when, text) in payloads {
        t.push_str(&format!(
            "[[upstreams.extra.models.xss-sim.rules]]\nwhen_contains = \"{when}\"\n\
             then = {{ reply = {{ text = {} }} }}\n\n",
            serde_json::to_string(text).unwrap()
        ));
    }
    let long = "lorem ipsum dolor sit amet ".repeat(100_000 / 27 + 1);
    t.push_str(&format!(
        "[models.xss]\nupstream = \"extra\"\nmodel = \"xss-sim\"\n\n\
         [upstreams.extra.models.long-sim]\nreply = {{ text = \"{long}\" }}\n\n\
         [models.long]\nupstream = \"extra\"\nmodel = \"long-sim\"\n"
    ));
    t
}

/// The browser and its driver, from the PATH or Debian's places.
fn tool(names: &[&str]) -> PathBuf {
    for n in names {
        let p = PathBuf::from(n);
        if p.is_absolute() && p.is_file() {
            return p;
        }
        if let Some(found) = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(n))
                .find(|p| p.is_file())
        }) {
            return found;
        }
    }
    panic!("none of {names:?} is installed: scripts/setup installs chromium and chromium-driver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_real_browser() {
    let chromium = tool(&["chromium", "/usr/lib/chromium/chromium", "chromium-browser"]);
    let driver = tool(&["chromedriver", "/usr/lib/chromium/chromedriver"]);
    let python = venv().join("bin/python");
    let gw = Srv::gateway_env(&world(), &[("ADMIN_KEY", ADMIN), ("USER_KEY", USER)]);
    let shots = std::env::var_os("CONCLAVE_SHOTS")
        .map(|s| root().join(s))
        .unwrap_or_else(|| target_dir().join("console-shots"));
    let base = gw.base.clone();
    let ran = tokio::task::spawn_blocking(move || {
        run_bounded(
            Command::new(python)
                .arg(root().join("tests/console/console.py"))
                .env("BASE", base)
                .env("ADMIN_KEY", ADMIN)
                .env("USER_KEY", USER)
                .env("SHOTS", &shots)
                .env("CHROMIUM", chromium)
                .env("CHROMEDRIVER", driver)
                .env("NO_PROXY", "127.0.0.1,localhost")
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("ONLY", std::env::var("CONSOLE_ONLY").unwrap_or_default()),
            Duration::from_secs(300),
        )
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        ran.ok(),
        "the console's browser test failed:\n{}",
        ran.show()
    );
    // What the browser did reached the gateway as requests like any other.
    if std::env::var("CONSOLE_ONLY").unwrap_or_default().is_empty() {
        let metrics = gw.metrics().await;
        assert!(metrics.contains("route=\"ab\""), "no battle in the metrics");
    }
}
