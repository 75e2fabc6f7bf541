//! The HTTP server: routes, request parsing, and the hand-off to the fixed-latency bodies or the
//! engine.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::args::{SimArgs, StreamWrites};
use crate::body::{FixedStream, ModelStream, SimBody, StreamCore};
use crate::engine::Engine;
use crate::logs;
use crate::metrics::Metrics;
use crate::model::ModelParams;
use crate::sse::{Api, Renderer, StreamOpts};
use crate::timer::Timer;

/// Largest request body accepted.
const MAX_BODY: usize = 64 << 20;
/// Share of requests that stop early (finish_reason "stop") when `ignore_eos` is not set.
const EARLY_STOP_SHARE: f64 = 0.3;

/// Everything the handlers share.
pub struct AppState {
    pub args: SimArgs,
    pub params: ModelParams,
    pub model_json: String,
    pub server_info: Bytes,
    pub ready: AtomicBool,
    pub hung: AtomicBool,
    pub requests: AtomicU64,
    /// In-flight fixed-latency responses (the batch of fixed mode).
    pub active: AtomicU64,
    pub metrics: Arc<Metrics>,
    pub engine: Option<Arc<Engine>>,
    pub fixed: Option<(Duration, Duration)>,
    pub coalesced: bool,
    pub created: u64,
    /// Sub-millisecond deadlines for fixed-latency streams.
    pub timer: Arc<Timer>,
    nan_logged: AtomicBool,
    /// The prefix cache; `None` with `--disable-radix-cache`.
    pub prefix: Option<std::sync::Mutex<crate::prefix::PrefixCache>>,
    /// Draws which requests `--fail-rate` fails (and the step noise): per process unless
    /// `--noise-seed` pins it.
    pub noise_seed: u64,
}

impl AppState {
    /// Shared state for `args`; `engine` is `None` in fixed-latency mode.
    pub fn new(
        args: SimArgs,
        params: ModelParams,
        server_info: Value,
        metrics: Arc<Metrics>,
        engine: Option<Arc<Engine>>,
        timer: Arc<Timer>,
    ) -> Arc<Self> {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let args_disable_radix = args.disable_radix_cache;
        let kv_capacity = params.max_total_num_tokens;
        let noise_seed = noise_seed(&args);
        Arc::new(AppState {
            model_json: serde_json::to_string(args.served_model_name()).unwrap_or_default(),
            server_info: Bytes::from(server_info.to_string()),
            fixed: args.fixed_latency(),
            coalesced: args.stream_writes == StreamWrites::Coalesced,
            args,
            params,
            ready: AtomicBool::new(false),
            hung: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            active: AtomicU64::new(0),
            metrics,
            engine,
            created,
            timer,
            nan_logged: AtomicBool::new(false),
            prefix: (!args_disable_radix)
                .then(|| std::sync::Mutex::new(crate::prefix::PrefixCache::new(kv_capacity))),
            noise_seed,
        })
    }
}

/// The seed of the step noise and of `--fail-rate`: `--noise-seed`, else drawn per process
/// (the examples pin `--seed`, and repeats of a config must not share one drift).
pub fn noise_seed(args: &SimArgs) -> u64 {
    args.noise_seed.unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        splitmix(args.seed ^ nanos ^ (u64::from(std::process::id()) << 32))
    })
}

/// Accepts connections forever.
pub async fn serve(listener: TcpListener, state: Arc<AppState>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                logs::server(&format!("accept failed: {e}"));
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let st = state.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(st.clone(), req));
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn respond(status: StatusCode, ctype: &'static str, body: impl Into<Bytes>) -> Response<SimBody> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, ctype)
        .body(SimBody::full(body))
        .expect("static response parts")
}

fn json_resp(status: StatusCode, v: &Value) -> Response<SimBody> {
    respond(status, "application/json", v.to_string())
}

fn error(status: StatusCode, msg: &str) -> Response<SimBody> {
    json_resp(
        status,
        &json!({"object": "error", "message": msg, "type": "BadRequestError", "param": null, "code": status.as_u16()}),
    )
}

async fn handle(
    state: Arc<AppState>,
    req: Request<Incoming>,
) -> Result<Response<SimBody>, Infallible> {
    let arrival = Instant::now();
    if state.hung.load(Relaxed) {
        std::future::pending::<()>().await;
    }
    let path = req.uri().path().to_string();
    // A rank above 0 of an engine spanning hosts serves its health alone, as SGLang's do.
    if state.args.node_rank > 0 && !matches!(path.as_str(), "/health" | "/health_generate") {
        return Ok(json_resp(
            StatusCode::NOT_FOUND,
            &json!({"detail": "Not Found"}),
        ));
    }
    let resp = match (req.method(), path.as_str()) {
        (&Method::GET, "/health" | "/health_generate" | "/ready") => {
            if state.ready.load(Relaxed) {
                respond(StatusCode::OK, "text/plain", "")
            } else {
                respond(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "")
            }
        }
        (&Method::GET, "/metrics") => respond(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            state.metrics.render(state.args.served_model_name()),
        ),
        (&Method::GET, "/server_info" | "/get_server_info") => respond(
            StatusCode::OK,
            "application/json",
            state.server_info.clone(),
        ),
        (&Method::GET, "/v1/models") => json_resp(
            StatusCode::OK,
            &json!({"object": "list", "data": [{
                "id": state.args.served_model_name(), "object": "model", "created": state.created,
                "owned_by": "sglang", "root": state.args.model_path,
                "max_model_len": state.params.context_len,
            }]}),
        ),
        (&Method::GET, "/model_info" | "/get_model_info") => json_resp(
            StatusCode::OK,
            &json!({"model_path": state.args.model_path, "tokenizer_path": state.args.model_path,
                    "served_model_name": state.args.served_model_name(), "is_generation": true}),
        ),
        (&Method::POST, "/tokenize" | "/v1/tokenize") => tokenize(req).await,
        (&Method::POST, "/flush_cache") => {
            if let Some(c) = &state.prefix {
                c.lock().expect("prefix cache lock").flush();
            }
            respond(
                StatusCode::OK,
                "text/plain",
                "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n",
            )
        }
        (&Method::POST, "/v1/completions") => {
            generate(state.clone(), req, Api::Completions, arrival).await
        }
        (&Method::POST, "/v1/chat/completions") => {
            generate(state.clone(), req, Api::Chat, arrival).await
        }
        (
            _,
            "/health"
            | "/metrics"
            | "/v1/models"
            | "/tokenize"
            | "/v1/completions"
            | "/v1/chat/completions"
            | "/server_info",
        ) => error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed"),
        _ => json_resp(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"})),
    };
    Ok(resp)
}

async fn read_json(req: Request<Incoming>) -> Result<Value, Response<SimBody>> {
    let bytes = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| error(StatusCode::BAD_REQUEST, &format!("cannot read body: {e}")))?
        .to_bytes();
    serde_json::from_slice(&bytes)
        .map_err(|e| error(StatusCode::BAD_REQUEST, &format!("invalid JSON body: {e}")))
}

fn count_words(s: &str) -> u32 {
    s.split_whitespace().count() as u32
}

/// Token count of an OpenAI `prompt` (string, list of strings, token ids, lists of ids).
fn prompt_tokens(v: &Value) -> Option<u32> {
    match v {
        Value::String(s) => Some(count_words(s)),
        Value::Array(items) => {
            let mut n = 0;
            for it in items {
                n += match it {
                    Value::Number(_) => 1,
                    other => prompt_tokens(other)?,
                };
            }
            Some(n)
        }
        _ => None,
    }
}

/// Concatenated text of chat messages (string contents or text parts).
fn messages_text(v: &Value) -> Option<String> {
    let mut out = String::new();
    for m in v.as_array()? {
        match m.get("content") {
            Some(Value::String(s)) => out.push_str(s),
            Some(Value::Array(parts)) => {
                for p in parts {
                    if let Some(t) = p.get("text").and_then(Value::as_str) {
                        out.push_str(t);
                        out.push(' ');
                    }
                }
            }
            Some(Value::Null) | None => {}
            Some(_) => return None,
        }
        out.push(' ');
    }
    Some(out)
}

async fn tokenize(req: Request<Incoming>) -> Response<SimBody> {
    let v = match read_json(req).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let text = if let Some(p) = v
        .get("prompt")
        .or_else(|| v.get("content"))
        .or_else(|| v.get("text"))
    {
        match p {
            Value::String(s) => s.clone(),
            _ => return error(StatusCode::BAD_REQUEST, "'prompt' must be a string"),
        }
    } else if let Some(m) = v.get("messages") {
        match messages_text(m) {
            Some(t) => t,
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "'messages' must be a list of messages",
                );
            }
        }
    } else {
        return error(
            StatusCode::BAD_REQUEST,
            "expected 'prompt', 'content' or 'messages'",
        );
    };
    // Token ids: a stable hash of each word into a 150k vocabulary.
    let tokens: Vec<u64> = text
        .split_whitespace()
        .map(|w| {
            w.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            }) % 151_000
        })
        .collect();
    json_resp(
        StatusCode::OK,
        &json!({"count": tokens.len(), "tokens": tokens, "max_model_len": 32768}),
    )
}

#[derive(Deserialize)]
struct StreamOptionsIn {
    #[serde(default)]
    include_usage: bool,
    #[serde(default)]
    continuous_usage_stats: bool,
}

#[derive(Deserialize)]
struct GenRequest {
    prompt: Option<Value>,
    messages: Option<Value>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptionsIn>,
    #[serde(default)]
    ignore_eos: bool,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Output length and finish reason: `max_tokens`, or (seeded) an earlier stop without
/// `ignore_eos`.
fn output_len(seed: u64, req_no: u64, max_tokens: u32, ignore_eos: bool) -> (u32, &'static str) {
    if ignore_eos || max_tokens <= 1 {
        return (max_tokens, "length");
    }
    let h = splitmix(seed ^ splitmix(req_no));
    let u = (h >> 11) as f64 / (1u64 << 53) as f64;
    if u < EARLY_STOP_SHARE {
        let len = 1 + (splitmix(h) % u64::from(max_tokens - 1)) as u32;
        (len, "stop")
    } else {
        (max_tokens, "length")
    }
}

async fn generate(
    state: Arc<AppState>,
    req: Request<Incoming>,
    api: Api,
    arrival: Instant,
) -> Response<SimBody> {
    if !state.ready.load(Relaxed) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "The server is starting up");
    }
    let v = match read_json(req).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let g: GenRequest = match serde_json::from_value(v) {
        Ok(g) => g,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("invalid request: {e}")),
    };
    let text = match api {
        Api::Completions => g
            .prompt
            .as_ref()
            .and_then(|p| p.as_str().map(str::to_string)),
        Api::Chat => g.messages.as_ref().and_then(messages_text),
    };
    let prompt = match api {
        Api::Completions => match g.prompt.as_ref().and_then(prompt_tokens) {
            Some(n) => n,
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "'prompt' is required: a string, a list of strings or token ids",
                );
            }
        },
        Api::Chat => match g.messages.as_ref().and_then(messages_text) {
            Some(t) => count_words(&t),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "'messages' is required: a list of messages",
                );
            }
        },
    };
    let default_max = match api {
        Api::Completions => 16,
        Api::Chat => 128,
    };
    let max_tokens = g
        .max_tokens
        .or(g.max_completion_tokens)
        .unwrap_or(default_max)
        .max(1);
    let req_no = state.requests.fetch_add(1, Relaxed) + 1;
    if let Some(r) = crate::reqfaults::check(&state.args, state.noise_seed, req_no, prompt) {
        let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return error(status, &r.message);
    }
    let cached = match (&state.prefix, &text) {
        (Some(c), Some(t)) => c
            .lock()
            .expect("prefix cache lock")
            .lookup_insert(t)
            .min(prompt.saturating_sub(1)),
        _ => 0,
    };
    if let Some(limit) = state.args.faults.hang_after_requests
        && req_no > limit
    {
        if !state.hung.swap(true, Relaxed)
            && let Some(e) = &state.engine
        {
            e.hung.store(true, Relaxed);
        }
        std::future::pending::<()>().await;
    }
    let nan = state.args.faults.nan;
    if nan && !state.nan_logged.swap(true, Relaxed) {
        logs::info("Detected errors during sampling! NaN in the logits.");
    }
    let (n, finish) = output_len(state.args.seed, req_no, max_tokens, g.ignore_eos);
    let opts = match g.stream_options {
        Some(o) => StreamOpts {
            include_usage: o.include_usage,
            continuous_usage: o.continuous_usage_stats,
        },
        None => StreamOpts {
            include_usage: state.args.default_include_usage,
            continuous_usage: false,
        },
    };
    let renderer = Renderer::new(
        api,
        req_no,
        state.created,
        &state.model_json,
        prompt,
        &opts,
        nan,
    );
    let m = &state.metrics;
    m.requests.fetch_add(1, Relaxed);
    m.prompt_tokens.fetch_add(u64::from(prompt), Relaxed);
    m.cached_tokens.fetch_add(u64::from(cached), Relaxed);
    let core = StreamCore::new(state.clone(), renderer, arrival, n, finish, g.stream);
    let body = if let Some((ttft, itl)) = state.fixed {
        let batch = state.active.fetch_add(1, Relaxed) + 1;
        m.running.store(batch, Relaxed);
        if state.params.crashes_at(batch as u32) {
            crate::faults::crash_batch(batch as u32, state.params.backend.as_str());
        }
        m.generation_tokens.fetch_add(u64::from(n), Relaxed);
        SimBody::Fixed(Box::new(FixedStream::new(core, ttft, itl)))
    } else {
        let engine = state.engine.as_ref().expect("model mode has an engine");
        // Cached prompt tokens are not prefilled again.
        match engine.submit(prompt - cached, n, arrival) {
            Ok(slot) => SimBody::Model(Box::new(ModelStream { core, slot })),
            Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
        }
    };
    let ctype = if g.stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, ctype)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .expect("static response parts")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_counts() {
        assert_eq!(prompt_tokens(&json!("a b  c")), Some(3));
        assert_eq!(prompt_tokens(&json!([1, 2, 3, 4])), Some(4));
        assert_eq!(prompt_tokens(&json!(["a b", "c"])), Some(3));
        assert_eq!(prompt_tokens(&json!(5)), None);
        let m = json!([{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi there"}]}]);
        assert_eq!(count_words(&messages_text(&m).unwrap()), 4);
    }

    #[test]
    fn early_stop_is_seeded() {
        let lens: Vec<_> = (0..200).map(|i| output_len(7, i, 100, false)).collect();
        let again: Vec<_> = (0..200).map(|i| output_len(7, i, 100, false)).collect();
        assert_eq!(lens, again);
        let early = lens.iter().filter(|(_, f)| *f == "stop").count();
        assert!((30..90).contains(&early), "{early} early stops of 200");
        assert!(lens.iter().all(|(n, _)| (1..=100).contains(n)));
        assert!((0..50).all(|i| output_len(7, i, 100, true) == (100, "length")));
    }
}
