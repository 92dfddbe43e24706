//! The chat completions dialect (`POST /v1/chat/completions`): the body
//! parsed once into a `ChatRequest` and run on the named node, and
//! [`ChatRender`], which writes answers as the upstream sent them (usage
//! left out of a stream unless the client asked for it, an estimated
//! usage chunk when it asked and none came, then `data: [DONE]`). It is
//! conclave's internal form, so it is also how the Completions API's
//! streams are relayed.

use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};

use super::Gateway;
use super::error::ApiError;
use super::ingress::{Admitted, Dialect, Job, serve};
use super::render::Render;
use crate::boxed::boxed;
use crate::model::Chunk;
use crate::sink::Totals;
use crate::wire::billing::{answers, check_caps};
use crate::wire::{ChatRequest, ClientBody, ReadRequest, UsageField, null_usage_span, strip_usage};

const DONE: &[u8] = b"data: [DONE]\n\n";

/// Inlined, as [`serve`] is, so that its future is built in the box
/// `Routes::answer` makes for it.
#[inline(always)]
pub fn chat_completions(
    State(gw): State<Arc<Gateway>>,
    req: Request,
) -> impl Future<Output = Response> + Send + 'static {
    serve(gw, req, &Chat)
}

struct Chat;

#[async_trait]
impl Dialect for Chat {
    async fn job<'a>(&self, ad: &'a Admitted) -> Result<Job<'a>, ApiError> {
        let ReadRequest {
            request: req,
            keys_once,
        } = read(&ad.body)?;
        let (route, node) = ad.resolve(&req.model)?;
        let model = node.model.clone();
        let render = Box::new(ChatRender::new(req.wants_stream_usage()));
        let (bill, answers, stream) = (req.billable(), answers(&req.extra), req.is_stream());
        let req = Arc::new(req);
        let client_body = keys_once.then(|| ClientBody::new(req.clone(), ad.body.clone()));
        Ok(Job {
            route,
            node,
            bill,
            answers,
            request: Some(req.clone()),
            client_body,
            stream,
            run: Box::new(move |call| boxed(move || async move { model.chat(call, req).await })),
            render,
            headers: Vec::new(),
            on_open: None,
        })
    }
}

/// Reads the body as a `ChatRequest`, with OpenAI-style messages that say
/// which field is wrong.
pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    read(body).map(|r| r.request)
}

/// [`parse`], and whether the body named each key once.
fn read(body: &[u8]) -> Result<ReadRequest, ApiError> {
    // Read once without tracking the path (a third of the cost); a body
    // that fails is read again for the path its error names.
    let read = match crate::wire::from_json::<ReadRequest>(body) {
        Ok(read) => read,
        Err(_) => read_tracked(body)?,
    };
    let req = &read.request;
    if req.model.is_empty() {
        return Err(ApiError::BadRequest {
            message: "`model` must not be empty.".into(),
            param: Some("model".into()),
            code: Some("invalid_request_body"),
        });
    }
    check_caps(&req.extra).map_err(ApiError::bad_cap)?;
    if req.messages.is_empty() {
        return Err(ApiError::BadRequest {
            message: "`messages` must contain at least one message.".into(),
            param: Some("messages".into()),
            code: Some("invalid_request_body"),
        });
    }
    Ok(read)
}

/// Reads a [`ChatRequest`] tracking the path of what is wrong in it, for
/// its error.
fn read_tracked(body: &[u8]) -> Result<ReadRequest, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let req = serde_path_to_error::deserialize::<_, ReadRequest>(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::invalid_json(&inner);
        }
        let msg = inner.to_string();
        let param = match path.as_str() {
            "." => msg
                .strip_prefix("missing field `")
                .and_then(|r| r.split('`').next())
                .map(str::to_owned),
            p => Some(p.to_owned()),
        };
        ApiError::BadRequest {
            message: format!("Invalid request body: {msg}"),
            param,
            code: Some("invalid_request_body"),
        }
    })?;
    de.end().map_err(|e| ApiError::invalid_json(&e))?;
    Ok(req)
}

/// Answers as chat completions (and completions): the upstream's bytes.
pub struct ChatRender {
    include_usage: bool,
    /// A chunk with usage went out (or there is nothing to send).
    usage_sent: bool,
    /// The last chunk relayed to an `include_usage` client: the model of
    /// an estimated usage chunk copies its `id`, `created` and `model`.
    last: Option<Bytes>,
}

impl ChatRender {
    /// `include_usage`: the client asked for usage at the end of a stream.
    pub fn new(include_usage: bool) -> Self {
        ChatRender {
            include_usage,
            usage_sent: !include_usage,
            last: None,
        }
    }
}

/// Appends one `data:` event made of `parts` (the payload, possibly in
/// pieces around an edit).
fn frame_into(out: &mut BytesMut, parts: &[&[u8]]) {
    out.reserve(parts.iter().map(|p| p.len()).sum::<usize>() + 8);
    out.put_slice(b"data: ");
    for part in parts {
        super::sse::put_data_line(out, part);
    }
    out.put_slice(b"\n\n");
}

/// The usage chunk for an `include_usage` client whose upstream reported
/// none: the request's totals, marked `"estimated": true`.
fn estimated_usage(last: Option<&Bytes>, totals: Totals) -> Bytes {
    let like: Value = last
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or(Value::Null);
    let chunk = json!({
        "id": like.get("id").cloned().unwrap_or(Value::Null),
        "object": "chat.completion.chunk",
        "created": like.get("created").cloned().unwrap_or(Value::Null),
        "model": like.get("model").cloned().unwrap_or(Value::Null),
        "choices": [],
        "usage": {
            "prompt_tokens": totals.input_tokens,
            "completion_tokens": totals.output_tokens,
            "total_tokens": totals.input_tokens + totals.output_tokens,
            "estimated": true,
        },
    });
    Bytes::from(chunk.to_string())
}

impl Render for ChatRender {
    fn whole(&mut self, completion: &Bytes, _: Totals) -> Result<Bytes, ApiError> {
        Ok(completion.clone())
    }

    /// The upstream's own bytes, with usage left out when conclave asked
    /// for it and the client did not: copied around where it sits when
    /// that is known (the scanner read the chunk) or a compact
    /// `"usage":null` is found, else the chunk re-serialised without it.
    fn chunk(&mut self, chunk: Chunk, out: &mut BytesMut) -> Result<(), ApiError> {
        let data = chunk.data;
        if self.include_usage {
            if matches!(chunk.usage, UsageField::Present(_)) {
                self.usage_sent = true;
            }
            frame_into(out, &[&data]);
            self.last = Some(data);
            return Ok(());
        }
        let usage = chunk.usage;
        if usage == UsageField::Absent {
            frame_into(out, &[&data]);
            return Ok(());
        }
        if matches!(usage, UsageField::Present(_)) && chunk.choices == 0 {
            return Ok(());
        }
        let cut = chunk
            .usage_at
            .or_else(|| null_usage_span(&data).filter(|_| usage == UsageField::Null));
        match cut.and_then(|c| Some((data.get(..c.start)?, data.get(c.end..)?))) {
            Some((before, after)) => frame_into(out, &[before, after]),
            None => {
                let edited = strip_usage(&data).unwrap_or(data);
                frame_into(out, &[&edited]);
            }
        }
        Ok(())
    }

    fn end(&mut self, totals: Totals, out: &mut BytesMut) {
        if !self.usage_sent {
            let usage = estimated_usage(self.last.as_ref(), totals);
            frame_into(out, &[&usage]);
        }
        out.put_slice(DONE);
    }

    fn fail(&mut self, error: &ApiError, out: &mut BytesMut) {
        out.put_slice(&error.sse_event());
    }
}
