//! [`UpstreamHealth`]: an upstream's members, the whole upstream's
//! [`Health`] and each of its models', kept across reloads by the
//! registry.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Health, Shown};
use crate::config::Eject;
use crate::sink::Metrics;

/// An upstream's health: the whole upstream's (transport, checks) and
/// each of its models'.
pub struct UpstreamHealth {
    pub whole: Arc<Health>,
    name: Arc<str>,
    metrics: Metrics,
    eject: Mutex<Option<Eject>>,
    /// By the model's name (conclave's, as the config names it).
    models: Mutex<HashMap<String, Arc<Health>>>,
}

impl UpstreamHealth {
    /// Upstream `name`'s, with `models` (their names in the config).
    pub fn new<'a>(
        name: Arc<str>,
        eject: Option<Eject>,
        models: impl IntoIterator<Item = &'a str>,
        metrics: Metrics,
    ) -> Arc<UpstreamHealth> {
        let h = UpstreamHealth {
            whole: Health::new(name.clone(), "".into(), eject, metrics.clone()),
            name,
            metrics,
            eject: Mutex::new(eject),
            models: Mutex::new(HashMap::new()),
        };
        for m in models {
            h.model(m);
        }
        Arc::new(h)
    }

    /// The settings of a reloaded config with `models`: each member's
    /// state goes on (see [`Health::configure`]); models it did not have
    /// are added, those the config no longer has are forgotten.
    pub fn configure<'a>(&self, eject: Option<Eject>, models: impl IntoIterator<Item = &'a str>) {
        *self.eject.lock() = eject;
        self.whole.configure(eject);
        let models: Vec<&str> = models.into_iter().collect();
        {
            let mut held = self.models.lock();
            held.retain(|name, _| models.contains(&name.as_str()));
            for h in held.values() {
                h.configure(eject);
            }
        }
        for m in models {
            self.model(m);
        }
    }

    /// Model `name`'s (its config name), made serving if it had
    /// none.
    pub fn model(&self, name: &str) -> Arc<Health> {
        let mut models = self.models.lock();
        if let Some(h) = models.get(name) {
            return h.clone();
        }
        let eject = *self.eject.lock();
        let h = Health::new(self.name.clone(), name.into(), eject, self.metrics.clone());
        models.insert(name.to_owned(), h.clone());
        h
    }

    /// Each model's state, by name, sorted.
    pub fn models_shown(&self) -> Vec<(String, Shown)> {
        let mut v: Vec<_> = self
            .models
            .lock()
            .iter()
            .map(|(n, h)| (n.clone(), h.shown()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}
