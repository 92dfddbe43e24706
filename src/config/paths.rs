//! The files a config names, anchored where its readers expect: a
//! relative path (`server.event_log`, `server.state_path`, a mock model's
//! `reply.solve.tasks`, in its rules too) is relative to the folder of the
//! config file, as in nginx's, Prometheus's and Envoy's configs, never to
//! the working directory. A file conclave reads must exist, and a file it
//! writes must have its folder: either missing is a load error, which
//! `conclave check` reports with the key that names it.

use std::path::{Path, PathBuf};

use super::{Config, Errors, UpstreamKind};
use crate::mock::Behavior;

/// Anchors `config`'s relative paths at `base` (the config file's
/// folder) and reports the files that are not there.
pub(crate) fn anchor(config: &mut Config, base: &Path, errs: &mut Errors) {
    let server = &mut config.server;
    for (key, path) in [
        ("server.event_log", &mut server.event_log),
        ("server.state_path", &mut server.state_path),
    ] {
        if let Some(p) = path {
            *p = anchored(base, p);
            written_in_a_folder(key, p, errs);
        }
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

/// Reports a file conclave creates whose folder is missing.
fn written_in_a_folder(key: &str, path: &Path, errs: &mut Errors) {
    let folder = path.parent().filter(|f| !f.as_os_str().is_empty());
    if let Some(f) = folder.filter(|f| !f.is_dir()) {
        errs.push(key, format!("the folder {} does not exist", f.display()));
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

    #[test]
    fn a_missing_folder_is_reported_with_its_key() {
        let mut errs = Errors::default();
        written_in_a_folder(
            "server.event_log",
            Path::new("/no/such/dir/e.jsonl"),
            &mut errs,
        );
        written_in_a_folder("server.state_path", Path::new("/tmp/ok.db"), &mut errs);
        assert_eq!(errs.0.len(), 1);
        assert_eq!(errs.0[0].path, "server.event_log");
        assert!(errs.0[0].message.contains("/no/such/dir"));
    }
}
