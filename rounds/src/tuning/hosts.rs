//! What a search needs to know of the hosts before it spends their time: GPUs per host (the
//! per-GPU objective's divisor) and, for the per-watt objective, that every host the search
//! may run on has GPUs to report power from.

use std::collections::BTreeMap;

use fleetbench_proto::controllerpb::{AgentHealth, AgentInfo};

use std::time::Duration;

use super::TuneError;
use super::score::HostGpus;
use crate::fleet::{Fleet, FleetError};
use fleetbench_spec::HostSelector;
use fleetbench_spec::search::Objective;

/// GPUs per host, from the facts of the agents that have reported them.
pub fn gpu_counts(agents: &[AgentInfo]) -> HostGpus {
    agents
        .iter()
        .filter_map(|a| Some((a.name.clone(), a.facts.as_ref()?.gpus.len() as u32)))
        .collect()
}

/// The controller's agents, waiting up to `wait` for the facts of those it has not asked yet
/// (a controller that just started has not heard from its agents).
pub async fn agents_with_facts<F: Fleet>(
    fleet: &mut F,
    wait: Duration,
) -> Result<Vec<AgentInfo>, FleetError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let agents = fleet.agents().await?;
        // No facts and no error: the controller has not asked the agent yet.
        let pending = agents
            .iter()
            .any(|a| a.facts.is_none() && a.error.is_empty());
        if !pending || tokio::time::Instant::now() >= deadline {
            return Ok(agents);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// For the per-watt objective: refuses the search when a host it may run on (selected by the
/// spec's `[hosts]`, not draining or unreachable) says it has no GPUs. Hosts whose facts are
/// not known yet are left to the check on their results.
pub fn check_power(
    objective: Objective,
    selector: &HostSelector,
    agents: &[AgentInfo],
) -> Result<(), TuneError> {
    if objective != Objective::OutputTokensPerSPerWatt {
        return Ok(());
    }
    for a in agents {
        let usable = a.health == AgentHealth::Ready as i32 || a.health == AgentHealth::Busy as i32;
        let Some(facts) = a.facts.as_ref() else {
            continue;
        };
        let labels: BTreeMap<String, String> = a
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !usable || !selector.matches(&a.name, &labels, Some(facts)) || !facts.gpus.is_empty() {
            continue;
        }
        let why = if facts.gpu_unavailable_reason.is_empty() {
            "it has no GPUs".to_string()
        } else {
            format!("no GPUs: {}", facts.gpu_unavailable_reason)
        };
        return Err(TuneError::NoPowerHost {
            objective: objective.name(),
            host: a.name.clone(),
            why,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use fleetbench_proto::agentpb::{GpuFacts, HostFacts};

    use super::*;

    fn agent(name: &str, gpus: usize, label: &str) -> AgentInfo {
        AgentInfo {
            name: name.into(),
            health: AgentHealth::Ready as i32,
            labels: [("pool".to_string(), label.to_string())]
                .into_iter()
                .collect(),
            facts: Some(HostFacts {
                gpus: (0..gpus)
                    .map(|i| GpuFacts {
                        index: i as u32,
                        name: "NVIDIA H200".into(),
                        ..Default::default()
                    })
                    .collect(),
                gpu_unavailable_reason: if gpus == 0 {
                    "NVML not found".into()
                } else {
                    String::new()
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn per_watt_is_refused_when_a_selected_host_has_no_gpus() {
        let agents = [agent("gpu-a", 2, "gpu"), agent("cpu-b", 0, "cpu")];
        let any = HostSelector::default();
        let err = check_power(Objective::OutputTokensPerSPerWatt, &any, &agents).unwrap_err();
        assert_eq!(
            err.to_string(),
            "objective output_tokens_per_s_per_watt needs GPU power; host cpu-b reported none \
             (no GPUs: NVML not found)"
        );
        // Other objectives do not need power.
        assert!(check_power(Objective::OutputTokensPerS, &any, &agents).is_ok());
        // A selector that leaves the host out, or a host that cannot take work, is fine.
        let gpu_pool = HostSelector {
            labels: [("pool".to_string(), "gpu".to_string())]
                .into_iter()
                .collect(),
            ..Default::default()
        };
        assert!(check_power(Objective::OutputTokensPerSPerWatt, &gpu_pool, &agents).is_ok());
        let mut draining = agents.clone();
        draining[1].health = AgentHealth::Draining as i32;
        assert!(check_power(Objective::OutputTokensPerSPerWatt, &any, &draining).is_ok());
    }

    #[test]
    fn gpus_are_counted_per_host_that_reported_facts() {
        let mut agents = vec![agent("gpu-a", 2, "gpu"), agent("cpu-b", 0, "cpu")];
        agents.push(AgentInfo {
            name: "unreached".into(),
            ..Default::default()
        });
        let n = gpu_counts(&agents);
        assert_eq!(n.get("gpu-a"), Some(&2));
        assert_eq!(n.get("cpu-b"), Some(&0));
        assert_eq!(n.get("unreached"), None);
    }
}
