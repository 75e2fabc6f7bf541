//! The heartbeat of every host: one task per host record while this controller leads, holding
//! the host's `WatchEngine` stream (see the parent module for what marks a host lost).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fleetbench_proto::agentpb::{GetEngineRequest, GetHostRequest, HostFacts, WatchEngineRequest};
use fleetbench_proto::now_unix_ms;
use tokio_util::sync::CancellationToken;

use super::{FACTS_EVERY, Inventory};
use crate::agents::AgentClient;

impl Inventory {
    /// The client of `name` if its record is still `generation`.
    pub(super) fn client_of(&self, name: &str, generation: u64) -> Option<AgentClient> {
        let hosts = self.hosts.lock().expect("inventory lock");
        hosts
            .get(name)
            .filter(|h| h.generation == generation)
            .map(|h| h.client.clone())
    }

    /// Records an answer from the host (with its facts, if read). False when the record is
    /// gone or replaced: the caller's task ends.
    pub(super) fn seen(&self, name: &str, generation: u64, facts: Option<HostFacts>) -> bool {
        let back = {
            let mut hosts = self.hosts.lock().expect("inventory lock");
            let Some(h) = hosts.get_mut(name).filter(|h| h.generation == generation) else {
                return false;
            };
            if let Some(facts) = facts {
                h.facts = Some(facts);
            }
            h.last_seen_unix_ms = now_unix_ms();
            let back = !h.reachable;
            if back {
                h.reachable = true;
                h.error.clear();
            }
            back
        };
        if back {
            tracing::info!(host = name, reachable = true, "agent health changed");
            self.bump();
        }
        true
    }

    /// Records a failed heartbeat. False when the record is gone or replaced.
    pub(super) fn unseen(&self, name: &str, generation: u64, error: String) -> bool {
        let lost = {
            let mut hosts = self.hosts.lock().expect("inventory lock");
            let Some(h) = hosts.get_mut(name).filter(|h| h.generation == generation) else {
                return false;
            };
            let lost = h.reachable;
            h.reachable = false;
            h.error = error;
            // The channel keeps the client certificate it was built with: after a renewal
            // rewrote the files (and the old certificate expired) only a new one connects.
            if let Ok(client) = self.connector.client(&h.address) {
                h.client = client;
            }
            lost
        };
        if lost {
            tracing::info!(host = name, reachable = false, "agent health changed");
            self.bump();
        }
        true
    }

    /// How long one heartbeat call may take (a polled beat's time-out), and the slack a
    /// stream's keep-alive gets beyond its interval.
    pub(super) fn slack(&self) -> Duration {
        self.heartbeat.max(Duration::from_secs(2))
    }

    /// One `GetHost`: the facts, and whether the host answers. False when the record is gone.
    pub(super) async fn read_facts(&self, name: &str, generation: u64) -> bool {
        let Some(mut client) = self.client_of(name, generation) else {
            return false;
        };
        let timeout = self.slack();
        match tokio::time::timeout(timeout, client.get_host(GetHostRequest {})).await {
            Ok(Ok(f)) => self.seen(name, generation, Some(f.into_inner())),
            Ok(Err(status)) => {
                self.unseen(name, generation, format!("GetHost: {}", status.message()));
                false
            }
            Err(_) => {
                self.unseen(
                    name,
                    generation,
                    format!("GetHost: no answer within {timeout:?}"),
                );
                false
            }
        }
    }

    /// The heartbeat of one host record until `cancel` or until the record is replaced: facts,
    /// then its `WatchEngine` stream (or polling, for an agent without it); after a failure,
    /// again one interval later.
    pub(super) async fn watch_host(
        self: Arc<Self>,
        name: String,
        generation: u64,
        cancel: CancellationToken,
    ) {
        let mut first = true;
        loop {
            if !first {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(self.heartbeat) => {}
                }
            }
            first = false;
            let Some(mut client) = self.client_of(&name, generation) else {
                return;
            };
            let connected = tokio::select! {
                _ = cancel.cancelled() => return,
                ok = self.read_facts(&name, generation) => ok,
            };
            if !connected {
                continue;
            }
            let req = WatchEngineRequest {
                keepalive_ms: self.heartbeat.as_millis().clamp(100, 600_000) as u32,
            };
            let slack = self.slack();
            let opened = tokio::select! {
                _ = cancel.cancelled() => return,
                r = tokio::time::timeout(slack, client.watch_engine(req)) => r,
            };
            let mut stream = match opened {
                Ok(Ok(s)) => s.into_inner(),
                Ok(Err(s)) if s.code() == tonic::Code::Unimplemented => {
                    // An agent older than WatchEngine.
                    self.poll(&name, generation, client, &cancel).await;
                    continue;
                }
                Ok(Err(s)) => {
                    self.unseen(&name, generation, format!("WatchEngine: {}", s.message()));
                    continue;
                }
                Err(_) => {
                    self.unseen(
                        &name,
                        generation,
                        format!("WatchEngine: no answer within {slack:?}"),
                    );
                    continue;
                }
            };
            let deadline = self.heartbeat + slack;
            let mut facts_due = Instant::now() + self.heartbeat * FACTS_EVERY;
            let error = loop {
                let msg = tokio::select! {
                    _ = cancel.cancelled() => return,
                    m = tokio::time::timeout(deadline, stream.message()) => m,
                };
                match msg {
                    Ok(Ok(Some(_))) => {
                        if !self.seen(&name, generation, None) {
                            return;
                        }
                        if Instant::now() >= facts_due {
                            facts_due = Instant::now() + self.heartbeat * FACTS_EVERY;
                            // A failing read marks the host unreachable; the stream's next
                            // message brings it back.
                            if !self.read_facts(&name, generation).await
                                && self.client_of(&name, generation).is_none()
                            {
                                return;
                            }
                        }
                    }
                    Ok(Ok(None)) => break "WatchEngine: the agent ended the stream".to_string(),
                    Ok(Err(s)) => break format!("WatchEngine: {}", s.message()),
                    Err(_) => {
                        break format!(
                            "WatchEngine: nothing for {deadline:?} (keep-alive every {:?})",
                            self.heartbeat
                        );
                    }
                }
            };
            if !self.unseen(&name, generation, error) {
                return;
            }
        }
    }

    /// Heartbeats an agent without `WatchEngine` by polling (`GetEngine` every interval,
    /// `GetHost` every [`FACTS_EVERY`]th) until a beat fails or `cancel`.
    pub(super) async fn poll(
        &self,
        name: &str,
        generation: u64,
        mut client: AgentClient,
        cancel: &CancellationToken,
    ) {
        let timeout = self.slack();
        let mut tick = tokio::time::interval(self.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut beats = 0u32;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            beats += 1;
            if beats.is_multiple_of(FACTS_EVERY) {
                if !self.read_facts(name, generation).await {
                    return;
                }
                continue;
            }
            match tokio::time::timeout(timeout, client.get_engine(GetEngineRequest {})).await {
                Ok(Ok(_)) => {
                    if !self.seen(name, generation, None) {
                        return;
                    }
                }
                Ok(Err(status)) => {
                    self.unseen(name, generation, format!("GetEngine: {}", status.message()));
                    return;
                }
                Err(_) => {
                    self.unseen(
                        name,
                        generation,
                        format!("GetEngine: no answer within {timeout:?}"),
                    );
                    return;
                }
            }
        }
    }

    /// Heartbeats every host until `cancel`: one task per host record (started as hosts are
    /// added), all awaited before this returns.
    pub async fn heartbeat_loop(self: Arc<Self>, cancel: CancellationToken) {
        self.beating.store(true, Ordering::Release);
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let start: Vec<(String, u64)> = {
                let mut hosts = self.hosts.lock().expect("inventory lock");
                hosts
                    .values_mut()
                    .filter(|h| !h.watched)
                    .map(|h| {
                        h.watched = true;
                        (h.name.clone(), h.generation)
                    })
                    .collect()
            };
            for (name, generation) in start {
                tasks.spawn(self.clone().watch_host(name, generation, cancel.clone()));
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.added.notified() => {}
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        self.beating.store(false, Ordering::Release);
        while tasks.join_next().await.is_some() {}
        let mut hosts = self.hosts.lock().expect("inventory lock");
        for h in hosts.values_mut() {
            h.watched = false;
        }
    }
}
