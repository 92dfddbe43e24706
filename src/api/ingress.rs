//! The life of one model request, the same for every dialect: admit it
//! (state, caller, body), let its dialect parse it and resolve its model
//! into a [`Job`], open its context and guard (the key's limits), bound
//! its work by the deadline and shutdown, answer in kind through the
//! dialect's [`Render`], and record it when it ends.
//!
//! A dialect (chat completions, completions and embeddings, Responses,
//! Anthropic's Messages) is a [`Dialect`]: a parse, a render and the shape
//! of its errors; it knows nothing of limits, keep-alives, telemetry or
//! shutdown. A request that asks its model for something other than an
//! answer (Anthropic's `count_tokens`) is an [`Errands`] dialect: the same
//! life, its own answer.
//!
//! This is the one admission point of every request to an upstream: a
//! model is resolved (a node, and the upstreams behind it) only through
//! an [`Admitted`], which only [`serve`] and [`serve_errand`] make, and
//! both check the key's limits and budget for the request's estimate
//! (`open`) before anything the node does runs.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::time::timeout_at;

use super::auth::Caller;
use super::error::{ApiError, ErrorStyle};
use super::guard::{RequestGuard, finish_response, request_id};
use super::render::Render;
use super::respond::{self, Work};
use super::{AppState, Gateway, body, options};
use crate::boxed::boxed;
use crate::context::{Options, RequestCtx};
use crate::error::ModelError;
use crate::governor::{RateHeaders, Refused, record_rejection};
use crate::graph::Node;
use crate::model::{Call, CallSize, Reply, Spend};
use crate::telemetry::status_label;
use crate::wire::billing::Billable;
use crate::wire::{ChatRequest, ClientBody};

/// A request received: the current state, the caller behind its
/// credentials, its headers, and its body within the limits. Enough for
/// an endpoint that runs no model (an arena vote); a model request goes
/// on only as an [`Admitted`].
pub struct Received {
    pub app: Arc<AppState>,
    pub caller: Caller,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A model request on its way through [`serve`] or [`serve_errand`]: the
/// only way to resolve a model. Made nowhere else (`_only_here`), so no
/// node is reached without its key's limits checked first.
pub struct Admitted {
    pub app: Arc<AppState>,
    pub caller: Caller,
    pub body: Bytes,
    _only_here: (),
}

impl Admitted {
    /// `r` admitted, and what its headers ask of conclave
    /// ([`options::read`]): the headers are read now and let go, while
    /// they are still in the cache. Held to the request's end, they were
    /// freed cold, every block of the map read again (`benches/cachesim.py`).
    /// A bad option header is the caller's to raise where it always was:
    /// after the dialect has read the body.
    fn new(r: Received) -> (Self, Result<Options, ApiError>) {
        let options = options::read(&r.headers);
        let admitted = Admitted {
            app: r.app,
            caller: r.caller,
            body: r.body,
            _only_here: (),
        };
        (admitted, options)
    }

    /// The node a client's `model` names, if the caller may use it. A
    /// model the caller may not use is not found, exactly as an unknown one.
    pub fn resolve(&self, model: &str) -> Result<(&Arc<str>, &Node), ApiError> {
        self.app
            .graph
            .get(model)
            .filter(|(route, _)| self.caller.may_use(route))
            .ok_or_else(|| ApiError::NotFound {
                model: model.to_owned(),
            })
    }
}

/// What a model is asked to do for a request: the call it makes, given
/// the request's first [`Call`].
pub type Run = Box<dyn FnOnce(Call) -> BoxFuture<'static, Result<Reply, ModelError>> + Send>;

/// Something to do once the request's context exists (an event to emit).
pub type OnOpen = Box<dyn FnOnce(&RequestCtx) + Send>;

/// A request read by its dialect and resolved to a node, ready to run.
pub struct Job<'a> {
    pub route: &'a Arc<str>,
    pub node: &'a Node,
    /// The request's size, for its key's limits, and how many answers
    /// it asks for.
    pub bill: Billable,
    pub answers: u64,
    /// The chat request the node will run, when it runs one: its fields
    /// may change what the node will spend ([`crate::model::ChatModel::estimate_request`]).
    pub request: Option<Arc<ChatRequest>>,
    /// The client's body, when it is `request` written exactly: a call
    /// that sends `request` unchanged sends these bytes.
    pub client_body: Option<ClientBody>,
    pub stream: bool,
    pub run: Run,
    pub render: Box<dyn Render>,
    /// Response headers the dialect adds (a warning).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub on_open: Option<OnOpen>,
}

/// Names the built-in tool types left out of a translated request.
pub const DROPPED_TOOLS: HeaderName = HeaderName::from_static("x-conclave-dropped-tools");

/// What a translated request that left out the built-in tools `names`
/// answers with: the `x-conclave-dropped-tools` header, and a
/// `tools_dropped` event once its context exists.
pub fn dropped_tools(names: &[String]) -> (Vec<(HeaderName, HeaderValue)>, Option<OnOpen>) {
    if names.is_empty() {
        return (Vec::new(), None);
    }
    let header = HeaderValue::from_str(&names.join(", "))
        .ok()
        .map(|v| (DROPPED_TOOLS, v));
    let tools = names.to_vec();
    let on_open: OnOpen = Box::new(move |ctx| {
        if ctx.events_enabled() {
            let mut f = serde_json::Map::new();
            f.insert("tools".into(), Value::from(tools));
            ctx.emit("tools_dropped", f);
        }
    });
    (header.into_iter().collect(), Some(on_open))
}

/// One API dialect's request side: its body read into a [`Job`].
#[async_trait]
pub trait Dialect: Send + Sync {
    async fn job<'a>(&self, admitted: &'a Admitted) -> Result<Job<'a>, ApiError>;

    /// The shape its clients read errors in.
    fn errors(&self) -> ErrorStyle {
        ErrorStyle::OpenAi
    }
}

/// Serves one model request of `dialect`, start to end. The request is
/// taken apart before the future is made, so that the future holds its
/// headers and body, not the whole request and its parts beside them:
/// every request's future is allocated and written whole, and this one
/// was twice the size (`-Zprint-type-sizes`). Inlined, so that the
/// future is written where its caller keeps it (a box, [`boxed`]): made
/// out of line, it was written on the stack and copied into the box
/// whole, 1.5 KiB of a block just handed out (`benches/cachesim.py`).
///
/// [`boxed`]: crate::boxed::boxed
#[inline(always)]
pub fn serve(
    gw: Arc<Gateway>,
    req: Request,
    dialect: &'static dyn Dialect,
) -> impl Future<Output = Response> + Send + 'static {
    // Taken apart, not extracted: axum's `HeaderMap` extractor clones.
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let id = request_id(&headers);
    async move {
        let resp = answer(&gw, headers, body, dialect, &id).await;
        finish_response(&gw, resp, &id, dialect.errors())
    }
}

/// [`serve`]'s answer, or the error it ends with.
async fn answer(
    gw: &Gateway,
    headers: HeaderMap,
    body: Body,
    dialect: &dyn Dialect,
    id: &Arc<str>,
) -> Result<Response, ApiError> {
    let (admitted, opts) = Admitted::new(receive(gw, headers, body).await?);
    let job = dialect.job(&admitted).await?;
    run(gw, &admitted, id, job, opts?, dialect.errors()).await
}

/// What an errand does once admitted, given the request's context: its
/// whole response.
pub type Answer<'a> =
    Box<dyn FnOnce(Arc<RequestCtx>) -> BoxFuture<'a, Result<Response, ApiError>> + Send + 'a>;

/// A request that asks its model for something other than an answer
/// (Anthropic's `count_tokens`), resolved: it costs no tokens, and is one
/// request to its key's `rpm` like any other.
pub struct Errand<'a> {
    pub route: &'a Arc<str>,
    pub node: &'a Node,
    pub answer: Answer<'a>,
}

/// A dialect of errands: its body read into an [`Errand`].
#[async_trait]
pub trait Errands: Send + Sync {
    async fn errand<'a>(&self, admitted: &'a Admitted) -> Result<Errand<'a>, ApiError>;

    /// The shape its clients read errors in.
    fn errors(&self) -> ErrorStyle;
}

/// Serves one errand of `dialect`, start to end: admitted by the key's
/// limits as a request that spends nothing (its `rpm` counts it), bounded
/// by the deadline and shutdown, recorded when it ends.
pub async fn serve_errand(gw: &Gateway, req: Request, dialect: &dyn Errands) -> Response {
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let id = request_id(&headers);
    let style = dialect.errors();
    let resp = async {
        let (ad, opts) = Admitted::new(receive(gw, headers, body).await?);
        let errand = dialect.errand(&ad).await?;
        let opts = opts?;
        let at = (errand.route, errand.node);
        let free = (Spend::default(), true);
        let Opened {
            ctx,
            mut guard,
            limits,
        } = open(gw, &ad.app, &id, at, ad.caller.clone(), opts, free).await?;
        let mut resp = match bounded(ctx.clone(), (errand.answer)(ctx.clone())).await {
            Ok(resp) => {
                guard.finish(status_label(resp.status().as_u16()));
                resp
            }
            Err(e) => respond::failed(e, style, &ctx, errand.node, guard),
        };
        rate_headers(resp.headers_mut(), &limits);
        Ok(resp)
    }
    .await;
    finish_response(gw, resp, &id, style)
}

/// The first steps of every request: the current state, the caller
/// behind the credentials, and the body within its limits.
pub async fn receive(gw: &Gateway, headers: HeaderMap, body: Body) -> Result<Received, ApiError> {
    let app = gw.state();
    let caller = app.keys.authenticate(&headers)?;
    let body = body::read(
        body,
        &headers,
        app.max_body_bytes,
        app.body_read_timeout,
        &gw.stop,
    )
    .await?;
    Ok(Received {
        app,
        caller,
        headers,
        body,
    })
}

/// Opens the job's request, runs its model bounded by the request, and
/// answers in kind.
async fn run(
    gw: &Gateway,
    ad: &Admitted,
    id: &Arc<str>,
    job: Job<'_>,
    opts: Options,
    style: ErrorStyle,
) -> Result<Response, ApiError> {
    let asked = Asked::new(&ad.app, job.bill, job.answers);
    let model = &job.node.model;
    let spend = match &job.request {
        Some(req) => model.estimate_request(req, asked.size),
        None => model.estimate(asked.size),
    };
    let cost = (spend, asked.capped);
    let Opened { ctx, guard, limits } = open(
        gw,
        &ad.app,
        id,
        (job.route, job.node),
        ad.caller.clone(),
        opts,
        cost,
    )
    .await?;
    if let Some(f) = job.on_open {
        f(&ctx);
    }
    if let Some(body) = job.client_body {
        ctx.keep_client_body(body);
    }
    let run = (job.run)(Call::new(ctx.clone()));
    let work: Work = boxed(|| bounded(ctx.clone(), run));
    let keepalive = respond::keepalive_for(&ad.app, job.node);
    let answer = respond::Answer {
        node: job.node,
        ctx: &ctx,
        render: job.render,
        guard,
        style,
    };
    let mut resp = if job.stream {
        respond::stream(answer, keepalive, work).await
    } else {
        respond::whole(answer, work).await
    };
    let h = resp.headers_mut();
    h.extend(job.headers);
    rate_headers(h, &limits);
    Ok(resp)
}

/// The key's `x-ratelimit-*` figures, as response headers.
fn rate_headers(h: &mut HeaderMap, limits: &RateHeaders) {
    for (name, value) in limits.pairs() {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
}

/// What a request asks of a node, for its key's limits: the size of
/// one call, and whether the client capped its output.
#[derive(Debug, Clone, Copy)]
struct Asked {
    size: CallSize,
    capped: bool,
}

impl Asked {
    /// A request billable for `bill`, its output at the gateway's
    /// assumption (times its answers) when the client set no cap.
    fn new(app: &AppState, bill: Billable, answers: u64) -> Self {
        let assumed = u64::from(app.estimate_output_tokens).saturating_mul(answers);
        Asked {
            size: CallSize {
                input: bill.input,
                images: bill.images,
                output: bill.output.unwrap_or(assumed),
            },
            capped: bill.output.is_some(),
        }
    }
}

/// An opened request: its context, the guard that records it when it
/// ends, and the key's `x-ratelimit-*` figures for its response.
struct Opened {
    ctx: Arc<RequestCtx>,
    guard: RequestGuard,
    limits: RateHeaders,
}

/// Opens a request on `route` if the caller's key lets it in (its rate
/// limits and budget, for the `estimate` of what its node may spend;
/// `capped`: the client capped its output): its context (deadline, key,
/// shutdown, access log, budget ticket) and guard. A request turned away
/// is recorded as a 429 and its rejection logged. The one admission
/// point: every request to a node passes here first.
async fn open(
    gw: &Gateway,
    app: &AppState,
    id: &Arc<str>,
    (route, node): (&Arc<str>, &Node),
    caller: Caller,
    options: Options,
    (estimate, capped): (Spend, bool),
) -> Result<Opened, ApiError> {
    let admitted = match caller.gov.as_ref() {
        Some(g) => g.admit(estimate, capped).await.map(Some),
        None => Ok(None),
    };
    let reporters = app
        .telemetry
        .reporters(id, route, node.strategy, &caller.name);
    let mut ctx = RequestCtx::new(
        id.to_owned(),
        route.clone(),
        node.strategy,
        caller.name,
        app.request_timeout,
        reporters,
        gw.hard.clone(),
    );
    // Set in place: the context is large, and each builder step moved it.
    ctx.access_log = app.access_log;
    ctx.trace = app
        .telemetry
        .tracer
        .as_ref()
        .and_then(|t| t.start(options.trace_parent.as_ref(), app.clock.now()));
    ctx.options = options;
    let mut limits = RateHeaders::default();
    let rejected = match admitted {
        Ok(admitted) => {
            if let Some(a) = admitted {
                limits = a.headers;
                if let Some(t) = a.ticket {
                    ctx.add_sink(t);
                }
            }
            if let Some(b) = app.retry_budgets.get(route) {
                ctx.count_in(b.clone());
            }
            None
        }
        Err(r) => Some(r),
    };
    let ctx = Arc::new(ctx);
    let mut guard = RequestGuard::new(ctx.clone(), app.telemetry.clone());
    if let Some(Refused::StateDown { key }) = rejected {
        guard.finish("503");
        return Err(ApiError::StateDown { key });
    }
    if let Some(Refused::Limited(r)) = rejected {
        let retry = r.retry_after.map_or(Value::Null, Value::from);
        record_rejection(&ctx, r.scope, r.limit, r.asked, &[("retry_after_s", retry)]);
        guard.finish("429");
        return Err(ApiError::Governed(r));
    }
    Ok(Opened { ctx, guard, limits })
}

/// Runs a request's work under its deadline, until shutdown's grace
/// period ends it.
async fn bounded<T, E>(
    ctx: Arc<RequestCtx>,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, ApiError>
where
    ApiError: From<E>,
{
    tokio::select! {
        // The work first (no coin to toss): an answer that is ready is given.
        biased;
        r = timeout_at(ctx.deadline, work) => match r {
            Err(_) => Err(ApiError::Timeout {
                after: ctx.deadline - ctx.started,
            }),
            Ok(r) => r.map_err(ApiError::from),
        },
        () = ctx.shutdown.cancelled() => Err(ApiError::ShuttingDown),
    }
}
