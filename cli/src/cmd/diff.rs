//! `fleetbench diff RUN_A RUN_B`: the effective server args (argv, logged server args) and
//! log facts of two engine runs side by side, only what differs.

use std::path::PathBuf;
use std::process::ExitCode;

use super::jobs::ControllerArgs;
use super::report::Source;
use super::run::DEFAULT_DATA_DIR;
use crate::report::diff::{diff_runs, render_diff};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run id of the first engine run (see `fleetbench watch` or results.csv).
    pub run_a: String,
    /// Run id of the second engine run.
    pub run_b: String,
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Data directory of the embedded controller, read when no controller is given.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Print the differing entries as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut source = Source::open(&args.controller, &args.data_dir).await?;
    let a = source.run(&args.run_a).await;
    let b = source.run(&args.run_b).await;
    source.close().await;
    let (a, b) = (a?, b?);
    let diff = diff_runs(&a, &b);
    if args.json {
        let rows: Vec<_> = diff
            .rows
            .iter()
            .map(|r| serde_json::json!({ "key": r.key, "a": r.a, "b": r.b }))
            .collect();
        let doc = serde_json::json!({
            "run_a": args.run_a,
            "run_b": args.run_b,
            "differ": rows,
            "same": diff.same,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", render_diff(&a, &b, &diff));
    Ok(ExitCode::SUCCESS)
}
