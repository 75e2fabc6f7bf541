//! A suite's history: where its runs are kept and how a baseline is found in them.
//!
//! The history lives in the controller's store. A process that holds that store (an embedded
//! controller, the controller's own scheduled suites) reads and writes it directly; any other
//! (`fleetbench regress --controller URL`) goes through the controller's `RecordSuiteRun` and
//! `ListSuiteRuns`, so a remote controller keeps the history and `last-passing` works there too.

use fleetbench_proto::controllerpb::{self, JobState, SuiteCheck};

use super::{Fleet, FleetError, RegressError};
use crate::metrics::Metrics;
use crate::store::{Store, SuiteRun};
use fleetbench_spec::suite::Baseline;
use fleetbench_verdicts::regress::{PastRun, Status, Verdict, group};

/// The checks of a run as the API carries them (for the controller's regression metrics).
pub fn checks(verdicts: &[Verdict]) -> Vec<SuiteCheck> {
    let mean = |xs: &[f64]| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
    verdicts
        .iter()
        .map(|v| SuiteCheck {
            level: v.key(),
            metric: v.metric.name().to_string(),
            regressed: v.status == Status::Regressed,
            current: mean(&v.current),
            baseline: mean(&v.baseline),
            change_points: v
                .trend
                .change_points
                .iter()
                .map(|p| controllerpb::SuiteChangePoint {
                    job_id: p.job_id.clone(),
                    created_unix_ms: p.created_unix_ms,
                    relative: p.relative,
                    p: p.p,
                })
                .collect(),
        })
        .collect()
}

/// Exports a suite run's verdicts as the regression dashboard's metrics.
pub fn export(metrics: &Metrics, suite_name: &str, job_id: &str, verdicts: &[Verdict]) {
    let run = controllerpb::SuiteRun {
        suite: suite_name.to_string(),
        job_id: job_id.to_string(),
        checks: checks(verdicts),
        ..Default::default()
    };
    export_checks(metrics, &run);
}

/// Exports a run's checks: the verdict per check, and both sides' means where both exist.
pub fn export_checks(metrics: &Metrics, run: &controllerpb::SuiteRun) {
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

/// Whether a controller answered that it has no such call (a version before the history).
fn unimplemented(e: &FleetError) -> bool {
    matches!(e, FleetError::Rpc { status, .. } if status.code() == tonic::Code::Unimplemented)
}

/// The runs of a suite, newest first; None when the controller keeps no history (older).
async fn runs<F: Fleet>(
    fleet: &mut F,
    store: Option<&Store>,
    suite: &str,
) -> Result<Option<Vec<SuiteRun>>, RegressError> {
    match store {
        Some(s) => Ok(Some(s.suite_runs(suite).await?)),
        None => match fleet.suite_runs(suite).await {
            Ok(r) => Ok(Some(r)),
            Err(e) if unimplemented(&e) => Ok(None),
            Err(e) => Err(e.into()),
        },
    }
}

/// The job a suite run is compared with. A tag must exist; "last passing" is None on the
/// first run.
pub(crate) async fn find_baseline<F: Fleet>(
    fleet: &mut F,
    store: Option<&Store>,
    suite: &str,
    baseline: &Baseline,
) -> Result<Option<String>, RegressError> {
    let history = runs(fleet, store, suite).await?;
    match baseline {
        Baseline::Tag(tag) => {
            if let Some(r) = history.iter().flatten().find(|r| &r.tag == tag) {
                return Ok(Some(r.job_id.clone()));
            }
            if store.is_some() {
                return Err(RegressError::NoBaseline(format!(
                    "tag:{tag}: no run of suite {suite:?} has this tag (mark one with `fleetbench regress --tag {tag}`)"
                )));
            }
            // A remote controller: a run tagged before it kept the history (or by an older
            // one) is still a job of the suite with the tag.
            let jobs = fleet.jobs().await?;
            jobs.iter()
                .find(|j| &j.tag == tag && j.name == suite && j.state == JobState::Succeeded as i32)
                .map(|j| Some(j.id.clone()))
                .ok_or_else(|| {
                    RegressError::NoBaseline(format!(
                        "tag:{tag}: no run of suite {suite:?} has this tag (mark one with `fleetbench regress --tag {tag}`)"
                    ))
                })
        }
        Baseline::First => match history {
            // Newest first: the last element is the first run.
            Some(runs) => Ok(runs.into_iter().last().map(|r| r.job_id)),
            None => Err(RegressError::NoBaseline(
                "first: this controller keeps no suite history (a version without \
                 ListSuiteRuns); upgrade it, or name a baseline with baseline = \"tag:NAME\""
                    .into(),
            )),
        },
        Baseline::LastPassing => match history {
            Some(runs) => Ok(runs.into_iter().find(|r| r.passed).map(|r| r.job_id)),
            None => Err(RegressError::NoBaseline(
                "last-passing: this controller keeps no suite history (a version without \
                 ListSuiteRuns); upgrade it, or name a baseline with baseline = \"tag:NAME\""
                    .into(),
            )),
        },
    }
}

/// The most stored runs the trend analysis reads (the newest).
pub const HISTORY_RUNS: usize = 100;

/// The suite's stored runs with their results, oldest first (at most [`HISTORY_RUNS`], the
/// newest). A run whose job's results are gone is left out; a controller without a history
/// gives none.
pub(crate) async fn past_runs<F: Fleet>(
    fleet: &mut F,
    store: Option<&Store>,
    suite: &str,
) -> Result<Vec<PastRun>, RegressError> {
    let Some(mut runs) = runs(fleet, store, suite).await? else {
        return Ok(Vec::new());
    };
    runs.truncate(HISTORY_RUNS);
    runs.reverse();
    let mut out = Vec::with_capacity(runs.len());
    for r in runs {
        match fleet.results(std::slice::from_ref(&r.job_id)).await {
            Ok(res) => out.push(PastRun {
                job_id: r.job_id,
                created_unix_ms: r.created_unix_ms,
                levels: group(&res.levels),
            }),
            Err(e) => {
                tracing::warn!(suite, job = %r.job_id, error = %e, "a stored suite run's results cannot be read; left out of the trend");
            }
        }
    }
    Ok(out)
}

/// Keeps a finished run in the history: in the store when this process holds it, else on the
/// controller (which also exports the checks as its metrics).
pub(crate) async fn record<F: Fleet>(
    fleet: &mut F,
    store: Option<&Store>,
    run: &SuiteRun,
    verdicts: &[Verdict],
) -> Result<(), RegressError> {
    match store {
        Some(s) => Ok(s.put_suite_run(run).await?),
        None => {
            let mut pb = controllerpb::SuiteRun::from(run);
            pb.checks = checks(verdicts);
            match fleet.record_suite_run(pb).await {
                Ok(()) => Ok(()),
                Err(e) if unimplemented(&e) => {
                    tracing::warn!(
                        suite = %run.suite,
                        job = %run.job_id,
                        "the controller keeps no suite history (RecordSuiteRun unimplemented): this run is not recorded"
                    );
                    Ok(())
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}
