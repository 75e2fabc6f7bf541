//! `fleetbench report JOB… --output DIR`: results.json, results.csv and report.html.
//!
//! Also home of [`Source`], where `compare`, `diff` and `report` read results: a controller's
//! API when one is given (`--controller` / `FLEETBENCH_CONTROLLER`), else the embedded
//! controller's store that `fleetbench run` left under the data directory
//! (`./fleetbench-data/controller.db`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use fleetbench_controller::store::Store;
use fleetbench_proto::controllerpb::{
    CompareRequest, CompareResponse, GetResultsRequest, GetResultsResponse, GetRunRequest, Job,
    ListJobsRequest, Run,
};

use super::jobs::{Client, ControllerArgs, connect};
use super::run::DEFAULT_DATA_DIR;

/// An open source of results.
pub enum Source {
    Remote(Client),
    Local(Store),
}

impl Source {
    /// The controller given, else the store under `data_dir`.
    pub async fn open(args: &ControllerArgs, data_dir: &Path) -> anyhow::Result<Source> {
        if let Some(url) = &args.controller {
            return Ok(Source::Remote(connect(url, args).await?));
        }
        let db = data_dir.join("controller.db");
        if !db.exists() {
            bail!(
                "no controller given (--controller or FLEETBENCH_CONTROLLER) and no embedded store at {} \
                 (run `fleetbench run SPEC` here first, or pass --data-dir)",
                db.display()
            );
        }
        let store = Store::open(&format!("sqlite://{}", db.display()))
            .await
            .with_context(|| format!("opening {}", db.display()))?;
        Ok(Source::Local(store))
    }

    pub async fn close(self) {
        if let Source::Local(store) = self {
            store.close().await;
        }
    }

    async fn jobs(&mut self) -> anyhow::Result<Vec<Job>> {
        Ok(match self {
            Source::Remote(c) => {
                c.list_jobs(ListJobsRequest {
                    limit: 10_000,
                    ..Default::default()
                })
                .await
                .context("ListJobs")?
                .into_inner()
                .jobs
            }
            Source::Local(s) => s.list_jobs(10_000).await?,
        })
    }

    /// A job id from what the user typed: an id, a unique id prefix, or a job name (its
    /// newest job).
    pub async fn resolve_job(&mut self, given: &str) -> anyhow::Result<String> {
        let jobs = self.jobs().await?;
        if jobs.iter().any(|j| j.id == given) {
            return Ok(given.to_string());
        }
        let by_prefix: Vec<&Job> = jobs.iter().filter(|j| j.id.starts_with(given)).collect();
        if let [one] = by_prefix.as_slice() {
            return Ok(one.id.clone());
        }
        if by_prefix.len() > 1 {
            bail!(
                "job id prefix {given:?} matches {} jobs; give more of the id",
                by_prefix.len()
            );
        }
        match jobs
            .iter()
            .filter(|j| j.name == given)
            .max_by_key(|j| j.created_unix_ms)
        {
            Some(j) => Ok(j.id.clone()),
            None => bail!(
                "no job {given:?} (neither an id, an id prefix nor a job name; see `fleetbench jobs`)"
            ),
        }
    }

    /// Everything stored for the jobs.
    pub async fn results(
        &mut self,
        job_ids: &[String],
        telemetry: bool,
    ) -> anyhow::Result<GetResultsResponse> {
        match self {
            Source::Remote(c) => Ok(c
                .get_results(GetResultsRequest {
                    job_ids: job_ids.to_vec(),
                    include_telemetry: telemetry,
                })
                .await
                .context("GetResults")?
                .into_inner()),
            Source::Local(s) => {
                let mut out = GetResultsResponse::default();
                for id in job_ids {
                    let job = s
                        .get_job(id)
                        .await?
                        .with_context(|| format!("no job {id:?}"))?;
                    out.jobs.push(job);
                    out.configs.extend(s.configs(id).await?);
                    out.runs.extend(s.runs(id).await?);
                    out.levels.extend(s.levels(id).await?);
                    if telemetry {
                        out.telemetry.extend(s.telemetry(id).await?);
                    }
                }
                Ok(out)
            }
        }
    }

    /// The comparison of the jobs at significance level `alpha` (0: the default), with the
    /// earlier jobs `history` lending their spread (`compare --history`): the controller's,
    /// or computed here from the store.
    pub async fn compare(
        &mut self,
        job_ids: &[String],
        results: &GetResultsResponse,
        history: &[String],
        alpha: f64,
    ) -> anyhow::Result<CompareResponse> {
        match self {
            Source::Remote(c) => Ok(c
                .compare(CompareRequest {
                    job_ids: job_ids.to_vec(),
                    alpha,
                    history_job_ids: history.to_vec(),
                })
                .await
                .context("Compare")?
                .into_inner()),
            Source::Local(_) => {
                let mut past = Vec::with_capacity(history.len());
                for id in history {
                    past.push(self.results(std::slice::from_ref(id), false).await?);
                }
                Ok(fleetbench_verdicts::compare::compare_with_history(
                    results, &past, alpha,
                ))
            }
        }
    }

    /// One engine run.
    pub async fn run(&mut self, run_id: &str) -> anyhow::Result<Run> {
        match self {
            Source::Remote(c) => Ok(c
                .get_run(GetRunRequest {
                    run_id: run_id.to_string(),
                })
                .await
                .with_context(|| format!("GetRun {run_id}"))?
                .into_inner()),
            Source::Local(s) => s
                .get_run(run_id)
                .await?
                .with_context(|| format!("no run {run_id:?}")),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Job ids (or id prefixes, or job names) to report on; several jobs share one report.
    #[arg(required = true)]
    pub jobs: Vec<String>,
    /// Directory for the files (default: ./fleetbench-results/<job name>).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Data directory of the embedded controller, read when no controller is given.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut source = Source::open(&args.controller, &args.data_dir).await?;
    let mut ids = Vec::new();
    for j in &args.jobs {
        ids.push(source.resolve_job(j).await?);
    }
    let results = source.results(&ids, true).await?;
    let compare = source.compare(&ids, &results, &[], 0.0).await?;
    source.close().await;
    let dir = args
        .output
        .unwrap_or_else(|| default_output(results.jobs.first()));
    for f in crate::report::write_all(&dir, &results, &compare)? {
        println!("wrote {}", f.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `./fleetbench-results/<job name>`, the name made safe for a path (as `run` does).
fn default_output(job: Option<&Job>) -> PathBuf {
    let name: String = job
        .map_or("report", |j| j.name.as_str())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = if name.is_empty() {
        "report".to_string()
    } else {
        name
    };
    Path::new("fleetbench-results").join(name)
}
