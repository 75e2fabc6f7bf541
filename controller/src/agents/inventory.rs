//! The inventory: hosts from the config file and self-registered agents, their facts and labels
//! (from `GetHost`), health from heartbeats, and the leases that keep one engine per host.
//!
//! The heartbeat is one `WatchEngine` stream per host (its task: [`Inventory::heartbeat_loop`]
//! starts one per host while this controller leads): the agent pushes its engine's status on
//! every change and a keep-alive every `heartbeat_interval`; a host whose stream breaks, or
//! sends nothing for `heartbeat_interval` plus the slack a polled beat had (its time-out,
//! `max(heartbeat_interval, 2 s)`), is unreachable until a new stream is up. The facts
//! (`GetHost`: GPUs, profiles, labels) are read when a stream (re)connects and every
//! [`FACTS_EVERY`] intervals. An agent without `WatchEngine` (UNIMPLEMENTED) is polled as
//! before: `GetEngine` every interval. Cost per host: docs/controller.md, Scale.

mod heartbeat;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetbench_proto::agentpb::HostFacts;
use fleetbench_proto::controllerpb::{AgentHealth, AgentInfo};
use tokio::sync::{Notify, watch};

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
    /// Which record of this name a heartbeat task speaks for: a host re-added at another
    /// address gets a new one, and the old address's task ends.
    generation: u64,
    /// A heartbeat task runs for this record.
    watched: bool,
}

/// The heartbeat reads the host's facts (`GetHost`: GPUs, profiles, labels) when its stream
/// (re)connects and every this many intervals: facts rarely change, and reading them costs
/// the agent a system and NVML scan.
const FACTS_EVERY: u32 = 30;

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

/// A host held by one trial: a guard that gives the host back when dropped, however its
/// holder ends (done, failed, cancelled, aborted or panicked).
#[derive(Debug)]
pub struct Lease {
    pub host: String,
    pub client: AgentClient,
    inventory: Arc<Inventory>,
}

impl Lease {
    /// The host stopped answering: it is marked unreachable before the lease lets go of it, so
    /// no other trial takes it until a heartbeat brings it back.
    pub fn lost(self, error: &str) {
        self.inventory.mark_unreachable(&self.host, error);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.inventory.release(&self.host);
    }
}

/// The hosts the controller knows.
#[derive(Debug)]
pub struct Inventory {
    hosts: Mutex<BTreeMap<String, Host>>,
    connector: AgentConnector,
    heartbeat: Duration,
    /// Bumped on every change a waiting scheduler may care about (a host freed, back, added).
    changed: watch::Sender<u64>,
    /// Wakes the heartbeat loop to start a task for a host just added.
    added: Notify,
    generations: AtomicU64,
    /// A heartbeat loop runs (this controller leads).
    beating: AtomicBool,
}

impl Inventory {
    pub fn new(connector: AgentConnector, heartbeat: Duration) -> Arc<Self> {
        Arc::new(Inventory {
            hosts: Mutex::new(BTreeMap::new()),
            connector,
            heartbeat,
            changed: watch::channel(0).0,
            added: Notify::new(),
            generations: AtomicU64::new(0),
            beating: AtomicBool::new(false),
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
    /// first heartbeat, which starts at once (or, while no heartbeat loop runs, one `GetHost`).
    pub fn add(
        self: &Arc<Self>,
        name: &str,
        address: &str,
        labels: BTreeMap<String, String>,
        source: &'static str,
    ) -> Result<(), ClientError> {
        let client = self.connector.client(address)?;
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        {
            let mut hosts = self.hosts.lock().expect("inventory lock");
            match hosts.get_mut(name) {
                Some(h) if h.address == address => {
                    h.labels = labels;
                    drop(hosts);
                    self.bump();
                    return Ok(());
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
                            generation,
                            watched: false,
                        },
                    );
                }
            }
        }
        if self.beating.load(Ordering::Acquire) {
            self.added.notify_one();
        } else {
            let me = self.clone();
            let name = name.to_string();
            tokio::spawn(async move { me.read_facts(&name, generation).await });
        }
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

    /// The names of the hosts that are unreachable now.
    pub fn unreachable(&self) -> Vec<String> {
        let hosts = self.hosts.lock().expect("inventory lock");
        hosts
            .values()
            .filter(|h| !h.reachable)
            .map(|h| h.name.clone())
            .collect()
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
    pub fn acquire(
        self: &Arc<Self>,
        job_id: &str,
        fits: impl Fn(&HostSnapshot) -> bool,
    ) -> Option<Lease> {
        self.acquire_all(job_id, 1, |h, _| fits(h))
            .and_then(|mut v| v.pop())
    }

    /// Takes `n` ready hosts (the first by name that `fits`), all or none: a target that spans
    /// hosts (client agents for one level, replicas, an engine's ranks) never holds some of
    /// them while it waits for the rest, so two such jobs cannot each hold half of what they
    /// need. `fits` sees each candidate with the hosts taken so far (in order), so a caller can
    /// ask for hosts that differ from or match the first one.
    pub fn acquire_all(
        self: &Arc<Self>,
        job_id: &str,
        n: usize,
        fits: impl Fn(&HostSnapshot, &[HostSnapshot]) -> bool,
    ) -> Option<Vec<Lease>> {
        if n == 0 {
            return Some(Vec::new());
        }
        let mut hosts = self.hosts.lock().expect("inventory lock");
        let mut taken: Vec<HostSnapshot> = Vec::with_capacity(n);
        // Passes over the hosts until none more fits: a host that fits only after another
        // (a replica's after its router's, which sorts later by name) is found on the next.
        loop {
            let before = taken.len();
            for h in hosts.values() {
                if taken.len() == n {
                    break;
                }
                if h.health() != AgentHealth::Ready || taken.iter().any(|t| t.name == h.name) {
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
                if fits(&snap, &taken) {
                    taken.push(snap);
                }
            }
            if taken.len() == n || taken.len() == before {
                break;
            }
        }
        if taken.len() < n {
            return None;
        }
        Some(
            taken
                .into_iter()
                .map(|snap| {
                    let h = hosts
                        .get_mut(&snap.name)
                        .expect("host seen under this lock");
                    h.busy_job = Some(job_id.to_string());
                    Lease {
                        host: h.name.clone(),
                        client: h.client.clone(),
                        inventory: self.clone(),
                    }
                })
                .collect(),
        )
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

    /// Gives a host back (a [`Lease`] does when dropped).
    fn release(&self, name: &str) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An inventory with one ready host `h1` (no agent behind it: nothing here calls it).
    fn one_ready_host() -> Arc<Inventory> {
        ready_hosts(&["h1"])
    }

    fn ready_hosts(names: &[&str]) -> Arc<Inventory> {
        let inv = Inventory::new(AgentConnector::new(None), Duration::from_secs(3600));
        for name in names {
            add_ready(&inv, name);
        }
        inv
    }

    fn add_ready(inv: &Inventory, name: &str) {
        let client = inv.connector.client("127.0.0.1:9").unwrap();
        inv.hosts.lock().unwrap().insert(
            name.to_string(),
            Host {
                name: name.to_string(),
                address: "127.0.0.1:9".into(),
                labels: BTreeMap::new(),
                source: "config",
                client,
                facts: Some(HostFacts::default()),
                reachable: true,
                draining: false,
                busy_job: None,
                current_config_id: String::new(),
                last_seen_unix_ms: 0,
                error: String::new(),
                generation: 0,
                watched: false,
            },
        );
    }

    #[tokio::test]
    async fn several_hosts_are_taken_all_or_none() {
        let inv = ready_hosts(&["h1", "h2", "h3"]);
        let held = inv.acquire("j1", |h| h.name == "h2").unwrap();
        // Three wanted, two free: nothing is taken, so no job holds a part of what it needs.
        assert!(inv.acquire_all("j2", 3, |_, _| true).is_none());
        let busy = |inv: &Inventory| {
            inv.list()
                .iter()
                .filter(|a| a.health == AgentHealth::Busy as i32)
                .count()
        };
        assert_eq!(busy(&inv), 1);
        drop(held);
        // `fits` sees the hosts taken so far: here, every host after the first must differ.
        let all = inv
            .acquire_all("j2", 3, |h, taken| taken.iter().all(|t| t.name != h.name))
            .unwrap();
        let names: Vec<&str> = all.iter().map(|l| l.host.as_str()).collect();
        assert_eq!(names, ["h1", "h2", "h3"]);
        assert_eq!(busy(&inv), 3);
        drop(all);
        assert_eq!(busy(&inv), 0);
        assert!(inv.acquire_all("j3", 0, |_, _| true).unwrap().is_empty());
        // A first host that sorts last (a deployment's router on "h3", its replicas on the
        // others): the hosts before it are taken on a second pass.
        let all = inv
            .acquire_all("j4", 3, |h, taken| !taken.is_empty() || h.name == "h3")
            .unwrap();
        let names: Vec<&str> = all.iter().map(|l| l.host.as_str()).collect();
        assert_eq!(names, ["h3", "h1", "h2"]);
    }

    fn health(inv: &Inventory) -> i32 {
        inv.list()[0].health
    }

    #[tokio::test]
    async fn a_panicked_trial_gives_its_host_back() {
        let inv = one_ready_host();
        let lease = inv.acquire("j1", |_| true).expect("h1 is ready");
        assert_eq!(health(&inv), AgentHealth::Busy as i32);
        assert!(inv.acquire("j2", |_| true).is_none(), "h1 is held");
        // A trial task that panics while it holds the lease, as run_job spawns them.
        let mut set = tokio::task::JoinSet::new();
        set.spawn(async move {
            let _held = lease;
            tokio::task::yield_now().await;
            panic!("a bug in a trial");
        });
        let joined = set.join_next().await.unwrap();
        assert!(joined.unwrap_err().is_panic());
        assert_eq!(health(&inv), AgentHealth::Ready as i32);
        assert!(inv.acquire("j2", |_| true).is_some(), "h1 is free again");
    }

    #[tokio::test]
    async fn an_aborted_trial_gives_its_host_back_and_a_lost_one_marks_it_unreachable() {
        let inv = one_ready_host();
        // A job dropping its trials' JoinSet (a store error ended it) aborts them.
        let lease = inv.acquire("j1", |_| true).unwrap();
        let mut set = tokio::task::JoinSet::new();
        set.spawn(async move {
            let _held = lease;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
        drop(set);
        tokio::task::yield_now().await;
        assert_eq!(health(&inv), AgentHealth::Ready as i32);
        // A host lost mid-trial is not handed out again before a heartbeat brings it back.
        inv.acquire("j1", |_| true)
            .unwrap()
            .lost("GetHost: connection refused");
        assert_eq!(health(&inv), AgentHealth::Unreachable as i32);
        assert!(inv.acquire("j2", |_| true).is_none());
        assert!(inv.list()[0].current_job_id.is_empty());
    }
}
