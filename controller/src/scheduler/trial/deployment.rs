//! One trial attempt of a deployment (a config with `replicas = N` and a `router`): N replicas
//! of the engine, one per host, behind a router on a host of its own, loaded through the router.
//!
//! - Placement: N + 1 hosts at once (`Inventory::acquire_all`: all or none); the first runs the
//!   router and must offer the router's profile, the others the engine's ([`fits`]).
//! - Leases: every host under its own agent lease and epoch; any replica's lease that ends ends
//!   the attempt as a single host's does, naming the replica.
//! - Start: every replica's `ApplyEngine` at once; the first that fails stops them all and the
//!   trial's reason names the replica and its host. Then the router, with the replicas' base
//!   URLs as its workers (`EngineSpec.workers`: each replica's agent host and the port its engine
//!   serves on; the router's profile must allowlist them) and their engine kind, so that its
//!   agent reads their counters per level (`LevelResult.deployment`).
//! - Levels: `RunBenchmark` on the router's agent. The replicas are watched; one that leaves its
//!   ready state mid-level has the router stopped at once (its retries would otherwise finish
//!   the level on fewer replicas than the config names), and the level is stored `crashed` with
//!   the class `replica_lost`, naming the replica and its host. The remaining levels run on a
//!   fresh deployment.
//! - End: every lease is released, which stops every engine: nothing is left running.
//!
//! The router's run is the attempt's `Run` (its argv, its log facts, the levels); each
//! replica's host, run id, argv, URL and log facts are facts of that run
//! (`deployment.replica<i>.*`), so reports that read one run per attempt hold.

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

/// How long a level that arrives after a replica was lost may have ended before the loss and
/// still be counted as measured on the whole deployment (the two clocks are different hosts').
const LOSS_SLACK_MS: i64 = 1_000;

/// The hosts a deployment config takes (its replicas and the router's); 0: not a deployment.
pub(crate) fn hosts(spec: &JobSpec, trial: &TrialRow) -> usize {
    spec.configs[trial.config_index as usize]
        .deployment
        .as_ref()
        .map_or(0, |d| d.replicas as usize + 1)
}

/// Whether `h` may join a deployment of `trial` after `taken`: the first host runs the router
/// and must offer its profile; the others run a replica each and must offer the engine's.
pub(crate) fn fits(
    spec: &JobSpec,
    trial: &TrialRow,
    h: &HostSnapshot,
    taken: &[HostSnapshot],
) -> bool {
    let c = &spec.configs[trial.config_index as usize];
    let Some(d) = &c.deployment else {
        return true;
    };
    let profile = if taken.is_empty() {
        &d.router.profile
    } else {
        &c.profile
    };
    h.facts.profiles.iter().any(|p| &p.name == profile)
}

/// The replica that left first in a level, and when (the controller's clock).
#[derive(Debug, Clone)]
struct Loss {
    replica: usize,
    host: String,
    what: String,
    unix_ms: i64,
}

/// A deployment's replicas and what the attempt learned about them.
pub(super) struct Replicas {
    replicas: Vec<Member>,
    /// Their base URLs as the router reaches them, from their last start.
    workers: Mutex<Vec<String>>,
    lost: Mutex<Option<Loss>>,
    /// The index (into the attempt's hosts: the router's 0, replica `i`'s `i + 1`) of the host
    /// to blame for the attempt's end, when it was not the router's.
    blame: Mutex<Option<usize>>,
}

impl Replicas {
    /// The replicas in order.
    pub(super) fn members(&self) -> &[Member] {
        &self.replicas
    }

    /// The router's engine, in front of the replicas as last started.
    pub(super) fn router_spec(&self, spec: &JobSpec, config: usize) -> agentpb::EngineSpec {
        let workers = self.workers.lock().expect("deployment lock").clone();
        spec.router_spec(config, workers)
            .expect("a deployment's config has a router")
    }

    fn blame(&self, replica: usize) {
        *self.blame.lock().expect("deployment lock") = Some(replica + 1);
    }

    /// A level of the router's: stored as crashed (`replica_lost`, naming the replica) when a
    /// replica left before it ended, whatever the router's agent says of it.
    pub(super) fn name_loss(&self, result: &mut LevelResult) {
        let Some(loss) = self.lost.lock().expect("deployment lock").clone() else {
            return;
        };
        if result.finished_unix_ms != 0 && result.finished_unix_ms + LOSS_SLACK_MS < loss.unix_ms {
            return;
        }
        let router = match (result.crash.as_ref(), result.error.as_str()) {
            (Some(c), _) if !c.summary.is_empty() => c.summary.clone(),
            (_, "") => "it was stopped".to_string(),
            (_, e) => e.to_string(),
        };
        result.outcome = LevelOutcome::Crashed as i32;
        result.crash = Some(agentpb::Crash {
            class: CrashClass::ReplicaLost as i32,
            summary: format!(
                "replica {} on host {} ended mid-level ({}); the router was stopped ({router})",
                loss.replica, loss.host, loss.what
            ),
            ..Default::default()
        });
    }

    /// The deployment's rounds under every lease: start it, run levels through the router,
    /// start it afresh after a crashed level, until every level is stored.
    pub(super) async fn body(&self, a: &mut Attempt<'_>) -> Result<(), Stop> {
        let ended = tokio::select! {
            r = self.rounds(a) => return r,
            (i, stop) = members::lease_ended(&self.replicas) => {
                self.blame(i);
                stop
            }
        };
        // The router would go on sending to a replica that is gone: stop it now.
        if !a.ctx.is_deposed() {
            a.stop_engine().await;
        }
        Err(ended)
    }

    async fn rounds(&self, a: &mut Attempt<'_>) -> Result<(), Stop> {
        let mut rounds = 0;
        loop {
            let Some(stored) = a.next_round(&mut rounds, "the deployment").await? else {
                return Ok(());
            };
            *self.lost.lock().expect("deployment lock") = None;
            a.enter(TrialState::StartingEngine).await?;
            self.start_replicas(a).await?;
            if let Err(stop) = a.apply().await {
                members::stop_members(a.ctx, &self.replicas).await;
                return Err(stop);
            }
            a.enter(TrialState::Running).await?;
            let before = stored.len();
            let benched = {
                let (ctx, router, epoch) = (a.ctx, a.client.clone(), a.lease.epoch);
                let bench = a.bench(stored);
                let watch = members::first_to_leave(&self.replicas);
                tokio::pin!(bench, watch);
                tokio::select! {
                    r = &mut bench => r,
                    (i, what) = &mut watch => {
                        let host = self.replicas[i].host.clone();
                        tracing::warn!(replica = i, %host, "{what}: stopping the router");
                        *self.lost.lock().expect("deployment lock") = Some(Loss {
                            replica: i,
                            host,
                            what,
                            unix_ms: fleetbench_proto::now_unix_ms(),
                        });
                        self.stop_router(ctx, router, epoch).await;
                        match tokio::time::timeout(Duration::from_secs(60), &mut bench).await {
                            Ok(r) => r,
                            Err(_) => Err(Stop::Lost(
                                "the router's agent did not end the benchmark after the router \
                                 was stopped"
                                    .into(),
                            )),
                        }
                    }
                }
            };
            benched?;
            if a.round_ended(before, "the router's agent").await? {
                return Ok(());
            }
            // A level crashed (the router's, or a replica's): a fresh deployment runs the rest.
            members::stop_members(a.ctx, &self.replicas).await;
        }
    }

    async fn stop_router(&self, ctx: &Ctx, mut client: AgentClient, epoch: u64) {
        if ctx.is_deposed() {
            return;
        }
        let stop = client.stop_engine(StopEngineRequest { lease_epoch: epoch });
        if !matches!(
            tokio::time::timeout(Duration::from_secs(60), stop).await,
            Ok(Ok(_))
        ) {
            tracing::warn!("could not confirm the router stopped");
        }
    }

    /// Starts every replica at once; the first that fails stops them all. Records each one's
    /// URL and start as facts of the router's run.
    async fn start_replicas(&self, a: &mut Attempt<'_>) -> Result<(), Stop> {
        let (ctx, spec, trial) = (a.ctx, a.spec, a.trial);
        let mut starts: futures::stream::FuturesUnordered<_> = self
            .replicas
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let engine = spec.engine_spec(trial.config_index as usize);
                let cancel = a.cancel.clone();
                async move {
                    (
                        i,
                        members::start_member(ctx, trial, m, engine, &cancel).await,
                    )
                }
            })
            .collect();
        let mut started: Vec<Option<members::Started>> =
            (0..self.replicas.len()).map(|_| None).collect();
        let mut failed = None;
        while let Some((i, r)) = starts.next().await {
            match r {
                Ok(s) => started[i] = Some(s),
                Err(f) => {
                    failed = Some((i, f.stop));
                    break;
                }
            }
        }
        drop(starts);
        if let Some((i, stop)) = failed {
            members::stop_members(ctx, &self.replicas).await;
            self.blame(i);
            let who = format!(
                "deployment of {}: replica {i} on host {} could not start",
                self.replicas.len(),
                self.replicas[i].host
            );
            return Err(stop.prefixed(&who));
        }
        let mut workers = Vec::new();
        for (i, (m, s)) in self.replicas.iter().zip(started).enumerate() {
            let s = s.unwrap_or_default();
            let url = worker_url(ctx, &m.host, &s.base_url);
            let prefix = format!("deployment.replica{i}");
            members::member_facts(&mut a.run, &prefix, m, &s);
            set_fact(&mut a.run, format!("{prefix}.url"), url.clone());
            workers.push(url);
        }
        *self.workers.lock().expect("deployment lock") = workers;
        ctx.store.put_run(&a.run).await?;
        Ok(())
    }
}

fn set_fact(run: &mut Run, key: String, value: String) {
    run.facts.retain(|f| f.key != key);
    run.facts.push(LogFact { key, value });
}

/// A replica's base URL as the router reaches it: its agent's host (where the controller dials
/// it) and the port its engine serves on (from the engine's own `base_url`, which names the
/// replica's host as seen from itself).
fn worker_url(ctx: &Ctx, host: &str, base_url: &str) -> String {
    let address = ctx
        .inventory
        .list()
        .into_iter()
        .find(|h| h.name == host)
        .map(|h| h.address)
        .unwrap_or_default();
    let port = base_url
        .trim_end_matches('/')
        .rsplit_once(':')
        .map_or("", |(_, p)| p);
    format!("http://{}:{port}", members::address_host(&address))
}

/// One attempt of a deployment `trial` on `leases` (the router's host first), run by
/// `members::run_group`. Returns the index of the host to blame for the outcome (the router's
/// unless a replica's ended it) with the outcome.
pub(super) async fn attempt(
    ctx: &Ctx,
    spec: &JobSpec,
    trial: &TrialRow,
    leases: &[Lease],
    run_id: &str,
    cancel: CancellationToken,
) -> (usize, TrialOutcome) {
    let who = |i: usize| match i {
        0 => "the router".to_string(),
        i => format!("replica {}", i - 1),
    };
    let held = match members::acquire_each(ctx, trial, leases, who).await {
        Ok(held) => held,
        Err(failed) => return failed,
    };
    let (router_lease, members) = members::split_members(
        held,
        leases,
        |i| format!("replica {i}"),
        |i| format!("{run_id}-p{i}"),
    );
    let replicas = Replicas {
        replicas: members,
        workers: Mutex::new(Vec::new()),
        lost: Mutex::new(None),
        blame: Mutex::new(None),
    };
    tracing::info!(replicas = replicas.replicas.len(), "deployment placed");
    let c = &spec.configs[trial.config_index as usize];
    let mut run = new_run(trial, run_id, &leases[0].host, router_lease.epoch);
    if let Some(d) = &c.deployment {
        set_fact(
            &mut run,
            "deployment.replicas".into(),
            d.replicas.to_string(),
        );
        set_fact(
            &mut run,
            "deployment.router".into(),
            d.router.kind.to_string(),
        );
        set_fact(&mut run, "deployment.engine".into(), c.kind.to_string());
    }
    let mut a = Attempt {
        ctx,
        spec,
        trial,
        host: leases[0].host.clone(),
        client: leases[0].client.clone(),
        run,
        cancel,
        lease: &router_lease,
        power: telemetry::PowerLog::with_interval(ctx.telemetry_interval),
        member_power: Vec::new(),
        clients: &[],
        gang: None,
        deployment: Some(&replicas),
    };
    let outcome = a.attempt(run_id).await;
    let blame = replicas.blame.lock().expect("deployment lock").unwrap_or(0);
    // Releasing a lease stops its engine: the router and every replica, at once.
    let Replicas { replicas: rest, .. } = replicas;
    members::release_all(router_lease, rest).await;
    (blame, outcome)
}
