//! OTLP export as configured by the standard variables, received by real receivers on
//! loopback: the tonic services of `opentelemetry-proto` for gRPC, and a hyper server decoding
//! the same protobuf messages for HTTP/protobuf; each in clear and over TLS with a CA given by
//! `OTEL_EXPORTER_OTLP_CERTIFICATE`, with `OTEL_EXPORTER_OTLP_HEADERS`, and with per-signal
//! endpoints. One test runs the cases in turn: the global tracer and meter providers are the
//! process's, so cases must not overlap.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fleetbench_support::telemetry::{TelemetryConfig, init_with_env};
use http_body_util::{BodyExt, Full};
use opentelemetry::trace::Tracer as _;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    metrics_service_server::{MetricsService, MetricsServiceServer},
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
    trace_service_server::{TraceService, TraceServiceServer},
};
use prost::Message;

/// One export request as received: how it came and what it held.
#[derive(Debug, Clone)]
struct Got {
    /// `grpc` or the HTTP path.
    path: String,
    tenant: Option<String>,
    spans: Vec<String>,
    metrics: Vec<String>,
}

#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
}

fn span_names(r: &ExportTraceServiceRequest) -> Vec<String> {
    r.resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .map(|s| s.name.clone())
        .collect()
}

fn metric_names(r: &ExportMetricsServiceRequest) -> Vec<String> {
    r.resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .map(|m| m.name.clone())
        .collect()
}

fn tenant_of(h: &http::HeaderMap) -> Option<String> {
    h.get("x-tenant")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let tenant = tenant_of(&request.metadata().clone().into_headers());
        self.got.lock().unwrap().push(Got {
            path: "grpc".into(),
            tenant,
            spans: span_names(request.get_ref()),
            metrics: Vec::new(),
        });
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let tenant = tenant_of(&request.metadata().clone().into_headers());
        self.got.lock().unwrap().push(Got {
            path: "grpc".into(),
            tenant,
            spans: Vec::new(),
            metrics: metric_names(request.get_ref()),
        });
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// Runs `serve` on a thread and runtime of its own (the guard's flush blocks the caller).
fn on_own_runtime<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            serve(listener).await;
        });
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

fn grpc_receiver(tls: Option<(&Path, &Path)>) -> (Receiver, SocketAddr) {
    let receiver = Receiver::default();
    let served = receiver.clone();
    let identity = tls.map(|(c, k)| {
        tonic::transport::Identity::from_pem(std::fs::read(c).unwrap(), std::fs::read(k).unwrap())
    });
    let addr = on_own_runtime(move |listener| async move {
        let mut server = tonic::transport::Server::builder();
        if let Some(id) = identity {
            server = server
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(id))
                .unwrap();
        }
        server
            .add_service(TraceServiceServer::new(served.clone()))
            .add_service(MetricsServiceServer::new(served))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (receiver, addr)
}

async fn handle_http(
    receiver: Receiver,
    req: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Full<Bytes>>, hyper::Error> {
    let path = req.uri().path().to_string();
    let tenant = tenant_of(req.headers());
    let body = req.into_body().collect().await?.to_bytes();
    let mut got = Got {
        path: path.clone(),
        tenant,
        spans: Vec::new(),
        metrics: Vec::new(),
    };
    let answer = if let Ok(r) = ExportTraceServiceRequest::decode(body.clone())
        && !r.resource_spans.is_empty()
    {
        got.spans = span_names(&r);
        ExportTraceServiceResponse::default().encode_to_vec()
    } else if let Ok(r) = ExportMetricsServiceRequest::decode(body) {
        got.metrics = metric_names(&r);
        ExportMetricsServiceResponse::default().encode_to_vec()
    } else {
        Vec::new()
    };
    receiver.got.lock().unwrap().push(got);
    Ok(http::Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::from(answer)))
        .unwrap())
}

fn http_receiver(tls: Option<(&Path, &Path)>) -> (Receiver, SocketAddr) {
    use rustls::pki_types::pem::PemObject;
    let receiver = Receiver::default();
    let served = receiver.clone();
    let acceptor = tls.map(|(c, k)| {
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(c)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(k).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    });
    let addr = on_own_runtime(move |listener| async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (served, acceptor) = (served.clone(), acceptor.clone());
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req| handle_http(served.clone(), req));
                let http = hyper::server::conn::http1::Builder::new();
                match acceptor {
                    Some(a) => {
                        if let Ok(tls) = a.accept(tcp).await {
                            let _ = http
                                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                                .await;
                        }
                    }
                    None => {
                        let _ = http
                            .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                            .await;
                    }
                }
            });
        }
    });
    (receiver, addr)
}

/// Exports one span and one counter named for `case` with the variables `vars`, and flushes.
fn export(case: &str, vars: &[(String, String)]) {
    let map: HashMap<String, String> = vars.iter().cloned().collect();
    let guard = init_with_env(
        TelemetryConfig {
            service_name: "otlp-export-test".into(),
            log_filter: Some("warn".into()),
            ..Default::default()
        },
        &move |k| map.get(k).cloned(),
    )
    .unwrap_or_else(|e| panic!("{case}: {e}"));
    assert!(guard.exports_traces() && guard.exports_metrics(), "{case}");
    opentelemetry::global::tracer("otlp-export-test").in_span(format!("span-{case}"), |_| {});
    opentelemetry::global::meter("otlp-export-test")
        .u64_counter(format!("counter_{case}"))
        .build()
        .add(1, &[]);
    guard.flush();
    drop(guard);
}

/// The requests that carried `case`'s span and counter.
fn received(r: &Receiver, case: &str) -> (Vec<Got>, Vec<Got>) {
    let got = r.got.lock().unwrap().clone();
    let spans = got
        .iter()
        .filter(|g| g.spans.contains(&format!("span-{case}")))
        .cloned()
        .collect();
    let metrics = got
        .iter()
        .filter(|g| g.metrics.contains(&format!("counter_{case}")))
        .cloned()
        .collect();
    (spans, metrics)
}

fn assert_case(
    r: &Receiver,
    case: &str,
    trace_path: &str,
    metric_path: &str,
    tenant: Option<&str>,
) {
    let (spans, metrics) = received(r, case);
    let all = r.got.lock().unwrap().clone();
    assert!(!spans.is_empty(), "{case}: span not received; got {all:?}");
    assert!(
        !metrics.is_empty(),
        "{case}: counter not received; got {all:?}"
    );
    for g in &spans {
        assert_eq!(g.path, trace_path, "{case}: {g:?}");
        assert_eq!(g.tenant.as_deref(), tenant, "{case}: {g:?}");
    }
    for g in &metrics {
        assert_eq!(g.path, metric_path, "{case}: {g:?}");
        assert_eq!(g.tenant.as_deref(), tenant, "{case}: {g:?}");
    }
}

#[test]
fn otlp_export_over_grpc_and_http_protobuf_in_clear_and_tls_with_headers() {
    let dir = tempfile::tempdir().unwrap();
    let pki =
        fleetbench_support::tls::generate_dev_certs(&dir.path().join("pki"), &[], false).unwrap();
    let server_tls = Some((pki.agent_cert.as_path(), pki.agent_key.as_path()));
    let ca = pki.ca_cert.to_string_lossy().into_owned();
    let var = |k: &str, v: &str| (k.to_string(), v.to_string());

    // gRPC in clear, no protocol given: fleetbench's default.
    let (grpc, addr) = grpc_receiver(None);
    export(
        "grpc",
        &[var(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            &format!("http://{addr}"),
        )],
    );
    assert_case(&grpc, "grpc", "grpc", "grpc", None);

    // gRPC over TLS, the CA from OTEL_EXPORTER_OTLP_CERTIFICATE, a header as metadata.
    let (grpcs, addr) = grpc_receiver(server_tls);
    let vars = [
        var("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("https://{addr}")),
        var("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        var("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca),
        var("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=team%20a"),
    ];
    export("grpc_tls", &vars);
    assert_case(&grpcs, "grpc_tls", "grpc", "grpc", Some("team a"));

    // HTTP/protobuf in clear: the general endpoint is a base URL, signal paths appended.
    let (http, addr) = http_receiver(None);
    let vars = [
        var(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            &format!("http://{addr}/otlp/"),
        ),
        var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        var("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=b"),
    ];
    export("http", &vars);
    assert_case(
        &http,
        "http",
        "/otlp/v1/traces",
        "/otlp/v1/metrics",
        Some("b"),
    );

    // Per-signal endpoints and protocols: traces over HTTP to a path used as given, metrics
    // over gRPC; each signal's own headers.
    let (grpc2, gaddr) = grpc_receiver(None);
    let vars = [
        var(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            &format!("http://{addr}/my/traces"),
        ),
        var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        var("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-tenant=t"),
        var(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            &format!("http://{gaddr}"),
        ),
        var("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
    ];
    export("split", &vars);
    let (spans, _) = received(&http, "split");
    assert!(
        spans
            .iter()
            .all(|g| g.path == "/my/traces" && g.tenant.as_deref() == Some("t"))
            && !spans.is_empty(),
        "{spans:?}"
    );
    let (_, metrics) = received(&grpc2, "split");
    assert!(
        metrics.iter().all(|g| g.tenant.is_none()) && !metrics.is_empty(),
        "{metrics:?}"
    );

    // HTTP/protobuf over TLS on the port 4318 convention is covered by the unit tests; here the
    // protocol is implied by nothing but the variable, and the CA is trusted from the file.
    let (https, addr) = http_receiver(server_tls);
    let vars = [
        var("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("https://{addr}")),
        var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        var("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca),
        var("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=c"),
    ];
    export("https", &vars);
    assert_case(&https, "https", "/v1/traces", "/v1/metrics", Some("c"));

    // Without the CA the collector's certificate is not trusted: nothing arrives.
    let vars = [
        var("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("https://{addr}")),
        var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ];
    export("untrusted", &vars);
    let (spans, metrics) = received(&https, "untrusted");
    assert!(
        spans.is_empty() && metrics.is_empty(),
        "{spans:?} {metrics:?}"
    );
}
