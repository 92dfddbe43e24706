//! The files a config names, anchored where its readers expect: a
//! relative path (`server.event_log`, `server.state_path`, a mock model's
//! `reply.solve.tasks`, in its rules too) is relative to the folder of the
//! config file, as in nginx's, Prometheus's and Envoy's configs, never to
//! the working directory. A file conclave reads must exist: one missing is
//! a load error, which `conclave check` reports with the key that names
//! it. The files it writes (the event log, the store) are created when
//! `serve` opens them, on the machine it runs on, so a config checked
//! elsewhere is not held to this one's folders.

use std::path::{Path, PathBuf};

use super::{Config, Errors, UpstreamKind};
use crate::mock::Behavior;

/// Anchors `config`'s relative paths at `base` (the config file's
/// folder) and reports the files that are not there.
pub(crate) fn anchor(config: &mut Config, base: &Path, errs: &mut Errors) {
    let server = &mut config.server;
    for p in [&mut server.event_log, &mut server.state_path]
        .into_iter()
        .flatten()
    {
        *p = anchored(base, p);
    }
    for (name, u) in &mut config.upstreams {
        if let UpstreamKind::Mock { models, .. } = &mut u.kind {
            anchor_models(&format!("upstreams.{name}"), models.iter_mut(), base, errs);
        }
    }
}

/// [`anchor`] for the simulated models of one mock upstream at `at`.
pub(crate) fn anchor_models<'a>(
    at: &str,
    models: impl Iterator<Item = (&'a String, &'a mut Behavior)>,
    base: &Path,
    errs: &mut Errors,
) {
    for (model, b) in models {
        b.each_file(&mut |key, p| {
            *p = anchored(base, p);
            if !p.is_file() {
                errs.push(
                    format!("{at}.models.{model}.{key}"),
                    format!("the file {} does not exist", p.display()),
                );
            }
        });
    }
}

/// `path` as it is when absolute, else under `base`.
fn anchored(base: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        base.join(path)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn relative_paths_join_the_base_and_absolute_ones_stay() {
        let base = Path::new("/etc/conclave");
        assert_eq!(
            anchored(base, Path::new("events.jsonl")),
            Path::new("/etc/conclave/events.jsonl")
        );
        assert_eq!(
            anchored(base, Path::new("/var/log/e.jsonl")),
            Path::new("/var/log/e.jsonl")
        );
    }
}
