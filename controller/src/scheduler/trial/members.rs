//! The hosts a trial runs engines on besides its own: a gang's ranks above 0 (`gang`) and a
//! deployment's replicas (`deployment`). Each is held under its own agent lease; what both
//! groups do with a member is here once: take every lease or none, start a member's engine
//! (its events relayed to the job's watchers), watch it while the leader runs levels, stop it,
//! and say which member's lease ended first.

use fleetbench_proto::agentpb::{
    ApplyEngineRequest, CrashClass, EngineSpec, EngineState, LogFact, StopEngineRequest,
    WatchEngineRequest, engine_event, engine_watch_event,
};
use fleetbench_proto::controllerpb::{HostEngineEvent, job_event};
use futures::future::select_all;
use std::time::Duration;

use super::*;

/// `host` of an agent address (`http://10.0.0.1:7443`, `[::1]:7443`), as other hosts dial
/// it: a gang's rendezvous and a deployment's replicas are reached where their agent is.
pub(super) fn address_host(address: &str) -> &str {
    let a = address
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let a = a.split('/').next().unwrap_or(a);
    a.rsplit_once(':').map_or(a, |(h, _)| h)
}

/// The `trial` span of a group's attempt: the first host's (rank 0's, the router's) as
/// `fleetbench.host`, and every host in order as `fleetbench.group.hosts`.
pub(super) fn group_span(
    trial: &TrialRow,
    run_id: &str,
    leases: &[Lease],
    group: &'static str,
) -> tracing::Span {
    let hosts: Vec<&str> = leases.iter().map(|l| l.host.as_str()).collect();
    tracing::info_span!(
        "trial",
        fleetbench.host = %hosts.first().copied().unwrap_or_default(),
        fleetbench.group = group,
        fleetbench.group.hosts = %hosts.join(","),
        fleetbench.config.id = %trial.config_id,
        fleetbench.config.name = %trial.config_name,
        fleetbench.workload = %trial.workload,
        fleetbench.repeat = i64::from(trial.repeat),
        fleetbench.attempt = i64::from(trial.attempts),
        fleetbench.run.id = %run_id,
    )
}

/// One attempt of a group `trial` (a gang, a deployment) on `leases`, in the group's span:
/// `attempt(leases, run_id)` returns the index of the host to blame with the outcome; that
/// host's name is returned and every other lease given back ([`settle`]).
pub(super) async fn run_group(
    trial: &TrialRow,
    leases: Vec<Lease>,
    group: &'static str,
    attempt: impl AsyncFnOnce(&[Lease], &str) -> (usize, TrialOutcome),
) -> (String, TrialOutcome) {
    let run_id = format!("{}-a{}", trial.id, trial.attempts);
    let span = group_span(trial, &run_id, &leases, group);
    let (blame, outcome) = attempt(&leases, &run_id).instrument(span).await;
    (settle(leases, blame, &outcome), outcome)
}

/// After a group's attempt: the host to blame (`blame` indexes `leases`), marked unreachable
/// when the outcome says it was lost; every other host is given back.
pub(super) fn settle(mut leases: Vec<Lease>, blame: usize, outcome: &TrialOutcome) -> String {
    let at = blame.min(leases.len() - 1);
    let host = leases[at].host.clone();
    if let TrialOutcome::HostLost(reason) | TrialOutcome::DiedRunning(reason) = outcome {
        leases.swap_remove(at).lost(reason);
    }
    host
}

/// A host of the group: which member it is (`label`: "rank 1", "replica 0"), its agent, and
/// the lease it is held under.
pub(super) struct Member {
    pub(super) label: String,
    pub(super) host: String,
    pub(super) client: AgentClient,
    pub(super) lease: AgentLease,
    /// Its run id (`<run>-r<R>` for a rank): its engine's log on its host, and what its
    /// watch events carry.
    pub(super) run_id: String,
}

/// What a member's engine said while starting.
#[derive(Default)]
pub(super) struct Started {
    pub(super) argv: Vec<String>,
    pub(super) base_url: String,
    pub(super) facts: Vec<LogFact>,
}

/// Why a member's start failed, and whether it died of a lost peer (`rank_lost`: a gang waits
/// to name a rank that failed on its own instead).
pub(super) struct StartFailed {
    pub(super) stop: Stop,
    pub(super) peer_lost: bool,
}

impl From<Stop> for StartFailed {
    fn from(stop: Stop) -> Self {
        StartFailed {
            stop,
            peer_lost: false,
        }
    }
}

/// Every host's agent lease at once, in `leases`' order; any that cannot be had gives the
/// others back, and says which (its index) and why, with `who(i)` naming it ("rank 1").
pub(super) async fn acquire_each(
    ctx: &Ctx,
    trial: &TrialRow,
    leases: &[Lease],
    who: impl Fn(usize) -> String,
) -> Result<Vec<AgentLease>, (usize, TrialOutcome)> {
    let acquired = futures::future::join_all(
        leases
            .iter()
            .map(|l| AgentLease::acquire(&l.client, &trial.job_id, &trial.id, ctx.lease_ttl)),
    )
    .await;
    let mut held = Vec::new();
    let mut first_error = None;
    for (i, r) in acquired.into_iter().enumerate() {
        match r {
            Ok(l) => held.push(l),
            Err(e) if first_error.is_none() => first_error = Some((i, e)),
            Err(_) => {}
        }
    }
    let Some((i, e)) = first_error else {
        return Ok(held);
    };
    futures::future::join_all(held.into_iter().map(AgentLease::release)).await;
    let who = format!("{} on host {}", who(i), leases[i].host);
    Err((
        i,
        match e {
            AcquireError::Busy(m) => {
                TrialOutcome::Interrupted(format!("{who} is leased by another holder: {m}"))
            }
            AcquireError::Unreachable(m) | AcquireError::Refused(m) => {
                TrialOutcome::HostLost(format!("{who}: {m}"))
            }
        },
    ))
}

/// The leases [`acquire_each`] returned, split into the group's first host's (the router's,
/// rank 0's) and the other members, the `i`-th of them (from 0) named `label(i)` with the run
/// id `run_id(i)`.
pub(super) fn split_members(
    held: Vec<AgentLease>,
    leases: &[Lease],
    label: impl Fn(usize) -> String,
    run_id: impl Fn(usize) -> String,
) -> (AgentLease, Vec<Member>) {
    let mut held = held.into_iter();
    let first = held.next().expect("a group holds its first host's lease");
    let members = held
        .zip(leases.iter().skip(1))
        .enumerate()
        .map(|(i, (lease, l))| Member {
            label: label(i),
            host: l.host.clone(),
            client: l.client.clone(),
            lease,
            run_id: run_id(i),
        })
        .collect();
    (first, members)
}

/// Releases the first host's lease and every member's at once; releasing a lease stops its
/// engine.
pub(super) async fn release_all(first: AgentLease, members: Vec<Member>) {
    let releases = std::iter::once(first)
        .chain(members.into_iter().map(|m| m.lease))
        .map(AgentLease::release);
    futures::future::join_all(releases).await;
}

/// Starts `m`'s engine from `spec`, relaying its events to the job's watchers; resolves when
/// it is ready (with what it said) or failed.
pub(super) async fn start_member(
    ctx: &Ctx,
    trial: &TrialRow,
    m: &Member,
    spec: EngineSpec,
    cancel: &CancellationToken,
) -> Result<Started, StartFailed> {
    let req = ApplyEngineRequest {
        spec: Some(spec),
        run_id: m.run_id.clone(),
        lease_epoch: m.lease.epoch,
    };
    let mut client = m.client.clone();
    let mut stream = tokio::select! {
        s = client.apply_engine(req) => s.map_err(|s| classify("ApplyEngine", s))?.into_inner(),
        _ = cancel.cancelled() => return Err(Stop::Cancelled.into()),
    };
    let mut started = Started::default();
    loop {
        let msg = tokio::select! {
            m = stream.message() => m.map_err(|s| classify("ApplyEngine stream", s))?,
            _ = cancel.cancelled() => return Err(Stop::Cancelled.into()),
        };
        let Some(ev) = msg else {
            return Err(Stop::Lost("ApplyEngine ended before the engine was ready".into()).into());
        };
        let host_ev = HostEngineEvent {
            host: m.host.clone(),
            run_id: m.run_id.clone(),
            event: Some(ev.clone()),
        };
        ctx.hub
            .emit(&trial.job_id, job_event::Event::Engine(host_ev))
            .await
            .map_err(Stop::Store)?;
        match ev.event {
            Some(engine_event::Event::Spawned(s)) => started.argv = s.argv,
            Some(engine_event::Event::Fact(f)) => {
                started.facts.retain(|x| x.key != f.key);
                started.facts.push(f);
            }
            Some(engine_event::Event::Ready(r)) => {
                for f in r.facts {
                    started.facts.retain(|x| x.key != f.key);
                    started.facts.push(f);
                }
                started.base_url = r.base_url;
                return Ok(started);
            }
            Some(engine_event::Event::Failed(crash)) => {
                let class = crash.class();
                let stop = if class == CrashClass::HostFault {
                    Stop::HostFault(crash.summary)
                } else if class.not_the_configs() {
                    Stop::Outside(crash.summary)
                } else {
                    Stop::Rejected(crash.summary)
                };
                return Err(StartFailed {
                    stop,
                    peer_lost: class == CrashClass::RankLost,
                });
            }
            _ => {}
        }
    }
}

/// Stops every member's engine (bounded per host); a deposed controller leaves them to the new
/// leader.
pub(super) async fn stop_members(ctx: &Ctx, members: &[Member]) {
    if ctx.is_deposed() {
        return;
    }
    let stops = members.iter().map(|m| async move {
        let mut c = m.client.clone();
        let req = StopEngineRequest {
            lease_epoch: m.lease.epoch,
        };
        let done = tokio::time::timeout(Duration::from_secs(60), c.stop_engine(req)).await;
        if !matches!(done, Ok(Ok(_))) {
            tracing::warn!(member = %m.label, host = %m.host, "could not confirm the engine stopped");
        }
    });
    futures::future::join_all(stops).await;
}

/// Resolves when the first member's lease ends: its index, and the stop it means.
pub(super) async fn lease_ended(members: &[Member]) -> (usize, Stop) {
    if members.is_empty() {
        return std::future::pending().await;
    }
    let ends = members.iter().enumerate().map(|(i, m)| {
        Box::pin(async move {
            let end = m.lease.ended().await;
            (i, end)
        })
    });
    let ((i, end), _, _) = select_all(ends).await;
    let m = &members[i];
    let epoch = m.lease.epoch;
    let stop = match end {
        LeaseEnd::Fenced(e) => Stop::Fenced(format!(
            "{} on host {}: lease epoch {epoch} fenced off: {e}",
            m.label, m.host
        )),
        LeaseEnd::Lost(e) => Stop::Lost(format!("{} on host {}: {e}", m.label, m.host)),
    };
    (i, stop)
}

/// Resolves when the first member's engine leaves its ready state: its index and how. A broken
/// watch stream is left to the member's lease (a partition ends it).
pub(super) async fn first_to_leave(members: &[Member]) -> (usize, String) {
    if members.is_empty() {
        return std::future::pending().await;
    }
    let watches = members
        .iter()
        .enumerate()
        .map(|(i, m)| Box::pin(async move { (i, left_ready(m).await) }));
    let ((i, what), _, _) = select_all(watches).await;
    (i, what)
}

/// Resolves when `m`'s engine leaves its ready state for its run, saying how.
async fn left_ready(m: &Member) -> String {
    let mut c = m.client.clone();
    let req = WatchEngineRequest { keepalive_ms: 500 };
    let Ok(stream) = c.watch_engine(req).await else {
        return std::future::pending().await;
    };
    let mut stream = stream.into_inner();
    loop {
        let Ok(Some(ev)) = stream.message().await else {
            return std::future::pending().await;
        };
        let Some(engine_watch_event::Event::Status(s)) = ev.event else {
            continue;
        };
        if s.run_id == m.run_id && s.state == EngineState::Ready as i32 {
            continue;
        }
        let crash = s
            .last_crash
            .as_ref()
            .map(|c| c.summary.clone())
            .filter(|c| !c.is_empty());
        let state = EngineState::try_from(s.state).map_or("unknown".into(), |st| {
            st.as_str_name()
                .trim_start_matches("ENGINE_STATE_")
                .to_ascii_lowercase()
        });
        return match crash {
            Some(c) if s.run_id == m.run_id => format!("its engine is {state}: {c}"),
            _ => format!("its engine is {state}"),
        };
    }
}

/// Records `m`'s start as facts of the leader's run (`<prefix>.host`, `.run_id`, `.argv`,
/// `.lease_epoch`, and each of its own log facts under `<prefix>.fact.<key>`).
pub(super) fn member_facts(run: &mut Run, prefix: &str, m: &Member, started: &Started) {
    let key = |k: &str| format!("{prefix}.{k}");
    let mut facts = vec![
        (key("host"), m.host.clone()),
        (key("run_id"), m.run_id.clone()),
        (key("argv"), started.argv.join(" ")),
        (key("lease_epoch"), m.lease.epoch.to_string()),
    ];
    for f in &started.facts {
        facts.push((key(&format!("fact.{}", f.key)), f.value.clone()));
    }
    for (k, v) in facts {
        run.facts.retain(|f| f.key != k);
        run.facts.push(LogFact { key: k, value: v });
    }
}

#[cfg(test)]
mod tests {
    use super::address_host;

    #[test]
    fn a_member_is_dialled_where_its_agent_is() {
        assert_eq!(address_host("127.0.0.1:7443"), "127.0.0.1");
        assert_eq!(address_host("https://10.0.0.7:7443"), "10.0.0.7");
        assert_eq!(address_host("http://gpu-a.example:7443/"), "gpu-a.example");
        assert_eq!(address_host("[::1]:7443"), "[::1]");
    }
}
