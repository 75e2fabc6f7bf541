//! Errors of the load generator: set-up errors (`LoadgenError`) and per-request failures
//! (`FailureKind`), which are counted, never raised.

use std::path::PathBuf;

/// Why a benchmark could not be set up. Per-request failures during a level are not errors:
/// they are counted by [`FailureKind`] in the level's report.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    /// A configuration value is out of range or inconsistent; `field` names it.
    #[error("invalid configuration: {field}: {message}")]
    Config { field: String, message: String },
    /// The base URL cannot be used (not `http://host:port[/prefix]`).
    #[error("invalid base URL {url:?}: {message}")]
    BaseUrl { url: String, message: String },
    /// A dataset or tokenizer file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A dataset file is malformed; `line` is 1-based where the format has lines.
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Dataset {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
    /// The local `tokenizer.json` could not be loaded or used.
    #[error("tokenizer {}: {message}", path.display())]
    Tokenizer { path: PathBuf, message: String },
    /// The server could not be reached or answered a set-up call (`/v1/models`, `/tokenize`) badly.
    #[error("server {url}: {message}")]
    Server { url: String, message: String },
    /// Prompts of the requested lengths could not be built.
    #[error("cannot shape prompts: {0}")]
    Shaping(String),
}

/// The class of a failed request, counted per level under [`FailureKind::key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureKind {
    /// TCP connect was refused: nothing listens on the port.
    ConnectRefused,
    /// TCP connect failed otherwise (unreachable, reset, DNS).
    Connect,
    /// The request ran past the configured request timeout.
    Timeout,
    /// The server answered with a non-200 HTTP status.
    HttpStatus(u16),
    /// The stream ended (connection closed or body finished) before `[DONE]` or a finish reason.
    StreamClosedEarly,
    /// An SSE event carried data that is not the expected JSON.
    BadJson,
    /// The stream carried an error object from the server.
    ServerError,
    /// A read or write on the connection failed mid-request.
    Io,
}

impl FailureKind {
    /// The key under which the kind is counted in `failures_by_kind`.
    pub fn key(self) -> String {
        match self {
            FailureKind::ConnectRefused => "connect_refused".into(),
            FailureKind::Connect => "connect".into(),
            FailureKind::Timeout => "timeout".into(),
            FailureKind::HttpStatus(code) => format!("http_{code}"),
            FailureKind::StreamClosedEarly => "stream_closed_early".into(),
            FailureKind::BadJson => "bad_json".into(),
            FailureKind::ServerError => "server_error".into(),
            FailureKind::Io => "io".into(),
        }
    }
}

/// A failed request: its class and a human-readable detail (first bytes of an error body, the
/// OS error, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
        }
    }
}
