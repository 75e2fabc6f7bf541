//! Keeping `/metrics` to live, bounded series. Results live in the store (and reach Grafana
//! through its PostgreSQL views); Prometheus holds what is happening now:
//!
//! - a job's per-job series (every series labelled `fleetbench.job.id`: level gauges, request
//!   and token counters, client histograms) leave the registry a grace period
//!   (`metrics_job_ttl`, 10 min by default) after the job ends, so that the last scrapes still
//!   see its final values and the number of series stays bounded by the jobs of the last
//!   minutes, not by every job the controller ever ran;
//! - a host's GPU and engine series leave as soon as nothing refreshes them: its telemetry relay
//!   stopped (the trial ended, the engine stopped) or the host turned unreachable.
//!
//! Expiry is lazy: due jobs are dropped on each scrape and each job submission, so no task is
//! needed and nothing waits.

use std::time::{Duration, Instant};

use super::names::{self, attr};
use super::{Metrics, lock};

impl Metrics {
    /// How long a job's series stay after the job ends.
    pub fn set_job_series_ttl(&self, ttl: Duration) {
        *lock(&self.job_ttl) = ttl;
    }

    /// A job ended: its per-job series go after the grace period.
    pub fn job_series_expire(&self, job_id: &str) {
        let due = Instant::now() + *lock(&self.job_ttl);
        lock(&self.ended_jobs).push((due, job_id.to_string()));
    }

    /// Drops the series of jobs whose grace period is over.
    pub(crate) fn expire_due(&self) {
        let now = Instant::now();
        let due: Vec<String> = {
            let mut ended = lock(&self.ended_jobs);
            let (due, keep): (Vec<_>, Vec<_>) = ended.drain(..).partition(|(at, _)| *at <= now);
            *ended = keep;
            due.into_iter().map(|(_, id)| id).collect()
        };
        for id in due {
            self.registry.remove_all_where(names::PER_JOB, |labels| {
                labels.iter().any(|(k, v)| *k == attr::JOB_ID && *v == id)
            });
        }
    }

    /// Drops a host's GPU and engine series (and which config it runs): its telemetry stopped
    /// or it is unreachable. The next sample, if any, brings them back.
    pub fn host_series_remove(&self, host: &str) {
        self.registry.remove_host(names::PER_HOST, host);
        self.set_host_config(host, "");
        lock(&self.cumulative).retain(|(h, _, _), _| h != host);
    }
}
