//! Tracing and OpenTelemetry setup: one function per binary, returning a guard that flushes.
//!
//! [`init`] installs a `tracing` subscriber with three layers: human (or JSON) logs on stderr
//! filtered by `RUST_LOG`, and — when an OTLP endpoint is configured — the
//! `tracing-opentelemetry` layer feeding an OTLP span exporter. A meter provider exporting
//! OTLP metrics becomes the global one, so `opentelemetry::global::meter(..)` records into it.
//! Each signal goes over gRPC or HTTP/protobuf, in clear or TLS, with the headers the standard
//! `OTEL_EXPORTER_OTLP_*` variables give ([`otlp`] resolves them).
//!
//! The exporters run on a small runtime owned by the guard. The SDK's batch processors block
//! their own thread on the tonic client, which needs a tokio runtime to make progress; owning
//! that runtime means export and shutdown never depend on (or deadlock) the caller's runtime,
//! whether it is a `current_thread` test runtime or a one-worker pod.
//!
//! [`propagation`] carries the W3C trace context across gRPC calls (controller → agent).

mod http_client;
mod otlp;
pub mod propagation;

use std::fmt;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use otlp::{Protocol, SignalExport};
pub use propagation::{
    PropagateContext, TraceContextLayer, TraceContextService, extract_context, inject_context,
    inject_span_context, set_remote_parent,
};

/// The standard variable naming the OTLP endpoint for every signal.
pub const ENV_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Endpoint for traces only (takes precedence over [`ENV_OTLP_ENDPOINT`] for traces).
pub const ENV_OTLP_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// Endpoint for metrics only (takes precedence over [`ENV_OTLP_ENDPOINT`] for metrics).
pub const ENV_OTLP_METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
/// The standard variable naming the service.
pub const ENV_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// Log filter when neither the config nor `RUST_LOG` gives one.
pub const DEFAULT_LOG_FILTER: &str = "info,opentelemetry=warn,opentelemetry_sdk=warn";
/// `true` turns every exporter off (OpenTelemetry's general switch).
pub const ENV_SDK_DISABLED: &str = "OTEL_SDK_DISABLED";

/// How a binary wants its telemetry. Empty fields fall back to the standard `OTEL_*` variables.
#[derive(Debug, Clone, Default)]
pub struct TelemetryConfig {
    /// Default `service.name`. `OTEL_SERVICE_NAME` overrides it (deployments rename services
    /// through the environment); with neither, the executable's file name.
    pub service_name: String,
    /// OTLP gRPC endpoint (else `OTEL_EXPORTER_OTLP_ENDPOINT`); none means no export, no error.
    pub otlp_endpoint: Option<String>,
    /// `tracing_subscriber::EnvFilter` directives (else `RUST_LOG`, else `info`).
    pub log_filter: Option<String>,
    /// Log lines as JSON instead of text.
    pub json_logs: bool,
}

/// Flushes and shuts down the providers when dropped (tracer first, meter last).
pub struct TelemetryGuard {
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
    runtime: Option<tokio::runtime::Runtime>,
    service_name: String,
}

impl fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryGuard")
            .field("service_name", &self.service_name)
            .field("traces", &self.tracer_provider.is_some())
            .field("metrics", &self.meter_provider.is_some())
            .finish()
    }
}

/// Errors setting up telemetry.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built from the given endpoint.
    #[error("OTLP exporter for {endpoint}: {reason}")]
    Exporter { endpoint: String, reason: String },
    /// The log filter directives (from the config or `RUST_LOG`) do not parse.
    #[error("log filter {source_name} ({directives:?}): {reason}")]
    Filter {
        /// Where the directives came from: `log_filter` or `RUST_LOG`.
        source_name: &'static str,
        directives: String,
        reason: String,
    },
    /// A standard `OTEL_*` variable (or the config's endpoint) has a value that cannot be used.
    #[error("{variable}: {reason}")]
    Setting { variable: String, reason: String },
    /// The runtime that drives the exporters could not be started.
    #[error("telemetry export runtime: {0}")]
    Runtime(std::io::Error),
}

/// Sets up tracing (and OpenTelemetry export when an endpoint is configured).
///
/// Call it once per process, early in `main` (inside or outside a tokio runtime). When a global
/// subscriber is already installed (a second call in one test binary), the logs and spans keep
/// going to the first one; the returned guard still owns this call's providers.
pub fn init(config: TelemetryConfig) -> Result<TelemetryGuard, TelemetryError> {
    init_with_env(config, &|k| std::env::var(k).ok())
}

/// An OTLP exporter of either signal (`SpanExporter`, `MetricExporter`: their builders share no
/// trait) for `export`'s protocol: gRPC with its metadata and TLS, or HTTP/protobuf with its
/// headers and a client on `runtime`.
macro_rules! otlp_exporter {
    ($kind:path, $export:expr, $runtime:expr) => {{
        let export = $export;
        match export.protocol {
            Protocol::Grpc => <$kind>::builder()
                .with_tonic()
                .with_endpoint(export.endpoint.clone())
                .with_metadata(metadata(export)?)
                .with_tls_config(grpc_tls(export))
                .build(),
            Protocol::HttpProtobuf => <$kind>::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(export.endpoint.clone())
                .with_headers(export.headers.iter().cloned().collect())
                .with_http_client(http_client(export, $runtime.handle())?)
                .build(),
        }
        .map_err(|e| exporter_error(&export.endpoint, e))?
    }};
}

/// [`init`] with the `OTEL_*` variables read through `env` instead of the process environment
/// (for embedding, and for tests that must not change their process's environment).
pub fn init_with_env(
    config: TelemetryConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TelemetryGuard, TelemetryError> {
    let endpoints = otlp::resolve_endpoints(&config, env)?;
    let service_name = resolve_service_name(&config, env(ENV_SERVICE_NAME));
    let log_filter = build_log_filter(&config)?;

    let mut guard = TelemetryGuard {
        tracer_provider: None,
        meter_provider: None,
        runtime: None,
        service_name: service_name.clone(),
    };
    if endpoints.traces.is_some() || endpoints.metrics.is_some() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("otel-export")
            .enable_all()
            .build()
            .map_err(TelemetryError::Runtime)?;
        let resource = build_resource(&service_name);
        {
            // tonic's lazy channel spawns its worker on the ambient runtime: make it ours.
            let _entered = runtime.enter();
            if let Some(export) = &endpoints.traces {
                let exporter = otlp_exporter!(opentelemetry_otlp::SpanExporter, export, runtime);
                guard.tracer_provider = Some(
                    SdkTracerProvider::builder()
                        .with_resource(resource.clone())
                        .with_batch_exporter(exporter)
                        .build(),
                );
            }
            if let Some(export) = &endpoints.metrics {
                let exporter = otlp_exporter!(opentelemetry_otlp::MetricExporter, export, runtime);
                guard.meter_provider = Some(
                    SdkMeterProvider::builder()
                        .with_resource(resource)
                        .with_periodic_exporter(exporter)
                        .build(),
                );
            }
        }
        guard.runtime = Some(runtime);
    }

    let fmt_layer: Box<dyn Layer<Registry> + Send + Sync> = if config.json_logs {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_filter(log_filter)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(log_filter)
            .boxed()
    };
    let otel_layer = guard.tracer_provider.as_ref().map(|tp| {
        tracing_opentelemetry::layer()
            .with_tracer(tp.tracer("fleetbench"))
            .with_filter(span_export_filter())
    });
    let _already_set = tracing_subscriber::registry()
        .with(fmt_layer)
        .with(otel_layer)
        .try_init();

    if let Some(tp) = &guard.tracer_provider {
        opentelemetry::global::set_tracer_provider(tp.clone());
    }
    if let Some(mp) = &guard.meter_provider {
        opentelemetry::global::set_meter_provider(mp.clone());
    }
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    Ok(guard)
}

impl TelemetryGuard {
    /// The `service.name` the resource carries.
    pub fn service_name(&self) -> &str {
        &self.service_name
    }

    /// Whether spans are exported over OTLP.
    pub fn exports_traces(&self) -> bool {
        self.tracer_provider.is_some()
    }

    /// Whether metrics are exported over OTLP.
    pub fn exports_metrics(&self) -> bool {
        self.meter_provider.is_some()
    }

    /// Exports every finished span and the current metric values now (blocks until done).
    pub fn flush(&self) {
        if let Some(tp) = &self.tracer_provider
            && let Err(e) = tp.force_flush()
        {
            eprintln!("telemetry: flushing spans: {e}");
        }
        if let Some(mp) = &self.meter_provider
            && let Err(e) = mp.force_flush()
        {
            eprintln!("telemetry: flushing metrics: {e}");
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        // Tracer first: its last spans may still record metrics; meter last.
        if let Some(tp) = self.tracer_provider.take()
            && let Err(e) = tp.shutdown_with_timeout(Duration::from_secs(10))
        {
            eprintln!("telemetry: shutting down the tracer provider: {e}");
        }
        if let Some(mp) = self.meter_provider.take()
            && let Err(e) = mp.shutdown()
        {
            eprintln!("telemetry: shutting down the meter provider: {e}");
        }
        if let Some(rt) = self.runtime.take() {
            // Dropping a runtime inside another runtime's worker panics; this does not block.
            rt.shutdown_background();
        }
    }
}

/// gRPC metadata from the configured headers.
fn metadata(export: &SignalExport) -> Result<tonic::metadata::MetadataMap, TelemetryError> {
    let mut map = http::HeaderMap::new();
    for (k, v) in &export.headers {
        // Checked by `otlp::resolve_endpoints`; a failure here would be a bug there.
        let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            http::HeaderValue::from_str(v),
        ) else {
            return Err(exporter_error(&export.endpoint, format!("header {k}")));
        };
        map.append(k, v);
    }
    Ok(tonic::metadata::MetadataMap::from_headers(map))
}

/// TLS for a gRPC export: the configured CA, else the system's store. A plain `http://`
/// endpoint never uses it (tonic applies TLS to `https://` only).
fn grpc_tls(export: &SignalExport) -> tonic::transport::ClientTlsConfig {
    let tls = tonic::transport::ClientTlsConfig::new();
    match &export.ca_cert {
        Some((_, pem)) => tls.ca_certificate(tonic::transport::Certificate::from_pem(pem)),
        None => tls.with_native_roots(),
    }
}

fn http_client(
    export: &SignalExport,
    runtime: &tokio::runtime::Handle,
) -> Result<http_client::OtlpHttpClient, TelemetryError> {
    let tls = export
        .tls()
        .then(|| export.ca_cert.as_ref().map(|(_, pem)| pem.as_slice()));
    http_client::OtlpHttpClient::new(runtime.clone(), tls).map_err(|reason| match &export.ca_cert {
        Some((path, _)) => TelemetryError::Setting {
            variable: otlp::ENV_CERTIFICATE.into(),
            reason: format!("{}: {reason}", path.display()),
        },
        None => exporter_error(&export.endpoint, reason),
    })
}

fn exporter_error(endpoint: &str, e: impl fmt::Display) -> TelemetryError {
    TelemetryError::Exporter {
        endpoint: endpoint.to_string(),
        reason: e.to_string(),
    }
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn resolve_service_name(config: &TelemetryConfig, env_name: Option<String>) -> String {
    non_empty(env_name)
        .or_else(|| non_empty(Some(config.service_name.clone())))
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        })
        .unwrap_or_else(|| "fleetbench".to_string())
}

fn build_log_filter(config: &TelemetryConfig) -> Result<EnvFilter, TelemetryError> {
    let (source_name, directives) = match non_empty(config.log_filter.clone()) {
        Some(d) => ("log_filter", d),
        None => match non_empty(std::env::var("RUST_LOG").ok()) {
            Some(d) => ("RUST_LOG", d),
            // The SDK announces its own set-up at INFO; that is noise in a service's log.
            None => ("default", DEFAULT_LOG_FILTER.to_string()),
        },
    };
    EnvFilter::builder()
        .parse(&directives)
        .map_err(|e| TelemetryError::Filter {
            source_name,
            directives,
            reason: e.to_string(),
        })
}

/// Spans at INFO and above go to the collector; the exporter's own transport (tonic, h2, hyper)
/// never does, or every export would produce spans to export.
fn span_export_filter() -> Targets {
    Targets::new()
        .with_default(LevelFilter::INFO)
        .with_target("h2", LevelFilter::OFF)
        .with_target("hyper", LevelFilter::OFF)
        .with_target("hyper_util", LevelFilter::OFF)
        .with_target("tonic", LevelFilter::OFF)
        .with_target("tower", LevelFilter::OFF)
        .with_target("opentelemetry", LevelFilter::OFF)
        .with_target("opentelemetry_sdk", LevelFilter::OFF)
        .with_target("opentelemetry_otlp", LevelFilter::OFF)
}

fn build_resource(service_name: &str) -> Resource {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let mut attrs = vec![
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new(
            "service.instance.id",
            format!(
                "{}-{}",
                if host.is_empty() { "host" } else { &host },
                std::process::id()
            ),
        ),
    ];
    if !host.is_empty() {
        attrs.push(KeyValue::new("host.name", host));
    }
    // `Resource::builder()` also reads OTEL_RESOURCE_ATTRIBUTES.
    Resource::builder()
        .with_service_name(service_name.to_string())
        .with_attributes(attrs)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve_endpoints(
        config: &TelemetryConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Endpoints, TelemetryError> {
        let e = otlp::resolve_endpoints(config, &env)?;
        Ok(Endpoints {
            traces: e.traces.map(|s| s.endpoint),
            metrics: e.metrics.map(|s| s.endpoint),
        })
    }

    /// The endpoints alone, as the tests below compare them.
    #[derive(Debug, PartialEq)]
    struct Endpoints {
        traces: Option<String>,
        metrics: Option<String>,
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn no_endpoint_means_no_export() {
        let e = resolve_endpoints(&TelemetryConfig::default(), env_of(&[])).unwrap();
        assert_eq!(
            e,
            Endpoints {
                traces: None,
                metrics: None
            }
        );
        let blank = TelemetryConfig {
            otlp_endpoint: Some("  ".into()),
            ..Default::default()
        };
        let e = resolve_endpoints(&blank, env_of(&[(ENV_OTLP_ENDPOINT, "")])).unwrap();
        assert_eq!(
            e,
            Endpoints {
                traces: None,
                metrics: None
            }
        );
    }

    #[test]
    fn config_endpoint_wins_over_environment() {
        let cfg = TelemetryConfig {
            otlp_endpoint: Some("http://collector:4317".into()),
            ..Default::default()
        };
        let e = resolve_endpoints(
            &cfg,
            env_of(&[
                (ENV_OTLP_ENDPOINT, "http://other:4317"),
                (ENV_OTLP_TRACES_ENDPOINT, "http://traces:4317"),
            ]),
        )
        .unwrap();
        assert_eq!(e.traces.as_deref(), Some("http://collector:4317"));
        assert_eq!(e.metrics.as_deref(), Some("http://collector:4317"));
    }

    #[test]
    fn signal_specific_variables_override_the_general_one() {
        let e = resolve_endpoints(
            &TelemetryConfig::default(),
            env_of(&[
                (ENV_OTLP_ENDPOINT, "http://all:4317"),
                (ENV_OTLP_TRACES_ENDPOINT, "http://traces:4317"),
            ]),
        )
        .unwrap();
        assert_eq!(e.traces.as_deref(), Some("http://traces:4317"));
        assert_eq!(e.metrics.as_deref(), Some("http://all:4317"));
        let only_metrics = resolve_endpoints(
            &TelemetryConfig::default(),
            env_of(&[(ENV_OTLP_METRICS_ENDPOINT, "http://m:4317")]),
        )
        .unwrap();
        assert_eq!(only_metrics.traces, None);
        assert_eq!(only_metrics.metrics.as_deref(), Some("http://m:4317"));
    }

    #[test]
    fn sdk_disabled_turns_export_off() {
        let e = resolve_endpoints(
            &TelemetryConfig::default(),
            env_of(&[
                (ENV_OTLP_ENDPOINT, "http://all:4317"),
                (ENV_SDK_DISABLED, "true"),
            ]),
        )
        .unwrap();
        assert_eq!(
            e,
            Endpoints {
                traces: None,
                metrics: None
            }
        );
    }

    #[test]
    fn schemeless_endpoint_is_a_clear_error_and_tls_is_accepted() {
        let err = resolve_endpoints(
            &TelemetryConfig::default(),
            env_of(&[(ENV_OTLP_ENDPOINT, "collector:4317")]),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("collector:4317") && msg.contains("http://collector:4317"),
            "{msg}"
        );
        let tls = resolve_endpoints(
            &TelemetryConfig {
                otlp_endpoint: Some("https://c:4317".into()),
                ..Default::default()
            },
            env_of(&[]),
        )
        .unwrap();
        assert_eq!(tls.traces.as_deref(), Some("https://c:4317"));
    }

    #[test]
    fn service_name_precedence() {
        let cfg = TelemetryConfig {
            service_name: "fleetbench-controller".into(),
            ..Default::default()
        };
        assert_eq!(resolve_service_name(&cfg, Some("ctl-eu".into())), "ctl-eu");
        assert_eq!(resolve_service_name(&cfg, None), "fleetbench-controller");
        assert!(!resolve_service_name(&TelemetryConfig::default(), None).is_empty());
    }

    #[test]
    fn bad_log_filter_names_its_source() {
        let cfg = TelemetryConfig {
            log_filter: Some("info,foo=notalevel".into()),
            ..Default::default()
        };
        let err = build_log_filter(&cfg).unwrap_err();
        assert!(err.to_string().contains("log_filter"), "{err}");
        assert!(err.to_string().contains("notalevel"), "{err}");
    }
}
