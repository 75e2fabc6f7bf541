//! Every numeric field of `RunBenchmark` and `ApplyEngine` against its documented range
//! (`fleetbench_proto::limits`), checked before the request touches the engine, the load
//! generator or an allocation. Any caller with a certificate can send these, so the agent does
//! not rely on a controller having validated the spec: `request_rate = 1e-300` once made the
//! load generator panic (an inter-arrival time beyond `Duration`), three times, and the
//! controller reported the host as lost.

use fleetbench_proto::agentpb;
use fleetbench_proto::limits::{self as lim, check_f64, check_len, check_u32};

use crate::convert::BenchRequestError;

fn at(field: impl Into<String>, r: Result<(), String>) -> Result<(), BenchRequestError> {
    r.map_err(|message| BenchRequestError {
        field: field.into(),
        message,
    })
}

fn name_len(field: &str, s: &str) -> Result<(), BenchRequestError> {
    at(
        field,
        (s.len() <= lim::MAX_NAME_LEN)
            .then_some(())
            .ok_or_else(|| format!("at most {} bytes, got {}", lim::MAX_NAME_LEN, s.len())),
    )
}

fn tokens(field: &str, v: u32, zero_ok: bool) -> Result<(), BenchRequestError> {
    if zero_ok && v == 0 {
        return Ok(());
    }
    at(field, check_u32(v, lim::TOKENS))
}

/// Checks a `RunBenchmark` request's sizes and numbers; the error names the field.
pub fn check_benchmark(req: &agentpb::RunBenchmarkRequest) -> Result<(), BenchRequestError> {
    use agentpb::run_benchmark_request::Bound;
    use agentpb::workload::Dataset;
    name_len("run_id", &req.run_id)?;
    at("levels", check_len(req.levels.len(), lim::MAX_LEVELS))?;
    if let Some(t) = &req.target {
        const MAX_URL: usize = 2048;
        const MAX_LIST: usize = 64;
        let long = |field: &str, v: &str| {
            if v.len() > MAX_URL {
                Err(crate::convert::bad(
                    field,
                    format!("longer than {MAX_URL} bytes"),
                ))
            } else {
                Ok(())
            }
        };
        long("target.base_url", &t.base_url)?;
        long("target.ca_cert", &t.ca_cert)?;
        long("target.api_key_ref", &t.api_key_ref)?;
        for (field, n) in [
            ("target.headers", t.headers.len()),
            ("target.secret_headers", t.secret_headers.len()),
            ("target.metrics_urls", t.metrics_urls.len()),
        ] {
            if n > MAX_LIST {
                return Err(crate::convert::bad(
                    field,
                    format!("at most {MAX_LIST}, got {n}"),
                ));
            }
        }
        for u in &t.metrics_urls {
            long("target.metrics_urls", u)?;
        }
        for h in t.headers.iter().chain(&t.secret_headers) {
            long("target.headers", &h.name)?;
            long("target.headers", &h.value)?;
        }
    }
    let mut slowest: Option<f64> = None;
    for (i, l) in req.levels.iter().enumerate() {
        if let Some(c) = l.concurrency {
            at(
                format!("levels[{i}].concurrency"),
                check_u32(c, lim::CONCURRENCY),
            )?;
        }
        if let Some(r) = l.request_rate {
            at(
                format!("levels[{i}].request_rate"),
                check_f64(r, lim::REQUEST_RATE),
            )?;
            slowest = Some(slowest.map_or(r, |s| s.min(r)));
        }
        // 0 on the wire means "unset" (Poisson).
        if l.burstiness != 0.0 {
            at(
                format!("levels[{i}].burstiness"),
                check_f64(l.burstiness, lim::BURSTINESS),
            )?;
        }
    }
    at(
        "warmup_requests",
        check_u32(req.warmup_requests, lim::WARMUP),
    )?;
    match req.bound {
        Some(Bound::NumRequests(n)) => {
            at("num_requests", check_u32(n, lim::REQUESTS))?;
            if let Some(rate) = slowest {
                let secs = f64::from(n) / rate;
                if secs > lim::MAX_LEVEL_S {
                    at(
                        "num_requests",
                        Err(format!(
                            "{n} requests at {rate} per second take {secs:.0} s; a level may \
                             take at most {} s",
                            lim::MAX_LEVEL_S
                        )),
                    )?;
                }
            }
        }
        Some(Bound::DurationS(s)) => at("duration_s", check_f64(s, lim::DURATION_S))?,
        None => {}
    }
    at(
        "percentiles",
        check_len(req.percentiles.len(), lim::MAX_PERCENTILES),
    )?;
    at(
        "skip_levels",
        check_len(req.skip_levels.len(), lim::MAX_SKIP_LEVELS),
    )?;
    if req.start_at_unix_ms != 0 {
        start_at(req)?;
    }
    // Steady-state spans: a ramp-up of zero means none; otherwise each is a level duration.
    if req.ramp_up_s != 0.0 {
        at("ramp_up_s", check_f64(req.ramp_up_s, lim::DURATION_S))?;
    }
    if let Some(w) = req.window_s {
        at("window_s", check_f64(w, lim::DURATION_S))?;
    }
    if let Some(s) = &req.slo {
        for (k, v) in [
            ("ttft_ms", s.ttft_ms),
            ("itl_ms", s.itl_ms),
            ("e2e_ms", s.e2e_ms),
            ("tpot_ms", s.tpot_ms),
            ("itl_p99_ms", s.itl_p99_ms),
        ] {
            if let Some(v) = v {
                at(format!("slo.{k}"), check_f64(v, lim::SLO_MS))?;
            }
        }
    }
    let Some(w) = &req.workload else {
        return Ok(());
    };
    name_len("workload.name", &w.name)?;
    name_len("workload.model", &w.model)?;
    match &w.dataset {
        Some(Dataset::Random(r)) => {
            tokens("workload.random.input_len", r.input_len, false)?;
            tokens("workload.random.output_len", r.output_len, false)?;
        }
        Some(Dataset::Sharegpt(s)) => {
            name_len("workload.sharegpt.path", &s.path)?;
            tokens("workload.sharegpt.output_len", s.output_len, true)?;
        }
        Some(Dataset::SharedPrefix(s)) => {
            at(
                "workload.shared_prefix.groups",
                check_u32(s.groups, lim::GROUPS),
            )?;
            at(
                "workload.shared_prefix.prompts_per_group",
                check_u32(s.prompts_per_group, lim::GROUPS),
            )?;
            let prompts = u64::from(s.groups) * u64::from(s.prompts_per_group);
            if prompts > lim::MAX_PROMPTS {
                at(
                    "workload.shared_prefix.prompts_per_group",
                    Err(format!(
                        "groups x prompts_per_group is {prompts}; at most {}",
                        lim::MAX_PROMPTS
                    )),
                )?;
            }
            tokens("workload.shared_prefix.prefix_len", s.prefix_len, true)?;
            tokens("workload.shared_prefix.suffix_len", s.suffix_len, false)?;
            tokens("workload.shared_prefix.output_len", s.output_len, false)?;
        }
        Some(Dataset::Jsonl(j)) => {
            name_len("workload.jsonl.path", &j.path)?;
            tokens("workload.jsonl.output_len", j.output_len, true)?;
        }
        Some(Dataset::Trace(t)) => {
            name_len("workload.trace.path", &t.path)?;
            // 0 asks for the defaults (512 tokens a block, recorded speed).
            if t.block_tokens != 0 {
                at(
                    "workload.trace.block_tokens",
                    check_u32(t.block_tokens, lim::TRACE_BLOCK_TOKENS),
                )?;
            }
            if t.speedup != 0.0 {
                at(
                    "workload.trace.speedup",
                    check_f64(t.speedup, lim::TRACE_SPEEDUP),
                )?;
            }
            if let Some(i) = req.levels.iter().position(|l| l.request_rate.is_some()) {
                at(
                    format!("levels[{i}].request_rate"),
                    Err(
                        "a trace sends at its own timestamps (speedup scales them); a level's \
                         concurrency caps it, a request rate is not offered"
                            .into(),
                    ),
                )?;
            }
        }
        Some(Dataset::Conversation(c)) => {
            at(
                "workload.conversation.turns",
                check_u32(c.turns, lim::TURNS),
            )?;
            at(
                "workload.conversation.think_time_ms",
                check_u32(c.think_time_ms, lim::THINK_MS),
            )?;
            tokens("workload.conversation.input_len", c.input_len, false)?;
            tokens("workload.conversation.output_len", c.output_len, false)?;
            tokens(
                "workload.conversation.system_prompt_len",
                c.system_prompt_len,
                true,
            )?;
            if let Some(i) = req.levels.iter().position(|l| l.request_rate.is_some()) {
                at(
                    format!("levels[{i}].request_rate"),
                    Err(
                        "a conversation workload runs at a concurrency (one stream per \
                         session); a request rate is not offered"
                            .into(),
                    ),
                )?;
            }
        }
        None => {}
    }
    level_budget(req, w)
}

/// The level's memory and time budget (`fleetbench_proto::budget`), checked before a prompt
/// is built: every field can be in range while their product exhausts the agent.
fn level_budget(
    req: &agentpb::RunBenchmarkRequest,
    w: &agentpb::Workload,
) -> Result<(), BenchRequestError> {
    use agentpb::run_benchmark_request::Bound;
    use agentpb::workload::Dataset;
    use fleetbench_proto::budget::{LevelDemand, check_level};
    let (field, input, output, in_name, out_name) = match &w.dataset {
        Some(Dataset::Random(r)) => (
            "workload.random.input_len",
            u64::from(r.input_len),
            u64::from(r.output_len),
            "workload.random.input_len",
            "workload.random.output_len",
        ),
        Some(Dataset::SharedPrefix(s)) => (
            "workload.shared_prefix.suffix_len",
            u64::from(s.prefix_len) + u64::from(s.suffix_len),
            u64::from(s.output_len),
            "workload.shared_prefix.prefix_len + suffix_len",
            "workload.shared_prefix.output_len",
        ),
        // Counted as if every prompt were the longest (the last turn's): an upper bound.
        Some(Dataset::Conversation(c)) => (
            "workload.conversation.turns",
            u64::from(c.system_prompt_len)
                + u64::from(c.input_len)
                + u64::from(c.turns.saturating_sub(1))
                    * (u64::from(c.input_len) + u64::from(c.output_len)),
            u64::from(c.output_len),
            "workload.conversation.turns x (input_len + output_len) + system_prompt_len",
            "workload.conversation.output_len",
        ),
        // Prompts read from a file are bounded by the file.
        _ => return Ok(()),
    };
    let requests = match req.bound {
        Some(Bound::NumRequests(n)) => Some(u64::from(n)),
        _ => None,
    };
    check_level(&LevelDemand {
        requests,
        warmup: u64::from(req.warmup_requests),
        input_tokens: input,
        output_tokens: output,
        names: ["num_requests", "warmup_requests", in_name, out_name],
    })
    .map_err(|e| BenchRequestError {
        field: field.into(),
        message: e.to_string(),
    })
}

/// Checks an `ApplyEngine` spec's sizes (values are the profile's business).
pub fn check_apply(spec: &agentpb::EngineSpec, run_id: &str) -> Result<(), BenchRequestError> {
    name_len("run_id", run_id)?;
    name_len("spec.profile", &spec.profile)?;
    name_len("spec.model", &spec.model)?;
    at("spec.flags", check_len(spec.flags.len(), lim::MAX_FLAGS))?;
    for (i, f) in spec.flags.iter().enumerate() {
        name_len(&format!("spec.flags[{i}].name"), &f.name)?;
    }
    Ok(())
}

/// Checks an `AcquireLease` request's sizes (the owner, job and trial are shown and logged).
pub fn check_lease(req: &agentpb::AcquireLeaseRequest) -> Result<(), BenchRequestError> {
    name_len("owner", &req.owner)?;
    name_len("job_id", &req.job_id)?;
    name_len("trial_id", &req.trial_id)?;
    name_len("reason", &req.reason)?;
    Ok(())
}

/// How far ahead a synchronized start may lie: the controller picks one a moment after it
/// sends the request; a start further off is a wrong clock or a mistake.
pub const MAX_START_AHEAD_MS: i64 = 60_000;

/// A synchronized start (`start_at_unix_ms`): within a minute of the agent's clock either way
/// (a start a little past is begun at once: the caller's clock runs ahead of this one by less
/// than its offset estimate), and with no warm-up, whose length nobody can plan a start after.
fn start_at(req: &agentpb::RunBenchmarkRequest) -> Result<(), BenchRequestError> {
    let now = fleetbench_proto::now_unix_ms();
    let ahead = req.start_at_unix_ms - now;
    if !(-MAX_START_AHEAD_MS..=MAX_START_AHEAD_MS).contains(&ahead) {
        return at(
            "start_at_unix_ms",
            Err(format!(
                "{} is {:+.1} s from this agent's clock ({now}); at most {} s either way",
                req.start_at_unix_ms,
                ahead as f64 / 1e3,
                MAX_START_AHEAD_MS / 1000
            )),
        );
    }
    if req.warmup_requests != 0 {
        return at(
            "start_at_unix_ms",
            Err(
                "a synchronized start needs warmup_requests 0 (warm the engine up in a call \
                 of its own first)"
                    .into(),
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_s_values_are_refused_by_field() {
        let mut req = agentpb::RunBenchmarkRequest {
            levels: vec![agentpb::LoadLevel {
                concurrency: None,
                request_rate: Some(1e-300),
                burstiness: 0.0,
            }],
            ..Default::default()
        };
        let e = check_benchmark(&req).unwrap_err();
        assert_eq!(e.field, "levels[0].request_rate");
        assert!(e.message.contains("1e-300"), "{e}");
        req.levels[0].request_rate = Some(10.0);
        req.bound = Some(agentpb::run_benchmark_request::Bound::NumRequests(
            4_000_000_000,
        ));
        assert_eq!(check_benchmark(&req).unwrap_err().field, "num_requests");
        req.bound = Some(agentpb::run_benchmark_request::Bound::NumRequests(100));
        assert!(check_benchmark(&req).is_ok());
    }

    #[test]
    fn the_in_range_memory_bomb_is_refused_before_a_prompt_is_built() {
        let bomb = |input_len: u32| agentpb::RunBenchmarkRequest {
            workload: Some(agentpb::Workload {
                name: "w".into(),
                dataset: Some(agentpb::workload::Dataset::Random(agentpb::RandomDataset {
                    input_len,
                    output_len: 128,
                    range_ratio: 0.0,
                })),
                ..Default::default()
            }),
            levels: vec![agentpb::LoadLevel {
                concurrency: Some(64),
                ..Default::default()
            }],
            warmup_requests: 100_000,
            bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(
                1_000_000,
            )),
            ..Default::default()
        };
        let e = check_benchmark(&bomb(1_048_576)).unwrap_err();
        assert_eq!(e.field, "workload.random.input_len");
        for part in [
            "memory budget of 4.0 GiB",
            "num_requests 1000000 + warmup_requests 100000",
            "workload.random.input_len 1048576",
        ] {
            assert!(e.message.contains(part), "{part:?} not in {e}");
        }
        // The same level with short prompts fits.
        assert!(check_benchmark(&bomb(16)).is_ok());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn number() -> impl Strategy<Value = f64> {
            prop_oneof![
                any::<f64>(),
                (-6.0f64..7.0).prop_map(|e| 10f64.powf(e)),
                Just(1e-300),
                Just(f64::NAN),
                Just(0.0),
            ]
        }

        fn level() -> impl Strategy<Value = agentpb::LoadLevel> {
            (
                prop::option::of(prop_oneof![any::<u32>(), 0u32..100]),
                prop::option::of(number()),
                number(),
            )
                .prop_map(|(concurrency, request_rate, burstiness)| {
                    agentpb::LoadLevel {
                        concurrency,
                        request_rate,
                        burstiness,
                    }
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            /// Whatever numbers a caller sends: no panic, and a request the bounds accept is
            /// one the load generator accepts too (its own validation is the last line).
            #[test]
            fn accepted_requests_are_valid_load_generator_configs(
                levels in prop::collection::vec(level(), 0..6),
                warmup in prop_oneof![any::<u32>(), 0u32..10],
                bound in prop_oneof![
                    prop_oneof![any::<u32>(), 0u32..1000]
                        .prop_map(agentpb::run_benchmark_request::Bound::NumRequests),
                    number().prop_map(agentpb::run_benchmark_request::Bound::DurationS),
                ],
                input_len in prop_oneof![any::<u32>(), 0u32..100],
                output_len in prop_oneof![any::<u32>(), 0u32..100],
                ratio in number(),
                percentiles in prop::collection::vec(number(), 0..4),
            ) {
                let req = agentpb::RunBenchmarkRequest {
                    workload: Some(agentpb::Workload {
                        name: "w".into(),
                        dataset: Some(agentpb::workload::Dataset::Random(agentpb::RandomDataset {
                            input_len,
                            output_len,
                            range_ratio: ratio,
                        })),
                        ..Default::default()
                    }),
                    levels,
                    warmup_requests: warmup,
                    bound: Some(bound),
                    percentiles,
                    ..Default::default()
                };
                if check_benchmark(&req).is_ok() {
                    let cfg = crate::convert::bench_config(
                        &req,
                        "http://127.0.0.1:1",
                        &Default::default(),
                    );
                    // Refusals here are about values outside the numeric bounds (a missing
                    // level, a range ratio, a percentile): named, never a panic.
                    if let Err(e) = cfg {
                        prop_assert!(!e.field.is_empty());
                    }
                }
            }
        }
    }
}
