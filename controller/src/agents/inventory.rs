//! The inventory: hosts from the config file and self-registered agents, their facts and labels
//! (from `GetHost`), health from heartbeats, and the leases that keep one engine per host.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetbench_proto::agentpb::{GetHostRequest, HostFacts};
use fleetbench_proto::controllerpb::{AgentHealth, AgentInfo};
use fleetbench_proto::now_unix_ms;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::client::{AgentClient, AgentConnector, ClientError};

#[derive(Debug)]
struct Host {
    name: String,
    address: String,
    /// Labels from the config or the registration; they win over the agent's own labels.
    labels: BTreeMap<String, String>,
    source: &'static str,
    client: AgentClient,
    facts: Option<HostFacts>,
    reachable: bool,
    draining: bool,
    /// The job whose trial holds the host.
    busy_job: Option<String>,
    current_config_id: String,
    last_seen_unix_ms: i64,
    error: String,
}

impl Host {
    fn health(&self) -> AgentHealth {
        if !self.reachable {
            AgentHealth::Unreachable
        } else if self.busy_job.is_some() {
            AgentHealth::Busy
        } else if self.draining {
            AgentHealth::Draining
        } else {
            AgentHealth::Ready
        }
    }

    fn merged_labels(&self) -> BTreeMap<String, String> {
        let mut labels: BTreeMap<String, String> = self
            .facts
            .as_ref()
            .map(|f| f.labels.clone().into_iter().collect())
            .unwrap_or_default();
        labels.extend(self.labels.clone());
        labels
    }
}

/// What a scheduler may look at to decide whether a host fits a job.
#[derive(Debug, Clone)]
pub struct HostSnapshot {
    pub name: String,
    pub facts: HostFacts,
    pub labels: BTreeMap<String, String>,
    pub health: AgentHealth,
}

/// A host held by one trial; give it back with [`Inventory::release`].
#[derive(Debug, Clone)]
pub struct Lease {
    pub host: String,
    pub client: AgentClient,
}

/// The hosts the controller knows.
#[derive(Debug)]
pub struct Inventory {
    hosts: Mutex<BTreeMap<String, Host>>,
    connector: AgentConnector,
    heartbeat: Duration,
    /// Bumped on every change a waiting scheduler may care about (a host freed, back, added).
    changed: watch::Sender<u64>,
}

impl Inventory {
    pub fn new(connector: AgentConnector, heartbeat: Duration) -> Arc<Self> {
        Arc::new(Inventory {
            hosts: Mutex::new(BTreeMap::new()),
            connector,
            heartbeat,
            changed: watch::channel(0).0,
        })
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Wakes when the inventory changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The heartbeat interval agents are told.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat
    }

    /// Adds or updates a host (`source`: "config" or "registered"). Its facts arrive with the
    /// first heartbeat, which is sent at once.
    pub fn add(
        self: &Arc<Self>,
        name: &str,
        address: &str,
        labels: BTreeMap<String, String>,
        source: &'static str,
    ) -> Result<(), ClientError> {
        let client = self.connector.client(address)?;
        {
            let mut hosts = self.hosts.lock().expect("inventory lock");
            match hosts.get_mut(name) {
                Some(h) if h.address == address => {
                    h.labels = labels;
                }
                _ => {
                    let busy_job = hosts.get(name).and_then(|h| h.busy_job.clone());
                    hosts.insert(
                        name.to_string(),
                        Host {
                            name: name.to_string(),
                            address: address.to_string(),
                            labels,
                            source,
                            client,
                            facts: None,
                            reachable: false,
                            draining: false,
                            busy_job,
                            current_config_id: String::new(),
                            last_seen_unix_ms: 0,
                            error: "not contacted yet".into(),
                        },
                    );
                }
            }
        }
        let me = self.clone();
        let name = name.to_string();
        tokio::spawn(async move { me.beat_one(&name).await });
        Ok(())
    }

    /// Whether a host of this name is known at this address with these labels (a repeated
    /// registration changes nothing).
    pub fn is_known(&self, name: &str, address: &str, labels: &BTreeMap<String, String>) -> bool {
        let hosts = self.hosts.lock().expect("inventory lock");
        hosts
            .get(name)
            .is_some_and(|h| h.address == address && &h.labels == labels)
    }

    /// Whether `name` comes from the controller's config file (not from a registration).
    pub fn is_configured(&self, name: &str) -> bool {
        let hosts = self.hosts.lock().expect("inventory lock");
        hosts.get(name).is_some_and(|h| h.source == "config")
    }

    /// Marks a host draining (no new trials) or not. `None` when there is no such host.
    pub fn set_draining(&self, name: &str, draining: bool) -> Option<AgentInfo> {
        let info = {
            let mut hosts = self.hosts.lock().expect("inventory lock");
            let h = hosts.get_mut(name)?;
            h.draining = draining;
            info_of(h)
        };
        self.bump();
        Some(info)
    }

    /// Every host as the API shows it, by name.
    pub fn list(&self) -> Vec<AgentInfo> {
        let hosts = self.hosts.lock().expect("inventory lock");
        hosts.values().map(info_of).collect()
    }

    /// Hosts whose facts are known, with their health.
    pub fn snapshots(&self) -> Vec<HostSnapshot> {
        let hosts = self.hosts.lock().expect("inventory lock");
        hosts
            .values()
            .filter_map(|h| {
                Some(HostSnapshot {
                    name: h.name.clone(),
                    facts: h.facts.clone()?,
                    labels: h.merged_labels(),
                    health: h.health(),
                })
            })
            .collect()
    }

    /// Takes the first ready host (by name) that `fits`, for `job_id`.
    pub fn acquire(&self, job_id: &str, fits: impl Fn(&HostSnapshot) -> bool) -> Option<Lease> {
        let mut hosts = self.hosts.lock().expect("inventory lock");
        for h in hosts.values_mut() {
            if h.health() != AgentHealth::Ready {
                continue;
            }
            let Some(facts) = h.facts.clone() else {
                continue;
            };
            let snap = HostSnapshot {
                name: h.name.clone(),
                facts,
                labels: h.merged_labels(),
                health: AgentHealth::Ready,
            };
            if fits(&snap) {
                h.busy_job = Some(job_id.to_string());
                return Some(Lease {
                    host: h.name.clone(),
                    client: h.client.clone(),
                });
            }
        }
        None
    }

    /// A client for a host, whatever its state (to stop its engine).
    pub fn client(&self, name: &str) -> Option<AgentClient> {
        let hosts = self.hosts.lock().expect("inventory lock");
        hosts.get(name).map(|h| h.client.clone())
    }

    /// Records which config a held host runs now.
    pub fn set_current_config(&self, name: &str, config_id: &str) {
        let mut hosts = self.hosts.lock().expect("inventory lock");
        if let Some(h) = hosts.get_mut(name) {
            h.current_config_id = config_id.to_string();
        }
    }

    /// Gives a host back.
    pub fn release(&self, name: &str) {
        {
            let mut hosts = self.hosts.lock().expect("inventory lock");
            if let Some(h) = hosts.get_mut(name) {
                h.busy_job = None;
                h.current_config_id.clear();
            }
        }
        self.bump();
    }

    /// Marks a host unreachable after a failed call; the next good heartbeat makes it ready.
    pub fn mark_unreachable(&self, name: &str, error: &str) {
        let mut hosts = self.hosts.lock().expect("inventory lock");
        if let Some(h) = hosts.get_mut(name) {
            h.reachable = false;
            h.error = error.to_string();
        }
    }

    async fn beat_one(&self, name: &str) {
        let Some(mut client) = self.client(name) else {
            return;
        };
        let timeout = self.heartbeat.max(Duration::from_secs(2));
        let result = tokio::time::timeout(timeout, client.get_host(GetHostRequest {})).await;
        let changed = {
            let mut hosts = self.hosts.lock().expect("inventory lock");
            let Some(h) = hosts.get_mut(name) else { return };
            let was = h.reachable;
            match result {
                Ok(Ok(facts)) => {
                    h.facts = Some(facts.into_inner());
                    h.reachable = true;
                    h.error.clear();
                    h.last_seen_unix_ms = now_unix_ms();
                }
                Ok(Err(status)) => {
                    h.reachable = false;
                    h.error = format!("GetHost: {}", status.message());
                }
                Err(_) => {
                    h.reachable = false;
                    h.error = format!("GetHost: no answer within {timeout:?}");
                }
            }
            (was != h.reachable).then_some(h.reachable)
        };
        if let Some(reachable) = changed {
            tracing::info!(host = name, reachable, "agent health changed");
            self.bump();
        }
    }

    /// Heartbeats every host at the configured interval until `cancel`.
    pub async fn heartbeat_loop(self: Arc<Self>, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let names: Vec<String> = {
                let hosts = self.hosts.lock().expect("inventory lock");
                hosts.keys().cloned().collect()
            };
            let beats = names.iter().map(|n| self.beat_one(n));
            futures::future::join_all(beats).await;
        }
    }
}

fn info_of(h: &Host) -> AgentInfo {
    AgentInfo {
        name: h.name.clone(),
        address: h.address.clone(),
        health: h.health() as i32,
        labels: h.merged_labels().into_iter().collect(),
        facts: h.facts.clone(),
        last_seen_unix_ms: h.last_seen_unix_ms,
        current_config_id: h.current_config_id.clone(),
        current_job_id: h.busy_job.clone().unwrap_or_default(),
        error: h.error.clone(),
        source: h.source.to_string(),
    }
}
