//! Job specs: the TOML file a user writes (documented in `docs/job-spec.md`), validated with
//! every problem located by file, line and field, and turned into trials and agent requests.
//!
//! ```text
//! parse(file, text) -> JobSpec -> expand_trials() -> [TrialPlan]
//!                              -> engine_spec(config), benchmark_request(workload)
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use fleetbench_engines::EngineKind;

mod bounds;
mod configs;
mod deployment;
mod error;
mod flags;
mod parse;
mod plan;
pub mod search;
pub mod suite;
mod target;
mod walk;
mod workloads;

pub use error::{SpecError, render_errors};
pub use parse::parse;
pub use plan::{TrialPlan, kind_to_pb, level_label};
pub use target::ExternalTarget;

/// A validated job spec.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub name: String,
    pub description: String,
    /// Times every (config, workload) pair runs; at least 1.
    pub repeats: u32,
    pub order: Order,
    pub hosts: HostSelector,
    pub configs: Vec<ConfigSpec>,
    pub workloads: Vec<WorkloadSpec>,
    pub load: LoadSpec,
}

/// In which order trials run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Round-robin: every config once per repeat, so slow drift of a host (thermal, other
    /// tenants) is spread over all configs instead of favouring the one measured first. On a
    /// fleet of several hosts the next trial goes to the first free host, so config and host
    /// can coincide: not the default.
    Interleaved,
    /// All repeats of a config before the next config: fewer engine restarts.
    Sequential,
    /// Blocking by host: the configs of one (repeat, workload) block run one after another on
    /// the same host, in an order shuffled per block (`order_seed`, else a seed derived from
    /// the job id, recorded in the job's events); blocks run in parallel on the hosts there
    /// are. A difference between configs is then never a difference between hosts. The
    /// default: a fixed A, B, A, B order lets a config always follow the same other one (its
    /// warm page cache, its leftover clocks), and on a fleet lets config and host coincide.
    Blocked {
        /// `order_seed = N`: reproduces a recorded order.
        seed: Option<u64>,
    },
}

impl Default for Order {
    fn default() -> Self {
        Order::Blocked { seed: None }
    }
}

impl Order {
    /// Whether trials of one block must stay on one host.
    pub fn is_blocked(self) -> bool {
        matches!(self, Order::Blocked { .. })
    }
}

/// Which hosts a job may run on. Empty fields match everything.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostSelector {
    /// Host names; empty: any host.
    pub names: Vec<String>,
    /// Every label must be present with this value.
    pub labels: BTreeMap<String, String>,
    /// Substring of the GPU name, case-insensitive ("H200" matches "NVIDIA H200").
    pub gpu_model: Option<String>,
    /// At least this many GPUs (of `gpu_model` when given).
    pub gpu_count: Option<u32>,
}

/// One engine config, with `extends` already resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigSpec {
    pub name: String,
    pub kind: EngineKind,
    /// Engine profile on the agent; defaults to the kind's name.
    pub profile: String,
    pub model: String,
    /// `(name, value)`; `None` is a switch such as `--disable-cuda-graph`. Sorted by name.
    pub flags: Vec<(String, Option<String>)>,
    pub env: BTreeMap<String, String>,
    /// Hash of kind, model, flags and env (`fleetbench_engines::config_id`); for an external
    /// target, of its URL, headers and secret references instead of flags.
    pub config_id: String,
    /// An endpoint fleetbench does not own: no engine is started, the load goes to it.
    pub target: Option<ExternalTarget>,
    /// Hosts the engine spans (`nodes`, default 1): above 1, one rank per host, started
    /// together by the controller with the engine's own rendezvous flags.
    pub nodes: u32,
    /// Replicas of the engine behind a router (`replicas` and `[configs.router]`): the load
    /// goes to the router, each replica runs on a host of its own. `None`: one server.
    pub deployment: Option<DeploymentSpec>,
}

/// A config's deployment: `replicas` of its engine behind a router.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentSpec {
    /// Replicas, one host each (1..=64).
    pub replicas: u32,
    /// The router in front of them.
    pub router: RouterSpec,
}

/// The router of a deployment, started by an agent from its own profile.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterSpec {
    /// A router kind (`sglang-router`).
    pub kind: EngineKind,
    /// Its profile on the agent; defaults to the kind's name.
    pub profile: String,
    /// `(name, value)` as for an engine's flags; sorted by name.
    pub flags: Vec<(String, Option<String>)>,
}

/// One workload: what the load generator sends.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadSpec {
    pub name: String,
    pub dataset: Dataset,
    pub api: Api,
    /// Model name sent in requests; empty: the first model the server lists.
    pub model: String,
    pub ignore_eos: bool,
    pub seed: u64,
}

/// Where prompts come from. Paths are on the agent's host.
#[derive(Debug, Clone, PartialEq)]
pub enum Dataset {
    Random {
        input_len: u32,
        output_len: u32,
        range_ratio: f64,
    },
    ShareGpt {
        path: String,
        /// 0: the dataset's own output lengths.
        output_len: u32,
    },
    SharedPrefix {
        groups: u32,
        prompts_per_group: u32,
        prefix_len: u32,
        suffix_len: u32,
        output_len: u32,
    },
    Jsonl {
        path: String,
        output_len: u32,
    },
    /// A Mooncake-format JSONL trace replayed at its timestamps (`dataset = "trace"`).
    Trace {
        path: String,
        /// Tokens each of the trace's 512-token blocks is sent as (`trace_block_tokens`).
        block_tokens: u32,
        /// Timestamps are divided by this (`trace_speedup`).
        speedup: f64,
    },
    /// Multi-turn sessions (`dataset = "conversation"`): each turn sends the history plus a
    /// new message; `system_prompt_len` > 0 makes them agent sessions sharing a system prompt.
    Conversation {
        turns: u32,
        input_len: u32,
        output_len: u32,
        think_time_ms: u32,
        system_prompt_len: u32,
    },
}

/// OpenAI-compatible endpoint used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Api {
    #[default]
    Completions,
    Chat,
}

/// Load levels and how long each runs.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadSpec {
    pub levels: Levels,
    /// Requests sent and discarded before each level is measured.
    pub warmup: u32,
    pub bound: Bound,
    /// Percentiles reported, 0..100; always includes 50 and 99 (the comparison uses them).
    pub percentiles: Vec<f64>,
    pub slo: Slo,
    /// Closed-loop streams start one after another over this span (`ramp_up = "10s"`); with
    /// `steady`, requests intended inside it are left out of the level's figures.
    pub ramp_up: Duration,
    /// The measurement window after the ramp-up (`window = "60s"`); `None`: until the last
    /// request is sent.
    pub window: Option<Duration>,
    /// Leave out the ramp-up and the drain (set by `ramp_up` or `window`).
    pub steady: bool,
    /// Empty the engine's prefix cache before every level (`reset_cache = true`).
    pub reset_cache: bool,
    /// Client agents each level's load is split over (`clients = 4`): every level's
    /// concurrency or rate, and its request count, divided among them; they start together
    /// and their histograms merge exactly. 1: the trial's own host drives it all.
    pub clients: u32,
}

/// The swept load axis.
#[derive(Debug, Clone, PartialEq)]
pub enum Levels {
    /// Closed loop: this many requests in flight.
    Concurrency(Vec<u32>),
    /// Open loop: arrivals at these rates (requests/s).
    RequestRate {
        rates: Vec<f64>,
        max_concurrency: Option<u32>,
        /// Gamma shape of inter-arrival times; 1.0 is Poisson.
        burstiness: f64,
    },
}

/// How long a level runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    Requests(u32),
    Duration(Duration),
}

/// Latency objectives and the highest error rate a config may have. `ttft_ms`, `tpot_ms` and
/// `e2e_ms` are per request: a request meeting all of them counts toward goodput. `itl_ms` is the
/// level's p99 of per-token ITL (spec key `itl_p99_ms`), which tuning judges a level by.
/// `max_error_rate` decides whether a config may win a level or be feasible in a search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    /// The level's p99 per-token ITL limit (spec key `itl_p99_ms`).
    pub itl_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    /// A request's own time per output token, `(e2e − ttft) / (tokens − 1)`.
    pub tpot_ms: Option<f64>,
    /// failed / (completed + failed), summed over a config's repeats at a level
    /// (`[load] slo.max_error_rate`, 0 to 1).
    pub max_error_rate: f64,
}

/// The error rate a config may have unless the spec says otherwise: one request in a hundred.
pub const DEFAULT_MAX_ERROR_RATE: f64 = 0.01;

impl Default for Slo {
    fn default() -> Self {
        Slo {
            ttft_ms: None,
            itl_ms: None,
            e2e_ms: None,
            tpot_ms: None,
            max_error_rate: DEFAULT_MAX_ERROR_RATE,
        }
    }
}

impl JobSpec {
    /// Index of the config with this name.
    pub fn config_index(&self, name: &str) -> Option<usize> {
        self.configs.iter().position(|c| c.name == name)
    }

    /// Index of the workload with this name.
    pub fn workload_index(&self, name: &str) -> Option<usize> {
        self.workloads.iter().position(|w| w.name == name)
    }
}
