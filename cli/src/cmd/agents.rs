//! `fleetbench agents`: the controller's hosts, their health, GPUs and labels.

use fleetbench_proto::Word;
use std::process::ExitCode;

use anyhow::Context;
use fleetbench_proto::controllerpb::{AgentHealth, AgentInfo, ListAgentsRequest};

use super::jobs::{ControllerArgs, ago, connect};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Print the agents as a JSON array on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn agent_json(a: &AgentInfo) -> serde_json::Value {
    let gpus: Vec<serde_json::Value> = a
        .facts
        .iter()
        .flat_map(|f| &f.gpus)
        .map(|g| serde_json::json!({ "name": g.name }))
        .collect();
    serde_json::json!({
        "name": a.name,
        "address": a.address,
        "health": AgentHealth::word_of(a.health),
        "gpus": gpus,
        "source": a.source,
        "last_seen_unix_ms": a.last_seen_unix_ms,
        "labels": a.labels.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "current_job_id": a.current_job_id,
        "current_config_id": a.current_config_id,
        "error": a.error,
    })
}

fn gpus(a: &AgentInfo) -> String {
    let Some(f) = &a.facts else {
        return "-".into();
    };
    if f.gpus.is_empty() {
        return "none".into();
    }
    let mut names: Vec<&str> = f.gpus.iter().map(|g| g.name.as_str()).collect();
    names.dedup();
    format!("{}x {}", f.gpus.len(), names.join("/"))
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut client = connect(args.controller.url()?, &args.controller).await?;
    let agents = client
        .list_agents(ListAgentsRequest {})
        .await
        .context("ListAgents")?
        .into_inner()
        .agents;
    if args.json {
        let doc: Vec<_> = agents.iter().map(agent_json).collect();
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    if agents.is_empty() {
        println!("no agents (add [[hosts]] to the controller's config, or let agents register)");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<16}  {:<22}  {:<11}  {:<20}  {:<10}  {:<14}  LABELS",
        "NAME", "ADDRESS", "HEALTH", "GPUS", "SOURCE", "LAST SEEN"
    );
    for a in &agents {
        let labels: Vec<String> = {
            let mut l: Vec<_> = a.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            l.sort();
            l
        };
        println!(
            "{:<16}  {:<22}  {:<11}  {:<20}  {:<10}  {:<14}  {}",
            a.name,
            a.address,
            AgentHealth::word_of(a.health),
            gpus(a),
            a.source,
            ago(a.last_seen_unix_ms),
            labels.join(",")
        );
        if !a.current_job_id.is_empty() {
            println!(
                "    running job {} config {}",
                a.current_job_id, a.current_config_id
            );
        }
        if !a.error.is_empty() {
            println!("    error: {}", a.error);
        }
    }
    Ok(ExitCode::SUCCESS)
}
