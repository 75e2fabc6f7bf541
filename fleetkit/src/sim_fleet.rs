//! A fleet for suite and tuning tests and benchmarks: agent processes on loopback and an
//! embedded controller in this process (its store and metrics readable), plus the suite
//! text the regression detection checks run.

use std::path::Path;
use std::time::Duration;

use fleetbench_controller::{ControllerHandle, HostConfig};
use fleetbench_proto::controllerpb::controller_client::ControllerClient;
use tonic::transport::Channel;

/// An agent process, stopped when dropped.
pub type Agent = fleetbench_testkit::process::Listening;

/// Starts a plaintext loopback agent with the built-in profiles, its sim engine on a port of
/// its own (the agents share this machine).
pub fn spawn_agent(dir: &Path, name: &str) -> Agent {
    fleetbench_testkit::process::sim_agent(dir, name).spawn()
}

/// Agents plus an embedded controller.
pub struct Fleet {
    pub agents: Vec<Agent>,
    pub controller: ControllerHandle,
}

impl Fleet {
    pub async fn start(dir: &Path, agents: usize) -> Fleet {
        let agents: Vec<Agent> = (0..agents)
            .map(|i| spawn_agent(dir, &format!("host-{i}")))
            .collect();
        let hosts = agents
            .iter()
            .map(|a| HostConfig {
                name: a.name.clone(),
                address: a.addr.to_string(),
                labels: Default::default(),
            })
            .collect();
        let controller = fleetbench_controller::embedded::start_embedded(dir, hosts)
            .await
            .expect("embedded controller");
        // Let the first heartbeat find the agents ready.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Fleet { agents, controller }
    }

    pub async fn client(&self) -> ControllerClient<Channel> {
        ControllerClient::connect(self.controller.url())
            .await
            .expect("controller client")
    }

    pub async fn stop(self) {
        self.controller.shutdown().await;
        drop(self.agents);
    }
}

/// The tolerance of the tests' suites. The test suite checks a smaller, deterministic version
/// of what `benches/regress_detection.rs` measures (5% tolerance, 10% slowdown, 20 runs each):
/// a level lasts about a second, and on a loaded 2-core CI machine one run's throughput drifted
/// 4.5% from another's with no change at all, so the tests keep a margin of three such drifts
/// on each side of the tolerance.
pub const TEST_TOLERANCE: f64 = 0.10;

/// The tests' slower build: far enough past [`TEST_TOLERANCE`] that machine noise cannot
/// pull it back inside, and that the suite's stated run spread (5%) shows it from the second
/// run on.
pub const TEST_SLOWDOWN: f64 = 1.50;

/// The detection suite: one sim config whose build is `slowdown` times slower, its jitter
/// seeded by `seed`, compared with the run tagged `base` (or the last passing one); both
/// metrics are checked against `tolerance`.
pub fn detection_suite(
    seed: u64,
    slowdown: f64,
    repeats: u32,
    baseline_tag: bool,
    tolerance: f64,
) -> String {
    let baseline = if baseline_tag {
        "\"tag:base\""
    } else {
        "\"last-passing\""
    };
    format!(
        r#"name = "detect"
repeats = {repeats}

[[configs]]
name = "sim"
engine = "sim"
model = "fleetbench/sim-moe-30b-a3b"
flags = {{ "--moe-runner-backend" = "flashinfer_cutlass", "--time-scale" = 0.25, "--slowdown" = {slowdown:?}, "--seed" = {seed}, "--jitter" = 0.02 }}

[[workloads]]
name = "random-128-64"
dataset = "random"
input_len = 128
output_len = 64
ignore_eos = true

[load]
concurrency = [8]
requests = 48

[suite]
baseline = {baseline}
# A young suite's runs vary this much with no change (stated until the history measures it).
run_spread = 0.05
metrics = [
  {{ name = "output_tokens_per_s", tolerance = {tolerance:?} }},
  {{ name = "itl_p50_ms", tolerance = {tolerance:?} }},
]
"#
    )
}

/// The simulator's argv for a search candidate: the starting config's flags with the
/// candidate's over them (what the agent would start).
pub fn sim_argv(
    spec: &fleetbench_spec::JobSpec,
    c: &fleetbench_rounds::tuning::space::Candidate,
) -> Vec<String> {
    use fleetbench_spec::search::SWITCH_ON;
    let mut flags: std::collections::BTreeMap<String, Option<String>> = spec.configs[0]
        .flags
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in &c.flags {
        match v.as_deref() {
            None => {
                flags.remove(k);
            }
            Some(SWITCH_ON) => {
                flags.insert(k.clone(), None);
            }
            Some(v) => {
                flags.insert(k.clone(), Some(v.to_string()));
            }
        }
    }
    let mut argv = Vec::new();
    for (k, v) in flags {
        argv.push(k);
        argv.extend(v);
    }
    argv
}

/// The simulator's model of a candidate; None when it does not start (memory).
pub fn model_params(
    spec: &fleetbench_spec::JobSpec,
    c: &fleetbench_rounds::tuning::space::Candidate,
) -> Option<fleetbench_sim::ModelParams> {
    let args = fleetbench_sim::parse_args(&sim_argv(spec, c)).ok()?;
    fleetbench_sim::ModelParams::from_args(&args).ok()
}

/// The candidate the model makes best: output tokens/s at the spec's first concurrency level
/// with the spec's request count, among those that start.
pub fn model_best(
    spec: &fleetbench_spec::JobSpec,
    search: &fleetbench_spec::search::SearchSpec,
    input_len: u32,
    output_len: u32,
) -> (String, f64) {
    use fleetbench_spec::{Bound, Levels};
    let Levels::Concurrency(cs) = &spec.load.levels else {
        panic!("concurrency levels")
    };
    let Bound::Requests(n) = spec.load.bound else {
        panic!("requests bound")
    };
    fleetbench_rounds::tuning::space::candidates(spec, search)
        .iter()
        .filter_map(|c| {
            let p = model_params(spec, c)?;
            let t = fleetbench_sim::model::closed_loop(&p, cs[0], input_len, output_len, n)
                .output_tokens_per_s;
            Some((c.name.clone(), t))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .expect("a candidate that starts")
}
