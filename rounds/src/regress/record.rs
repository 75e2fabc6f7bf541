//! The record of one suite run, as a [`History`](super::History) keeps it: which job ran the
//! suite, whether it passed, against which baseline, and its tag (a baseline later runs can
//! name). The controller's store holds these rows; its API carries them as
//! `controllerpb::SuiteRun`.

use fleetbench_proto::controllerpb;

/// One run of a regression suite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuiteRun {
    pub job_id: String,
    pub suite: String,
    /// The `--tag` it was marked with; empty: none.
    pub tag: String,
    pub passed: bool,
    pub regressions: u32,
    /// The job it was compared with; empty: none (a first run).
    pub baseline_job_id: String,
    pub created_unix_ms: i64,
    /// The verdicts as printed.
    pub verdicts: String,
}

impl From<&SuiteRun> for controllerpb::SuiteRun {
    fn from(r: &SuiteRun) -> Self {
        controllerpb::SuiteRun {
            job_id: r.job_id.clone(),
            suite: r.suite.clone(),
            tag: r.tag.clone(),
            passed: r.passed,
            regressions: r.regressions,
            baseline_job_id: r.baseline_job_id.clone(),
            created_unix_ms: r.created_unix_ms,
            verdicts: r.verdicts.clone(),
            checks: Vec::new(),
        }
    }
}

impl From<&controllerpb::SuiteRun> for SuiteRun {
    fn from(r: &controllerpb::SuiteRun) -> Self {
        SuiteRun {
            job_id: r.job_id.clone(),
            suite: r.suite.clone(),
            tag: r.tag.clone(),
            passed: r.passed,
            regressions: r.regressions,
            baseline_job_id: r.baseline_job_id.clone(),
            created_unix_ms: r.created_unix_ms,
            verdicts: r.verdicts.clone(),
        }
    }
}
