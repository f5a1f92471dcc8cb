//! `lutra serve`: an OpenAI-compatible HTTP server (`/v1/chat/completions`,
//! `/v1/completions`, `/v1/models`, `/health`) over `--parallel` sessions of one model.
//! HTTP runs on tokio; the engine on its own thread (`slots`), fed through a bounded queue.

mod api;
mod slots;
mod stop;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use http_body_util::BodyExt;
use lutra::engine::DEFAULT_CONTEXT;
use lutra::Role;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use api::{ApiError, ChatRequest, CompletionRequest, Content, Prompt, Settings};
use slots::{Event, Job, Scheduler, SlotOptions, Summary};

use super::{default_threads, AttentionArgs, ModelArgs};

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0 exposes the server to the network)
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0: any free one; the address is printed)
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sessions kept at once: requests beyond them wait in the queue
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Positions of each session, at most the model's own
    #[arg(long, default_value_t = DEFAULT_CONTEXT)]
    ctx: usize,
    #[arg(short, long, default_value_t = default_threads())]
    threads: usize,
    /// Requests that may wait for a session; beyond them the server answers 503 with Retry-After
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Require `Authorization: Bearer KEY` on /v1 routes (default: LUTRA_API_KEY if set)
    #[arg(long, env = "LUTRA_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Largest request body in bytes; larger ones get 413
    #[arg(long, default_value_t = 8 << 20)]
    max_body: usize,
    /// Connections served at once; more wait in the listen backlog
    #[arg(long, default_value_t = 256)]
    max_connections: usize,
    /// The model's name in /v1/models and in requests (default: the file name without extension)
    #[arg(long)]
    alias: Option<String>,
    #[command(flatten)]
    attention: AttentionArgs,
}

struct AppState {
    model: lutra::Model,
    id: String,
    created: u64,
    context: usize,
    scheduler: Scheduler,
    api_key: Option<String>,
    max_body: usize,
    next_id: AtomicU64,
}

pub fn serve(a: ServeArgs) -> Result<(), String> {
    if a.parallel == 0 || a.queue == 0 || a.max_connections == 0 {
        return Err("--parallel, --queue and --max-connections must be at least 1".into());
    }
    let (attention, values) = (a.attention.choice()?, a.attention.values()?);
    let model = a.model.load(true)?;
    let context = a.ctx.min(model.info().hparams.context_length);
    super::warn_if_codebooks_short(&attention, context);
    model.check_session_memory(context.saturating_mul(a.parallel)).map_err(|e| format!("{e} (for {} sessions)", a.parallel))?;
    let scheduler =
        slots::start(&model, SlotOptions { parallel: a.parallel, context, threads: a.threads, queue: a.queue, attention, values })?;
    let id =
        a.alias.clone().unwrap_or_else(|| a.model.model.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned()));
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let summary = model.info().summary();
    let state = Arc::new(AppState {
        model,
        id,
        created,
        context,
        scheduler,
        api_key: a.api_key.filter(|k| !k.is_empty()),
        max_body: a.max_body,
        next_id: AtomicU64::new(0),
    });
    let router = Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), authorize))
        .layer(axum::middleware::from_fn(log_request))
        .with_state(state.clone());

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the server's runtime: {e}"))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
            .await
            .map_err(|e| format!("cannot listen on {}:{}: {e}", a.host, a.port))?;
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        eprintln!(
            "lutra serve: {summary}; {} session(s) of {context} positions, {} threads\nlistening on http://{address}",
            a.parallel,
            a.threads.max(1)
        );
        let listener = LimitedListener { inner: listener, permits: Arc::new(Semaphore::new(a.max_connections)) };
        axum::serve(listener, router).await.map_err(|e| format!("server: {e}"))
    })
}

/// `/health` is open to all (a load balancer's check); every other route needs the key
/// when one is set.
async fn authorize(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if let (Some(key), false) = (&state.api_key, path == "/health" || path == "/v1/health") {
        let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), key.as_bytes())) {
            let message = if given.is_none() { "no API key: send Authorization: Bearer KEY" } else { "invalid API key" };
            return ApiError::new(StatusCode::UNAUTHORIZED, message).code("invalid_api_key").into_response();
        }
    }
    next.run(request).await
}

/// Compares without stopping at the first difference, so timing tells nothing of the key.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// One line per request: method, path, status and the time to the response's head.
async fn log_request(request: Request, next: Next) -> Response {
    let (method, path, t) = (request.method().clone(), request.uri().path().to_string(), Instant::now());
    let response = next.run(request).await;
    eprintln!("{method} {path} {} {:.1} ms", response.status().as_u16(), t.elapsed().as_secs_f64() * 1e3);
    response
}

async fn health(State(state): State<Arc<AppState>>) -> Json<Value> {
    let (busy, total) = state.scheduler.slots();
    Json(json!({"status": "ok", "slots_idle": total - busy, "slots_processing": busy}))
}

async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    let info = state.model.info();
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.id,
            "object": "model",
            "created": state.created,
            "owned_by": "lutra",
            "meta": {"architecture": info.architecture, "n_ctx_train": info.hparams.context_length, "n_ctx": state.context, "n_vocab": info.hparams.vocab_size},
        }],
    }))
}

async fn not_found(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no route {method} {}", uri.path()))
}

/// The body, up to `--max-body` bytes (413 beyond, whether or not Content-Length says so).
async fn read_body(state: &AppState, headers: &HeaderMap, body: Body) -> Result<axum::body::Bytes, ApiError> {
    let too_large =
        || ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is over {} bytes (--max-body)", state.max_body));
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > state.max_body as u64) {
        return Err(too_large());
    }
    match http_body_util::Limited::new(body, state.max_body).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(ApiError::bad_request(format!("cannot read the request body: {e}"))),
    }
}

impl AppState {
    fn check_model(&self, model: Option<&str>) -> Result<(), ApiError> {
        match model {
            Some(m) if !m.is_empty() && m != self.id => {
                Err(ApiError::new(StatusCode::NOT_FOUND, format!("the model '{m}' does not exist: this server runs '{}'", self.id))
                    .param("model")
                    .code("model_not_found"))
            }
            _ => Ok(()),
        }
    }

    /// Queues a generation of `prompt`; its events come through the receiver.
    fn submit(&self, prompt: Vec<u32>, settings: &Settings) -> Result<UnboundedReceiver<Event>, ApiError> {
        if prompt.is_empty() {
            return Err(ApiError::bad_request("the prompt is empty").param("prompt"));
        }
        if prompt.len() >= self.context {
            return Err(ApiError::bad_request(format!(
                "the prompt has {} tokens; the context holds {} (--ctx), and at least one must be left to generate",
                prompt.len(),
                self.context
            ))
            .code("context_length_exceeded"));
        }
        let room = self.context - prompt.len();
        let (events, receiver) = unbounded_channel();
        let job = Job {
            prompt,
            sampler: settings.sampler,
            max_tokens: settings.max_tokens.unwrap_or(room).min(room),
            stop: settings.stop.clone(),
            json: settings.json.clone(),
            events,
        };
        self.scheduler.submit(job).map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is busy: every session is generating and the queue is full; retry later",
            )
        })?;
        Ok(receiver)
    }

    fn next_id(&self, prefix: &str) -> String {
        format!("{prefix}-{:x}{:04x}", self.created, self.next_id.fetch_add(1, Ordering::Relaxed))
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Waits for the whole text of a generation.
async fn collect(mut events: UnboundedReceiver<Event>) -> Result<(String, Summary), ApiError> {
    let mut text = String::new();
    while let Some(event) = events.recv().await {
        match event {
            Event::Text(piece) => text.push_str(&piece),
            Event::Done(summary) => return Ok((text, summary)),
            Event::Failed(message) => return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)),
        }
    }
    Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the engine stopped"))
}

/// The two endpoints' streams differ only in how a piece of text is wrapped.
#[derive(Clone, Copy)]
enum Kind {
    Chat,
    Completion,
}

impl Kind {
    fn object(self, streamed: bool) -> &'static str {
        match (self, streamed) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }

    fn choice(self, text: Option<&str>, finish: Option<&str>, streamed: bool) -> Value {
        match (self, streamed) {
            (Kind::Chat, false) => json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}),
            (Kind::Chat, true) => {
                let delta = text.map_or(json!({}), |t| json!({"content": t}));
                json!({"index": 0, "delta": delta, "finish_reason": finish})
            }
            (Kind::Completion, _) => json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish}),
        }
    }
}

async fn chat_completions(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let body = read_body(&state, &headers, body).await?;
    let (request, params): (ChatRequest, api::Params) = (api::parse(&body)?, api::parse(&body)?);
    state.check_model(params.model.as_deref())?;
    let settings = api::settings(&params)?;
    let mut turns = Vec::with_capacity(request.messages.len());
    for (i, m) in request.messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(ApiError::bad_request(format!(
                    "messages[{i}]: role '{other}' is not one of system, developer, user, assistant"
                ))
                .param("messages"))
            }
        };
        let text = match &m.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for part in parts {
                    match (part.kind.as_str(), &part.text) {
                        ("text", Some(t)) => text.push_str(t),
                        (kind, _) => {
                            return Err(ApiError::bad_request(format!(
                                "messages[{i}]: content of type '{kind}' is not supported (text only)"
                            ))
                            .param("messages"))
                        }
                    }
                }
                text
            }
        };
        turns.push((role, text));
    }
    if turns.is_empty() {
        return Err(ApiError::bad_request("'messages': at least one message is needed").param("messages"));
    }
    let model = state.model.clone();
    let prompt = tokenize(move || {
        let turns: Vec<(Role, &str)> = turns.iter().map(|(r, t)| (*r, t.as_str())).collect();
        model.format_chat(&turns, true).and_then(|text| model.encode_chat_text(&text, true))
    })
    .await
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    respond(state, Kind::Chat, prompt, settings).await
}

async fn completions(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let body = read_body(&state, &headers, body).await?;
    let (request, params): (CompletionRequest, api::Params) = (api::parse(&body)?, api::parse(&body)?);
    state.check_model(params.model.as_deref())?;
    let settings = api::settings(&params)?;
    let model = state.model.clone();
    let prompt = match request.prompt {
        Prompt::Text(text) => tokenize(move || model.encode(&text, true)).await,
        Prompt::Texts(texts) if texts.len() == 1 => tokenize(move || model.encode(&texts[0], true)).await,
        Prompt::Texts(texts) => {
            return Err(
                ApiError::bad_request(format!("'prompt': {} prompts; lutra serve takes one per request", texts.len())).param("prompt")
            )
        }
        Prompt::Tokens(tokens) => {
            let vocab = state.model.vocab_size();
            match tokens.iter().find(|&&t| t as usize >= vocab) {
                Some(t) => {
                    return Err(ApiError::bad_request(format!("'prompt': token {t} is outside the vocabulary of {vocab}")).param("prompt"))
                }
                None => Ok(tokens),
            }
        }
    }
    .map_err(|e| ApiError::bad_request(e.to_string()).param("prompt"))?;
    respond(state, Kind::Completion, prompt, settings).await
}

/// Tokenizes off the async workers: a body of megabytes takes a while to encode.
async fn tokenize<F>(encode: F) -> Result<Vec<u32>, lutra::engine::Error>
where
    F: FnOnce() -> Result<Vec<u32>, lutra::engine::Error> + Send + 'static,
{
    tokio::task::spawn_blocking(encode).await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

async fn respond(state: Arc<AppState>, kind: Kind, prompt: Vec<u32>, settings: Settings) -> Result<Response, ApiError> {
    let events = state.submit(prompt, &settings)?;
    let id = state.next_id(match kind {
        Kind::Chat => "chatcmpl",
        Kind::Completion => "cmpl",
    });
    if !settings.stream {
        let (text, summary) = collect(events).await?;
        return Ok(Json(json!({
            "id": id,
            "object": kind.object(false),
            "created": now(),
            "model": state.id,
            "choices": [kind.choice(Some(&text), Some(summary.finish.as_str()), false)],
            "usage": api::usage(&summary),
            "timings": api::timings(&summary),
        }))
        .into_response());
    }
    let created = now();
    let model = state.id.clone();
    let chunk = move |choices: Value, extra: Option<(&str, Value)>| {
        let mut v = json!({"id": id, "object": kind.object(true), "created": created, "model": model, "choices": choices});
        if let Some((key, value)) = extra {
            v[key] = value;
        }
        SseEvent::default().data(v.to_string())
    };
    // the stream owns the receiver: when the client goes, the body is dropped with it and
    // the engine frees the slot at its next step
    let mut pending = std::collections::VecDeque::new();
    if let Kind::Chat = kind {
        pending.push_back(chunk(json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]), None));
    }
    let include_usage = settings.include_usage;
    let stream = futures_util::stream::unfold((events, pending, false), move |(mut events, mut pending, mut done)| {
        let chunk = chunk.clone();
        async move {
            loop {
                if let Some(event) = pending.pop_front() {
                    return Some((Ok::<_, std::convert::Infallible>(event), (events, pending, done)));
                }
                if done {
                    return None;
                }
                match events.recv().await {
                    Some(Event::Text(piece)) => pending.push_back(chunk(json!([kind.choice(Some(&piece), None, true)]), None)),
                    Some(Event::Done(summary)) => {
                        let finish = Some(summary.finish.as_str());
                        pending.push_back(chunk(json!([kind.choice(None, finish, true)]), Some(("timings", api::timings(&summary)))));
                        if include_usage {
                            pending.push_back(chunk(json!([]), Some(("usage", api::usage(&summary)))));
                        }
                        pending.push_back(SseEvent::default().data("[DONE]"));
                        done = true;
                    }
                    Some(Event::Failed(message)) => {
                        pending.push_back(
                            SseEvent::default().data(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message).body().to_string()),
                        );
                        done = true;
                    }
                    None => return None,
                }
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response())
}

/// A TCP listener that holds at most `permits` connections open; further ones wait in
/// the kernel's backlog until one closes.
struct LimitedListener {
    inner: tokio::net::TcpListener,
    permits: Arc<Semaphore>,
}

impl axum::serve::Listener for LimitedListener {
    type Io = LimitedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (LimitedStream, SocketAddr) {
        let permit = self.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
        let (stream, address) = axum::serve::Listener::accept(&mut self.inner).await;
        let _ = stream.set_nodelay(true);
        (LimitedStream { stream, _permit: permit }, address)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection and its place among the `--max-connections`, given back when it closes.
struct LimitedStream {
    stream: tokio::net::TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl tokio::io::AsyncRead for LimitedStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for LimitedStream {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
