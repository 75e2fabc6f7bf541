//! `fleetbench regress SUITE`: run a regression suite, compare every gated metric at every
//! level with the baseline, print the verdicts (or `--json`), write JUnit XML.
//!
//! Exit status: 0 no regression, 1 a regression, 2 the suite could not run (invalid suite,
//! controller unreachable, the suite's job failed, no baseline): CI can tell "the code got
//! slower" from "the benchmark is broken".
//!
//! Like `run`, with no controller address it starts an embedded controller with local agents
//! (`--agents N`), whose store keeps the suite's history (baselines, last passing run). With
//! `--controller URL` the history is kept on that controller, through its suite history API.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use fleetbench_controller::HostConfig;
use fleetbench_controller::regress::StoreHistory;
use fleetbench_rounds::regress::{self, RegressError, RemoteHistory, Status};

use super::jobs::{ControllerArgs, connect};
use super::run::DEFAULT_DATA_DIR;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The suite (TOML: a job spec with a [suite] table).
    pub suite: PathBuf,
    /// Mark this run as a baseline named NAME (`baseline = "tag:NAME"` in later runs).
    #[arg(long, value_name = "NAME")]
    pub tag: Option<String>,
    /// Write the verdicts as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Data directory of the embedded controller and agents.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Local agents the embedded controller starts (hosts local-0, local-1, …).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub agents: u32,
    /// Print the outcome as one JSON document on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The exit status of a suite that could not run.
const COULD_NOT_RUN: u8 = 2;

/// A controller with local agents started in this process (no `--controller` given).
pub(crate) struct LocalFleet {
    pub controller: fleetbench_controller::ControllerHandle,
    agents: Vec<fleetbench_agent::AgentHandle>,
}

impl LocalFleet {
    pub(crate) async fn start(data_dir: &Path, agents: u32) -> anyhow::Result<LocalFleet> {
        let mut handles = Vec::new();
        let mut hosts = Vec::new();
        for i in 0..agents {
            let mut cfg = fleetbench_agent::AgentConfig::local(data_dir.join(format!("agent-{i}")));
            cfg.name = format!("local-{i}");
            // The agents share this machine (and maybe other users'): each engine gets a
            // free port of its own rather than the engine's well-known one.
            for p in cfg.profiles.values_mut() {
                p.port = free_port()?;
            }
            let agent = match fleetbench_agent::start(cfg).await {
                Ok(a) => a,
                Err(e) => {
                    for h in handles {
                        fleetbench_agent::AgentHandle::shutdown(h).await;
                    }
                    return Err(e).context("starting a local agent");
                }
            };
            hosts.push(HostConfig {
                name: format!("local-{i}"),
                address: agent.addr.to_string(),
                labels: BTreeMap::new(),
            });
            handles.push(agent);
        }
        match fleetbench_controller::embedded::start_embedded(data_dir, hosts).await {
            Ok(controller) => Ok(LocalFleet {
                controller,
                agents: handles,
            }),
            Err(e) => {
                for h in handles {
                    h.shutdown().await;
                }
                Err(e).context("starting the embedded controller")
            }
        }
    }

    pub(crate) async fn stop(self) {
        self.controller.shutdown().await;
        for a in self.agents {
            a.shutdown().await;
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match run_suite(args).await {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            eprintln!("the suite could not run (exit status {COULD_NOT_RUN})");
            Ok(ExitCode::from(COULD_NOT_RUN))
        }
    }
}

async fn run_suite(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.suite)
        .with_context(|| format!("cannot read the suite {}", args.suite.display()))?;
    let file_name = args.suite.display().to_string();
    // Refuse an invalid suite before anything starts.
    if let Err(RegressError::Spec(errors)) = regress::load(&file_name, &text) {
        for e in &errors {
            eprintln!("{e}");
        }
        eprintln!(
            "{} problem(s) in {file_name}; nothing was run",
            errors.len()
        );
        return Ok(ExitCode::from(COULD_NOT_RUN));
    }
    let tag = args.tag.clone().unwrap_or_default();
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
        // The embedded controller's store is in this process; a remote one keeps the history
        // through its API.
        anyhow::Ok(match &local {
            Some(l) => {
                let metrics = Some(&*l.controller.metrics);
                let mut store = StoreHistory::new(&l.controller.store, metrics);
                regress::run_suite(&mut client, &mut store, &file_name, &text, &tag).await
            }
            None => {
                let mut remote = RemoteHistory::new(client.clone());
                regress::run_suite(&mut client, &mut remote, &file_name, &text, &tag).await
            }
        })
    }
    .await;
    if let Some(l) = local {
        l.stop().await;
    }
    let outcome = match result? {
        Ok(o) => o,
        Err(RegressError::Spec(errors)) => {
            for e in &errors {
                eprintln!("{e}");
            }
            return Ok(ExitCode::from(COULD_NOT_RUN));
        }
        Err(e) => return Err(e).context(format!("suite {file_name}")),
    };
    let regressions = outcome
        .verdicts
        .iter()
        .filter(|v| v.status == Status::Regressed)
        .count();
    if let Some(path) = &args.junit {
        let xml = fleetbench_verdicts::regress::junit::junit_xml(&outcome.suite, &outcome.verdicts)
            .context("rendering JUnit XML")?;
        std::fs::write(path, xml).with_context(|| format!("writing {}", path.display()))?;
        if !args.json {
            println!("wrote {}", path.display());
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&outcome_json(&outcome, &tag))?
        );
        return Ok(if outcome.passed {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    println!(
        "suite {}: run {} (job {}), baseline: {}",
        outcome.suite,
        if tag.is_empty() { "-" } else { tag.as_str() },
        outcome.job.id,
        outcome
            .baseline_job_id
            .as_deref()
            .unwrap_or("none (first run: nothing to compare)")
    );
    print!(
        "{}",
        fleetbench_verdicts::regress::verdict::render(&outcome.verdicts)
    );
    if outcome.passed {
        println!("PASS: {} checks, no regression", outcome.verdicts.len());
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "FAIL: {regressions} of {} checks regressed",
            outcome.verdicts.len()
        );
        Ok(ExitCode::FAILURE)
    }
}

/// `--json`: the outcome with every verdict (values per repeat, the change and its interval).
fn outcome_json(o: &regress::SuiteOutcome, tag: &str) -> serde_json::Value {
    let verdicts: Vec<serde_json::Value> = o
        .verdicts
        .iter()
        .map(|v| {
            serde_json::json!({
                "config": v.config,
                "workload": v.workload,
                "level": v.level,
                "metric": v.metric.name(),
                "tolerance": v.tolerance,
                "baseline": v.baseline,
                "current": v.current,
                "change": v.test.map(|c| serde_json::json!({
                    "relative": c.relative, "low": c.low, "high": c.high,
                    "confidence": c.confidence, "df": c.df, "runs": c.runs,
                    "p_beyond_tolerance": c.p_beyond, "p_adjusted": c.p_adjusted,
                })),
                "relative": v.relative,
                "status": match v.status {
                    Status::Pass => "pass",
                    Status::Forming => "forming",
                    Status::Regressed => "regressed",
                    Status::NoBaseline => "no_baseline",
                },
                "detail": v.detail,
            })
        })
        .collect();
    serde_json::json!({
        "suite": o.suite,
        "tag": tag,
        "job_id": o.job.id,
        "baseline_job_id": o.baseline_job_id,
        "passed": o.passed,
        "verdicts": verdicts,
    })
}
