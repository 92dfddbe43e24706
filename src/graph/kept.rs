//! State a strategy keeps between requests: one value per (type, route,
//! member), made on first use and kept by the running gateway across
//! config reloads (the `Kept` of [`crate::api::Shared`]), so a reload that
//! leaves a route in place leaves its state as it was (a balance's calls
//! in flight and latency estimates go on). A strategy asks for its state
//! while its route is built, with [`super::Resolve`]'s `kept::<T>(route,
//! member)`; state of a whole route uses member `""`.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// The kept state of a running gateway, by (type, route, member).
#[derive(Default)]
pub struct Kept {
    values: Mutex<HashMap<Key, Arc<dyn Any + Send + Sync>>>,
}

type Key = (TypeId, String, String);

impl Kept {
    /// The `T` of `member` in `route`: the one kept, or a new default.
    pub fn get<T: Default + Send + Sync + 'static>(&self, route: &str, member: &str) -> Arc<T> {
        let key = (TypeId::of::<T>(), route.to_owned(), member.to_owned());
        let mut values = self.values.lock();
        // Keyed by its type, so a kept value is always a `T`.
        if let Some(t) = values
            .get(&key)
            .and_then(|v| v.clone().downcast::<T>().ok())
        {
            return t;
        }
        let t = Arc::new(T::default());
        values.insert(key, t.clone());
        t
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[derive(Default)]
    struct Count(AtomicU32);

    #[test]
    fn state_is_kept_by_type_route_and_member() {
        let kept = Kept::default();
        let a = kept.get::<Count>("r", "a");
        a.0.fetch_add(1, Ordering::Relaxed);
        assert!(Arc::ptr_eq(&a, &kept.get::<Count>("r", "a")));
        assert_eq!(kept.get::<Count>("r", "a").0.load(Ordering::Relaxed), 1);
        assert!(!Arc::ptr_eq(&a, &kept.get::<Count>("q", "a")));
        assert!(!Arc::ptr_eq(&a, &kept.get::<Count>("r", "b")));
        // Another type under the same names is another value.
        assert_eq!(*kept.get::<u32>("r", "a"), 0);
        assert!(Arc::ptr_eq(&a, &kept.get::<Count>("r", "a")));
    }
}
