//! Config reload (SIGHUP): the file is read and validated again; a valid
//! config becomes the state new requests see (requests in flight finish
//! on the graph they started with), an invalid one is logged and the old
//! one keeps serving. The event log is reopened either way, for log
//! rotation, and the ring of recent requests takes the config's size.
//! Settings the running server cannot change (listen address, connection
//! limits) are reported as needing a restart.

use std::fmt::Debug;
use std::path::Path;

use indexmap::IndexMap;

use crate::api::{AppState, Gateway, Shared};
use crate::config::{self, Config};
use crate::telemetry::Telemetry;

/// Reloads from `path`; returns the config now in force.
pub fn reload(path: &Path, running: Config, gateway: &Gateway, shared: &Shared) -> Config {
    let telemetry = &shared.telemetry;
    let next = match config::load(path, &crate::strategy::ALL) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("config reload failed; still serving the previous config:\n{e}");
            reopen(telemetry, &running);
            return running;
        }
    };
    let state = match AppState::new(&next, shared) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("config reload failed ({e}); still serving the previous config");
            reopen(telemetry, &running);
            return running;
        }
    };
    reopen(telemetry, &next);
    gateway.replace(state);
    for w in &next.warnings {
        tracing::warn!("{w}");
    }
    let changes = describe_changes(&running, &next);
    if changes.is_empty() {
        tracing::info!("config reloaded from {}: no changes", path.display());
    } else {
        tracing::info!(
            "config reloaded from {}: {}",
            path.display(),
            changes.join("; ")
        );
    }
    next
}

fn reopen(telemetry: &Telemetry, config: &Config) {
    telemetry.recent().resize(config.console.recent_requests);
    let (log, buffer) = (&config.server.event_log, config.server.event_log_buffer);
    if let Err(e) = telemetry.set_event_log(log.as_deref(), buffer) {
        tracing::error!("cannot open the event log: {e}");
    }
}

/// What a reload changed, one phrase per table.
fn describe_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    diff("upstreams", &old.upstreams, &new.upstreams, &mut out);
    diff("models", &old.models, &new.models, &mut out);
    diff("routes", &old.routes, &new.routes, &mut out);
    let names = |c: &Config| -> IndexMap<String, String> {
        c.keys
            .iter()
            .map(|k| (k.name.clone(), format!("{k:?}")))
            .collect()
    };
    diff("keys", &names(old), &names(new), &mut out);
    if old.server.listen != new.server.listen {
        out.push(format!(
            "server.listen changed to {} (needs a restart; still listening on {})",
            new.server.listen, old.server.listen
        ));
    }
    if old.server.state_path != new.server.state_path {
        out.push(
            "server.state_path changed (it needs a restart; spend is still kept where it was)"
                .into(),
        );
    }
    let state = |c: &Config| {
        c.state.as_ref().map(|s| {
            (
                s.url.0.clone(),
                s.on_error,
                s.timeout,
                s.prefix.clone(),
                s.lease_ttl,
            )
        })
    };
    if state(old) != state(new) {
        out.push(
            "[state] changed (it needs a restart; shared state is still kept where it was)".into(),
        );
    }
    if old.telemetry != new.telemetry {
        out.push(
            "[telemetry] changed (it needs a restart; traces still go where they went)".into(),
        );
    }
    if old.console.recent_requests != new.console.recent_requests {
        out.push(format!(
            "console.recent_requests changed to {}",
            new.console.recent_requests
        ));
    }
    if old.console != new.console && old.console.recent_requests == new.console.recent_requests {
        out.push("[console] changed".into());
    }
    if old.cache != new.cache {
        out.push("[cache] bounds changed (they need a restart; the cache keeps its bounds)".into());
    }
    if old.server.limits != new.server.limits {
        out.push("server connection limits changed (they need a restart)".into());
    }
    let scalars = [
        (
            "request_timeout",
            old.server.request_timeout != new.server.request_timeout,
        ),
        (
            "max_body_bytes",
            old.server.max_body_bytes != new.server.max_body_bytes,
        ),
        (
            "body_read_timeout",
            old.server.body_read_timeout != new.server.body_read_timeout,
        ),
        (
            "sse_keepalive",
            old.server.sse_keepalive != new.server.sse_keepalive,
        ),
        ("event_log", old.server.event_log != new.server.event_log),
        ("access_log", old.server.access_log != new.server.access_log),
    ];
    for (key, changed) in scalars {
        if changed {
            out.push(format!("server.{key} changed"));
        }
    }
    out
}

fn diff<T: Debug>(
    table: &str,
    old: &IndexMap<String, T>,
    new: &IndexMap<String, T>,
    out: &mut Vec<String>,
) {
    let added: Vec<&str> = new
        .keys()
        .filter(|k| !old.contains_key(*k))
        .map(String::as_str)
        .collect();
    let removed: Vec<&str> = old
        .keys()
        .filter(|k| !new.contains_key(*k))
        .map(String::as_str)
        .collect();
    let changed: Vec<&str> = new
        .iter()
        .filter(|(k, v)| {
            old.get(*k)
                .is_some_and(|o| format!("{o:?}") != format!("{v:?}"))
        })
        .map(|(k, _)| k.as_str())
        .collect();
    for (what, names) in [("added", added), ("removed", removed), ("changed", changed)] {
        if !names.is_empty() {
            out.push(format!("{table} {what}: {}", names.join(", ")));
        }
    }
}
