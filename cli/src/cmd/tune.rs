//! `fleetbench tune SPEC`: a tuning search (a job spec with a `[search]` table). Each round
//! runs as a job on every matching host; prints every candidate, the best config with its
//! margin and confidence, the Pareto front, engine-minutes, and the runs to `fleetbench diff`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use fleetbench_rounds::tuning::{self, TuneError};
use fleetbench_spec::search::Objective;

use super::jobs::{ControllerArgs, connect};
use super::regress::LocalFleet;
use super::run::DEFAULT_DATA_DIR;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The search spec (TOML: one [[configs]] to start from and a [search] table).
    pub spec: PathBuf,
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Where the outcome is written (default: ./fleetbench-results/<name>/tuning.txt).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Data directory of the embedded controller and agents.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Local agents the embedded controller starts (candidates run on all of them at once).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub agents: u32,
    /// Print the outcome as one JSON document on stdout (progress goes to stderr).
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.spec)
        .with_context(|| format!("cannot read the search spec {}", args.spec.display()))?;
    let file_name = args.spec.display().to_string();
    let (spec, search) = match tuning::parse(&file_name, &text) {
        Ok(s) => s,
        Err(TuneError::Spec(errors)) => {
            for e in &errors {
                eprintln!("{e}");
            }
            eprintln!(
                "{} problem(s) in {file_name}; nothing was run",
                errors.len()
            );
            return Ok(ExitCode::from(2));
        }
        Err(e) => return Err(e.into()),
    };
    let candidates = tuning::space::candidates(&spec, &search).len();
    let json = args.json;
    // With --json, stdout holds the document only.
    let say = move |line: String| {
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    say(format!(
        "{file_name}: {candidates} candidates, {}",
        tuning::search::strategy_label(&search)
    ));
    let (local, url) = match &args.controller.controller {
        Some(url) => (None, url.clone()),
        None => {
            let l = LocalFleet::start(&args.data_dir, args.agents).await?;
            let url = l.controller.url();
            (Some(l), url)
        }
    };
    let result = async {
        let mut client = connect(&url, &args.controller).await?;
        let out = if search.objective == Objective::Saturation {
            let o = tuning::saturation::run_saturation(&client, &file_name, &text).await?;
            (
                tuning::render::saturation(&o),
                super::tune_json::saturation(&o),
            )
        } else {
            let o = tuning::search::run_search(&mut client, &file_name, &text, say).await?;
            (tuning::render::search(&o), super::tune_json::search(&o))
        };
        anyhow::Ok(out)
    }
    .await;
    if let Some(l) = local {
        l.stop().await;
    }
    let (text, doc) = result?;
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("\n{text}");
    }
    let path = args.output.clone().unwrap_or_else(|| {
        PathBuf::from("fleetbench-results")
            .join(
                spec.name
                    .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_"),
            )
            .join("tuning.txt")
    });
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    say(format!("wrote {}", path.display()));
    Ok(ExitCode::SUCCESS)
}
