//! How a balance picks one member among those that would take a call now
//! (not ejected, below their `max_concurrency`, not tried yet for this
//! request, and warm when any is): the three policies over a list of
//! [`Candidate`]s. Members of weight 0 are standbys, picked only when no
//! member of positive weight is a candidate.

use rand::Rng;
use serde::Deserialize;

/// `policy = "…"` of a balance route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Weighted random.
    Weighted,
    /// Fewest calls in flight; ties by weighted random.
    #[default]
    LeastBusy,
    /// Power of two choices over the members' latency estimates (times
    /// their calls in flight plus one); members without a fresh estimate
    /// first.
    Latency,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Weighted => "weighted",
            Policy::LeastBusy => "least_busy",
            Policy::Latency => "latency",
        }
    }
}

/// A member that would take the call.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    /// The member's position in the route's `members`.
    pub index: usize,
    pub weight: u32,
    pub in_flight: u32,
    /// Seconds; `None` without a fresh sample.
    pub latency: Option<f64>,
}

/// The member (its `index`) `policy` picks among `cands`; `None` when
/// there is none.
pub fn pick(policy: Policy, cands: &[Candidate], rng: &mut impl Rng) -> Option<usize> {
    let active: Vec<Candidate> = cands.iter().copied().filter(|c| c.weight > 0).collect();
    // Only standbys left: they share the load evenly.
    let pool: Vec<Candidate> = if active.is_empty() {
        cands
            .iter()
            .map(|c| Candidate { weight: 1, ..*c })
            .collect()
    } else {
        active
    };
    match policy {
        Policy::Weighted => weighted(&pool, rng),
        Policy::LeastBusy => {
            let least = pool.iter().map(|c| c.in_flight).min()?;
            let idle: Vec<Candidate> = pool
                .iter()
                .copied()
                .filter(|c| c.in_flight == least)
                .collect();
            weighted(&idle, rng)
        }
        Policy::Latency => {
            let unknown: Vec<Candidate> = pool
                .iter()
                .copied()
                .filter(|c| c.latency.is_none())
                .collect();
            if !unknown.is_empty() {
                return weighted(&unknown, rng);
            }
            let first = weighted(&pool, rng)?;
            let rest: Vec<Candidate> = pool.iter().copied().filter(|c| c.index != first).collect();
            let Some(second) = weighted(&rest, rng) else {
                return Some(first);
            };
            let score = |i: usize| {
                pool.iter()
                    .find(|c| c.index == i)
                    .map_or(f64::INFINITY, |c| {
                        c.latency.unwrap_or(0.0) * f64::from(c.in_flight.saturating_add(1))
                    })
            };
            Some(if score(second) < score(first) {
                second
            } else {
                first
            })
        }
    }
}

/// Weighted random (every weight > 0).
fn weighted(cands: &[Candidate], rng: &mut impl Rng) -> Option<usize> {
    let total: u64 = cands.iter().map(|c| u64::from(c.weight)).sum();
    if total == 0 {
        return None;
    }
    let mut at = rng.random_range(0..total);
    for c in cands {
        let w = u64::from(c.weight);
        if at < w {
            return Some(c.index);
        }
        at -= w;
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn c(index: usize, weight: u32, in_flight: u32, latency: Option<f64>) -> Candidate {
        Candidate {
            index,
            weight,
            in_flight,
            latency,
        }
    }

    fn counts(policy: Policy, cands: &[Candidate], n: usize) -> Vec<usize> {
        let mut rng = StdRng::seed_from_u64(7);
        let mut out = vec![0; 4];
        for _ in 0..n {
            out[pick(policy, cands, &mut rng).unwrap()] += 1;
        }
        out
    }

    #[test]
    fn weighted_follows_the_weights_and_standbys_wait() {
        let got = counts(
            Policy::Weighted,
            &[c(0, 3, 0, None), c(1, 1, 0, None), c(2, 0, 0, None)],
            4000,
        );
        assert!((2850..3150).contains(&got[0]), "{got:?}");
        assert_eq!(got[2], 0);
        // Standbys only: evenly.
        let got = counts(
            Policy::Weighted,
            &[c(2, 0, 0, None), c(3, 0, 0, None)],
            1000,
        );
        assert!((400..600).contains(&got[2]), "{got:?}");
    }

    #[test]
    fn least_busy_takes_the_idle_member() {
        let got = counts(
            Policy::LeastBusy,
            &[c(0, 5, 2, None), c(1, 1, 0, None), c(2, 1, 1, None)],
            100,
        );
        assert_eq!(got[1], 100);
    }

    #[test]
    fn latency_tries_unknown_members_then_the_faster() {
        let got = counts(
            Policy::Latency,
            &[c(0, 1, 0, Some(0.1)), c(1, 1, 0, None)],
            50,
        );
        assert_eq!(got[1], 50);
        let got = counts(
            Policy::Latency,
            &[c(0, 1, 0, Some(0.1)), c(1, 1, 0, Some(2.0))],
            50,
        );
        assert_eq!(got[0], 50);
        // Busy enough, the fast one yields.
        let got = counts(
            Policy::Latency,
            &[c(0, 1, 30, Some(0.1)), c(1, 1, 0, Some(2.0))],
            50,
        );
        assert_eq!(got[1], 50);
    }
}
