//! The leaderboard: per model, its votes, wins, losses, ties and win rate,
//! and a Bradley–Terry rating with a 95% confidence interval.
//!
//! It reads the pairwise results each vote stands for
//! ([`crate::store::arena::pairwise`]): a pair's vote is one comparison,
//! an arena of N ranked is N·(N−1)/2, a pick of one of N is N−1 (the
//! others are not compared); "all bad" counts as a tie. A model's `votes`
//! are the comparisons it was in.
//!
//! Strengths are fitted by Hunter's MM algorithm, a tie counting half a
//! win for each side. Every pair of models also gets one virtual tie (a
//! weak prior), so a model that has only won or only lost still has a
//! finite rating, and few votes pull ratings towards the middle. Ratings
//! are on the Elo scale: `1000 + 400·log10(strength)`, with the strengths'
//! geometric mean at 1 (the ratings average 1000). The interval comes from
//! the Fisher information of the log-strengths (the inverse of the
//! comparison graph's weighted Laplacian under their sum-zero constraint):
//! `rating ± 1.96·se`.

use std::collections::BTreeMap;

use crate::store::arena::{Side, Vote};

#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    pub model: String,
    pub votes: u64,
    pub wins: u64,
    pub losses: u64,
    pub ties: u64,
    /// (wins + ties / 2) / votes; `None` before any vote.
    pub win_rate: Option<f64>,
    pub rating: f64,
    pub ci_low: f64,
    pub ci_high: f64,
}

/// Rating points per unit of log-strength.
const SCALE: f64 = 400.0 / std::f64::consts::LN_10;

/// The standings of `models` (and any other model the votes name), best
/// rating first.
pub fn leaderboard(models: &[String], votes: &[Vote]) -> Vec<Standing> {
    let mut names: Vec<String> = models.to_vec();
    for v in votes {
        for m in &v.models {
            if !names.contains(m) {
                names.push(m.clone());
            }
        }
    }
    let k = names.len();
    let at: BTreeMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    // Comparisons between each pair, and each model's (half-)wins.
    let mut n = vec![vec![0.0; k]; k];
    let mut w = vec![0.0; k];
    let mut counts = vec![(0u64, 0u64, 0u64); k];
    for (x, y, side) in votes.iter().flat_map(Vote::pairs) {
        let (Some(&a), Some(&b)) = (at.get(x), at.get(y)) else {
            continue;
        };
        if a == b {
            continue;
        }
        n[a][b] += 1.0;
        n[b][a] += 1.0;
        match side {
            Side::First => {
                w[a] += 1.0;
                counts[a].0 += 1;
                counts[b].1 += 1;
            }
            Side::Second => {
                w[b] += 1.0;
                counts[b].0 += 1;
                counts[a].1 += 1;
            }
            Side::Tie => {
                w[a] += 0.5;
                w[b] += 0.5;
                counts[a].2 += 1;
                counts[b].2 += 1;
            }
        }
    }
    for (i, row) in n.iter_mut().enumerate() {
        for (j, cell) in row.iter_mut().enumerate() {
            if i != j {
                *cell += 1.0;
                w[i] += 0.5;
            }
        }
    }
    let theta = fit(&n, &w);
    let se = standard_errors(&n, &theta);
    let mut out: Vec<Standing> = names
        .into_iter()
        .enumerate()
        .map(|(i, model)| {
            let (wins, losses, ties) = counts[i];
            let votes = wins + losses + ties;
            let rating = 1000.0 + SCALE * theta[i];
            let half = 1.96 * SCALE * se[i];
            Standing {
                model,
                votes,
                wins,
                losses,
                ties,
                win_rate: (votes > 0).then(|| (wins as f64 + ties as f64 / 2.0) / votes as f64),
                rating,
                ci_low: rating - half,
                ci_high: rating + half,
            }
        })
        .collect();
    out.sort_by(|a, b| b.rating.total_cmp(&a.rating).then(a.model.cmp(&b.model)));
    out
}

/// Log-strengths summing to zero, by MM iterations.
fn fit(n: &[Vec<f64>], w: &[f64]) -> Vec<f64> {
    let k = w.len();
    let mut p = vec![1.0; k];
    for _ in 0..10_000 {
        let mut next = vec![0.0; k];
        for i in 0..k {
            let denom: f64 = (0..k)
                .filter(|&j| j != i && n[i][j] > 0.0)
                .map(|j| n[i][j] / (p[i] + p[j]))
                .sum();
            next[i] = if denom > 0.0 { w[i] / denom } else { p[i] };
        }
        let mean = next.iter().map(|x| x.ln()).sum::<f64>() / k as f64;
        for x in &mut next {
            *x /= mean.exp();
        }
        let moved = p
            .iter()
            .zip(&next)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        p = next;
        if moved < 1e-12 {
            break;
        }
    }
    p.iter().map(|x| x.ln()).collect()
}

/// Standard errors of the log-strengths: the diagonal of the Laplacian's
/// pseudo-inverse, `(L + J/k)⁻¹ − J/k`.
fn standard_errors(n: &[Vec<f64>], theta: &[f64]) -> Vec<f64> {
    let k = theta.len();
    if k < 2 {
        return vec![0.0; k];
    }
    let mut l = vec![vec![0.0; k]; k];
    for i in 0..k {
        for j in 0..k {
            if i != j && n[i][j] > 0.0 {
                let q = 1.0 / (1.0 + (theta[j] - theta[i]).exp());
                let info = n[i][j] * q * (1.0 - q);
                l[i][j] -= info;
                l[i][i] += info;
            }
        }
    }
    let kf = k as f64;
    for row in &mut l {
        for x in row.iter_mut() {
            *x += 1.0 / kf;
        }
    }
    match invert(l) {
        Some(inv) => (0..k)
            .map(|i| (inv[i][i] - 1.0 / kf).max(0.0).sqrt())
            .collect(),
        None => vec![f64::NAN; k],
    }
}

/// Gauss–Jordan inverse with partial pivoting; `None` when singular.
fn invert(mut a: Vec<Vec<f64>>) -> Option<Vec<Vec<f64>>> {
    let k = a.len();
    let mut inv: Vec<Vec<f64>> = (0..k)
        .map(|i| (0..k).map(|j| if i == j { 1.0 } else { 0.0 }).collect())
        .collect();
    for col in 0..k {
        let pivot = (col..k).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        inv.swap(col, pivot);
        let d = a[col][col];
        for j in 0..k {
            a[col][j] /= d;
            inv[col][j] /= d;
        }
        for r in 0..k {
            if r != col {
                let f = a[r][col];
                if f != 0.0 {
                    for j in 0..k {
                        a[r][j] -= f * a[col][j];
                        inv[r][j] -= f * inv[col][j];
                    }
                }
            }
        }
    }
    Some(inv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(a: &str, b: &str, outcome: &str) -> Vote {
        Vote {
            models: vec![a.into(), b.into()],
            outcome: outcome.into(),
            at: 0,
        }
    }

    #[test]
    fn a_hand_computed_pair() {
        // x beats y three times of four. With the prior's virtual tie, x has
        // 3.5 wins in 5 comparisons, y 1.5: strengths 7:3, so the ratings are
        // 1000 ± 200·log10(7/3) = 1073.6 and 926.4. The information is
        // 5·0.7·0.3 = 1.05, so var(θx − θy) = 1/1.05 and, split evenly,
        // se(θx) = sqrt(1/4.2) = 0.48795: ±1.96·173.72·0.48795 = ±166.1.
        let votes = [
            vote("x", "y", "a"),
            vote("y", "x", "b"),
            vote("x", "y", "a"),
            vote("x", "y", "b"),
        ];
        let board = leaderboard(&["x".into(), "y".into()], &votes);
        let (x, y) = (&board[0], &board[1]);
        assert_eq!(
            (x.model.as_str(), x.wins, x.losses, x.votes),
            ("x", 3, 1, 4)
        );
        assert_eq!(x.win_rate, Some(0.75));
        assert!((x.rating - 1073.6).abs() < 0.05, "{x:?}");
        assert!((y.rating - 926.4).abs() < 0.05, "{y:?}");
        assert!((x.ci_high - x.rating - 166.1).abs() < 0.05, "{x:?}");
        assert!((y.rating - y.ci_low - 166.1).abs() < 0.05, "{y:?}");
    }

    #[test]
    fn ties_unvoted_models_and_three_way_order() {
        let mut votes = vec![vote("a", "b", "tie"), vote("a", "b", "tie")];
        for _ in 0..5 {
            votes.push(vote("a", "c", "a"));
            votes.push(vote("c", "b", "b"));
        }
        let names = ["a".into(), "b".into(), "c".into(), "d".into()];
        let board = leaderboard(&names, &votes);
        let order: Vec<&str> = board.iter().map(|s| s.model.as_str()).collect();
        assert_eq!(order[3], "c", "{board:?}");
        let d = board.iter().find(|s| s.model == "d").unwrap();
        assert_eq!((d.votes, d.win_rate), (0, None));
        assert!((d.rating - 1000.0).abs() < 60.0, "{d:?}");
        let mean: f64 = board.iter().map(|s| s.rating).sum::<f64>() / 4.0;
        assert!((mean - 1000.0).abs() < 1e-6);
        assert!(
            board
                .iter()
                .all(|s| s.ci_low < s.rating && s.rating < s.ci_high)
        );
        assert_eq!(board.iter().find(|s| s.model == "a").unwrap().ties, 2);
    }

    #[test]
    fn n_way_votes_count_each_pairwise_result() {
        let three = |outcome: &str| Vote {
            models: vec!["x".into(), "y".into(), "z".into()],
            outcome: outcome.into(),
            at: 0,
        };
        // y > x > z; then x beats both (y and z not compared); all bad.
        let votes = [three("rank:bac"), three("a"), three("bad")];
        let board = leaderboard(&["x".into(), "y".into(), "z".into()], &votes);
        let row = |m: &str| board.iter().find(|s| s.model == m).unwrap();
        let (x, y, z) = (row("x"), row("y"), row("z"));
        assert_eq!((x.wins, x.losses, x.ties, x.votes), (3, 1, 2, 6));
        assert_eq!((y.wins, y.losses, y.ties, y.votes), (2, 1, 2, 5));
        assert_eq!((z.wins, z.losses, z.ties, z.votes), (0, 3, 2, 5));
        assert_eq!(board[0].model, "x");
        assert_eq!(board[2].model, "z");
    }
}
