//! One trial attempt of an engine spanning hosts (a config with `nodes = N`): a gang of N ranks,
//! one per host, that start together or not at all and end together.
//!
//! - Placement: the job takes N hosts at once with `Inventory::acquire_all` (all or none, each
//!   matching the job's `[hosts]`); the first is rank 0 and must offer a rendezvous port in the
//!   config's profile (`rendezvous_port`, reported in `GetHost`) — [`fits`] says so to
//!   `acquire_all`, so a gang never waits on a host that could not lead it.
//! - Rendezvous: rank 0's host (the address the controller dials its agent at) and that port.
//!   The controller chooses it and every rank's number; the agent turns them into the engine's
//!   own flags (`EngineSpec.gang`), and refuses them from a config.
//! - Leases: every rank holds its host's agent lease under its own epoch, renewed as a single
//!   host's is (`super::super::lease`). Any rank's lease that ends (fenced, or not renewed
//!   through a partition) ends the attempt as it would end a single-host one, naming the rank.
//! - Start: every rank's `ApplyEngine` runs at once (rank 0 waits for its peers before it is
//!   ready, as SGLang does). The first rank that fails stops the others' starts, every rank's
//!   engine is stopped, and the trial's reason names the rank and its host.
//! - Levels: `RunBenchmark` on rank 0 (the API); the other ranks are watched (`WatchEngine`).
//!   A rank that exits mid-level takes rank 0 down (its collectives fail: a `rank_lost` crash),
//!   and the level is stored as crashed with the rank and host that ended first named in its
//!   crash summary. If rank 0 does not end within [`RANK_LOSS_GRACE`], the controller stops it.
//!   Remaining levels run on a fresh gang, as a single host's engine is restarted after a crash.
//! - End: every rank's lease is released, which stops its engine: nothing is left running.
//!
//! Here: placement, the attempt and its rounds, naming a lost rank; [`start`]: starting and
//! stopping the ranks; [`watch`]: watching the ranks above 0 during levels.
//!
//! Only rank 0 has a `Run` row (the levels are its); the other ranks' hosts, run ids and argv
//! are facts of that run (`gang.rank<R>.*`), so reports that read one run per attempt hold.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use fleetbench_proto::agentpb::{
    self, CrashClass, LevelOutcome, LevelResult, LogFact, StopEngineRequest,
};
use fleetbench_proto::controllerpb::TrialState;
use futures::StreamExt;

use super::members::{self, Member};
use super::*;
use crate::agents::HostSnapshot;

mod start;
mod watch;

/// How long rank 0 may take to end its level after another rank exited before the controller
/// stops it (a real engine may hang in a collective until NCCL's own time-out).
const RANK_LOSS_GRACE: Duration = Duration::from_secs(10);
/// How long a crashed level of rank 0 waits for the watcher to name the rank that ended first.
const NAME_WAIT: Duration = Duration::from_secs(3);

/// The hosts a config of `nodes` ranks takes (1: a single host).
pub(crate) fn nodes(spec: &JobSpec, trial: &TrialRow) -> usize {
    spec.configs[trial.config_index as usize].nodes.max(1) as usize
}

/// Whether `h` may join a gang of `trial` after `taken`: rank 0 (the first) must offer a
/// rendezvous port in the config's profile.
pub(crate) fn fits(
    spec: &JobSpec,
    trial: &TrialRow,
    h: &HostSnapshot,
    taken: &[HostSnapshot],
) -> bool {
    !taken.is_empty() || rendezvous_port(spec, trial, h) != 0
}

fn rendezvous_port(spec: &JobSpec, trial: &TrialRow, h: &HostSnapshot) -> u32 {
    let profile = &spec.configs[trial.config_index as usize].profile;
    h.facts
        .profiles
        .iter()
        .find(|p| &p.name == profile)
        .map_or(0, |p| p.rendezvous_port)
}

/// The rank that ended first in a level, with what its agent said.
#[derive(Debug, Clone)]
struct Loss {
    rank: u32,
    host: String,
    what: String,
}

/// The ranks above 0 of one attempt, and what the attempt learned about them.
pub(super) struct Ranks {
    nnodes: u32,
    dist_init_addr: String,
    /// Ranks 1.. in order (`ranks[i]` is rank `i + 1`).
    ranks: Vec<Member>,
    /// The rank that ended first in the current round.
    lost: Mutex<Option<Loss>>,
    /// The index (into the attempt's hosts, rank order) of the host to blame for the
    /// attempt's end, when it was not rank 0's.
    blame: Mutex<Option<usize>>,
}

impl Ranks {
    /// Ranks 1.. in order.
    pub(super) fn members(&self) -> &[Member] {
        &self.ranks
    }

    /// The rendezvous of rank `rank`, for its `EngineSpec`.
    pub(super) fn pb(&self, rank: u32) -> agentpb::Gang {
        agentpb::Gang {
            nnodes: self.nnodes,
            node_rank: rank,
            dist_init_addr: self.dist_init_addr.clone(),
        }
    }

    fn blame(&self, rank: u32) {
        *self.blame.lock().expect("gang lock") = Some(rank as usize);
    }

    fn note_loss(&self, loss: Loss) {
        let mut l = self.lost.lock().expect("gang lock");
        if l.is_none() {
            tracing::warn!(rank = loss.rank, host = %loss.host, "{}", loss.what);
            *l = Some(loss);
        }
    }

    /// A crashed level of rank 0: names the rank that ended first, if one did (waiting a
    /// moment for its watcher when rank 0 says it lost a peer). A level that failed because
    /// the controller stopped rank 0 after a peer's exit is that peer's crash too.
    pub(super) async fn name_loss(&self, result: &mut LevelResult) {
        if result.outcome == LevelOutcome::Failed as i32
            && let Some(loss) = self.lost.lock().expect("gang lock").clone()
        {
            result.outcome = LevelOutcome::Crashed as i32;
            result.crash = Some(agentpb::Crash {
                class: CrashClass::RankLost as i32,
                summary: format!(
                    "rank {} on host {} ended mid-level ({}); rank 0 was stopped after {} s \
                     without ending its level ({})",
                    loss.rank,
                    loss.host,
                    loss.what,
                    RANK_LOSS_GRACE.as_secs(),
                    result.error
                ),
                ..Default::default()
            });
            return;
        }
        if result.outcome != LevelOutcome::Crashed as i32 {
            return;
        }
        let Some(crash) = result.crash.as_mut() else {
            return;
        };
        let waits = crash.class() == CrashClass::RankLost;
        let until = tokio::time::Instant::now() + if waits { NAME_WAIT } else { Duration::ZERO };
        loop {
            if let Some(loss) = self.lost.lock().expect("gang lock").clone() {
                crash.summary = format!(
                    "rank {} on host {} ended mid-level ({}); rank 0: {}",
                    loss.rank, loss.host, loss.what, crash.summary
                );
                crash.class = CrashClass::RankLost as i32;
                return;
            }
            if tokio::time::Instant::now() >= until {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Resolves when a rank's lease ends, with the stop it means.
    async fn lease_ended(&self) -> Stop {
        let (i, stop) = members::lease_ended(&self.ranks).await;
        self.blame(i as u32 + 1);
        stop
    }

    /// The gang's rounds under every rank's lease: start all, run levels on rank 0, repeat
    /// after a crashed level, until every level is stored.
    pub(super) async fn body(&self, a: &mut Attempt<'_>) -> Result<(), Stop> {
        let ended = tokio::select! {
            r = self.rounds(a) => return r,
            stop = self.lease_ended() => stop,
        };
        // Rank 0 would wait on a peer that is gone: stop it now (its lease's release at the
        // attempt's end would too, later).
        if !a.ctx.is_deposed() {
            a.stop_engine().await;
        }
        Err(ended)
    }

    async fn rounds(&self, a: &mut Attempt<'_>) -> Result<(), Stop> {
        let mut rounds = 0;
        loop {
            let Some(stored) = a.next_round(&mut rounds, "the gang").await? else {
                return Ok(());
            };
            *self.lost.lock().expect("gang lock") = None;
            a.enter(TrialState::StartingEngine).await?;
            self.start_all(a).await?;
            a.enter(TrialState::Running).await?;
            let before = stored.len();
            let benched = {
                let (mut rank0, epoch0) = (a.client.clone(), a.lease.epoch);
                let watch = self.watch_all();
                let bench = a.bench(stored);
                tokio::pin!(watch, bench);
                let benched = tokio::select! {
                    r = &mut bench => r,
                    why = &mut watch => {
                        // Rank 0 did not end its level after a peer's exit (a real engine can wait
                        // in a collective until NCCL's time-out): stop it, and read the level its
                        // agent then reports (stored as crashed, naming the rank: `name_loss`).
                        tracing::warn!("{why}: stopping rank 0");
                        let stop = rank0.stop_engine(StopEngineRequest { lease_epoch: epoch0 });
                        let _ = tokio::time::timeout(Duration::from_secs(60), stop).await;
                        match tokio::time::timeout(Duration::from_secs(60), &mut bench).await {
                            Ok(r) => r,
                            Err(_) => Err(Stop::Lost(format!(
                                "{why}; rank 0's agent did not end the benchmark after its engine \
                                 was stopped"
                            ))),
                        }
                    }
                };
                benched
            };
            benched?;
            if a.round_ended(before, "the agent of rank 0").await? {
                return Ok(());
            }
            // A level crashed (a rank ended mid-level): a fresh gang runs the rest.
            members::stop_members(a.ctx, &self.ranks).await;
        }
    }
}

fn rank_run_id(run_id: &str, rank: u32) -> String {
    format!("{run_id}-r{rank}")
}

/// One attempt of a gang `trial` on `leases` (rank order; rank 0 first), run by
/// `members::run_group`. Returns the index of the host to blame for the outcome (rank 0's
/// unless another rank's ended it) with the outcome.
pub(super) async fn attempt(
    ctx: &Ctx,
    spec: &JobSpec,
    trial: &TrialRow,
    leases: &[Lease],
    run_id: &str,
    cancel: CancellationToken,
) -> (usize, TrialOutcome) {
    let n = leases.len();
    // Rank 0's host as the ranks reach it (the address its agent is dialled at), and the port
    // its profile reserves: `fits` placed a host with one first.
    let address = ctx
        .inventory
        .list()
        .into_iter()
        .find(|h| h.name == leases[0].host)
        .map(|h| h.address)
        .unwrap_or_default();
    let port = ctx
        .inventory
        .snapshots()
        .iter()
        .find(|h| h.name == leases[0].host)
        .map_or(0, |h| rendezvous_port(spec, trial, h));
    if port == 0 || address.is_empty() {
        return (
            0,
            TrialOutcome::Interrupted(format!(
                "host {} (rank 0) no longer offers a rendezvous_port in profile {:?}",
                leases[0].host, spec.configs[trial.config_index as usize].profile
            )),
        );
    }
    let host = members::address_host(&address);
    let dist_init_addr = format!("{host}:{port}");

    // Every rank's agent lease, at once; any that cannot be had gives the others back.
    let held = match members::acquire_each(ctx, trial, leases, |i| format!("rank {i}")).await {
        Ok(held) => held,
        Err(failed) => return failed,
    };
    let (lease0, others) = members::split_members(
        held,
        leases,
        |i| format!("rank {}", i + 1),
        |i| rank_run_id(run_id, i as u32 + 1),
    );
    let ranks = Ranks {
        nnodes: n as u32,
        dist_init_addr: dist_init_addr.clone(),
        ranks: others,
        lost: Mutex::new(None),
        blame: Mutex::new(None),
    };
    tracing::info!(nodes = n, %dist_init_addr, "gang placed");
    let mut run = new_run(trial, run_id, &leases[0].host, lease0.epoch);
    for (k, v) in [
        ("gang.nodes", n.to_string()),
        ("gang.dist_init_addr", dist_init_addr),
    ] {
        run.facts.push(LogFact {
            key: k.into(),
            value: v,
        });
    }
    let mut a = Attempt {
        ctx,
        spec,
        trial,
        host: leases[0].host.clone(),
        client: leases[0].client.clone(),
        run,
        cancel,
        lease: &lease0,
        power: telemetry::PowerLog::with_interval(ctx.telemetry_interval),
        member_power: Vec::new(),
        clients: &[],
        gang: Some(&ranks),
        deployment: None,
    };
    let outcome = a.attempt(run_id).await;
    let blame = ranks.blame.lock().expect("gang lock").unwrap_or(0);
    // Releasing a lease stops its rank's engine: every rank, at once.
    let Ranks { ranks: others, .. } = ranks;
    members::release_all(lease0, others).await;
    (blame, outcome)
}
