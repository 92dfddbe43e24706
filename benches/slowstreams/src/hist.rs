//! A lock-free log-linear histogram of microsecond values (0.1 % resolution above 2 ms,
//! exact below), shared by every stream of the load generator.

use std::sync::atomic::{AtomicU64, Ordering};

const SUB_BITS: u32 = 10;
const SUB: u64 = 1 << SUB_BITS;
/// Exact buckets below 2 * SUB, then SUB buckets per power of two up to 2^42 µs.
const BUCKETS: usize = (2 * SUB + (42 - SUB_BITS as u64) * SUB) as usize;

pub struct Hist {
    counts: Vec<AtomicU64>,
    max: AtomicU64,
    total: AtomicU64,
}

fn index(v: u64) -> usize {
    if v < 2 * SUB {
        return v as usize;
    }
    let e = 63 - u64::from(v.leading_zeros()); // >= SUB_BITS + 1
    let shift = e - u64::from(SUB_BITS);
    let m = (v >> shift) - SUB; // 0..SUB
    let i = 2 * SUB + (e - u64::from(SUB_BITS) - 1) * SUB + m;
    (i as usize).min(BUCKETS - 1)
}

fn lower_bound(i: usize) -> u64 {
    let i = i as u64;
    if i < 2 * SUB {
        return i;
    }
    let k = i - 2 * SUB;
    let e = k / SUB + u64::from(SUB_BITS) + 1;
    let m = k % SUB + SUB;
    m << (e - u64::from(SUB_BITS))
}

impl Hist {
    pub fn new() -> Self {
        Hist {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max: AtomicU64::new(0),
            total: AtomicU64::new(0),
        }
    }

    pub fn record(&self, v: u64) {
        self.counts[index(v)].fetch_add(1, Ordering::Relaxed);
        self.max.fetch_max(v, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// The value at quantile `q` (0..=1): the lower bound of the bucket it falls in.
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if seen >= rank {
                return lower_bound(i);
            }
        }
        self.max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_trip_within_resolution() {
        for v in [
            0u64,
            1,
            2047,
            2048,
            2049,
            50_000,
            50_049,
            1_000_000,
            123_456_789,
        ] {
            let lb = lower_bound(index(v));
            assert!(lb <= v, "{v}: {lb}");
            assert!(v - lb <= v / 1000 + 1, "{v}: {lb}");
        }
        assert!(index(u64::MAX) < BUCKETS);
    }

    #[test]
    fn quantiles() {
        let h = Hist::new();
        for v in 1..=1000u64 {
            h.record(v * 100);
        }
        assert_eq!(h.count(), 1000);
        assert_eq!(h.max(), 100_000);
        let p50 = h.quantile(0.5);
        assert!((49_900..=50_000).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99);
        assert!((98_800..=99_000).contains(&p99), "{p99}");
    }
}
