//! Daily budgets: one [`Budget`] per key name holds the UTC day's spend
//! and the reservations of the requests in flight, under one lock, so a
//! reservation either fits whole or not at all and concurrent requests
//! cannot overspend together. What was spent is written to the store by
//! the governor's flusher; the day's figures are loaded back at start.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use super::Spend;
use crate::store::SpendRow;

const DAY: u64 = 86_400;

/// Days since the Unix epoch, UTC.
pub fn utc_day(now: SystemTime) -> i64 {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    i64::try_from(secs / DAY).unwrap_or(i64::MAX)
}

/// Until the UTC day of `now` ends.
pub fn until_day_ends(now: SystemTime) -> Duration {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Duration::from_secs(DAY - secs % DAY)
}

/// `YYYY-MM-DD` of a day number.
pub fn day_name(day: i64) -> String {
    let secs = u64::try_from(day).unwrap_or(0).saturating_mul(DAY);
    let at = UNIX_EPOCH + Duration::from_secs(secs);
    humantime::format_rfc3339_seconds(at)
        .to_string()
        .chars()
        .take(10)
        .collect()
}

/// A key's daily limits (`None`: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Daily {
    pub tokens: Option<u64>,
    pub cost_usd: Option<f64>,
}

/// Why a reservation did not fit: what is `left` after today's spend and
/// the reservations of requests in flight (`held`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Over {
    Tokens {
        limit: u64,
        left: u64,
        held: u64,
        asked: u64,
    },
    Cost {
        limit: f64,
        left: f64,
        held: f64,
        asked: f64,
    },
}

impl Daily {
    /// A request bigger than a whole day's budget: no wait helps.
    pub fn never_fits(self, asked: Spend) -> Option<Over> {
        if let Some(limit) = self.tokens.filter(|&l| asked.tokens > l) {
            return Some(Over::Tokens {
                limit,
                left: limit,
                held: 0,
                asked: asked.tokens,
            });
        }
        self.cost_usd
            .filter(|&l| asked.cost_usd > l)
            .map(|limit| Over::Cost {
                limit,
                left: limit,
                held: 0.0,
                asked: asked.cost_usd,
            })
    }
}

#[derive(Debug, Default)]
struct Ledger {
    day: i64,
    spent: Spend,
    reserved: Spend,
    /// Spent changed since the last flush.
    dirty: bool,
    /// The previous day's last figures, when the day turned before they
    /// were flushed.
    unflushed: Option<(i64, Spend)>,
}

impl Ledger {
    /// Starts a new day's spend when `today` is not the ledger's day.
    /// (A clock stepped back keeps the day it had.)
    fn turn(&mut self, today: i64) {
        if today > self.day {
            if self.dirty {
                self.unflushed = Some((self.day, self.spent));
            }
            self.day = today;
            self.spent = Spend::default();
            self.dirty = false;
        }
    }
}

/// One key's spend today, shared by every generation of the config that
/// has a key of this name.
#[derive(Debug)]
pub struct Budget {
    name: String,
    ledger: Mutex<Ledger>,
}

/// Where a budget stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    pub day: i64,
    pub spent: Spend,
    pub reserved: Spend,
}

impl Budget {
    /// A budget that has spent `spent` on `day` (from the store).
    pub fn new(name: &str, day: i64, spent: Spend) -> Self {
        Budget {
            name: name.to_owned(),
            ledger: Mutex::new(Ledger {
                day,
                spent,
                ..Ledger::default()
            }),
        }
    }

    /// Reserves `asked` if it fits in what `limits` leave today.
    pub fn reserve(&self, limits: Daily, asked: Spend, today: i64) -> Result<(), Over> {
        let mut l = self.ledger.lock();
        l.turn(today);
        let used = l.spent + l.reserved;
        if let Some(limit) = limits.tokens {
            let left = limit.saturating_sub(used.tokens);
            if asked.tokens > left {
                return Err(Over::Tokens {
                    limit,
                    left,
                    held: l.reserved.tokens,
                    asked: asked.tokens,
                });
            }
        }
        if let Some(limit) = limits.cost_usd {
            let left = (limit - used.cost_usd).max(0.0);
            if asked.cost_usd > left {
                return Err(Over::Cost {
                    limit,
                    left,
                    held: l.reserved.cost_usd,
                    asked: asked.cost_usd,
                });
            }
        }
        l.reserved = l.reserved + asked;
        Ok(())
    }

    /// Records `spent` and releases `held` of the reservations; what is
    /// spent today now.
    pub fn settle(&self, held: Spend, spent: Spend, today: i64) -> Spend {
        let mut l = self.ledger.lock();
        l.turn(today);
        l.reserved = Spend {
            tokens: l.reserved.tokens.saturating_sub(held.tokens),
            cost_usd: (l.reserved.cost_usd - held.cost_usd).max(0.0),
        };
        if spent != Spend::default() {
            l.spent = l.spent + spent;
            l.dirty = true;
        }
        l.spent
    }

    pub fn standing(&self, today: i64) -> Standing {
        let mut l = self.ledger.lock();
        l.turn(today);
        Standing {
            day: l.day,
            spent: l.spent,
            reserved: l.reserved,
        }
    }

    /// The figures not yet written to the store; marked written.
    pub fn take_unflushed(&self) -> Vec<SpendRow> {
        let mut l = self.ledger.lock();
        let row = |day, s: Spend| SpendRow {
            key: self.name.clone(),
            day: day_name(day),
            tokens: s.tokens,
            cost_usd: s.cost_usd,
        };
        let mut rows: Vec<SpendRow> = l
            .unflushed
            .take()
            .map(|(d, s)| row(d, s))
            .into_iter()
            .collect();
        if l.dirty {
            l.dirty = false;
            rows.push(row(l.day, l.spent));
        }
        rows
    }

    /// A write of `rows` failed: they are unflushed again (unless newer
    /// figures have replaced them).
    pub fn unflushed_again(&self, rows: &[SpendRow]) {
        let mut l = self.ledger.lock();
        let today = day_name(l.day);
        if rows.iter().any(|r| r.day == today) {
            l.dirty = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spend(tokens: u64) -> Spend {
        Spend {
            tokens,
            cost_usd: tokens as f64 / 1000.0,
        }
    }

    #[test]
    fn reservations_fit_whole_or_not_at_all() {
        let b = Budget::new("k", 10, spend(0));
        let limits = Daily {
            tokens: Some(100),
            cost_usd: None,
        };
        assert!(b.reserve(limits, spend(60), 10).is_ok());
        assert_eq!(
            b.reserve(limits, spend(50), 10),
            Err(Over::Tokens {
                limit: 100,
                left: 40,
                held: 60,
                asked: 50
            })
        );
        // The first request spent 30 of its 60: 70 are left.
        b.settle(spend(60), spend(30), 10);
        assert!(b.reserve(limits, spend(70), 10).is_ok());
        assert!(b.reserve(limits, spend(1), 10).is_err());
        let cost = Daily {
            tokens: None,
            cost_usd: Some(0.05),
        };
        let c = Budget::new("c", 10, spend(40));
        assert!(matches!(
            c.reserve(cost, spend(20), 10),
            Err(Over::Cost { .. })
        ));
    }

    #[test]
    fn a_new_utc_day_starts_from_zero_and_keeps_yesterdays_figures_for_the_store() {
        let b = Budget::new("k", 10, spend(0));
        let limits = Daily {
            tokens: Some(100),
            cost_usd: None,
        };
        b.reserve(limits, spend(100), 10).unwrap();
        b.settle(spend(100), spend(100), 10);
        assert!(b.reserve(limits, spend(1), 10).is_err());
        assert!(b.reserve(limits, spend(100), 11).is_ok());
        let rows = b.take_unflushed();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].day.as_str(), rows[0].tokens), ("1970-01-11", 100));
        assert!(b.take_unflushed().is_empty());
    }

    #[test]
    fn days_and_their_ends() {
        let at = UNIX_EPOCH + Duration::from_secs(20_415 * DAY + 3600);
        assert_eq!(utc_day(at), 20_415);
        assert_eq!(day_name(20_415), "2025-11-23");
        assert_eq!(until_day_ends(at), Duration::from_secs(DAY - 3600));
    }
}
