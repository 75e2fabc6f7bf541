//! One HTTP/1.1 connection per stream slot (over TCP, or TLS for `https://`), driven inside the
//! slot's own task (no hand-off to a connection task per body chunk), and the streaming of one
//! request over it. The set-up calls made before a level (`setup`) and the connection's
//! transport (`transport`) are modules of their own.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;

use crate::endpoint::ClientOptions;
use crate::error::{Failure, FailureKind, LoadgenError};
use crate::sse::SseScanner;

mod setup;
mod transport;

pub(crate) use setup::{SetupClient, call_json};
pub use transport::ConnectionStats;
pub(crate) use transport::{ConnectStats, Tls};
use transport::{Io, OpenError};

/// Where requests go: the resolved address, the `Host` header, a path prefix, the TLS side of
/// an `https://` endpoint and the headers every request carries.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub addr: SocketAddr,
    pub authority: String,
    pub prefix: String,
    pub base_url: String,
    pub tls: Option<Tls>,
    /// Extra headers (an API key among them): sent with every request, set-up calls included.
    pub headers: Arc<http::HeaderMap>,
    pub stats: Arc<ConnectStats>,
}

impl Target {
    /// Parses `http[s]://host[:port][/prefix]`, checks the access options and resolves the host
    /// once. Errors name the option (`client.headers`, `client.api_key`, `client.ca_cert`).
    pub async fn resolve(base_url: &str, opts: &ClientOptions) -> Result<Target, LoadgenError> {
        let bad = |message: &str| LoadgenError::BaseUrl {
            url: base_url.to_string(),
            message: message.into(),
        };
        let option = |field: &str, message: String| LoadgenError::Config {
            field: format!("client.{field}"),
            message,
        };
        let headers = opts.header_map().map_err(|e| option(e.field, e.message))?;
        let uri: http::Uri = base_url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("expected http://host:port or https://host[:port]")),
        };
        if !https && opts.ca_cert.is_some() {
            return Err(option(
                "ca_cert",
                format!("a CA is trusted for https:// only, and {base_url} is http://"),
            ));
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let tls = if https {
            Some(Tls::new(host, opts.ca_cert.as_deref()).map_err(|m| option("ca_cert", m))?)
        } else {
            None
        };
        let addr = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?
            .next()
            .ok_or_else(|| bad(&format!("{host} resolves to no address")))?;
        Ok(Target {
            addr,
            authority: authority.as_str().to_string(),
            prefix: uri.path().trim_end_matches('/').to_string(),
            base_url: base_url.trim_end_matches('/').to_string(),
            tls,
            headers: Arc::new(headers),
            stats: Arc::default(),
        })
    }

    pub fn request(
        &self,
        method: http::Method,
        path: &str,
        body: Bytes,
    ) -> http::Request<Full<Bytes>> {
        let mut req = http::Request::new(Full::new(body));
        *req.method_mut() = method;
        *req.uri_mut() = format!("{}{}", self.prefix, path)
            .parse()
            .unwrap_or_else(|_| http::Uri::from_static("/"));
        let h = req.headers_mut();
        if let Ok(v) = http::HeaderValue::from_str(&self.authority) {
            h.insert(http::header::HOST, v);
        }
        h.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        h.insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("text/event-stream, application/json"),
        );
        for (name, value) in self.headers.iter() {
            h.append(name, value.clone());
        }
        req
    }
}

type Driver = Pin<Box<Connection<TokioIo<Io>, Full<Bytes>>>>;

/// A keep-alive connection whose driver is polled by whoever awaits on it.
pub(crate) struct Conn {
    sender: SendRequest<Full<Bytes>>,
    /// `None` once the connection has finished: a finished driver is dropped at once, because
    /// only dropping it fails the requests still queued on it (see `drive`).
    driver: Option<Driver>,
    /// No further request may go on this connection.
    closed: bool,
    /// Requests answered on this connection.
    pub served: u32,
    /// The last request failed before any response arrived.
    pub send_failed: bool,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("closed", &self.closed)
            .finish()
    }
}

pub(crate) fn connect_failure(e: &std::io::Error, addr: SocketAddr) -> Failure {
    let kind = if e.kind() == std::io::ErrorKind::ConnectionRefused {
        FailureKind::ConnectRefused
    } else {
        FailureKind::Connect
    };
    Failure::new(kind, format!("connect to {addr}: {e}"))
}

impl Conn {
    /// Opens a connection to `target` (TCP, then TLS for `https://`). A failed TLS handshake
    /// (an untrusted certificate, say) is a connect failure: no request was sent.
    pub async fn open(target: &Target) -> Result<Conn, Failure> {
        let addr = target.addr;
        let io = transport::open(addr, target.tls.as_ref(), &target.stats)
            .await
            .map_err(|e| match e {
                OpenError::Connect(e) => connect_failure(&e, addr),
                OpenError::Handshake(e) => Failure::new(
                    FailureKind::Connect,
                    format!("TLS handshake with {}: {e}", target.authority),
                ),
            })?;
        let (sender, driver) = http1::Builder::new()
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| {
                Failure::new(
                    FailureKind::Connect,
                    format!("HTTP handshake with {addr}: {e}"),
                )
            })?;
        Ok(Conn {
            sender,
            driver: Some(Box::pin(driver)),
            closed: false,
            served: 0,
            send_failed: false,
        })
    }

    /// Whether the connection can take a request. Polls the driver once so that a close by the
    /// server while the connection sat idle is noticed before a request is sent on it.
    pub async fn usable(&mut self) -> bool {
        if !self.closed {
            let Conn { driver, closed, .. } = self;
            Self::drive(driver, closed, 1, std::future::ready(())).await;
        }
        !self.closed && !self.sender.is_closed()
    }

    pub fn is_open(&self) -> bool {
        !self.closed && !self.sender.is_closed()
    }

    /// Awaits `fut` while polling the connection driver in the same task, `rounds` times per
    /// wake-up. Two rounds on the send path: the request that `fut` queues is written by the
    /// driver at once instead of after a self-wake through the scheduler's queue, which at
    /// hundreds of streams waits for a full round of every other task. Body frames need one:
    /// the driver decodes, then `fut` takes the frame.
    async fn drive<T>(
        driver: &mut Option<Driver>,
        closed: &mut bool,
        rounds: u32,
        fut: impl Future<Output = T>,
    ) -> T {
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| {
            for _ in 0..rounds {
                if let Some(d) = driver.as_mut()
                    && d.as_mut().poll(cx).is_ready()
                {
                    // The server closed the connection, perhaps just as a request was queued
                    // on it (an idle keep-alive timing out). The finished driver never takes
                    // that request, and a driver kept would leave it waiting forever; dropping
                    // it fails the request, which the caller may retry on a new connection.
                    *driver = None;
                    *closed = true;
                }
                if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                    return Poll::Ready(v);
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Sends `req`; returns the response head once it arrives. The actual send instant goes to
    /// `sent` the moment the request leaves, so a request whose answer never comes keeps it.
    pub async fn send(
        &mut self,
        req: http::Request<Full<Bytes>>,
        sent: &mut Option<Instant>,
    ) -> Result<http::Response<Incoming>, Failure> {
        self.send_failed = true;
        let Conn {
            sender,
            driver,
            closed,
            ..
        } = &mut *self;
        Self::drive(driver, closed, 2, sender.ready())
            .await
            .map_err(|e| {
                Failure::new(
                    FailureKind::StreamClosedEarly,
                    format!("connection not ready: {e}"),
                )
            })?;
        *sent = Some(Instant::now());
        let resp = Self::drive(driver, closed, 2, sender.send_request(req))
            .await
            .map_err(|e| {
                let kind = if e.is_incomplete_message() || e.is_canceled() {
                    FailureKind::StreamClosedEarly
                } else {
                    FailureKind::Io
                };
                Failure::new(kind, format!("request failed: {e}"))
            })?;
        self.send_failed = false;
        Ok(resp)
    }

    /// The next body chunk with the instant it arrived (taken before anything looks at it);
    /// `Ok(None)` at the clean end of the body.
    pub async fn next_chunk(
        &mut self,
        body: &mut Incoming,
    ) -> Result<Option<(Instant, Bytes)>, hyper::Error> {
        let Conn { driver, closed, .. } = self;
        loop {
            match Self::drive(driver, closed, 1, body.frame()).await {
                None => return Ok(None),
                Some(Err(e)) => return Err(e),
                Some(Ok(frame)) => {
                    let at = Instant::now();
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some((at, data)));
                    }
                }
            }
        }
    }

    /// Reads a whole (small) body, for error messages and set-up calls; stops at `limit` bytes.
    pub async fn read_body(
        &mut self,
        body: &mut Incoming,
        limit: usize,
    ) -> Result<Vec<u8>, hyper::Error> {
        let mut out = Vec::new();
        while let Some((_, chunk)) = self.next_chunk(body).await? {
            out.extend_from_slice(&chunk[..chunk.len().min(limit.saturating_sub(out.len()))]);
            if out.len() >= limit {
                self.closed = true; // the rest is unread: the connection cannot be reused
                break;
            }
        }
        Ok(out)
    }
}

/// What one streamed request measured. Instants are absolute; the runner makes them relative.
#[derive(Debug)]
pub(crate) struct Streamed {
    pub sent: Instant,
    pub first_byte: Option<Instant>,
    pub end: Instant,
    /// `usage` from the stream: (prompt_tokens, completion_tokens).
    pub usage: Option<(u64, u64)>,
    /// Tokens counted from content chunks (used when the server sends no usage).
    pub counted_tokens: u64,
    /// Arrival of the first answer token (after any reasoning tokens).
    pub first_answer: Option<Instant>,
}

/// Per-slot reusable buffers: the SSE scanner, and what the current request measured so far
/// (kept when it fails or times out, so its record still shows how far it got).
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    pub scanner: SseScanner,
    /// `(arrival, tokens)` of each token-bearing chunk.
    pub chunks: Vec<(Instant, u32)>,
    pub sent: Option<Instant>,
    pub first_byte: Option<Instant>,
}

impl Scratch {
    /// Forgets the previous request, keeping the buffers' capacity.
    pub fn clear(&mut self) {
        self.scanner.reset();
        self.chunks.clear();
        self.sent = None;
        self.first_byte = None;
    }
}

/// `text` with every secret (and, for `Bearer X`/`Basic X` values, the credential `X` alone)
/// replaced by `[redacted]`.
pub(crate) fn redact(text: &str, secrets: &[Vec<u8>]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        let Ok(s) = std::str::from_utf8(s) else {
            continue;
        };
        let bare = s
            .strip_prefix("Bearer ")
            .or_else(|| s.strip_prefix("Basic "))
            .unwrap_or(s);
        for needle in [s, bare] {
            if needle.len() >= 4 {
                out = out.replace(needle, "[redacted]");
            }
        }
    }
    out
}

/// Streams one request over `conn`; token-bearing chunks land in `scratch.chunks`.
pub(crate) async fn stream_request(
    conn: &mut Conn,
    req: http::Request<Full<Bytes>>,
    scratch: &mut Scratch,
) -> Result<Streamed, Failure> {
    scratch.clear();
    // The secret header values (an API key, a bearer token), to strip from an error body that
    // echoes them: error texts are stored with the results, which viewers read.
    let secrets: Vec<Vec<u8>> = req
        .headers()
        .values()
        .filter(|v| v.is_sensitive())
        .map(|v| v.as_bytes().to_vec())
        .collect();
    let resp = conn.send(req, &mut scratch.sent).await?;
    let sent = scratch.sent.expect("set by a successful send");
    let (head, mut body) = resp.into_parts();
    if head.status != http::StatusCode::OK {
        let text = conn.read_body(&mut body, 2048).await.unwrap_or_default();
        conn.closed = true;
        return Err(Failure::new(
            FailureKind::HttpStatus(head.status.as_u16()),
            format!(
                "HTTP {}: {}",
                head.status,
                redact(&String::from_utf8_lossy(&text), &secrets).trim()
            ),
        ));
    }
    let mut usage: Option<(u64, u64)> = None;
    let mut counted = 0u64;
    let mut done: Option<Instant> = None;
    let mut finished = false;
    let mut failure: Option<Failure> = None;
    let mut first_event = true;
    let mut content_without_usage = false;
    let mut first_answer: Option<Instant> = None;
    loop {
        let next = conn.next_chunk(&mut body).await;
        let (at, data) = match next {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                conn.closed = true;
                if done.is_some() {
                    break;
                }
                return Err(Failure::new(
                    FailureKind::StreamClosedEarly,
                    format!("stream broke after {counted} tokens: {e}"),
                ));
            }
        };
        scratch.first_byte.get_or_insert(at);
        if done.is_some() {
            continue; // draining the body's end so the connection can be reused
        }
        let chunks = &mut scratch.chunks;
        scratch.scanner.feed(&data, |ev, raw| {
            if ev.done {
                done = Some(at);
                return false;
            }
            if ev.malformed
                || (first_event && serde_json::from_slice::<serde::de::IgnoredAny>(raw).is_err())
            {
                failure = Some(Failure::new(
                    FailureKind::BadJson,
                    format!(
                        "bad event: {}",
                        String::from_utf8_lossy(&raw[..raw.len().min(200)])
                    ),
                ));
                return false;
            }
            first_event = false;
            if ev.error {
                failure = Some(Failure::new(
                    FailureKind::ServerError,
                    String::from_utf8_lossy(&raw[..raw.len().min(500)]).into_owned(),
                ));
                return false;
            }
            // Continuous usage (usage on every chunk) gives the exact token count of each
            // chunk. Once a chunk carried content without usage, a later usage is the final
            // summary, not a delta, and each chunk with content counts as one token.
            let tokens = match ev.usage {
                Some((_, completion)) if !content_without_usage => {
                    completion.saturating_sub(usage.map_or(0, |u| u.1))
                }
                _ => u64::from(ev.has_content),
            };
            if ev.usage.is_some() {
                usage = ev.usage;
            } else if ev.has_content {
                content_without_usage = true;
            }
            if ev.answer && first_answer.is_none() {
                first_answer = Some(at);
            }
            if tokens > 0 {
                counted += tokens;
                chunks.push((at, tokens.min(u64::from(u32::MAX)) as u32));
            }
            finished |= ev.finished;
            true
        });
        if failure.is_some() {
            conn.closed = true;
            break;
        }
    }
    if let Some(f) = failure {
        return Err(f);
    }
    let end = match done {
        Some(t) => t,
        None if finished && !conn.closed => {
            scratch.chunks.last().map_or_else(Instant::now, |c| c.0)
        }
        None => {
            conn.closed = true;
            return Err(Failure::new(
                FailureKind::StreamClosedEarly,
                format!("stream ended after {counted} tokens without [DONE]"),
            ));
        }
    };
    conn.served += 1;
    Ok(Streamed {
        sent,
        first_byte: scratch.first_byte,
        end,
        usage,
        counted_tokens: counted,
        first_answer,
    })
}

#[cfg(test)]
mod tests;
