//! The telemetry guard flushes on drop without deadlocking, even on a `current_thread` runtime
//! (the OpenTelemetry batch processors block on the tonic exporter, which deadlocks when the
//! exporter lives on the runtime that is blocked; fleetbench gives the exporters their own).
//! The receiver is a real OTLP gRPC server on loopback, on a runtime of its own.

mod otlp_receiver;

use std::time::{Duration, Instant};

use fleetbench_support::telemetry;
use otlp_receiver::Receiver;

#[tokio::test(flavor = "current_thread")]
async fn guard_drop_flushes_spans_and_metrics_on_a_current_thread_runtime() {
    let (receiver, endpoint) = Receiver::start();
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
    assert_eq!(receiver.span_names(), vec!["shutdown.check".to_string()]);
    let metrics = receiver.metric_names();
    assert!(
        metrics.iter().any(|m| m == "fleetbench.jobs.submitted"),
        "metrics flushed at shutdown: {metrics:?}"
    );
}
