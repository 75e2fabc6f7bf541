//! What a comparison reports beside its tests: crossovers (where the decisive winner changes
//! with load) and crashes (levels that crashed, and engines that never became ready).

use std::collections::HashMap;

use fleetbench_proto::agentpb::LevelOutcome;
use fleetbench_proto::controllerpb::{
    CompareGroup, CrashInfo, Crossover, GetResultsResponse, RunState, StoredLevel,
};
use fleetbench_spec::level_label;

pub(super) fn crossovers(groups: &[CompareGroup]) -> Vec<Crossover> {
    let mut out = Vec::new();
    let mut prev: Option<&CompareGroup> = None;
    for g in groups {
        // Only a decisive winner counts: significant, or the only config that may win a
        // level others took part in (they crashed, failed or erred). An untested or
        // insignificant lead is not a winner a crossover can be drawn from.
        let alone = g.runner_up_config.is_empty() && g.configs.len() > 1;
        if g.winner_config.is_empty() || !(g.margin_significant || alone) {
            continue;
        }
        if let Some(p) = prev.filter(|p| p.workload == g.workload)
            && p.winner_config != g.winner_config
        {
            out.push(Crossover {
                workload: g.workload.clone(),
                from_level: p.level_label.clone(),
                to_level: g.level_label.clone(),
                from_winner: p.winner_config.clone(),
                to_winner: g.winner_config.clone(),
            });
        }
        prev = Some(g);
    }
    out
}

pub(super) fn crashes(
    results: &GetResultsResponse,
    levels: &[&StoredLevel],
    names: &HashMap<(String, String), String>,
) -> Vec<CrashInfo> {
    let name = |job: &str, id: &str, fallback: &str| {
        names
            .get(&(job.to_string(), id.to_string()))
            .cloned()
            .unwrap_or_else(|| fallback.to_string())
    };
    let mut out = Vec::new();
    for l in levels {
        let Some(r) = &l.result else { continue };
        if r.outcome() != LevelOutcome::Crashed {
            continue;
        }
        let level = r.level.unwrap_or_default();
        out.push(CrashInfo {
            config_name: name(&l.job_id, &l.config_id, &l.config_name),
            host: l.host.clone(),
            workload: l.workload.clone(),
            level_label: level_label(&level),
            run_id: l.run_id.clone(),
            crash: r.crash.clone(),
        });
    }
    // Engines that never became ready: no level ran, but the crash is a result too.
    for run in &results.runs {
        if run.state() == RunState::EngineFailed && run.crash.is_some() {
            out.push(CrashInfo {
                config_name: name(&run.job_id, &run.config_id, &run.config_name),
                host: run.host.clone(),
                workload: run.workload.clone(),
                level_label: "engine start".to_string(),
                run_id: run.run_id.clone(),
                crash: run.crash.clone(),
            });
        }
    }
    out
}
