//! Scheduled suites: the controller runs regression suites named in its config on a cron
//! schedule (`[[suites]] path = "...", cron = "0 3 * * *"`), keeps their history in its store
//! and exports their verdicts, exactly as `fleetbench regress` against its store would: the
//! suite itself runs in `fleetbench_rounds::regress::run_suite`, with the controller's own
//! scheduler as its [`Fleet`].

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use croner::Cron;
use fleetbench_proto::controllerpb::{GetResultsResponse, Job, JobKind, JobState};
use fleetbench_rounds::fleet::{Fleet, FleetError, accepted};
use fleetbench_rounds::regress::run_suite;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::StoreHistory;
use crate::metrics::Metrics;
use crate::scheduler::Scheduler;

/// A suite the controller runs on a schedule.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScheduledSuite {
    /// The suite file (read again at every run, so edits take effect).
    pub path: PathBuf,
    /// Cron expression, 5 fields (minute hour day month weekday) or 6 with seconds first.
    pub cron: String,
    /// Marks every scheduled run with this tag; empty: none.
    #[serde(default)]
    pub tag: String,
}

/// Checks every scheduled suite: the cron expression parses and the suite file is valid.
pub(crate) fn validate(suites: &[ScheduledSuite], problems: &mut Vec<String>) {
    for (i, s) in suites.iter().enumerate() {
        if let Err(e) = Cron::from_str(&s.cron) {
            problems.push(format!(
                "suites[{i}].cron: {:?} is not a cron expression: {e}",
                s.cron
            ));
        }
        match std::fs::read_to_string(&s.path) {
            Ok(text) => {
                if let Err(errors) =
                    fleetbench_spec::suite::parse_suite(&s.path.display().to_string(), &text)
                {
                    for e in errors {
                        problems.push(format!("suites[{i}].path: {e}"));
                    }
                }
            }
            Err(e) => problems.push(format!(
                "suites[{i}].path: cannot read {}: {e}",
                s.path.display()
            )),
        }
    }
}

/// Runs the scheduled suites until `shutdown`, one at a time, each at its next cron time.
pub(crate) async fn run(
    scheduler: Scheduler,
    metrics: Arc<Metrics>,
    suites: Vec<ScheduledSuite>,
    shutdown: CancellationToken,
) {
    let crons: Vec<Option<Cron>> = suites
        .iter()
        .map(|s| Cron::from_str(&s.cron).ok())
        .collect();
    let mut fleet = scheduler.clone();
    loop {
        let now = chrono::Utc::now();
        let next = crons
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((c.as_ref()?.find_next_occurrence(&now, false).ok()?, i)))
            .min();
        let Some((at, i)) = next else { return };
        let wait = (at - now).to_std().unwrap_or_default();
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return,
        }
        let s = &suites[i];
        let name = s.path.display().to_string();
        let text = match std::fs::read_to_string(&s.path) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(suite = %name, error = %e, "scheduled suite unreadable");
                continue;
            }
        };
        let mut history = StoreHistory::new(scheduler.store(), Some(&metrics));
        let run = run_suite(&mut fleet, &mut history, &name, &text, &s.tag);
        let outcome = tokio::select! {
            o = run => o,
            _ = shutdown.cancelled() => return,
        };
        match outcome {
            Ok(o) if o.passed => {
                tracing::info!(suite = %o.suite, job = %o.job.id, "scheduled suite passed")
            }
            Ok(o) => tracing::warn!(
                suite = %o.suite,
                job = %o.job.id,
                verdicts = %fleetbench_verdicts::regress::verdict::render(&o.verdicts),
                "scheduled suite REGRESSED"
            ),
            Err(e) => tracing::error!(suite = %name, error = %e, "scheduled suite failed"),
        }
    }
}

fn local(e: impl std::fmt::Display) -> FleetError {
    FleetError::Local(e.to_string())
}

/// The controller's own scheduler as a [`Fleet`], for scheduled suites.
impl Fleet for Scheduler {
    async fn submit(
        &mut self,
        spec_toml: &str,
        file_name: &str,
        tag: &str,
        kind: JobKind,
    ) -> Result<String, FleetError> {
        let resp = Scheduler::submit(self, spec_toml, file_name, false, tag, kind)
            .await
            .map_err(local)?;
        accepted(resp)
    }

    async fn wait(&mut self, job_id: &str) -> Result<Job, FleetError> {
        loop {
            let job = self
                .store()
                .get_job(job_id)
                .await
                .map_err(local)?
                .ok_or_else(|| local(format!("no job {job_id}")))?;
            if JobState::is_final_value(job.state) {
                return Ok(job);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn results(&mut self, job_ids: &[String]) -> Result<GetResultsResponse, FleetError> {
        let mut out = GetResultsResponse::default();
        let store = self.store();
        for id in job_ids {
            if let Some(job) = store.get_job(id).await.map_err(local)? {
                out.jobs.push(job);
            }
            out.configs.extend(store.configs(id).await.map_err(local)?);
            out.runs.extend(store.runs(id).await.map_err(local)?);
            out.levels.extend(store.levels(id).await.map_err(local)?);
        }
        Ok(out)
    }
}
