//! A key's limits in a shared Redis: one script per admission (`rpm`,
//! the daily budget and `tpm`, all or nothing) and one per settlement
//! (see [`super::scripts`] for the keys and their lifetimes). A
//! settlement never blocks its caller: it is queued, and one task sends
//! what is queued as one pipeline (so an attempt's settlement and its
//! request's release, or those of many requests under load, share a
//! round trip). One that fails (the state is down, or the request was
//! admitted unchecked under `fail_open`) is kept in memory, summed per
//! key and day, and written once the state answers again (at most
//! [`MAX_OWED`] keys and days).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use redis::Value;

use super::budget::{self, Over};
use super::rate::{InUse, Standing};
use super::scripts::Scripts;
use super::{Ask, Granted, KeyLimit, KeyLimiter, Keys, OnSpent, Refusal, Settlement, Spend, Usage};
use crate::config::KeyLimits;
use crate::store::StoreError;
use crate::store::redis::Redis;

/// Spend kept while the state is down, by key and day: at most this many.
pub const MAX_OWED: usize = 10_000;

/// How often owed spend is offered to the state again.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// A day's spend key lives this long after its last write.
const DAY_TTL_SECS: u64 = 2 * 86_400;

/// Settlements one pipeline carries at most.
const BATCH: usize = 128;

/// A settlement waiting for the queue's task.
struct Queued {
    key: RedisLimits,
    s: Settlement,
    done: OnSpent,
}

#[derive(Default)]
struct Queue {
    items: Vec<Queued>,
    /// A task is sending what is queued.
    sending: bool,
}

/// What every key's shared limits use: the connection, the scripts, and
/// the spend owed while the state was down.
pub struct Shared {
    redis: Arc<Redis>,
    scripts: Scripts,
    /// How long a reservation holds the budget unless settled.
    hold_ttl: Duration,
    owed: Mutex<HashMap<(Arc<str>, i64), Owed>>,
    queue: Mutex<Queue>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Owed {
    spent: Spend,
    tpm: i64,
    tpm_limit: u32,
}

impl Shared {
    /// The shared limits on `redis`; a reservation lasts `hold_ttl`
    /// unless settled. Starts the task that writes owed spend (call it
    /// on a tokio runtime); the task ends with the last reference.
    pub fn new(redis: Arc<Redis>, hold_ttl: Duration) -> Arc<Shared> {
        let shared = Arc::new(Shared {
            redis,
            scripts: Scripts::new(),
            hold_ttl,
            owed: Mutex::new(HashMap::new()),
            queue: Mutex::new(Queue::default()),
        });
        let weak: Weak<Shared> = Arc::downgrade(&shared);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let mut tick = tokio::time::interval(RETRY_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(s) = weak.upgrade() else { return };
                    s.pay_owed().await;
                }
            });
        }
        shared
    }

    /// The limits of key `name` on the shared state.
    pub fn key(self: &Arc<Self>, name: &str, limits: &KeyLimits) -> RedisLimits {
        RedisLimits {
            shared: self.clone(),
            name: name.into(),
            rpm: limits.rpm.unwrap_or(0),
            tpm: limits.tpm.unwrap_or(0),
        }
    }

    fn owe(&self, name: &Arc<str>, day: i64, o: Owed) {
        let mut owed = self.owed.lock();
        let full = owed.len() >= MAX_OWED;
        match owed.get_mut(&(name.clone(), day)) {
            Some(e) => {
                e.spent = e.spent + o.spent;
                e.tpm = e.tpm.saturating_add(o.tpm);
                e.tpm_limit = o.tpm_limit;
            }
            None if full => {
                tracing::error!(key = %name, "spend owed to the shared state is dropped: too much is owed");
            }
            None => {
                owed.insert((name.clone(), day), o);
            }
        }
    }

    /// Queues a settlement; starts the task that sends the queue when
    /// none runs (or owes it where there is no runtime).
    fn enqueue(self: &Arc<Self>, q: Queued) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            q.owe();
            return;
        };
        let start = {
            let mut queue = self.queue.lock();
            queue.items.push(q);
            !std::mem::replace(&mut queue.sending, true)
        };
        if start {
            let me = self.clone();
            rt.spawn(async move { me.send_queued().await });
        }
    }

    /// Sends the queue, [`BATCH`] settlements a pipeline, until it is
    /// empty; what a failed pipeline carried is owed.
    async fn send_queued(self: Arc<Self>) {
        loop {
            let batch: Vec<Queued> = {
                let mut queue = self.queue.lock();
                if queue.items.is_empty() {
                    queue.sending = false;
                    return;
                }
                let n = queue.items.len().min(BATCH);
                queue.items.drain(..n).collect()
            };
            let mut pipe = redis::pipe();
            for q in &batch {
                pipe.add_command(q.key.settle_cmd(&q.s, q.key.tpm));
            }
            match self.send_settlements(&pipe).await {
                Ok(rows) if rows.len() == batch.len() => {
                    for (q, v) in batch.into_iter().zip(rows) {
                        (q.done)(Spend {
                            tokens: int(&v, 0),
                            cost_usd: float(&v, 1),
                        });
                    }
                }
                _ => batch.into_iter().for_each(Queued::owe),
            }
        }
    }

    /// Sends a pipeline of settlements: each one's answer. A Redis that
    /// lost its scripts (it restarted) is sent the script, then the
    /// pipeline again.
    async fn send_settlements(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<Vec<Value>>, StoreError> {
        self.redis
            .pipe_script("limits_settle", pipe, &self.scripts.settle_text)
            .await
    }

    /// Writes what is owed, until the state fails again (also once more
    /// at shutdown).
    pub async fn pay_owed(self: &Arc<Self>) {
        let owed: Vec<_> = self.owed.lock().drain().collect();
        let mut rest = owed.into_iter();
        while let Some(((name, day), o)) = rest.next() {
            let key = self.key(&name, &KeyLimits::default());
            let s = Settlement {
                spent: o.spent,
                day,
                tpm: o.tpm,
                ..Settlement::default()
            };
            if key.settle_with(s, o.tpm_limit).await.is_err() {
                self.owe(&name, day, o);
                for ((name, day), o) in rest {
                    self.owe(&name, day, o);
                }
                return;
            }
        }
    }
}

/// Every key's limits on the shared state, as the state backend hands
/// them out: a key's policy when the state does not answer is its
/// `on_state_error`, else `[state] on_error`.
pub struct SharedKeys(pub Arc<Shared>);

#[async_trait]
impl Keys for SharedKeys {
    fn key(&self, name: &str, limits: &KeyLimits, _today: i64) -> KeyLimit {
        KeyLimit {
            limiter: Arc::new(self.0.key(name, limits)),
            policy: Some(limits.on_state_error.unwrap_or(self.0.redis.on_error)),
            spent: None,
        }
    }

    /// Spend is written as it is settled: nothing waits here.
    fn flush_blocking(&self) {}

    async fn finish(&self, within: Duration) {
        let _ = tokio::time::timeout(within, async {
            // Settlements spawned a moment ago are in flight now.
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.0.pay_owed().await;
        })
        .await;
    }
}

#[derive(Clone)]
pub struct RedisLimits {
    shared: Arc<Shared>,
    name: Arc<str>,
    rpm: u32,
    tpm: u32,
}

impl RedisLimits {
    fn k(&self, rest: &str) -> String {
        self.shared.redis.key(&format!("key:{}", self.name), rest)
    }

    fn spent_key(&self, day: i64) -> String {
        self.k(&format!("spent:{}", budget::day_name(day)))
    }

    /// The settlement script's `EVALSHA` for `s`.
    fn settle_cmd(&self, s: &Settlement, tpm_limit: u32) -> redis::Cmd {
        let hold = s.hold.map(|h| h.to_string()).unwrap_or_default();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.shared.scripts.settle.get_hash())
            .arg(4)
            .arg(self.k("tpm"))
            .arg(self.spent_key(s.day))
            .arg(self.k("holds"))
            .arg(self.k("held"))
            .arg(hold)
            .arg(s.release.tokens)
            .arg(s.release.cost_usd.to_string())
            .arg(u8::from(s.last))
            .arg(s.spent.tokens)
            .arg(s.spent.cost_usd.to_string())
            .arg(s.tpm)
            .arg(tpm_limit)
            .arg(DAY_TTL_SECS);
        cmd
    }

    async fn settle_with(&self, s: Settlement, tpm_limit: u32) -> Result<Spend, StoreError> {
        let mut pipe = redis::pipe();
        pipe.add_command(self.settle_cmd(&s, tpm_limit));
        let rows = self.shared.send_settlements(&pipe).await?;
        let v = rows.first().map_or(&[][..], Vec::as_slice);
        Ok(Spend {
            tokens: int(v, 0),
            cost_usd: float(v, 1),
        })
    }
}

#[async_trait]
impl KeyLimiter for RedisLimits {
    async fn admit(&self, ask: Ask) -> Result<Result<Granted, Refusal>, StoreError> {
        let budgeted = ask.daily != budget::Daily::default();
        let hold: u64 = rand::random();
        let mut call = self.shared.scripts.admit.prepare_invoke();
        call.key(self.k("rpm"))
            .key(self.k("tpm"))
            .key(self.spent_key(ask.day))
            .key(self.k("holds"))
            .key(self.k("held"))
            .arg(self.rpm)
            .arg(self.tpm)
            .arg(ask.tpm)
            .arg(u8::from(budgeted))
            .arg(
                ask.daily
                    .tokens
                    .map_or(-1, |t| i64::try_from(t).unwrap_or(i64::MAX)),
            )
            .arg(ask.daily.cost_usd.map_or("-1".into(), |c| c.to_string()))
            .arg(ask.estimate.tokens)
            .arg(ask.estimate.cost_usd.to_string())
            .arg(hold.to_string())
            .arg(u64::try_from(self.shared.hold_ttl.as_millis()).unwrap_or(u64::MAX));
        let v: Vec<Value> = self.shared.redis.script("limits_admit", &call).await?;
        let ms = |i| Duration::from_millis(int(&v, i));
        let out = match int(&v, 0) {
            0 => {
                let standing = |limit: u32, i| {
                    (limit > 0).then(|| Standing {
                        limit,
                        remaining: u32::try_from(int(&v, i)).unwrap_or(u32::MAX),
                        reset: ms(i + 1),
                    })
                };
                Ok(Granted {
                    requests: standing(self.rpm, 1),
                    tokens: standing(self.tpm, 3),
                    hold: budgeted.then_some(hold),
                    spent: Spend {
                        tokens: int(&v, 5),
                        cost_usd: float(&v, 6),
                    },
                })
            }
            1 => Err(Refusal::Rpm(ms(1))),
            2 => Err(Refusal::Budget(Over::Tokens {
                limit: ask.daily.tokens.unwrap_or(0),
                left: int(&v, 1),
                held: int(&v, 2),
                asked: ask.estimate.tokens,
            })),
            3 => Err(Refusal::Budget(Over::Cost {
                limit: ask.daily.cost_usd.unwrap_or(0.0),
                left: float(&v, 1),
                held: float(&v, 2),
                asked: ask.estimate.cost_usd,
            })),
            4 => Err(Refusal::Tpm(ms(1))),
            _ => Err(Refusal::TpmNever(ms(1))),
        };
        Ok(out)
    }

    fn settle(&self, s: Settlement, done: OnSpent) {
        self.shared.enqueue(Queued {
            key: self.clone(),
            s,
            done,
        });
    }

    async fn usage(&self, day: i64) -> Result<Usage, StoreError> {
        let mut call = self.shared.scripts.standing.prepare_invoke();
        call.key(self.spent_key(day))
            .key(self.k("holds"))
            .key(self.k("held"))
            .key(self.k("rpm"))
            .key(self.k("tpm"))
            .arg(self.rpm)
            .arg(self.tpm);
        let v: Vec<Value> = self.shared.redis.script("limits_standing", &call).await?;
        let in_use = |limit: u32, i| {
            (limit > 0).then(|| InUse {
                used: int(&v, i),
                remaining: u32::try_from(int(&v, i + 1)).unwrap_or(u32::MAX),
                reset: Duration::from_millis(int(&v, i + 2)),
            })
        };
        Ok(Usage {
            budget: budget::Standing {
                day,
                spent: Spend {
                    tokens: int(&v, 0),
                    cost_usd: float(&v, 1),
                },
                reserved: Spend {
                    tokens: int(&v, 2),
                    cost_usd: float(&v, 3),
                },
            },
            requests: in_use(self.rpm, 4),
            tokens: in_use(self.tpm, 7),
        })
    }
}

impl Queued {
    /// What it spent and the `tpm` correction are owed to the state (its
    /// reservation expires by itself).
    fn owe(self) {
        let o = Owed {
            spent: self.s.spent,
            tpm: self.s.tpm,
            tpm_limit: self.key.tpm,
        };
        if o.spent != Spend::default() || o.tpm != 0 {
            self.key.shared.owe(&self.key.name, self.s.day, o);
        }
    }
}

/// The `i`th of a script's answers as a whole number (0 if not one).
fn int(v: &[Value], i: usize) -> u64 {
    match v.get(i) {
        Some(Value::Int(n)) => u64::try_from(*n).unwrap_or(0),
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .map_or(0, |f| f.max(0.0) as u64),
        _ => 0,
    }
}

/// The `i`th of a script's answers as a number (0 if not one).
fn float(v: &[Value], i: usize) -> f64 {
    match v.get(i) {
        Some(Value::Int(n)) => *n as f64,
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|f| f.is_finite())
            .unwrap_or(0.0),
        _ => 0.0,
    }
}
