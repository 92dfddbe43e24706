//! The rows behind [`Responses`](super::Responses): where they live
//! ([`ResponseRows`], SQLite or Redis, each keeping the bounds), the
//! pending map, the one writer task that drains it into the rows in
//! batches, the periodic retention sweep, and reads (pending first, then
//! stored) of one row and of a conversation's chain. The writer and
//! `delete` take one lock (`io`) before they look at the pending map, so
//! neither sees the other half done.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::{
    BATCH, ConversationError, MAX_CONVERSATION_BYTES, MAX_HOPS, NOT_STORED_LOG, SWEEP_ROWS,
    StoredResponse,
};
use crate::clock::Clock;
use crate::config::ResponseBounds;
use crate::store::StoreError;

/// A row as stored: its JSON already text.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The name of the key that stored it.
    pub key: String,
    pub previous: Option<String>,
    /// Unix seconds.
    pub created: i64,
    pub expires: i64,
    /// The JSON array of its own input items.
    pub input: String,
    /// The response object, JSON.
    pub output: String,
}

impl Row {
    pub(super) fn live(&self, key: &str, now: i64) -> bool {
        self.key == key && self.expires > now
    }

    /// What row `id` counts toward the bounds: the bytes of its stored
    /// text (id, key name, `previous`, input and response JSON).
    pub fn size(&self, id: &str) -> u64 {
        let n = id.len()
            + self.key.len()
            + self.previous.as_ref().map_or(0, String::len)
            + self.input.len()
            + self.output.len();
        u64::try_from(n).unwrap_or(u64::MAX)
    }
}

/// What a write did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// Rows stored.
    pub stored: usize,
    /// Older rows of the writing keys evicted to make room.
    pub evicted: usize,
    /// Ids not stored: the row alone cannot fit its key's bound, or would
    /// need room that only other keys' rows hold.
    pub refused: Vec<String>,
}

/// Where stored answers' rows live.
#[async_trait]
pub trait ResponseRows: Send + Sync {
    /// Writes `batch` in order (replacing rows of the same id) within
    /// `bounds`: before a row is stored, its own key's oldest rows are
    /// evicted until it fits; a row that would not fit once they all were
    /// (or that alone exceeds its key's bytes) is not stored. Another
    /// key's row is never evicted.
    async fn write(
        &self,
        batch: &[(String, Arc<Row>)],
        bounds: ResponseBounds,
    ) -> Result<Written, StoreError>;
    /// Deletes up to [`SWEEP_ROWS`] rows expired at `now`: how many.
    async fn sweep(&self, now: i64) -> Result<usize, StoreError>;
    /// Row `id` if the key named `key` stored it and it is live at `now`.
    async fn read(&self, id: &str, key: &str, now: i64) -> Result<Option<Row>, StoreError>;
    /// Deletes row `id` if the key named `key` stored it: its `expires`.
    async fn delete(&self, id: &str, key: &str) -> Result<Option<i64>, StoreError>;
    /// Where the rows are, for error messages (no secret).
    fn shown(&self) -> String;
}

#[derive(Default)]
pub(super) struct Pending {
    pub(super) rows: HashMap<String, Arc<Row>>,
    /// The sizes of `rows`, summed.
    pub(super) bytes: u64,
    /// Ids in the order they were put; one no longer in `rows` is skipped.
    pub(super) queue: VecDeque<String>,
    /// A writer is draining `queue`.
    pub(super) writing: bool,
    /// The bounds the newest put was given (a reload's), which the
    /// writer keeps.
    pub(super) bounds: ResponseBounds,
}

impl Pending {
    /// Takes row `id` out.
    pub(super) fn remove(&mut self, id: &str) -> Option<Arc<Row>> {
        let row = self.rows.remove(id)?;
        self.bytes = self.bytes.saturating_sub(row.size(id));
        Some(row)
    }

    /// Puts row `id` in (replacing one of the same id).
    pub(super) fn insert(&mut self, id: String, row: Arc<Row>) {
        self.remove(&id);
        self.bytes = self.bytes.saturating_add(row.size(&id));
        self.rows.insert(id.clone(), row);
        self.queue.push_back(id);
    }
}

pub(super) struct Inner {
    pub(super) rows: Arc<dyn ResponseRows>,
    pub(super) clock: Clock,
    pub(super) pending: Mutex<Pending>,
    /// Held by the writer from taking a batch to writing it, and by
    /// `delete`.
    pub(super) io: tokio::sync::Mutex<()>,
}

impl Inner {
    /// Writes pending rows until none is left (the writer; one at a time).
    pub(super) async fn drain(&self) {
        loop {
            let io = self.io.lock().await;
            let (batch, bounds): (Vec<(String, Arc<Row>)>, _) = {
                let mut p = self.pending.lock();
                if p.queue.is_empty() {
                    p.writing = false;
                    return;
                }
                let n = p.queue.len().min(BATCH);
                let ids: Vec<String> = p.queue.drain(..n).collect();
                let batch = ids
                    .into_iter()
                    .filter_map(|id| p.rows.get(&id).cloned().map(|r| (id, r)))
                    .collect();
                (batch, p.bounds)
            };
            if !batch.is_empty() {
                match self.rows.write(&batch, bounds).await {
                    Ok(w) => {
                        for id in &w.refused {
                            not_stored(
                                id,
                                "it does not fit the bounds of stored responses without evicting another key's",
                            );
                        }
                    }
                    Err(e) => {
                        if let Some(held) = NOT_STORED_LOG.allow() {
                            tracing::error!(
                                held_back = held,
                                "{} responses could not be stored and are lost: {e}",
                                batch.len()
                            );
                        }
                    }
                }
            }
            drop(io);
            let mut p = self.pending.lock();
            for (id, row) in &batch {
                if p.rows.get(id).is_some_and(|r| Arc::ptr_eq(r, row)) {
                    p.remove(id);
                }
            }
        }
    }

    /// Deletes the rows expired at `now`, [`SWEEP_ROWS`] at a time, at
    /// most `rounds` times: how many.
    pub(super) async fn sweep(&self, now: i64, rounds: usize) -> usize {
        let mut gone = 0;
        for _ in 0..rounds {
            match self.rows.sweep(now).await {
                Ok(n) => {
                    gone += n;
                    if n < SWEEP_ROWS {
                        break;
                    }
                }
                Err(e) => {
                    tracing::error!("expired responses could not be deleted (will retry): {e}");
                    break;
                }
            }
        }
        gone
    }

    pub(super) fn decode(&self, row: &Row, id: &str) -> Result<StoredResponse, StoreError> {
        let json = |e| StoreError::Json {
            path: self.rows.shown(),
            source: e,
        };
        Ok(StoredResponse {
            id: id.to_owned(),
            key: row.key.clone(),
            previous: row.previous.clone(),
            input: serde_json::from_str(&row.input).map_err(json)?,
            response: serde_json::from_str(&row.output).map_err(json)?,
        })
    }

    /// Row `id` of `key`, live at `now`: pending first, then stored.
    pub(super) async fn row(
        &self,
        id: &str,
        key: &str,
        now: i64,
    ) -> Result<Option<Arc<Row>>, StoreError> {
        if let Some(row) = self.pending.lock().rows.get(id) {
            return Ok(row.live(key, now).then(|| row.clone()));
        }
        Ok(self.rows.read(id, key, now).await?.map(Arc::new))
    }

    /// The rows from `id` back along `previous`, newest first, within
    /// [`MAX_HOPS`] and [`MAX_CONVERSATION_BYTES`].
    #[allow(clippy::type_complexity)]
    pub(super) async fn chain(
        &self,
        id: &str,
        key: &str,
        now: i64,
    ) -> Result<Option<Vec<(String, Arc<Row>)>>, ConversationError> {
        let mut chain: Vec<(String, Arc<Row>)> = Vec::new();
        let (mut next, mut bytes) = (Some(id.to_owned()), 0usize);
        while let Some(id) = next.take() {
            if chain.len() == MAX_HOPS {
                return Err(ConversationError::TooManyHops);
            }
            let Some(row) = self.row(&id, key, now).await? else {
                break;
            };
            bytes = bytes.saturating_add(row.input.len() + row.output.len());
            if bytes > MAX_CONVERSATION_BYTES {
                return Err(ConversationError::TooLarge);
            }
            next = row.previous.clone();
            chain.push((id, row));
        }
        Ok((!chain.is_empty()).then_some(chain))
    }
}

/// Logs that the answer `id` was not stored, and `why` (at most one such
/// line per period).
pub(super) fn not_stored(id: &str, why: &str) {
    if let Some(held) = NOT_STORED_LOG.allow() {
        tracing::warn!(response = %id, held_back = held, "the response was not stored: {why}");
    }
}
