//! Today's usage, per route and per model: tallied where the request and
//! attempt metrics are recorded (on the same handles, from the same
//! records), so `GET /v1/usage` reads the increments of Prometheus's
//! counters since the UTC day began (or since this instance started).
//! Each tally is stamped with its day and starts again at zero on the
//! first record of a new one, by the instance's clock. The tallies are
//! keyed like the handles, by config names: bounded by the config.
//! Per instance: with `[state]` each replica tallies its own requests.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{Value, json};

const DAY: u64 = 86_400;

/// The UTC day (days since the Unix epoch) of `at`.
pub fn day_of(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / DAY)
}

/// One route's requests today.
#[derive(Debug, Default, Clone, Copy)]
pub struct RouteTally {
    pub requests: u64,
    /// Requests whose status was not 2xx (errors, `429`, `499`,
    /// `stream_error`).
    pub errors: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

/// One model's attempts today (on one upstream).
#[derive(Debug, Default, Clone, Copy)]
pub struct ModelTally {
    pub attempts: u64,
    /// Tokens and cost as `conclave_tokens_total` and
    /// `conclave_cost_usd_total` count them: of priced attempts.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

impl RouteTally {
    fn merge(&mut self, o: &Self) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cost_usd += o.cost_usd;
    }
}

impl ModelTally {
    fn merge(&mut self, o: &Self) {
        self.attempts += o.attempts;
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cost_usd += o.cost_usd;
    }
}

/// A tally of one day: the day it counts, and what it counted.
#[derive(Debug, Default)]
pub struct Today<T>(Mutex<(u64, T)>);

impl<T: Default + Copy> Today<T> {
    /// Counts into day `day`'s tally (a new day starts from zero).
    pub fn add(&self, day: u64, f: impl FnOnce(&mut T)) {
        let mut g = self.0.lock();
        if g.0 != day {
            *g = (day, T::default());
        }
        f(&mut g.1);
    }

    /// Day `day`'s tally, when this one counts that day.
    pub fn of(&self, day: u64) -> Option<T> {
        let g = self.0.lock();
        (g.0 == day).then_some(g.1)
    }
}

/// A model's config name and its upstream's.
pub type ModelKey = (Arc<str>, Arc<str>);

/// Today's tallies gathered from every handle: by route, and by model
/// and upstream.
#[derive(Debug, Default)]
pub struct Usage {
    pub routes: Vec<(Arc<str>, RouteTally)>,
    pub models: Vec<(ModelKey, ModelTally)>,
}

impl Usage {
    /// Adds one handle's route tally (a route has one per strategy it
    /// was served with).
    pub fn route(&mut self, route: &Arc<str>, t: &RouteTally) {
        match self.routes.iter_mut().find(|(r, _)| r == route) {
            Some((_, have)) => have.merge(t),
            None => self.routes.push((route.clone(), *t)),
        }
    }

    /// Adds one handle's model tally (a model has one per route and role).
    pub fn model(&mut self, model: &Arc<str>, upstream: &Arc<str>, t: &ModelTally) {
        let at = self
            .models
            .iter_mut()
            .find(|((m, u), _)| m == model && u == upstream);
        match at {
            Some((_, have)) => have.merge(t),
            None => self.models.push(((model.clone(), upstream.clone()), *t)),
        }
    }

    /// `{"object": "usage", "day", "since", "routes": […], "models": […]}`
    /// for day `day`, tallied since `started` (this instance's start) or
    /// the day's midnight, whichever is later.
    pub fn render(mut self, day: u64, started: SystemTime) -> Value {
        let midnight = UNIX_EPOCH + Duration::from_secs(day * DAY);
        let since = started.max(midnight);
        let date = humantime::format_rfc3339_seconds(midnight).to_string();
        self.routes.sort_by(|a, b| a.0.cmp(&b.0));
        self.models.sort_by(|a, b| a.0.cmp(&b.0));
        let usd = crate::sink::shown_usd;
        let routes: Vec<Value> = self
            .routes
            .iter()
            .map(|(r, t)| {
                json!({"route": &**r, "requests": t.requests, "input_tokens": t.input_tokens,
                    "output_tokens": t.output_tokens, "cost_usd": usd(t.cost_usd), "errors": t.errors})
            })
            .collect();
        let models: Vec<Value> = self
            .models
            .iter()
            .map(|((m, u), t)| {
                json!({"model": &**m, "upstream": &**u, "attempts": t.attempts,
                    "input_tokens": t.input_tokens, "output_tokens": t.output_tokens,
                    "cost_usd": usd(t.cost_usd)})
            })
            .collect();
        json!({
            "object": "usage",
            "day": date.get(..10).unwrap_or(&date),
            "since": since.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            "routes": routes,
            "models": models,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_day_starts_from_zero() {
        let t: Today<RouteTally> = Today::default();
        t.add(5, |t| t.requests += 2);
        t.add(5, |t| t.requests += 1);
        assert_eq!(t.of(5).map(|t| t.requests), Some(3));
        assert!(t.of(6).is_none());
        t.add(6, |t| t.errors += 1);
        let six = t.of(6).unwrap();
        assert_eq!((six.requests, six.errors), (0, 1));
        assert!(t.of(5).is_none());
    }

    #[test]
    fn the_day_and_since_are_utcs() {
        let day = 20_000;
        let noon = UNIX_EPOCH + Duration::from_secs(day * DAY + 43_200);
        assert_eq!(day_of(noon), day);
        let v = Usage::default().render(day, noon);
        assert_eq!(v["day"], "2024-10-04");
        assert_eq!(v["since"], day * DAY + 43_200);
        let v = Usage::default().render(day, UNIX_EPOCH);
        assert_eq!(v["since"], day * DAY);
    }
}
