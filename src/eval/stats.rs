//! The statistics an eval report rests on: the 95% Wilson score interval
//! of an accuracy, the exact McNemar test of two routes graded on the same
//! tasks, and nearest-rank percentiles (latency, cost).

/// The normal quantile of a two-sided 95% interval.
const Z95: f64 = 1.959964;

/// The 95% Wilson score interval of `correct` successes in `n` trials;
/// `(0.0, 1.0)` when `n` is 0 (nothing is known).
pub fn wilson(correct: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let n_f = n as f64;
    let p = correct.min(n) as f64 / n_f;
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / n_f;
    let center = (p + z2 / (2.0 * n_f)) / denom;
    let half = Z95 * (p * (1.0 - p) / n_f + z2 / (4.0 * n_f * n_f)).sqrt() / denom;
    // At 0/n and n/n the bounds are exactly 0 and 1; rounding says 1e-17.
    let lo = if correct == 0 {
        0.0
    } else {
        (center - half).max(0.0)
    };
    let hi = if correct >= n {
        1.0
    } else {
        (center + half).min(1.0)
    };
    (lo, hi)
}

/// McNemar's test on paired outcomes: how often only A was right, only B,
/// and the exact two-sided p-value that they are equally good.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    pub a_only: u64,
    pub b_only: u64,
    pub p_value: f64,
}

/// The exact (binomial) McNemar test of `(a correct, b correct)` pairs:
/// with b and c the discordant counts, p = min(1, 2 P(X <= min(b, c)))
/// for X ~ Bin(b + c, 1/2); 1 with no discordant pair. Summed in logs, so
/// any count is safe.
pub fn mcnemar(pairs: &[(bool, bool)]) -> Paired {
    let a_only = pairs.iter().filter(|(a, b)| *a && !*b).count() as u64;
    let b_only = pairs.iter().filter(|(a, b)| !*a && *b).count() as u64;
    Paired {
        a_only,
        b_only,
        p_value: exact_p(a_only, b_only),
    }
}

/// 2 P(X <= min(b, c)), X ~ Bin(b + c, 1/2), capped at 1.
fn exact_p(b: u64, c: u64) -> f64 {
    let n = b + c;
    let k = b.min(c);
    if n == 0 || 2 * k >= n {
        return 1.0;
    }
    // ln pmf(i), from ln pmf(0) = -n ln 2 and pmf(i+1) = pmf(i) (n-i)/(i+1).
    let n_f = n as f64;
    let mut ln_pmf = -n_f * std::f64::consts::LN_2;
    let mut terms = Vec::with_capacity(k as usize + 1);
    terms.push(ln_pmf);
    for i in 0..k {
        ln_pmf += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
        terms.push(ln_pmf);
    }
    // For k < n/2 the pmf rises with i: the last term is the largest.
    let top = ln_pmf;
    let sum: f64 = terms.iter().map(|t| (t - top).exp()).sum();
    let ln_tail = top + sum.ln();
    (2.0 * ln_tail.exp()).min(1.0)
}

/// The nearest-rank `p`th percentile (`p` in 0..=100, clamped) of
/// `values`, which it sorts in place; `None` when empty or `p` is NaN.
pub fn percentile(values: &mut [f64], p: f64) -> Option<f64> {
    if values.is_empty() || p.is_nan() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * n as f64).ceil() as usize;
    values.get(rank.clamp(1, n) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn near(got: f64, want: f64, places: i32) -> bool {
        (got - want).abs() < 0.5 * 10f64.powi(-places)
    }

    fn pairs(b: u64, c: u64, both: u64) -> Vec<(bool, bool)> {
        let mut v = Vec::new();
        v.extend((0..b).map(|_| (true, false)));
        v.extend((0..c).map(|_| (false, true)));
        v.extend((0..both).map(|_| (true, true)));
        v.extend((0..both).map(|_| (false, false)));
        v
    }

    #[test]
    fn wilson_known_values() {
        let (lo, hi) = wilson(8, 10);
        assert!(near(lo, 0.4902, 4) && near(hi, 0.9433, 4), "{lo} {hi}");
        let (lo, hi) = wilson(0, 10);
        assert!(near(lo, 0.0, 4) && near(hi, 0.2775, 4), "{lo} {hi}");
        let (lo, hi) = wilson(10, 10);
        assert!(near(lo, 0.7225, 4) && near(hi, 1.0, 4), "{lo} {hi}");
        assert_eq!(wilson(0, 0), (0.0, 1.0));
    }

    #[test]
    fn wilson_stays_in_unit_interval() {
        for n in [1, 2, 5, 1000, 1_000_000] {
            for c in [0, n / 2, n] {
                let (lo, hi) = wilson(c, n);
                assert!((0.0..=1.0).contains(&lo) && (0.0..=1.0).contains(&hi));
                assert!(lo <= c as f64 / n as f64 && c as f64 / n as f64 <= hi);
            }
        }
    }

    #[test]
    fn mcnemar_known_values() {
        let r = mcnemar(&pairs(10, 2, 7));
        assert_eq!((r.a_only, r.b_only), (10, 2));
        assert!(near(r.p_value, 0.0386, 4), "{}", r.p_value);
        assert!(near(r.p_value, 79.0 / 2048.0, 12));
        assert_eq!(mcnemar(&pairs(5, 5, 3)).p_value, 1.0);
        let r = mcnemar(&pairs(0, 6, 1));
        assert!(near(r.p_value, 0.03125, 10), "{}", r.p_value);
        assert_eq!((r.a_only, r.b_only), (0, 6));
        let r = mcnemar(&pairs(25, 15, 0));
        assert!(near(r.p_value, 0.1539, 4), "{}", r.p_value);
    }

    #[test]
    fn mcnemar_without_discordant_pairs_is_one() {
        assert_eq!(mcnemar(&[]).p_value, 1.0);
        assert_eq!(mcnemar(&pairs(0, 0, 20)).p_value, 1.0);
    }

    #[test]
    fn mcnemar_large_counts_do_not_overflow() {
        let p = exact_p(50_000, 50_000);
        assert_eq!(p, 1.0);
        let p = exact_p(49_000, 51_000);
        assert!(p > 0.0 && p < 1e-8, "{p}");
        let p = exact_p(49_990, 50_010);
        assert!(p > 0.9 && p <= 1.0, "{p}");
        let p = exact_p(100_000, 0);
        assert_eq!(p, 0.0); // 2^-99999 underflows to zero, not NaN
        assert!(exact_p(60_000, 40_000).is_finite());
    }

    #[test]
    fn percentile_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&mut v, 50.0), Some(50.0));
        assert_eq!(percentile(&mut v, 95.0), Some(95.0));
        assert_eq!(percentile(&mut v, 100.0), Some(100.0));
        assert_eq!(percentile(&mut v, 0.0), Some(1.0));
        assert_eq!(percentile(&mut [], 50.0), None);
        assert_eq!(percentile(&mut [3.0], 99.0), Some(3.0));
        assert_eq!(percentile(&mut [1.0, 2.0], f64::NAN), None);
    }
}
