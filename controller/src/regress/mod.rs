//! Regression suites: run a suite (a job spec with a `[suite]` table) as an ordinary job,
//! compare every gated metric at every level with the baseline's repeats, keep the history
//! and export the verdicts.
//!
//! - The verdicts (per check, the history's trend, JUnit XML) are `fleetbench-verdicts`'
//!   `regress`: the same code for a controller's scheduled suites and the CLI.
//! - [`fleet`]: the controller interface suites and tuning searches run their jobs through.
//! - [`history`]: the suite history (in this process's store, or on the controller) and
//!   baselines found in it.

pub mod fleet;
pub mod history;
pub mod schedule;

use fleetbench_proto::Word;
use fleetbench_proto::controllerpb::{Job, JobKind, JobState};
use fleetbench_proto::now_unix_ms;

use crate::metrics::Metrics;
use crate::store::{Store, StoreError, SuiteRun};
pub use fleet::{Fleet, FleetError};
use fleetbench_spec::suite::{SuiteSpec, job_toml, parse_suite};
use fleetbench_spec::{JobSpec, SpecError};
use fleetbench_verdicts::regress::verdict;
pub use fleetbench_verdicts::regress::{Status, Verdict};

/// Errors of a suite run.
#[derive(Debug, thiserror::Error)]
pub enum RegressError {
    /// The suite file is invalid; every problem, located.
    #[error("{}", fleetbench_spec::render_errors(.0))]
    Spec(Vec<SpecError>),
    /// Talking to the controller failed.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// The history store failed.
    #[error("suite history: {0}")]
    Store(#[from] StoreError),
    /// The baseline the suite names does not exist.
    #[error("baseline {0}")]
    NoBaseline(String),
    /// The suite's job ended without results to compare.
    #[error("the suite's job {job_id} ended {state}: {error}")]
    JobFailed {
        job_id: String,
        state: String,
        error: String,
    },
}

/// The end of a suite run.
#[derive(Debug, Clone)]
pub struct SuiteOutcome {
    pub suite: String,
    pub job: Job,
    /// The job compared with; None on a first run.
    pub baseline_job_id: Option<String>,
    pub verdicts: Vec<Verdict>,
    pub passed: bool,
}

/// Where a suite's history lives: the controller's store when this process has it (embedded
/// controller, scheduled runs), else (None) the controller's suite history API.
#[derive(Debug, Clone, Copy)]
pub struct History<'a> {
    pub store: Option<&'a Store>,
    pub metrics: Option<&'a Metrics>,
}

/// Parses a suite file, reporting every problem.
pub fn load(file_name: &str, text: &str) -> Result<(JobSpec, SuiteSpec), RegressError> {
    parse_suite(file_name, text).map_err(RegressError::Spec)
}

/// Runs a suite: finds its baseline, runs its job, compares, records and exports.
/// `tag` (may be empty) marks this run as a baseline for later runs.
pub async fn run_suite<F: Fleet>(
    fleet: &mut F,
    history: History<'_>,
    file_name: &str,
    text: &str,
    tag: &str,
) -> Result<SuiteOutcome, RegressError> {
    let (job_spec, suite) = load(file_name, text)?;
    let name = job_spec.name.clone();
    let baseline_job = history::find_baseline(fleet, history.store, &name, &suite.baseline).await?;
    let toml = job_toml(text).map_err(|e| {
        RegressError::Spec(vec![SpecError {
            file: file_name.to_string(),
            line: 0,
            field: String::new(),
            message: e.to_string(),
        }])
    })?;
    let job_id = fleet
        .submit(&toml, file_name, tag, JobKind::Regress)
        .await?;
    tracing::info!(suite = %name, job = %job_id, baseline = ?baseline_job, "suite run submitted");
    let job = fleet.wait(&job_id).await?;
    if job.state != JobState::Succeeded as i32 {
        let state = JobState::word_of(job.state);
        return Err(RegressError::JobFailed {
            job_id,
            state,
            error: job.error.clone(),
        });
    }
    let current = fleet.results(std::slice::from_ref(&job_id)).await?;
    let baseline = match &baseline_job {
        Some(b) => Some(verdict::group(
            &fleet.results(std::slice::from_ref(b)).await?.levels,
        )),
        None => None,
    };
    let past = history::past_runs(fleet, history.store, &name).await?;
    let verdicts = verdict::verdicts_with_history(
        &suite,
        baseline.as_ref(),
        &verdict::group(&current.levels),
        &past,
    );
    let passed = verdict::passed(&verdicts);
    if let Some(m) = history.metrics {
        history::export(m, &name, &job_id, &verdicts);
    }
    let record = SuiteRun {
        job_id: job_id.clone(),
        suite: name.clone(),
        tag: tag.to_string(),
        passed,
        regressions: verdicts
            .iter()
            .filter(|v| v.status == Status::Regressed)
            .count() as u32,
        baseline_job_id: baseline_job.clone().unwrap_or_default(),
        created_unix_ms: now_unix_ms(),
        verdicts: verdict::render(&verdicts),
    };
    history::record(fleet, history.store, &record, &verdicts).await?;
    Ok(SuiteOutcome {
        suite: name,
        job,
        baseline_job_id: baseline_job,
        verdicts,
        passed,
    })
}
