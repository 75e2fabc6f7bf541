//! The suite history in the controller's store: what the controller's scheduled suites and an
//! embedded controller's `fleetbench regress` keep their runs in, exporting each run's checks
//! as the regression dashboard's metrics. A remote client keeps its runs here too, through the
//! API (`RecordSuiteRun`, which exports with [`export_checks`]).

use fleetbench_proto::controllerpb;
use fleetbench_rounds::regress::history::checks;
use fleetbench_rounds::regress::{History, RegressError, SuiteRun};
use fleetbench_verdicts::regress::Verdict;

use crate::metrics::Metrics;
use crate::store::Store;

/// A suite's history in this process's store; with `metrics`, every recorded run's checks are
/// exported.
#[derive(Debug, Clone, Copy)]
pub struct StoreHistory<'a> {
    store: &'a Store,
    metrics: Option<&'a Metrics>,
}

impl<'a> StoreHistory<'a> {
    pub fn new(store: &'a Store, metrics: Option<&'a Metrics>) -> Self {
        StoreHistory { store, metrics }
    }
}

fn store_error(e: crate::store::StoreError) -> RegressError {
    RegressError::History(Box::new(e))
}

impl History for StoreHistory<'_> {
    async fn runs(&mut self, suite: &str) -> Result<Option<Vec<SuiteRun>>, RegressError> {
        Ok(Some(
            self.store.suite_runs(suite).await.map_err(store_error)?,
        ))
    }

    async fn record(&mut self, run: &SuiteRun, verdicts: &[Verdict]) -> Result<(), RegressError> {
        if let Some(m) = self.metrics {
            export(m, &run.suite, &run.job_id, verdicts);
        }
        self.store.put_suite_run(run).await.map_err(store_error)
    }
}

/// Exports a suite run's verdicts as the regression dashboard's metrics.
pub(crate) fn export(metrics: &Metrics, suite_name: &str, job_id: &str, verdicts: &[Verdict]) {
    let run = controllerpb::SuiteRun {
        suite: suite_name.to_string(),
        job_id: job_id.to_string(),
        checks: checks(verdicts),
        ..Default::default()
    };
    export_checks(metrics, &run);
}

/// Exports a run's checks: the verdict per check, and both sides' means where both exist.
pub(crate) fn export_checks(metrics: &Metrics, run: &controllerpb::SuiteRun) {
    for c in &run.checks {
        metrics.regression_verdict(&run.suite, &c.metric, &c.level, c.regressed);
        if let (Some(cur), Some(base)) = (c.current, c.baseline) {
            metrics.regression_values(&run.suite, &c.metric, &c.level, cur, base);
        }
        for p in &c.change_points {
            // A change point at the run being recorded is this run's.
            let (job, at) = if p.job_id.is_empty() {
                let at = if run.created_unix_ms > 0 {
                    run.created_unix_ms
                } else {
                    fleetbench_proto::now_unix_ms()
                };
                (run.job_id.as_str(), at)
            } else {
                (p.job_id.as_str(), p.created_unix_ms)
            };
            metrics.regression_change_point(&run.suite, &c.metric, &c.level, job, p.relative, at);
        }
    }
}
