//! The telemetry guard flushes on drop without deadlocking, even on a `current_thread` runtime
//! (the OpenTelemetry batch processors block on the tonic exporter, which deadlocks when the
//! exporter lives on the runtime that is blocked; fleetbench gives the exporters their own).
//! The receiver is a real OTLP gRPC server on loopback, on a runtime of its own.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetbench_support::telemetry;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    metrics_service_server::{MetricsService, MetricsServiceServer},
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
    trace_service_server::{TraceService, TraceServiceServer},
};

#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<String>>>,
    metrics: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            for ss in rs.scope_spans {
                spans.extend(ss.spans.into_iter().map(|s| s.name));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tonic::async_trait]
impl MetricsService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let mut metrics = self.metrics.lock().unwrap();
        for rm in request.into_inner().resource_metrics {
            for sm in rm.scope_metrics {
                metrics.extend(sm.metrics.into_iter().map(|m| m.name));
            }
        }
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

/// Starts the receiver on its own thread and runtime; returns its endpoint.
fn start_receiver(receiver: Receiver) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(receiver.clone()))
                .add_service(MetricsServiceServer::new(receiver))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
    });
    format!(
        "http://{}",
        rx.recv_timeout(Duration::from_secs(10)).unwrap()
    )
}

#[tokio::test(flavor = "current_thread")]
async fn guard_drop_flushes_spans_and_metrics_on_a_current_thread_runtime() {
    let receiver = Receiver::default();
    let endpoint = start_receiver(receiver.clone());
    let guard = telemetry::init(telemetry::TelemetryConfig {
        service_name: "shutdown-test".into(),
        otlp_endpoint: Some(endpoint),
        ..Default::default()
    })
    .unwrap();
    let metrics = fleetbench_controller::metrics::Metrics::new();
    async {
        tracing::info!("inside");
        metrics.job_submitted("sweep");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    .await;
    {
        let span = tracing::info_span!("shutdown.check", fleetbench.job.id = "j1");
        let _entered = span.enter();
        tracing::info!("work");
    }
    let started = Instant::now();
    drop(guard); // blocks this (only) runtime thread while the exporters flush
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "shutdown took {took:?}");
    assert_eq!(
        *receiver.spans.lock().unwrap(),
        vec!["shutdown.check".to_string()]
    );
    assert!(
        receiver
            .metrics
            .lock()
            .unwrap()
            .iter()
            .any(|m| m == "fleetbench.jobs.submitted"),
        "metrics flushed at shutdown: {:?}",
        receiver.metrics.lock().unwrap()
    );
}
