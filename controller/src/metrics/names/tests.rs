//! The catalogue against the collector's naming: translations, valid and distinct names, labels.

use super::*;

#[test]
fn collector_translation_of_semconv_names() {
    let cases = [
        (
            "gen_ai.server.time_to_first_token",
            "s",
            Kind::Histogram,
            "gen_ai_server_time_to_first_token_seconds",
        ),
        (
            "gen_ai.client.operation.duration",
            "s",
            Kind::Histogram,
            "gen_ai_client_operation_duration_seconds",
        ),
        (
            "gen_ai.client.token.usage",
            "{token}",
            Kind::Histogram,
            "gen_ai_client_token_usage",
        ),
        (
            "hw.gpu.utilization",
            "1",
            Kind::Gauge,
            "hw_gpu_utilization_ratio",
        ),
        (
            "hw.gpu.memory.usage",
            "By",
            Kind::Gauge,
            "hw_gpu_memory_usage_bytes",
        ),
        ("hw.power", "W", Kind::Gauge, "hw_power_watts"),
        ("hw.energy", "J", Kind::Counter, "hw_energy_joules_total"),
        (
            "hw.temperature",
            "Cel",
            Kind::Gauge,
            "hw_temperature_celsius",
        ),
        (
            "fleetbench.jobs.submitted",
            "{job}",
            Kind::Counter,
            "fleetbench_jobs_submitted_total",
        ),
        (
            "fleetbench.level.output_tokens",
            "{token}/s",
            Kind::Gauge,
            "fleetbench_level_output_tokens_per_second",
        ),
        (
            "fleetbench.gpu.pcie.throughput",
            "By/s",
            Kind::Gauge,
            "fleetbench_gpu_pcie_throughput_bytes_per_second",
        ),
        (
            "fleetbench.level.crashed",
            "",
            Kind::Gauge,
            "fleetbench_level_crashed",
        ),
        // A unit already in the name is not repeated; `total` moves to the end once.
        (
            "http.request.duration_seconds",
            "s",
            Kind::Histogram,
            "http_request_duration_seconds",
        ),
        (
            "requests.total",
            "{request}",
            Kind::Counter,
            "requests_total",
        ),
        // `1` on a counter adds nothing (ratio is for gauges only).
        ("x.events", "1", Kind::Counter, "x_events_total"),
        ("latency", "ms", Kind::Gauge, "latency_milliseconds"),
        ("2xx.count", "", Kind::Gauge, "_2xx_count"),
    ];
    for (name, unit, kind, want) in cases {
        assert_eq!(
            prometheus_name(name, unit, kind),
            want,
            "{name} [{unit}] {kind:?}"
        );
    }
}

#[test]
fn every_catalogued_metric_has_a_distinct_valid_prometheus_name() {
    let mut seen = std::collections::HashSet::new();
    for m in all() {
        let p = m.prometheus_name();
        assert!(
            p.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{p}"
        );
        assert!(seen.insert(p.clone()), "duplicate Prometheus name {p}");
        assert_eq!(m.kind == Kind::Counter, p.ends_with("_total"), "{p}");
        assert_eq!(
            m.kind == Kind::Histogram,
            !m.buckets.is_empty(),
            "{}",
            m.name
        );
    }
}

#[test]
fn attribute_keys_become_labels() {
    assert_eq!(
        prometheus_label("gen_ai.request.model"),
        "gen_ai_request_model"
    );
    assert_eq!(prometheus_label(attr::CONFIG_ID), "fleetbench_config_id");
    assert_eq!(
        prometheus_label("network.io.direction"),
        "network_io_direction"
    );
    assert_eq!(prometheus_label("9lives"), "key_9lives");
    assert_eq!(prometheus_label("_private"), "key_private");
}
