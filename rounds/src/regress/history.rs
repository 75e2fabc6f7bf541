//! A suite's history: where its runs are kept and how a baseline is found in them.
//!
//! The history lives in the controller's store. A process that holds that store (an embedded
//! controller, the controller's own scheduled suites) reads and writes it directly
//! (`fleetbench_controller::regress::StoreHistory`); any other (`fleetbench regress
//! --controller URL`) goes through the controller's `RecordSuiteRun` and `ListSuiteRuns`
//! ([`RemoteHistory`](super::RemoteHistory)), so a remote controller keeps the history and
//! `last-passing` works there too. The suite runner sees only the [`History`] trait.

use std::future::Future;

use fleetbench_proto::controllerpb::{self, SuiteCheck};

use super::{Fleet, RegressError, SuiteRun};
use fleetbench_spec::suite::Baseline;
use fleetbench_verdicts::regress::{PastRun, Status, Verdict, group};

/// Where a suite's runs are kept.
pub trait History: Send {
    /// The runs of a suite, newest first; None when this history is not kept (a controller of
    /// a version before the suite history).
    fn runs(
        &mut self,
        suite: &str,
    ) -> impl Future<Output = Result<Option<Vec<SuiteRun>>, RegressError>> + Send;

    /// For a tag no run in [`runs`](History::runs) has: a succeeded job of the suite with the
    /// tag that the history knows of otherwise (a remote controller keeps the jobs of runs
    /// tagged by clients that kept no history). None where the runs are the whole record.
    fn tagged_job(
        &mut self,
        _suite: &str,
        _tag: &str,
    ) -> impl Future<Output = Result<Option<String>, RegressError>> + Send {
        async { Ok(None) }
    }

    /// Keeps a finished run; `verdicts` are its checks, for the regression metrics of the
    /// controller that keeps it.
    fn record(
        &mut self,
        run: &SuiteRun,
        verdicts: &[Verdict],
    ) -> impl Future<Output = Result<(), RegressError>> + Send;
}

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

/// The job a suite run is compared with. A tag must exist; "last passing" is None on the
/// first run.
pub(crate) async fn find_baseline<H: History>(
    history: &mut H,
    suite: &str,
    baseline: &Baseline,
) -> Result<Option<String>, RegressError> {
    let runs = history.runs(suite).await?;
    match baseline {
        Baseline::Tag(tag) => {
            if let Some(r) = runs.iter().flatten().find(|r| &r.tag == tag) {
                return Ok(Some(r.job_id.clone()));
            }
            history.tagged_job(suite, tag).await?.map(Some).ok_or_else(|| {
                RegressError::NoBaseline(format!(
                    "tag:{tag}: no run of suite {suite:?} has this tag (mark one with `fleetbench regress --tag {tag}`)"
                ))
            })
        }
        Baseline::First => match runs {
            // Newest first: the last element is the first run.
            Some(runs) => Ok(runs.into_iter().last().map(|r| r.job_id)),
            None => Err(RegressError::NoBaseline(
                "first: this controller keeps no suite history (a version without \
                 ListSuiteRuns); upgrade it, or name a baseline with baseline = \"tag:NAME\""
                    .into(),
            )),
        },
        Baseline::LastPassing => match runs {
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
pub(crate) async fn past_runs<F: Fleet, H: History>(
    fleet: &mut F,
    history: &mut H,
    suite: &str,
) -> Result<Vec<PastRun>, RegressError> {
    let Some(mut runs) = history.runs(suite).await? else {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A history in memory: `runs` newest first (None: not kept), `jobs` the tagged jobs it
    /// knows of besides its runs.
    struct Memory {
        runs: Option<Vec<SuiteRun>>,
        jobs: Vec<(String, String)>,
    }

    impl History for Memory {
        async fn runs(&mut self, _suite: &str) -> Result<Option<Vec<SuiteRun>>, RegressError> {
            Ok(self.runs.clone())
        }

        async fn tagged_job(
            &mut self,
            _suite: &str,
            tag: &str,
        ) -> Result<Option<String>, RegressError> {
            Ok(self
                .jobs
                .iter()
                .find(|(t, _)| t == tag)
                .map(|j| j.1.clone()))
        }

        async fn record(&mut self, _run: &SuiteRun, _v: &[Verdict]) -> Result<(), RegressError> {
            Ok(())
        }
    }

    fn run(job: &str, tag: &str, passed: bool) -> SuiteRun {
        SuiteRun {
            job_id: job.into(),
            suite: "s".into(),
            tag: tag.into(),
            passed,
            regressions: 0,
            baseline_job_id: String::new(),
            created_unix_ms: 0,
            verdicts: String::new(),
        }
    }

    async fn baseline(h: &mut Memory, b: Baseline) -> Result<Option<String>, String> {
        find_baseline(h, "s", &b).await.map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn baselines_are_found_in_the_runs_then_among_the_tagged_jobs() {
        let mut h = Memory {
            runs: Some(vec![
                run("j3", "", false),
                run("j2", "", true),
                run("j1", "v1", true),
            ]),
            jobs: vec![("old".into(), "j0".into())],
        };
        let tag = |t: &str| Baseline::Tag(t.into());
        assert_eq!(baseline(&mut h, tag("v1")).await, Ok(Some("j1".into())));
        assert_eq!(baseline(&mut h, tag("old")).await, Ok(Some("j0".into())));
        assert_eq!(
            baseline(&mut h, tag("v9")).await,
            Err(
                "baseline tag:v9: no run of suite \"s\" has this tag (mark one with \
                 `fleetbench regress --tag v9`)"
                    .into()
            )
        );
        assert_eq!(
            baseline(&mut h, Baseline::First).await,
            Ok(Some("j1".into()))
        );
        assert_eq!(
            baseline(&mut h, Baseline::LastPassing).await,
            Ok(Some("j2".into()))
        );
        // A first run has nothing to compare with.
        h.runs = Some(Vec::new());
        assert_eq!(baseline(&mut h, Baseline::LastPassing).await, Ok(None));
        // A history that is not kept: tags still come from the jobs; the others are refused.
        h.runs = None;
        assert_eq!(baseline(&mut h, tag("old")).await, Ok(Some("j0".into())));
        let err = baseline(&mut h, Baseline::LastPassing).await.unwrap_err();
        assert!(
            err.starts_with("baseline last-passing: this controller keeps no suite history"),
            "{err}"
        );
    }
}
