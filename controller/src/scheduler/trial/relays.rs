//! Telemetry of every host an attempt runs engines on: the attempt's own host, and the other
//! ranks of a gang or the replicas of a deployment, each relayed under its own host name and
//! run id. A level's GPU power is the sum of every host's mean over the level: the replicas'
//! GPUs do a deployment's work, not the router's host, whose own power alone would say little.

use tokio::task::JoinHandle;

use super::members::Member;
use super::*;

/// The relays of one attempt, stopped together.
pub(super) struct Relays {
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    hosts: Vec<String>,
}

impl Attempt<'_> {
    /// The hosts of the attempt's group besides its own (a gang's ranks above 0, a deployment's
    /// replicas); none for one host.
    pub(super) fn members(&self) -> &[Member] {
        match (self.gang, self.deployment) {
            (Some(g), _) => g.members(),
            (_, Some(d)) => d.members(),
            _ => &[],
        }
    }

    /// Starts relaying the telemetry of every host of the attempt: its own into `self.power`,
    /// each member's into a power log of its own (`self.member_power`, in member order).
    pub(super) fn start_relays(&mut self, run_id: &str) -> Relays {
        let (ctx, trial) = (self.ctx, self.trial);
        let cancel = self.cancel.child_token();
        let mut hosts = vec![(
            self.host.clone(),
            self.client.clone(),
            run_id.to_string(),
            self.power.clone(),
        )];
        self.member_power = self
            .members()
            .iter()
            .map(|_| telemetry::PowerLog::with_interval(ctx.telemetry_interval))
            .collect();
        for (m, power) in self.members().iter().zip(&self.member_power) {
            hosts.push((
                m.host.clone(),
                m.client.clone(),
                m.run_id.clone(),
                power.clone(),
            ));
        }
        let mut tasks = Vec::new();
        let mut names = Vec::new();
        for (host, client, run_id, power) in hosts {
            ctx.inventory.set_current_config(&host, &trial.config_id);
            let relay = telemetry::Relay {
                writer: ctx.telemetry.clone(),
                power,
                metrics: ctx.metrics.clone(),
                client,
                job_id: trial.job_id.clone(),
                run_id,
                host: host.clone(),
                config_id: trial.config_id.clone(),
                interval: ctx.telemetry_interval,
            };
            tasks.push(tokio::spawn(
                telemetry::relay(relay, cancel.clone()).in_current_span(),
            ));
            names.push(host);
        }
        Relays {
            cancel,
            tasks,
            hosts: names,
        }
    }

    /// The level's mean GPU power summed over the attempt's hosts (those that report power),
    /// each waited for until a sample covers the level's end.
    pub(super) async fn level_power(&self, start_ms: i64, end_ms: i64) -> Option<f64> {
        let wait = self.power.wait();
        let means = futures::future::join_all(
            std::iter::once(&self.power)
                .chain(&self.member_power)
                .map(|p| p.level_mean(start_ms, end_ms, wait)),
        )
        .await;
        means.into_iter().flatten().reduce(|a, b| a + b)
    }
}

impl Relays {
    /// Stops every relay (each flushes what it holds) and drops the hosts' gauges, which nothing
    /// refreshes any more.
    pub(super) async fn stop(self, ctx: &Ctx) {
        self.cancel.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
        for h in &self.hosts {
            ctx.metrics.host_series_remove(h);
        }
    }
}
