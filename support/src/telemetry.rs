//! Tracing and OpenTelemetry setup (see the observability issue).
