//! Turns an upstream's raw response into a [`Completion`] (a streamed one
//! becomes a committed [`ChunkStream`](crate::model::ChunkStream) in
//! `super::relay`), enforcing the attempt's deadlines and bounds and
//! keeping its [`Attempt`] up to date (usage, end, failure), for every
//! endpoint alike (the body read as its [`crate::wire::Endpoint`] says);
//! and the error of a non-2xx answer.
//!
//! Nothing an upstream sends is trusted: a body or an event past its size
//! bound, a 200 that is not an answer (`{}`, `[]`, invalid UTF-8), a
//! whole answer that does not say it ended (no `finish_reason`: a cut,
//! retried like one) and a stream that stalls between events are
//! failures of the attempt. Every
//! byte the upstream wrote is redacted before anything reads it: error
//! text before it becomes part of an error ([`Exchange`]), a whole body
//! once, each stream event as it arrives (with a carry-over between
//! events). Stream events are relayed one by one as they arrive, each as
//! its own bytes; only a `Retry-After` that is a number or a date is kept.

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde_json::Value;
use tokio::time::{Instant, timeout_at};

use super::exchange::Exchange;
use super::{BodyStream, RawResponse, validation};
use crate::attempt::Attempt;
use crate::error::{ModelError, TimeoutPhase, WITHHELD};
use crate::model::{Completion, ReplyBody};
use crate::stream::whole_to_stream;
use crate::wire::{Endpoint, MAX_RESPONSE, Usage, WholeBody, error_message};

/// Why a whole answer that does not say it ended is a cut.
const UNFINISHED: &str = "the answer has no finish_reason: it was cut short";

/// Largest error body read to find the upstream's message.
const MAX_ERROR_BODY: usize = 64 * 1024;

enum ReadError {
    Cut(String),
    TooLarge,
    Late,
}

/// A streamed chat call's answer from a server that ignores `stream`:
/// labelled JSON and opening an object ([`opens_object`]), it is read as
/// the whole answer it is (replayed as a stream when `relayed`), not
/// taken for a stream cut short (a failure against the server's health
/// and a second call). Anything else comes back, to be relayed.
pub async fn unstreamed(
    resp: RawResponse,
    x: &Exchange,
    attempt: &Attempt,
    relayed: bool,
) -> Result<Result<ReplyBody, ModelError>, RawResponse> {
    if !resp.json || x.endpoint != Endpoint::CHAT {
        return Err(resp);
    }
    let (object, resp) = opens_object(resp, x.first).await;
    if !object {
        return Err(resp);
    }
    Ok(whole(resp, x, attempt).await.and_then(|w| {
        if relayed {
            whole_to_stream(&w).map(ReplyBody::Stream)
        } else {
            Ok(ReplyBody::Whole(w))
        }
    }))
}

/// Whether a body labelled JSON opens an object (a whole answer), by its
/// first bytes, waited for until `by`; those bytes are put back. A body
/// that says otherwise (an event stream labelled JSON), ends, fails or is
/// late is left to the relay, which meets it as it would have.
async fn opens_object(mut resp: RawResponse, by: Instant) -> (bool, RawResponse) {
    let Ok(Some(first)) = timeout_at(by, resp.body.next()).await else {
        return (false, resp);
    };
    let object =
        matches!(&first, Ok(b) if b.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'{'));
    let rest = std::mem::replace(&mut resp.body, Box::pin(futures::stream::empty()));
    resp.body = Box::pin(futures::stream::once(async move { first }).chain(rest));
    (object, resp)
}

/// Reads a body up to `limit` bytes, checking `by` as data arrives (an
/// upstream that never pauses still meets its deadline).
async fn read_body(mut body: BodyStream, limit: usize, by: Instant) -> Result<Bytes, ReadError> {
    // A body of one part (most are) is that part, not a copy of it.
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    while let Some(part) = timeout_at(by, body.next())
        .await
        .map_err(|_| ReadError::Late)?
    {
        let part = part.map_err(|e| ReadError::Cut(e.to_string()))?;
        let held = first.as_ref().map_or(0, Bytes::len) + buf.len();
        if held + part.len() > limit {
            return Err(ReadError::TooLarge);
        }
        if first.is_none() && buf.is_empty() {
            first = Some(part);
        } else {
            if let Some(earlier) = first.take() {
                buf.extend_from_slice(&earlier);
            }
            buf.extend_from_slice(&part);
        }
        if Instant::now() >= by {
            return Err(ReadError::Late);
        }
    }
    Ok(first.unwrap_or_else(|| buf.freeze()))
}

/// A small body (a count), read by `by` within `limit` bytes; `None`
/// when it was cut, too large or late.
pub async fn small_body(body: BodyStream, limit: usize, by: Instant) -> Option<Bytes> {
    read_body(body, limit, by).await.ok()
}

/// The error for a non-2xx answer, with the upstream's own message: a
/// [`ModelError::Rejected`] for a 500 that is a request-validation error
/// ([`validation`]).
pub async fn status_error(resp: RawResponse, x: &Exchange) -> ModelError {
    let body = read_body(resp.body, MAX_ERROR_BODY, x.total)
        .await
        .unwrap_or_default();
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let err = parsed.as_ref().and_then(|v| v.get("error").or(Some(v)));
    let message = match err {
        _ if matches!(resp.status, 401 | 403) => WITHHELD.to_owned(),
        Some(e @ Value::Object(o)) if o.contains_key("message") => x.clean(&error_message(e)),
        Some(Value::String(s)) => x.clean(s),
        _ => {
            let text = String::from_utf8_lossy(&body);
            let snippet: String = text.trim().chars().take(300).collect();
            if snippet.is_empty() {
                "(empty body)".into()
            } else {
                x.clean(&snippet)
            }
        }
    };
    let code = err.and_then(|e| e.get("code")).and_then(|c| match c {
        Value::String(s) => Some(x.clean(s)),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    let text = String::from_utf8_lossy(&body);
    if let Some(r) = validation::recognise(resp.status, parsed.as_ref(), &text) {
        return ModelError::Rejected {
            upstream: x.upstream.clone(),
            status: resp.status,
            field: r.field.map(|f| x.clean(&f)),
            problem: r.problem,
            message,
        };
    }
    ModelError::Status {
        upstream: x.upstream.clone(),
        status: resp.status,
        message,
        code,
        retry_after: resp.retry_after.filter(|r| is_retry_after(r)),
    }
}

/// A `Retry-After` value: seconds or an HTTP date, nothing else.
fn is_retry_after(v: &str) -> bool {
    let v = v.trim();
    (!v.is_empty() && v.len() <= 10 && v.bytes().all(|b| b.is_ascii_digit()))
        || httpdate::parse_http_date(v).is_ok()
}

/// Reads a whole (non-streamed) answer.
pub async fn whole(
    resp: RawResponse,
    x: &Exchange,
    attempt: &Attempt,
) -> Result<Completion, ModelError> {
    let body = match read_body(resp.body, MAX_RESPONSE, x.total).await {
        Err(ReadError::Late) => return Err(x.timeout(TimeoutPhase::Total)),
        Err(ReadError::Cut(detail)) => return Err(x.cut(&detail)),
        Err(ReadError::TooLarge) => {
            return Err(x.invalid(&format!(
                "the response body is larger than {MAX_RESPONSE} bytes"
            )));
        }
        Ok(b) => x.redactor.redact_bytes(b),
    };
    let (usage, plain_text) = match x.endpoint.inspect(&body) {
        // No `finish_reason` (a null one, a Responses body still
        // `in_progress`): generation was cut short, not an answer.
        Ok(WholeBody::Answer {
            finished: false, ..
        }) => return Err(x.cut(UNFINISHED)),
        Ok(WholeBody::Answer {
            usage,
            finish_reason,
            plain_text,
            ..
        }) => {
            if let Some(r) = finish_reason {
                attempt.set_finish_reason(&r);
            }
            (usage, plain_text)
        }
        Ok(WholeBody::Error(message)) => return Err(x.reported(&message, false)),
        Err(e) => return Err(x.invalid(&format!("the body is not an answer: {e}"))),
    };
    if let Some(u) = usage {
        attempt.set_usage(u);
    }
    // A plain answer's summary was read with its usage: one pass.
    let summarize = attempt.wants_summary();
    if let Some(text) = plain_text.filter(|_| usage.is_some() && summarize) {
        attempt.add_summary(&text);
    } else if usage.is_none() || summarize {
        let out = x.endpoint.output(&body).unwrap_or_default();
        if usage.is_none() {
            let output = out.text.len()
                + out
                    .tool_calls
                    .iter()
                    .map(|t| t.arguments.len())
                    .sum::<usize>();
            attempt.set_usage(Usage::estimate(x.input_tokens, output));
        }
        attempt.add_summary(&out.render());
    }
    attempt.finish();
    Ok(Completion { body, usage })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn body(parts: &[&'static [u8]]) -> BodyStream {
        let parts: Vec<Result<Bytes, crate::upstream::BoxError>> =
            parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        Box::pin(futures::stream::iter(parts))
    }

    #[tokio::test]
    async fn a_body_is_its_one_part_or_its_parts_joined_within_its_limit() {
        let by = Instant::now() + Duration::from_secs(5);
        let one: &'static [u8] = b"{\"a\":1}";
        let got = read_body(body(&[one]), 64, by)
            .await
            .ok()
            .unwrap_or_default();
        // The part itself, not a copy.
        assert_eq!(got.as_ptr(), one.as_ptr());
        for parts in [
            &[&b"ab"[..], b"", b"cd"][..],
            &[b"", b"abcd"],
            &[b"a", b"b", b"cd"],
        ] {
            let got = read_body(body(parts), 64, by)
                .await
                .ok()
                .unwrap_or_default();
            assert_eq!(&got[..], b"abcd", "{parts:?}");
        }
        assert!(
            read_body(body(&[]), 64, by)
                .await
                .is_ok_and(|b| b.is_empty())
        );
        for parts in [&[&b"abcde"[..]][..], &[b"abc", b"de"]] {
            let over = read_body(body(parts), 4, by).await;
            assert!(matches!(over, Err(ReadError::TooLarge)), "{parts:?}");
        }
    }
}
