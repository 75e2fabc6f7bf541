//! `fleetbench run SPEC`: submit a job spec, watch it, print the comparison and write the report.
//!
//! With no controller address (`--controller` or `FLEETBENCH_CONTROLLER`) it starts an embedded
//! controller (SQLite under `./fleetbench-data/`) and a local agent in this process, so nothing
//! else is needed.

use fleetbench_proto::Word;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use fleetbench_controller::HostConfig;
use fleetbench_proto::controllerpb::{
    CancelJobRequest, CompareRequest, GetResultsRequest, Job, JobState, SubmitJobRequest,
};

use super::jobs::{Client, ControllerArgs, connect};
use super::watch::{exit_code, follow};

/// Where the embedded controller and agent keep their data.
pub const DEFAULT_DATA_DIR: &str = "fleetbench-data";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job spec (TOML).
    pub spec: PathBuf,
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Where the report goes (default: ./fleetbench-results/<job name>).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Data directory of the embedded controller and agent.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Validate the spec only; submit nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// The controller and agent `run` started in-process, stopped when the command ends.
struct Embedded {
    controller: fleetbench_controller::ControllerHandle,
    agent: fleetbench_agent::AgentHandle,
}

impl Embedded {
    async fn start(data_dir: &Path) -> anyhow::Result<Embedded> {
        let mut config = fleetbench_agent::AgentConfig::local(data_dir.join("agent"));
        // A free port for the engine instead of each kind's well-known one: a server the user
        // already runs there (or one left by a killed run) must not fail the job.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .context("finding a free port for the local engine")?;
        for profile in config.profiles.values_mut() {
            profile.port = port;
        }
        let agent = fleetbench_agent::start(config)
            .await
            .context("starting the local agent")?;
        let hosts = vec![HostConfig {
            name: "local".into(),
            address: agent.addr.to_string(),
            labels: BTreeMap::new(),
        }];
        let controller =
            match fleetbench_controller::embedded::start_embedded(data_dir, hosts).await {
                Ok(c) => c,
                Err(e) => {
                    agent.shutdown().await;
                    return Err(e).context("starting the embedded controller");
                }
            };
        Ok(Embedded { controller, agent })
    }

    async fn stop(self) {
        self.controller.shutdown().await;
        self.agent.shutdown().await;
    }
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.spec)
        .with_context(|| format!("cannot read the job spec {}", args.spec.display()))?;
    let file_name = args.spec.display().to_string();
    let (embedded, url) = match &args.controller.controller {
        Some(url) => (None, url.clone()),
        None => {
            let e = Embedded::start(&args.data_dir).await?;
            let url = e.controller.url();
            (Some(e), url)
        }
    };
    let result = submit_and_follow(&args, &url, &text, &file_name).await;
    if let Some(e) = embedded {
        e.stop().await;
    }
    result
}

async fn submit_and_follow(
    args: &Args,
    url: &str,
    text: &str,
    file_name: &str,
) -> anyhow::Result<ExitCode> {
    let mut client = connect(url, &args.controller).await?;
    let resp = client
        .submit_job(SubmitJobRequest {
            spec_toml: text.to_string(),
            file_name: file_name.to_string(),
            dry_run: args.dry_run,
            tag: String::new(),
            kind: fleetbench_proto::controllerpb::JobKind::Sweep as i32,
        })
        .await
        .context("SubmitJob")?
        .into_inner();
    if !resp.errors.is_empty() {
        for e in &resp.errors {
            eprintln!("{}:{}: {}: {}", e.file, e.line, e.field, e.message);
        }
        eprintln!(
            "{} problem{} in {file_name}; nothing was submitted",
            resp.errors.len(),
            if resp.errors.len() == 1 { "" } else { "s" }
        );
        return Ok(ExitCode::from(2));
    }
    if args.dry_run {
        println!("{file_name}: valid, {} trials", resp.trial_count);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "job {} submitted: {} trials{}",
        resp.job_id,
        resp.trial_count,
        if args.controller.controller.is_none() {
            " (embedded controller, local agent)"
        } else {
            ""
        }
    );
    let stop = fleetbench_support::signal::stop_signal().context("watching SIGINT and SIGTERM")?;
    let job = tokio::select! {
        j = follow(&mut client, &resp.job_id, url, &args.controller) => j?,
        signal = stop => {
            eprintln!("{}: cancelling job {} (stopping engines)…", signal.name(), resp.job_id);
            let job = client
                .cancel_job(CancelJobRequest { job_id: resp.job_id.clone() })
                .await
                .context("CancelJob")?
                .into_inner();
            eprintln!("job {} {}", job.id, JobState::word_of(job.state));
            return Ok(ExitCode::from(130));
        }
    };
    let dir = args.output.clone().unwrap_or_else(|| default_output(&job));
    finish(&mut client, &job, &dir).await?;
    Ok(exit_code(&job))
}

fn default_output(job: &Job) -> PathBuf {
    let name: String = job
        .name
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
        job.id.clone()
    } else {
        name
    };
    Path::new("fleetbench-results").join(name)
}

/// Prints the comparison and writes the report of a finished job.
async fn finish(client: &mut Client, job: &Job, dir: &Path) -> anyhow::Result<()> {
    let results = client
        .get_results(GetResultsRequest {
            job_ids: vec![job.id.clone()],
            include_telemetry: true,
        })
        .await
        .context("GetResults")?
        .into_inner();
    let compare = client
        .compare(CompareRequest {
            job_ids: vec![job.id.clone()],
            alpha: 0.0,
            history_job_ids: Vec::new(),
        })
        .await
        .context("Compare")?
        .into_inner();
    crate::report::print_compare(&compare);
    for n in crate::report::protocol::notes(&results) {
        println!("note: {n}");
    }
    let files = crate::report::write_all(dir, &results, &compare)
        .with_context(|| format!("writing the report to {}", dir.display()))?;
    for f in files {
        println!("wrote {}", f.display());
    }
    Ok(())
}
