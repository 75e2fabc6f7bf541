//! Controller metrics: OpenTelemetry instruments and the Prometheus `/metrics` endpoint, with the
//! names the OpenTelemetry collector would give the OTLP series.
//!
//! INTERFACE STUB: the signatures are the contract between the scheduler (which calls them) and
//! the observability work (which fills in the bodies). Bodies are filled by the observability
//! issue; until then they record nothing.

use std::sync::Arc;

use fleetbench_proto::{agentpb, controllerpb};

/// Every metric the controller records.
#[derive(Debug, Default)]
pub struct Metrics {}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A job was accepted (`kind`: sweep, tune, regress).
    pub fn job_submitted(&self, _kind: &str) {}

    /// A job ended (`state`: succeeded, failed, cancelled).
    pub fn job_finished(&self, _kind: &str, _state: &str) {}

    /// A trial attempt ended on a host.
    pub fn trial_finished(&self, _host: &str, _config_name: &str, _state: controllerpb::TrialState) {}

    /// A level result was stored. `engine_kind` and `model` come from the config's spec.
    pub fn level_stored(&self, _level: &controllerpb::StoredLevel, _engine_kind: &str, _model: &str) {}

    /// An engine crash (at start or during a level) was classified.
    pub fn crash(&self, _host: &str, _config_name: &str, _class: agentpb::CrashClass) {}

    /// A telemetry sample relayed from an agent (GPU, engine metrics, process).
    pub fn telemetry(&self, _host: &str, _config_id: &str, _sample: &agentpb::MetricsSample) {}

    /// A regression verdict for one metric at one level of a suite run.
    pub fn regression_verdict(&self, _suite: &str, _metric: &str, _level: &str, _regressed: bool) {}

    /// The Prometheus text exposition of everything above.
    pub fn render_prometheus(&self) -> String {
        String::new()
    }
}
