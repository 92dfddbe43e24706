//! The streaming toolkit strategies share instead of hand-rolling:
//!
//! - [`whole_to_stream`]: a whole chat completion as the chunks a streamed
//!   client expects (for strategies that work on whole answers).
//! - [`rewrite`]: edit each chunk (set `choices[].index`, replace `model`);
//!   only the chunks the edit touches are re-serialised.
//! - [`commit_at_first_real`]: wait for the first chunk with content or a
//!   tool call (not the role-only first chunk), keeping what came before;
//!   first-of-N hedging and tool-call detection decide at that moment.
//! - [`commit_past_loading`] / [`past_loading`]: wait until the answer begins after
//!   llama-swap's loading banner, so a strategy that may still move on
//!   (a chain's `ttft_timeout`) does not commit to a model still loading.
//! - [`with_request_usage`]: a reply whose `usage` counts every call of
//!   the request (strategies that make several).
//! - [`merge`]: several streams as one, chunks in arrival order.

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, stream};
use serde_json::{Map, Value, json};

use crate::context::RequestCtx;
use crate::error::ModelError;
use crate::model::{Chunk, ChunkStream, Completion, Reply, ReplyBody};
use crate::wire::inspect_chunk;

/// A chunk made by conclave, inspected like an upstream's.
pub(crate) fn chunk_of(v: &Value) -> Result<Chunk, ModelError> {
    let data = Bytes::from(v.to_string());
    let info = inspect_chunk(&data, false).map_err(|e| ModelError::Invalid {
        upstream: "conclave".into(),
        detail: format!("a rewritten chunk is not a chunk: {e}"),
    })?;
    Ok(Chunk {
        data,
        usage: info.usage,
        usage_at: info.usage_at,
        choices: info.choices,
        real: info.real,
        loading: info.loading,
    })
}

/// A whole chat completion as a stream: a role chunk, one chunk with the
/// whole content and tool calls of each choice, a finish chunk, and a
/// usage-only chunk when the completion had usage.
pub fn whole_to_stream(c: &Completion) -> Result<ChunkStream, ModelError> {
    let v: Value = serde_json::from_slice(&c.body).map_err(|e| ModelError::Invalid {
        upstream: "conclave".into(),
        detail: format!("the answer is not JSON: {e}"),
    })?;
    let mut head = Map::new();
    for key in ["id", "created", "model", "system_fingerprint"] {
        if let Some(x) = v.get(key) {
            head.insert(key.into(), x.clone());
        }
    }
    head.insert("object".into(), json!("chat.completion.chunk"));
    let with_choices = |choices: Value| {
        let mut m = head.clone();
        m.insert("choices".into(), choices);
        Value::Object(m)
    };
    let choices = v
        .get("choices")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for (i, choice) in choices.iter().enumerate() {
        let index = choice.get("index").cloned().unwrap_or(json!(i));
        let msg = choice.get("message").cloned().unwrap_or(json!({}));
        out.push(with_choices(json!([{"index": index, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}])));
        let mut delta = Map::new();
        for key in ["content", "tool_calls", "refusal"] {
            if let Some(x) = msg.get(key).filter(|x| !x.is_null()) {
                delta.insert(key.into(), indexed_calls(key, x));
            }
        }
        if !delta.is_empty() {
            out.push(with_choices(
                json!([{"index": index, "delta": delta, "finish_reason": null}]),
            ));
        }
        let finish = choice.get("finish_reason").cloned().unwrap_or(Value::Null);
        out.push(with_choices(
            json!([{"index": index, "delta": {}, "finish_reason": finish}]),
        ));
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        let mut m = head.clone();
        m.insert("choices".into(), json!([]));
        m.insert("usage".into(), u.clone());
        out.push(Value::Object(m));
    }
    let chunks = out.iter().map(chunk_of).collect::<Result<Vec<_>, _>>()?;
    Ok(ChunkStream::replay(chunks))
}

/// Stream tool calls carry their position as `index`.
fn indexed_calls(key: &str, x: &Value) -> Value {
    match (key, x) {
        ("tool_calls", Value::Array(calls)) => Value::Array(
            calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let mut c = c.clone();
                    if let Some(o) = c.as_object_mut() {
                        o.insert("index".into(), json!(i));
                    }
                    c
                })
                .collect(),
        ),
        _ => x.clone(),
    }
}

/// Applies `edit` to every chunk; an edit that returns `false` left the
/// chunk alone and its bytes go on untouched.
pub fn rewrite(
    s: ChunkStream,
    edit: impl Fn(&mut Map<String, Value>) -> bool + Send + 'static,
) -> ChunkStream {
    ChunkStream::new(s.map(move |c| {
        let c = c?;
        let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(&c.data) else {
            return Ok(c);
        };
        if !edit(&mut obj) {
            return Ok(c);
        }
        chunk_of(&Value::Object(obj))
    }))
}

/// Sets every choice's `index` (the choices of one answer become choice
/// `index` of a combined one).
pub fn set_choice_index(obj: &mut Map<String, Value>, index: usize) -> bool {
    let Some(Value::Array(choices)) = obj.get_mut("choices") else {
        return false;
    };
    for c in choices.iter_mut().filter_map(Value::as_object_mut) {
        c.insert("index".into(), json!(index));
    }
    true
}

/// Reads `s` up to its first real chunk (content or a tool call). Returns
/// the stream replaying everything, or `None` when the stream ended (or
/// carried only usage) before any real chunk; an error before it is the
/// stream's error.
pub async fn commit_at_first_real(mut s: ChunkStream) -> Result<Option<ChunkStream>, ModelError> {
    let mut seen = Vec::new();
    while let Some(c) = s.next().await {
        let c = c?;
        let real = c.real;
        seen.push(c);
        if real {
            let replay = stream::iter(seen.into_iter().map(Ok));
            return Ok(Some(ChunkStream::new(replay.chain(s))));
        }
    }
    Ok(None)
}

/// Banner bytes kept for replay while waiting past a loading banner; more
/// are dropped (the client misses some progress dots, nothing else).
const MAX_BANNER: usize = 64 * 1024;

/// Reads `s` past llama-swap's loading banner, to the first chunk of the
/// answer. Returns the stream replaying the banner (up to [`MAX_BANNER`]
/// bytes of it) and then the answer; an error before the answer begins
/// (the first-token deadline, say) is the stream's error.
pub async fn commit_past_loading(mut s: ChunkStream) -> Result<ChunkStream, ModelError> {
    let mut banner = Vec::new();
    let mut kept = 0;
    while let Some(c) = s.next().await {
        let c = c?;
        if !c.loading {
            banner.push(c);
            return Ok(ChunkStream::new(
                stream::iter(banner.into_iter().map(Ok)).chain(s),
            ));
        }
        if kept + c.data.len() <= MAX_BANNER {
            kept += c.data.len();
            banner.push(c);
        }
    }
    Ok(ChunkStream::replay(banner))
}

/// A reply once its answer has begun: a stream is read past llama-swap's
/// loading banner ([`commit_past_loading`]).
pub async fn past_loading(mut reply: Reply) -> Result<Reply, ModelError> {
    reply.body = match reply.body {
        ReplyBody::Stream(s) => ReplyBody::Stream(commit_past_loading(s).await?),
        whole => whole,
    };
    Ok(reply)
}

/// The reply with its `usage` counting every call of the request (a
/// judge's panel, synthesis and default; a race's candidates and
/// scorers), so the client sees what the answer cost. The
/// default's own usage fields other than the three counts are kept.
pub fn with_request_usage(mut reply: Reply, ctx: Arc<RequestCtx>) -> Result<Reply, ModelError> {
    let totals = move |u: &mut Map<String, Value>| {
        let t = ctx.totals();
        u.insert("prompt_tokens".into(), json!(t.input_tokens));
        u.insert("completion_tokens".into(), json!(t.output_tokens));
        u.insert(
            "total_tokens".into(),
            json!(t.input_tokens + t.output_tokens),
        );
    };
    reply.body = match reply.body {
        ReplyBody::Stream(s) => {
            ReplyBody::Stream(rewrite(s, move |chunk| match chunk.get_mut("usage") {
                Some(Value::Object(u)) => {
                    totals(u);
                    true
                }
                _ => false,
            }))
        }
        ReplyBody::Whole(c) => {
            let mut v: Value = serde_json::from_slice(&c.body)?;
            match v.get_mut("usage") {
                Some(Value::Object(u)) => {
                    totals(u);
                    ReplyBody::Whole(Completion {
                        body: Bytes::from(serde_json::to_vec(&v)?),
                        usage: c.usage,
                    })
                }
                _ => ReplyBody::Whole(c),
            }
        }
    };
    Ok(reply)
}

/// Several streams as one, each chunk as soon as it arrives.
pub fn merge(streams: Vec<ChunkStream>) -> ChunkStream {
    ChunkStream::new(stream::select_all(streams))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn chunk(v: Value) -> Chunk {
        chunk_of(&v).unwrap()
    }

    async fn collect(s: ChunkStream) -> Vec<Value> {
        s.map(|c| serde_json::from_slice(&c.unwrap().data).unwrap())
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_whole_answer_streams_as_chunks() {
        let body = json!({"id": "x", "model": "m", "created": 1, "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 1, "completion_tokens": 2}});
        let c = Completion {
            body: Bytes::from(body.to_string()),
            usage: None,
        };
        let got = collect(whole_to_stream(&c).unwrap()).await;
        assert_eq!(got.len(), 4);
        assert_eq!(got[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(got[1]["choices"][0]["delta"]["content"], "hi");
        assert_eq!(got[1]["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
        assert_eq!(got[2]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(got[3]["usage"]["completion_tokens"], 2);
        assert!(
            got.iter()
                .all(|g| g["object"] == "chat.completion.chunk" && g["id"] == "x")
        );
    }

    #[tokio::test]
    async fn rewrite_touches_only_what_it_edits() {
        let a = chunk(json!({"choices": [{"index": 0, "delta": {"content": "a"}}]}));
        let u = chunk(json!({"choices": [], "usage": {"prompt_tokens": 1}}));
        let untouched = u.data.clone();
        let s = rewrite(ChunkStream::replay(vec![a, u]), |o| {
            o.get("choices")
                .and_then(Value::as_array)
                .is_some_and(|c| !c.is_empty())
                && set_choice_index(o, 1)
        });
        let out: Vec<Chunk> = s.map(|c| c.unwrap()).collect().await;
        assert!(String::from_utf8_lossy(&out[0].data).contains("\"index\":1"));
        assert_eq!(out[1].data, untouched);
    }

    #[tokio::test(start_paused = true)]
    async fn commit_waits_for_the_first_real_delta() {
        let role = chunk(
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
        );
        let loading = chunk(
            json!({"choices": [{"index": 0, "delta": {"reasoning_content": "loading model"}}]}),
        );
        let text = chunk(json!({"choices": [{"index": 0, "delta": {"content": "hi"}}]}));
        assert!(!role.real && !loading.real && text.real);
        let slow = stream::iter(vec![role, loading])
            .chain(stream::once(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                text
            }))
            .map(Ok);
        let t0 = tokio::time::Instant::now();
        let s = commit_at_first_real(ChunkStream::new(slow))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(t0.elapsed(), Duration::from_secs(5));
        assert_eq!(collect(s).await.len(), 3);
        let only_role = ChunkStream::replay(vec![chunk(
            json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
        )]);
        assert!(commit_at_first_real(only_role).await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn commit_waits_past_the_loading_banner_and_keeps_it() {
        let banner = |t: &str| chunk(json!({"choices": [{"delta": {"reasoning_content": t}}]}));
        let role = chunk(
            json!({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
        );
        assert!(banner(".").loading && !role.loading);
        let loading = stream::iter(vec![banner("loading"), banner(".")])
            .chain(stream::once(async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                role
            }))
            .map(Ok);
        let t0 = tokio::time::Instant::now();
        let s = commit_past_loading(ChunkStream::new(loading))
            .await
            .unwrap();
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        assert_eq!(collect(s).await.len(), 3);
        // An error before the answer begins is the commit's error.
        let failing = stream::iter(vec![
            Ok(banner("loading")),
            Err(ModelError::Invalid {
                upstream: "u".into(),
                detail: "late".into(),
            }),
        ]);
        assert!(
            commit_past_loading(ChunkStream::new(failing))
                .await
                .is_err()
        );
        // A flood of banner is kept only up to its bound.
        let big = "x".repeat(1000);
        let flood = ChunkStream::new(stream::iter((0..200).map(move |_| Ok(banner(&big)))));
        let kept = collect(commit_past_loading(flood).await.unwrap())
            .await
            .len();
        assert!(kept < 70, "{kept}");
    }

    #[tokio::test(start_paused = true)]
    async fn merge_interleaves_by_arrival() {
        let later = |ms: u64, text: &'static str| {
            ChunkStream::new(stream::once(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(chunk(
                    json!({"choices": [{"index": 0, "delta": {"content": text}}]}),
                ))
            }))
        };
        let got = collect(merge(vec![later(30, "b"), later(10, "a"), later(20, "ab")])).await;
        let texts: Vec<&str> = got
            .iter()
            .map(|g| g["choices"][0]["delta"]["content"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["a", "ab", "b"]);
    }
}
