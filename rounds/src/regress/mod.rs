//! Regression suites: run a suite (a job spec with a `[suite]` table) as an ordinary job,
//! compare every gated metric at every level with the baseline's repeats, and keep the run in
//! the suite's history.
//!
//! `fleetbench regress` runs this in the CLI; a controller's scheduled suites run the same
//! [`run_suite`] with the history in its store (`fleetbench_controller::regress`).
//!
//! - The verdicts (per check, the history's trend, JUnit XML) are `fleetbench-verdicts`'
//!   `regress`: the same code for a controller's scheduled suites and the CLI.
//! - [`history`]: the [`History`] a suite's runs are kept in, and baselines found in it.
//! - [`record`]: the [`SuiteRun`] record a history keeps.
//! - [`remote`]: the history on a controller reached over gRPC.

pub mod history;
pub mod record;
pub mod remote;

use fleetbench_proto::Word;
use fleetbench_proto::controllerpb::{Job, JobKind, JobState};
use fleetbench_proto::now_unix_ms;

use crate::fleet::{Fleet, FleetError};
use fleetbench_spec::suite::{SuiteSpec, job_toml, parse_suite};
use fleetbench_spec::{JobSpec, SpecError};
use fleetbench_verdicts::regress::verdict;
pub use fleetbench_verdicts::regress::{Status, Verdict};
pub use history::History;
pub use record::SuiteRun;
pub use remote::RemoteHistory;

/// Errors of a suite run.
#[derive(Debug, thiserror::Error)]
pub enum RegressError {
    /// The suite file is invalid; every problem, located.
    #[error("{}", fleetbench_spec::render_errors(.0))]
    Spec(Vec<SpecError>),
    /// Talking to the controller failed.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// The history failed (its store, in the process that holds it).
    #[error("suite history: {0}")]
    History(#[source] Box<dyn std::error::Error + Send + Sync>),
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

/// Parses a suite file, reporting every problem.
pub fn load(file_name: &str, text: &str) -> Result<(JobSpec, SuiteSpec), RegressError> {
    parse_suite(file_name, text).map_err(RegressError::Spec)
}

/// Runs a suite: finds its baseline in `history`, runs its job on `fleet`, compares, and
/// records the run in `history` (which exports its checks where it has metrics).
/// `tag` (may be empty) marks this run as a baseline for later runs.
pub async fn run_suite<F: Fleet, H: History>(
    fleet: &mut F,
    history: &mut H,
    file_name: &str,
    text: &str,
    tag: &str,
) -> Result<SuiteOutcome, RegressError> {
    let (job_spec, suite) = load(file_name, text)?;
    let name = job_spec.name.clone();
    let baseline_job = history::find_baseline(history, &name, &suite.baseline).await?;
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
    let past = history::past_runs(fleet, history, &name).await?;
    let verdicts = verdict::verdicts_with_history(
        &suite,
        baseline.as_ref(),
        &verdict::group(&current.levels),
        &past,
    );
    let passed = verdict::passed(&verdicts);
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
    history.record(&record, &verdicts).await?;
    Ok(SuiteOutcome {
        suite: name,
        job,
        baseline_job_id: baseline_job,
        verdicts,
        passed,
    })
}
