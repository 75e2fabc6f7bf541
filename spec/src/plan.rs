//! From a validated spec to work: trials, and the requests the agent receives.

use std::collections::BTreeMap;

use fleetbench_engines::EngineKind;
use fleetbench_proto::agentpb;

use super::{Api, Bound, Dataset, HostSelector, JobSpec, Levels, Order};

/// One trial of a job: a config on a workload, one repeat (0-based). The host is chosen by
/// the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TrialPlan {
    pub config: usize,
    pub workload: usize,
    pub repeat: u32,
}

impl JobSpec {
    /// Every trial in the order it should start. Interleaved: `for repeat { for workload {
    /// for config } }`, so every config is measured once before any is measured twice.
    /// Sequential: `for config { for workload { for repeat } }`.
    /// Blocked: as interleaved, each block's configs shuffled with `seed` (see
    /// [`JobSpec::order_seed`]).
    pub fn expand_trials(&self) -> Vec<TrialPlan> {
        self.expand_trials_seeded(0)
    }

    /// The seed a blocked order is shuffled with: `order_seed`, else one derived from the job
    /// id (stable for the job, different between jobs).
    pub fn order_seed(&self, job_id: &str) -> u64 {
        match self.order {
            Order::Blocked { seed: Some(s) } => s,
            _ => job_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            }),
        }
    }

    /// [`JobSpec::expand_trials`] with the seed of a blocked order.
    pub fn expand_trials_seeded(&self, seed: u64) -> Vec<TrialPlan> {
        let (nc, nw, nr) = (self.configs.len(), self.workloads.len(), self.repeats);
        let mut out = Vec::with_capacity(nc * nw * nr as usize);
        match self.order {
            Order::Blocked { .. } => {
                use rand::seq::SliceRandom;
                use rand::{SeedableRng, rngs::StdRng};
                for repeat in 0..nr {
                    for workload in 0..nw {
                        let mut rng = StdRng::seed_from_u64(
                            seed ^ (u64::from(repeat) << 32) ^ workload as u64,
                        );
                        let mut configs: Vec<usize> = (0..nc).collect();
                        configs.shuffle(&mut rng);
                        out.extend(configs.into_iter().map(|config| TrialPlan {
                            config,
                            workload,
                            repeat,
                        }));
                    }
                }
            }
            Order::Interleaved => {
                for repeat in 0..nr {
                    for workload in 0..nw {
                        for config in 0..nc {
                            out.push(TrialPlan {
                                config,
                                workload,
                                repeat,
                            });
                        }
                    }
                }
            }
            Order::Sequential => {
                for config in 0..nc {
                    for workload in 0..nw {
                        for repeat in 0..nr {
                            out.push(TrialPlan {
                                config,
                                workload,
                                repeat,
                            });
                        }
                    }
                }
            }
        }
        out
    }

    /// What the agent's `ApplyEngine` receives for config `config`.
    pub fn engine_spec(&self, config: usize) -> agentpb::EngineSpec {
        let c = &self.configs[config];
        agentpb::EngineSpec {
            profile: c.profile.clone(),
            model: c.model.clone(),
            flags: c
                .flags
                .iter()
                .map(|(name, value)| agentpb::Flag {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            env: c.env.clone().into_iter().collect(),
            port: 0,
            gang: None,
            // A replica is started as any engine; its router takes the workers.
            workers: Vec::new(),
            workers_kind: 0,
        }
    }

    /// The router of a deployment config, in front of `workers` (the replicas' base URLs, as
    /// the router's host reaches them); `None` for a config that is one server.
    pub fn router_spec(&self, config: usize, workers: Vec<String>) -> Option<agentpb::EngineSpec> {
        let c = &self.configs[config];
        let r = &c.deployment.as_ref()?.router;
        Some(agentpb::EngineSpec {
            profile: r.profile.clone(),
            model: String::new(),
            flags: r
                .flags
                .iter()
                .map(|(name, value)| agentpb::Flag {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            env: Default::default(),
            port: 0,
            gang: None,
            workers,
            workers_kind: kind_to_pb(c.kind) as i32,
        })
    }

    /// The config's engine kind as the wire enum.
    pub fn engine_kind_pb(&self, config: usize) -> agentpb::EngineKind {
        kind_to_pb(self.configs[config].kind)
    }

    /// What the agent's `RunBenchmark` receives for workload `workload`; the caller fills
    /// `run_id` and `skip_levels`.
    pub fn benchmark_request(&self, workload: usize) -> agentpb::RunBenchmarkRequest {
        let w = &self.workloads[workload];
        let dataset = match &w.dataset {
            Dataset::Random {
                input_len,
                output_len,
                range_ratio,
            } => {
                // The spec follows SGLang's bench_serving (1 = exact lengths); the wire
                // message is the spread below the length (0 = exact), as agent.proto says.
                agentpb::workload::Dataset::Random(agentpb::RandomDataset {
                    input_len: *input_len,
                    output_len: *output_len,
                    range_ratio: 1.0 - *range_ratio,
                })
            }
            Dataset::ShareGpt { path, output_len } => {
                agentpb::workload::Dataset::Sharegpt(agentpb::ShareGptDataset {
                    path: path.clone(),
                    output_len: *output_len,
                })
            }
            Dataset::SharedPrefix {
                groups,
                prompts_per_group,
                prefix_len,
                suffix_len,
                output_len,
            } => agentpb::workload::Dataset::SharedPrefix(agentpb::SharedPrefixDataset {
                groups: *groups,
                prompts_per_group: *prompts_per_group,
                prefix_len: *prefix_len,
                suffix_len: *suffix_len,
                output_len: *output_len,
            }),
            Dataset::Jsonl { path, output_len } => {
                agentpb::workload::Dataset::Jsonl(agentpb::JsonlDataset {
                    path: path.clone(),
                    output_len: *output_len,
                })
            }
            Dataset::Trace {
                path,
                block_tokens,
                speedup,
            } => agentpb::workload::Dataset::Trace(agentpb::TraceDataset {
                path: path.clone(),
                block_tokens: *block_tokens,
                speedup: *speedup,
            }),
            Dataset::Conversation {
                turns,
                input_len,
                output_len,
                think_time_ms,
                system_prompt_len,
            } => agentpb::workload::Dataset::Conversation(agentpb::ConversationDataset {
                turns: *turns,
                input_len: *input_len,
                output_len: *output_len,
                think_time_ms: *think_time_ms,
                system_prompt_len: *system_prompt_len,
            }),
        };
        let api = match w.api {
            Api::Completions => agentpb::ApiKind::Completions,
            Api::Chat => agentpb::ApiKind::Chat,
        };
        let load = &self.load;
        agentpb::RunBenchmarkRequest {
            workload: Some(agentpb::Workload {
                name: w.name.clone(),
                dataset: Some(dataset),
                api: api as i32,
                model: w.model.clone(),
                ignore_eos: w.ignore_eos,
                seed: w.seed,
            }),
            levels: self.levels_pb(),
            warmup_requests: load.warmup,
            bound: Some(match load.bound {
                Bound::Requests(n) => agentpb::run_benchmark_request::Bound::NumRequests(n),
                Bound::Duration(d) => {
                    agentpb::run_benchmark_request::Bound::DurationS(d.as_secs_f64())
                }
            }),
            percentiles: load.percentiles.clone(),
            slo: Some(agentpb::Slo {
                ttft_ms: load.slo.ttft_ms,
                itl_ms: None,
                e2e_ms: load.slo.e2e_ms,
                tpot_ms: load.slo.tpot_ms,
                itl_p99_ms: load.slo.itl_ms,
            }),
            run_id: String::new(),
            skip_levels: Vec::new(),
            ramp_up_s: load.ramp_up.as_secs_f64(),
            window_s: load.window.map(|w| w.as_secs_f64()),
            steady: load.steady,
            reset_cache: load.reset_cache,
            // The trial runner's, per attempt.
            lease_epoch: 0,
            target: None,
            // A level split over several clients: the trial runner's, per client.
            start_at_unix_ms: 0,
            histograms: false,
        }
    }

    /// The load levels as the wire message, in spec order (the index is the level index).
    pub fn levels_pb(&self) -> Vec<agentpb::LoadLevel> {
        match &self.load.levels {
            Levels::Concurrency(cs) => cs
                .iter()
                .map(|&c| agentpb::LoadLevel {
                    concurrency: Some(c),
                    request_rate: None,
                    burstiness: 1.0,
                })
                .collect(),
            Levels::RequestRate {
                rates,
                max_concurrency,
                burstiness,
            } => rates
                .iter()
                .map(|&r| agentpb::LoadLevel {
                    concurrency: *max_concurrency,
                    request_rate: Some(r),
                    burstiness: *burstiness,
                })
                .collect(),
        }
    }

    /// Number of load levels each trial runs.
    pub fn level_count(&self) -> usize {
        match &self.load.levels {
            Levels::Concurrency(cs) => cs.len(),
            Levels::RequestRate { rates, .. } => rates.len(),
        }
    }
}

/// Short label of a load level, the key people read in tables: `c=64`, `r=2.5/s`,
/// `r=2.5/s c<=64`.
pub fn level_label(level: &agentpb::LoadLevel) -> String {
    match (level.request_rate, level.concurrency) {
        (Some(r), Some(c)) => format!("r={r}/s c<={c}"),
        (Some(r), None) => format!("r={r}/s"),
        (None, Some(c)) => format!("c={c}"),
        (None, None) => "?".to_string(),
    }
}

/// The wire enum for an engine kind.
pub fn kind_to_pb(kind: EngineKind) -> agentpb::EngineKind {
    match kind {
        EngineKind::Sglang => agentpb::EngineKind::Sglang,
        EngineKind::Vllm => agentpb::EngineKind::Vllm,
        EngineKind::Llamacpp => agentpb::EngineKind::Llamacpp,
        EngineKind::Sim => agentpb::EngineKind::Sim,
        EngineKind::Generic => agentpb::EngineKind::Generic,
        EngineKind::SglangRouter => agentpb::EngineKind::SglangRouter,
    }
}

impl HostSelector {
    /// Whether a host fits. Without facts (host not reached yet) only name and labels can
    /// match, so a selector asking for GPUs does not match.
    pub fn matches(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        facts: Option<&agentpb::HostFacts>,
    ) -> bool {
        if !self.names.is_empty() && !self.names.iter().any(|n| n == name) {
            return false;
        }
        if !self.labels.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            return false;
        }
        if self.gpu_model.is_none() && self.gpu_count.is_none() {
            return true;
        }
        let Some(facts) = facts else { return false };
        let model = self.gpu_model.as_deref().map(str::to_lowercase);
        let fitting = facts
            .gpus
            .iter()
            .filter(|g| {
                model
                    .as_ref()
                    .is_none_or(|m| g.name.to_lowercase().contains(m))
            })
            .count();
        fitting >= self.gpu_count.unwrap_or(1) as usize
    }
}
