//! `fleetbench compare JOB [JOB…]`: per workload and load level, every config's throughput,
//! latency percentiles and errors, the winner with its margin, effect interval, p-values and
//! minimum detectable effect, crossovers between significant winners, and crashes with their
//! classification.

use std::path::PathBuf;

use anyhow::Context;
use std::process::ExitCode;

use super::jobs::ControllerArgs;
use super::report::Source;
use super::run::DEFAULT_DATA_DIR;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Job ids (or id prefixes, or job names); configs of different jobs are kept apart.
    #[arg(required = true)]
    pub jobs: Vec<String>,
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Data directory of the embedded controller, read when no controller is given.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Print the comparison as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Significance level of the tests (two-sided t on log throughput as the job's design
    /// allows, variances moderated over the levels, Holm over the levels and workloads
    /// compared; docs/tuning.md).
    #[arg(long, default_value_t = 0.05, value_parser = parse_alpha)]
    pub alpha: f64,
    /// An earlier job of the same comparison (id, prefix or name; repeatable): its levels'
    /// spread joins the moderated variances unless this job is significantly noisier. It is
    /// never compared itself.
    #[arg(long = "history", value_name = "JOB")]
    pub history: Vec<String>,
}

fn parse_alpha(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(a) if a > 0.0 && a < 1.0 => Ok(a),
        Ok(a) => Err(format!(
            "a significance level is between 0 and 1 (exclusive), got {a}"
        )),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut source = Source::open(&args.controller, &args.data_dir).await?;
    let mut ids = Vec::new();
    for j in &args.jobs {
        ids.push(source.resolve_job(j).await?);
    }
    let mut history = Vec::new();
    for j in &args.history {
        let id = source
            .resolve_job(j)
            .await
            .with_context(|| format!("--history {j}"))?;
        if ids.contains(&id) {
            anyhow::bail!("--history {j}: job {id} is compared; a job is not its own history");
        }
        history.push(id);
    }
    let results = source.results(&ids, false).await?;
    let compare = source.compare(&ids, &results, &history, args.alpha).await?;
    source.close().await;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::report::compare_json(&compare))?
        );
    } else {
        crate::report::print_compare(&compare);
        for n in crate::report::protocol::notes(&results) {
            println!("note: {n}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
