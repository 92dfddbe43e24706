//! The connection to a shared Redis (or Valkey) state (`[state]`): one
//! multiplexed connection that reconnects by itself, every call bounded
//! by `state.timeout`, every failure counted in
//! `conclave_state_errors_total{op}`. A gateway starts while Redis is
//! down (it connects on first use) and is not ready until a call
//! succeeds; the first failure after a success is logged, and so is the
//! recovery, so an outage is two log lines, not one per request.
//!
//! Keys are `{<prefix>:<tag>}:<rest>`: what one script touches shares a
//! tag, so every script also runs on Redis Cluster, where a hash tag
//! puts keys in one slot.

use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use metrics::counter;
use redis::aio::ConnectionManager;
use redis::{Client, FromRedisValue};

use super::StoreError;
use crate::config::{OnError, StateConfig};
use crate::sink::Metrics;
use crate::telemetry::STATE_ERRORS;

/// Longest wait for a connection to be made (or made again).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

pub struct Redis {
    conn: ConnectionManager,
    /// Longest wait for one call.
    pub timeout: Duration,
    prefix: String,
    /// The configured default policy of key governors.
    pub on_error: OnError,
    /// How long a shared lane's lease lasts unless renewed.
    pub lease_ttl: Duration,
    /// The URL without its password.
    shown: String,
    metrics: Metrics,
    /// [`UNKNOWN`] before the first call, then [`UP`] or [`DOWN`]: how
    /// the last call went.
    health: AtomicU8,
}

const UNKNOWN: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

impl Redis {
    /// A client for `cfg`; it connects on first use (Redis may be down
    /// at start).
    pub fn open(cfg: &StateConfig, metrics: Metrics) -> Result<Redis, StoreError> {
        let err = |e: redis::RedisError| StoreError::Redis {
            op: "connect",
            message: format!("{} ({})", e, cfg.shown),
        };
        let client = Client::open(cfg.url.0.as_str()).map_err(err)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT.max(cfg.timeout)))
            .set_response_timeout(Some(cfg.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(err)?;
        Ok(Redis {
            conn,
            timeout: cfg.timeout,
            prefix: cfg.prefix.clone(),
            on_error: cfg.on_error,
            lease_ttl: cfg.lease_ttl,
            shown: cfg.shown.clone(),
            metrics,
            health: AtomicU8::new(UNKNOWN),
        })
    }

    /// The server, as it may be shown (no password).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Whether the last call succeeded.
    pub fn up(&self) -> bool {
        self.health.load(Ordering::Relaxed) == UP
    }

    /// `{<prefix>:<tag>}:<rest>`: keys with one `tag` share a Cluster slot.
    pub fn key(&self, tag: &str, rest: &str) -> String {
        format!(
            "{{{}:{}}}:{}",
            self.prefix,
            tag.replace(['{', '}'], "_"),
            rest
        )
    }

    /// Runs one command.
    pub async fn run<T: FromRedisValue + Send>(
        &self,
        op: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        self.bounded(op, async move { cmd.query_async(&mut conn).await })
            .await
    }

    /// Runs a pipeline (or a `MULTI`/`EXEC` transaction).
    pub async fn pipe<T: FromRedisValue + Send>(
        &self,
        op: &'static str,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        self.bounded(op, async move { pipe.query_async(&mut conn).await })
            .await
    }

    /// Runs a Lua script (by its SHA, loading it when the server lacks it).
    pub async fn script<T: FromRedisValue + Send>(
        &self,
        op: &'static str,
        call: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        self.bounded(op, async move { call.invoke_async(&mut conn).await })
            .await
    }

    /// Runs a pipeline of `EVALSHA`s of the script `text`: each one's
    /// answer. A server that lacks the script (it restarted, or its
    /// script cache was flushed) is sent it, then the pipeline again.
    pub async fn pipe_script<T: FromRedisValue + Send>(
        &self,
        op: &'static str,
        pipe: &redis::Pipeline,
        text: &str,
    ) -> Result<T, StoreError> {
        let sent = self.pipe(op, pipe).await;
        if !sent.as_ref().is_err_and(no_script) {
            return sent;
        }
        let load = redis::cmd("SCRIPT").arg("LOAD").arg(text).clone();
        self.run::<String>(op, &load).await?;
        self.pipe(op, pipe).await
    }

    /// Whether the server answers a `PING` in time.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let pong: String = self.run("ping", &redis::cmd("PING")).await?;
        match pong.as_str() {
            "PONG" => Ok(()),
            other => Err(StoreError::Redis {
                op: "ping",
                message: format!("answered {other:?} to PING"),
            }),
        }
    }

    async fn bounded<T>(
        &self,
        op: &'static str,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        let out = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(StoreError::Redis {
                op,
                message: e.to_string(),
            }),
            Err(_) => Err(StoreError::Timeout {
                op,
                after: self.timeout,
            }),
        };
        match &out {
            Ok(_) => {
                if self.health.swap(UP, Ordering::Relaxed) == DOWN {
                    tracing::info!(state = %self.shown, "the shared state answers again");
                }
            }
            Err(e) => {
                self.metrics
                    .scope(|| counter!(STATE_ERRORS, "op" => op).increment(1));
                if self.health.swap(DOWN, Ordering::Relaxed) != DOWN {
                    tracing::error!(state = %self.shown, "the shared state failed: {e}");
                }
            }
        }
        out
    }
}

/// The server did not know a script (it restarted, or its script cache
/// was flushed).
fn no_script(e: &StoreError) -> bool {
    let e = e.to_string();
    e.contains("NOSCRIPT") || e.contains("NoScript")
}

#[cfg(test)]
mod tests {
    /// `[state] url` is checked when the config is read, by the rules
    /// the client reads it by: both agree on what is a URL it can use.
    #[test]
    fn the_config_accepts_the_urls_the_client_reads() {
        for url in [
            "redis://cache:6379/0",
            "redis://:pass@cache:6380/3",
            "redis://u%C3%A9:p%20w@cache",
            "redis://%zz@cache",
            "redis://:%FF@cache",
            "redis://cache/not-a-db",
            "redis://cache:6379//2",
            "redis://0.0.0.0:6379",
            "redis://[::]:6379",
            "redis://[::1]:6379",
            "redis://cache/?protocol=resp3",
            "redis://cache/?protocol=9",
            "rediss://cache#insecure",
            "rediss://cache#other",
            "redis://cache#other",
            "valkeys://cache:6379/1",
            "unix:///tmp/redis.sock",
            "unix:///tmp/redis.sock?db=x",
            "redis+unix:///tmp/r.sock?db=2",
            "redis://",
            "http://cache:6379",
        ] {
            let config = crate::config::check_state_url(url).is_ok();
            let client = redis::Client::open(url).is_ok();
            assert_eq!(config, client, "{url}");
        }
    }
}
