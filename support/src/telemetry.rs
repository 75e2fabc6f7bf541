//! Tracing and OpenTelemetry setup: one function per binary, returning a guard that flushes.
//!
//! INTERFACE STUB: the signatures are the contract the binaries code against; the observability
//! issue fills in the bodies (OTLP export, W3C trace-context propagation over gRPC metadata).

/// How a binary wants its telemetry. Empty fields fall back to the standard `OTEL_*` variables.
#[derive(Debug, Clone, Default)]
pub struct TelemetryConfig {
    /// `service.name` (else `OTEL_SERVICE_NAME`, else the binary's name).
    pub service_name: String,
    /// OTLP gRPC endpoint (else `OTEL_EXPORTER_OTLP_ENDPOINT`); none means no export, no error.
    pub otlp_endpoint: Option<String>,
    /// `tracing_subscriber::EnvFilter` directives (else `RUST_LOG`, else `info`).
    pub log_filter: Option<String>,
    /// Log lines as JSON instead of text.
    pub json_logs: bool,
}

/// Flushes and shuts down the providers when dropped.
#[derive(Debug)]
pub struct TelemetryGuard {}

/// Errors setting up telemetry.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built from the given endpoint.
    #[error("OTLP exporter for {endpoint}: {reason}")]
    Exporter { endpoint: String, reason: String },
}

/// Sets up tracing (and OpenTelemetry export when an endpoint is configured).
pub fn init(_config: TelemetryConfig) -> Result<TelemetryGuard, TelemetryError> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    Ok(TelemetryGuard {})
}
