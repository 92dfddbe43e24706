//! Stored answers' rows on the shared Redis (`[state]`): one hash per
//! answer, `{<prefix>:response}:<id>` (fields `key`, `previous`,
//! `created`, `expires`, `input`, `output`), expiring with its retention,
//! so no sweep is needed. The writer writes a batch in one pipeline; an
//! answer is deleted only by the key that stored it, in one script.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;

use super::rows::{ResponseRows, Row};
use crate::store::StoreError;
use crate::store::redis::Redis;

/// Deletes an answer if the key named `ARGV[1]` stored it, answering its
/// `expires` (nil when it was not there, or another key's).
/// KEYS: the answer's hash.
static DELETE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local k = redis.call('HGET', KEYS[1], 'key')
if k ~= ARGV[1] then return false end
local e = redis.call('HGET', KEYS[1], 'expires')
redis.call('DEL', KEYS[1])
return e
",
    )
});

pub struct RedisRows(pub Arc<Redis>);

impl RedisRows {
    fn key(&self, id: &str) -> String {
        self.0.key("response", id)
    }
}

fn bad(what: &str) -> StoreError {
    StoreError::Redis {
        op: "response_get",
        message: format!("a stored response lacks {what}"),
    }
}

#[async_trait]
impl ResponseRows for RedisRows {
    async fn write(&self, batch: &[(String, Arc<Row>)]) -> Result<(), StoreError> {
        let mut p = redis::pipe();
        for (id, r) in batch {
            let key = self.key(id);
            p.del(&key).ignore();
            let mut fields: Vec<(&str, String)> = vec![
                ("key", r.key.clone()),
                ("created", r.created.to_string()),
                ("expires", r.expires.to_string()),
                ("input", r.input.clone()),
                ("output", r.output.clone()),
            ];
            if let Some(prev) = &r.previous {
                fields.push(("previous", prev.clone()));
            }
            p.hset_multiple(&key, &fields)
                .ignore()
                .expire(&key, r.expires.saturating_sub(r.created).max(1))
                .ignore();
        }
        self.0.pipe::<()>("response_put", &p).await
    }

    async fn read(&self, id: &str, key: &str, now: i64) -> Result<Option<Row>, StoreError> {
        let mut got: HashMap<String, String> = self
            .0
            .run("response_get", redis::cmd("HGETALL").arg(self.key(id)))
            .await?;
        if got.get("key").is_none_or(|k| k != key) {
            return Ok(None);
        }
        let mut take = |f: &'static str| got.remove(f).ok_or_else(|| bad(f));
        let num = |s: String, f: &'static str| s.parse::<i64>().map_err(|_| bad(f));
        let row = Row {
            key: take("key")?,
            created: num(take("created")?, "created")?,
            expires: num(take("expires")?, "expires")?,
            input: take("input")?,
            output: take("output")?,
            previous: got.remove("previous"),
        };
        Ok((row.expires > now).then_some(row))
    }

    async fn delete(&self, id: &str, key: &str) -> Result<Option<i64>, StoreError> {
        let mut call = DELETE.prepare_invoke();
        call.key(self.key(id)).arg(key);
        let got: Option<String> = self.0.script("response_delete", &call).await?;
        Ok(got.and_then(|e| e.parse().ok()))
    }

    fn shown(&self) -> String {
        format!("Redis {}", self.0.shown())
    }
}
