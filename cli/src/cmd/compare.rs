//! `fleetbench compare JOB [JOB…]`: per workload and load level, every config's throughput,
//! latency percentiles and errors, the winner with its margin and whether it exceeds the
//! run-to-run noise, crossovers, and crashes with their classification.

use std::path::PathBuf;
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
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut source = Source::open(&args.controller, &args.data_dir).await?;
    let mut ids = Vec::new();
    for j in &args.jobs {
        ids.push(source.resolve_job(j).await?);
    }
    let results = source.results(&ids, false).await?;
    let compare = source.compare(&ids, &results).await?;
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
