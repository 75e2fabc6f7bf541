//! Every numeric field of a spec against its documented range (`fleetbench_proto::limits`),
//! checked once the spec has parsed and before anything is expanded or allocated: a dry run of
//! `repeats = 4000000000` is refused here instead of asking for 96 GB of trials, and
//! `request_rate = [1e-300]` before an agent is asked to wait 1e300 seconds between requests.
//!
//! Kept apart from the parser so that new fields add a line here without touching how they are
//! read. Each problem is located by file, line and field like any other spec error.

use fleetbench_proto::limits::{self as lim, check_f64, check_len, check_u32};

use super::walk::{Ctx, Span, Table, Val};
use super::{Bound, Dataset, JobSpec, Levels};

/// A step of a field path.
#[derive(Clone, Copy)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}
use Seg::{Index as I, Key as K};

fn field(path: &[Seg<'_>]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            K(k) if out.is_empty() => out.push_str(k),
            K(k) => {
                out.push('.');
                out.push_str(k);
            }
            I(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The span of the deepest part of `path` found in the document.
fn span(root: &Table<'_, '_>, path: &[Seg<'_>]) -> Option<Span> {
    let mut cur: Option<&Val<'_>> = None;
    let mut found = None;
    for s in path {
        let next = match (s, cur) {
            (K(k), None) => root.get(k),
            (K(k), Some(v)) => v.get_ref().as_table().and_then(|t| t.get(*k)),
            (I(i), Some(v)) => v.get_ref().as_array().and_then(|a| a.get(*i)),
            (I(_), None) => None,
        };
        match next {
            Some(v) => {
                found = Some(v.span());
                cur = Some(v);
            }
            None => break,
        }
    }
    found
}

struct Check<'c, 'r, 't, 'i> {
    ctx: &'c mut Ctx,
    root: &'r Table<'t, 'i>,
}

impl Check<'_, '_, '_, '_> {
    fn report(&mut self, path: &[Seg<'_>], r: Result<(), String>) {
        if let Err(msg) = r {
            let sp = span(self.root, path);
            self.ctx.error(sp.as_ref(), &field(path), msg);
        }
    }
}

/// Records a located error for every field outside its range.
pub(super) fn check(ctx: &mut Ctx, root: &Table<'_, '_>, spec: &JobSpec) {
    let mut c = Check { ctx, root };
    c.report(&[K("repeats")], check_u32(spec.repeats, lim::REPEATS));
    c.report(
        &[K("configs")],
        check_len(spec.configs.len(), lim::MAX_CONFIGS),
    );
    c.report(
        &[K("workloads")],
        check_len(spec.workloads.len(), lim::MAX_WORKLOADS),
    );
    let trials = (spec.configs.len() as u64)
        .saturating_mul(spec.workloads.len() as u64)
        .saturating_mul(u64::from(spec.repeats));
    if trials > lim::MAX_TRIALS {
        c.report(
            &[K("repeats")],
            Err(format!(
                "the job expands to {trials} trials (configs x workloads x repeats); at most {}",
                lim::MAX_TRIALS
            )),
        );
    }
    if let Some(n) = spec.hosts.gpu_count {
        c.report(&[K("hosts"), K("gpu_count")], check_u32(n, lim::GPU_COUNT));
    }
    load(&mut c, spec);
    if spec.load.clients > 1 {
        clients(&mut c, spec);
    }
    for (i, w) in spec.workloads.iter().enumerate() {
        dataset(&mut c, i, &w.dataset);
        if matches!(w.dataset, Dataset::Conversation { .. })
            && matches!(spec.load.levels, Levels::RequestRate { .. })
        {
            c.report(
                &[K("workloads"), I(i), K("dataset")],
                Err(
                    "a conversation workload runs at a concurrency (one stream per session): \
                     give load.concurrency, not load.request_rate"
                        .into(),
                ),
            );
        }
        if matches!(w.dataset, Dataset::Trace { .. })
            && matches!(spec.load.levels, Levels::RequestRate { .. })
        {
            c.report(
                &[K("workloads"), I(i), K("dataset")],
                Err(
                    "a trace sends at its own timestamps (trace_speedup scales them): give \
                     load.concurrency (a cap on requests in flight), not load.request_rate"
                        .into(),
                ),
            );
        }
        budget(&mut c, spec, i, &w.dataset);
    }
}

/// `load.clients > 1`: every client must get a share of each level, a host of its own, and a
/// target it can reach.
fn clients(c: &mut Check<'_, '_, '_, '_>, spec: &JobSpec) {
    let k = spec.load.clients;
    let at = [K("load"), K("clients")];
    if let Err(e) = check_u32(k, lim::CLIENTS) {
        // Out of range: what a split would need says nothing more.
        return c.report(&at, Err(e));
    }
    if let Some(cfg) = spec.configs.iter().find(|c| c.target.is_none()) {
        // The other agents would need the engine's port reachable from their hosts, which an
        // engine profile binds to the host it names; a router or Service in front is the
        // endpoint several hosts can load.
        c.report(
            &at,
            Err(format!(
                "config {:?} is an engine on the trial's host: a level split over {k} client \
                 agents loads one endpoint that every client reaches, so every config must be \
                 an external target (a router, a gateway, a Service)",
                cfg.name
            )),
        );
    }
    if (spec.hosts.names.len() as u64) < u64::from(k) {
        c.report(
            &at,
            Err(format!(
                "{k} clients need {k} hosts to drive the load; hosts.names lists {}",
                spec.hosts.names.len()
            )),
        );
    }
    match &spec.load.levels {
        Levels::Concurrency(cs) => {
            if let Some((i, &cv)) = cs.iter().enumerate().find(|(_, v)| **v < k) {
                c.report(
                    &[K("load"), K("concurrency"), I(i)],
                    Err(format!(
                        "concurrency {cv} cannot be split over {k} clients (each needs a \
                         stream): at least {k}"
                    )),
                );
            }
        }
        Levels::RequestRate {
            max_concurrency: Some(m),
            ..
        } if *m < k => c.report(
            &[K("load"), K("max_concurrency")],
            Err(format!(
                "max_concurrency {m} cannot be split over {k} clients: at least {k}"
            )),
        ),
        Levels::RequestRate { .. } => {}
    }
    if let Bound::Requests(n) = spec.load.bound
        && n < k
    {
        c.report(
            &[K("load"), K("requests")],
            Err(format!(
                "{n} requests cannot be split over {k} clients: at least {k}"
            )),
        );
    }
    for (i, w) in spec.workloads.iter().enumerate() {
        if matches!(w.dataset, Dataset::Trace { .. }) {
            c.report(
                &[K("workloads"), I(i), K("dataset")],
                Err(format!(
                    "a trace is replayed by one client at its timestamps; with {k} clients \
                     each would send the whole trace: use clients = 1"
                )),
            );
        }
    }
}

/// Each level of workload `i` against the agent's memory and time budget
/// (`fleetbench_proto::budget`): the same check the agent makes before it builds a prompt, so
/// a spec over it is refused here (and by `--dry-run`) instead of exhausting agents.
fn budget(c: &mut Check<'_, '_, '_, '_>, spec: &JobSpec, i: usize, d: &Dataset) {
    use fleetbench_proto::budget::{LevelDemand, check_level};
    let (key, input, output, in_name) = match d {
        Dataset::Random {
            input_len,
            output_len,
            ..
        } => (
            "input_len",
            u64::from(*input_len),
            u64::from(*output_len),
            format!("workloads[{i}].input_len"),
        ),
        Dataset::SharedPrefix {
            prefix_len,
            suffix_len,
            output_len,
            ..
        } => (
            "suffix_len",
            u64::from(*prefix_len) + u64::from(*suffix_len),
            u64::from(*output_len),
            format!("workloads[{i}].prefix_len + suffix_len"),
        ),
        Dataset::Conversation {
            turns,
            input_len,
            output_len,
            system_prompt_len,
            ..
        } => (
            "turns",
            conversation_longest(*turns, *input_len, *output_len, *system_prompt_len),
            u64::from(*output_len),
            format!("workloads[{i}].turns x (input_len + output_len) + system_prompt_len"),
        ),
        // Prompts read from a file are bounded by the file.
        _ => return,
    };
    let out_name = format!("workloads[{i}].output_len");
    let requests = match spec.load.bound {
        Bound::Requests(n) => Some(u64::from(n)),
        Bound::Duration(_) => None,
    };
    // A field outside its own range is already reported; a product of it would only repeat it.
    let in_range = |v: u64, (lo, hi): (u32, u32)| (u64::from(lo)..=u64::from(hi)).contains(&v);
    let longest = u64::from(lim::TOKENS.1)
        * match key {
            "suffix_len" => 2,
            "turns" => 2 * u64::from(lim::TURNS.1) + 1,
            _ => 1,
        };
    if !in_range(u64::from(spec.load.warmup), lim::WARMUP)
        || requests.is_some_and(|n| !in_range(n, lim::REQUESTS))
        || input > longest
        || !in_range(output, lim::TOKENS)
    {
        return;
    }
    let r = check_level(&LevelDemand {
        requests,
        warmup: u64::from(spec.load.warmup),
        input_tokens: input,
        output_tokens: output,
        names: ["load.requests", "load.warmup", &in_name, &out_name],
    });
    c.report(
        &[K("workloads"), I(i), K(key)],
        r.map_err(|e| e.to_string()),
    );
}

fn load(c: &mut Check<'_, '_, '_, '_>, spec: &JobSpec) {
    let l = &spec.load;
    let mut slowest_rate = None;
    match &l.levels {
        Levels::Concurrency(values) => {
            let p = [K("load"), K("concurrency")];
            c.report(&p, check_len(values.len(), lim::MAX_LEVELS));
            for (i, v) in values.iter().enumerate() {
                c.report(&[p[0], p[1], I(i)], check_u32(*v, lim::CONCURRENCY));
            }
        }
        Levels::RequestRate {
            rates,
            max_concurrency,
            burstiness,
        } => {
            let p = [K("load"), K("request_rate")];
            c.report(&p, check_len(rates.len(), lim::MAX_LEVELS));
            for (i, r) in rates.iter().enumerate() {
                c.report(&[p[0], p[1], I(i)], check_f64(*r, lim::REQUEST_RATE));
            }
            if let Some(m) = max_concurrency {
                c.report(
                    &[K("load"), K("max_concurrency")],
                    check_u32(*m, lim::CONCURRENCY),
                );
            }
            c.report(
                &[K("load"), K("burstiness")],
                check_f64(*burstiness, lim::BURSTINESS),
            );
            slowest_rate = rates
                .iter()
                .enumerate()
                .filter(|(_, r)| r.is_finite() && **r > 0.0)
                .min_by(|a, b| a.1.total_cmp(b.1));
        }
    }
    c.report(&[K("load"), K("warmup")], check_u32(l.warmup, lim::WARMUP));
    match l.bound {
        Bound::Requests(n) => {
            c.report(&[K("load"), K("requests")], check_u32(n, lim::REQUESTS));
            if let Some((i, rate)) = slowest_rate {
                let secs = f64::from(n) / rate;
                if secs > lim::MAX_LEVEL_S {
                    c.report(
                        &[K("load"), K("request_rate"), I(i)],
                        Err(format!(
                            "{n} requests at {rate} per second take {secs:.0} s; a level may \
                             take at most {} s",
                            lim::MAX_LEVEL_S
                        )),
                    );
                }
            }
        }
        Bound::Duration(d) => c.report(
            &[K("load"), K("duration")],
            check_f64(d.as_secs_f64(), lim::DURATION_S).map_err(|m| format!("seconds {m}")),
        ),
    }
    c.report(
        &[K("load"), K("percentiles")],
        check_len(l.percentiles.len(), lim::MAX_PERCENTILES),
    );
    for (key, v) in [
        ("ttft_ms", l.slo.ttft_ms),
        ("tpot_ms", l.slo.tpot_ms),
        // The level's p99 ITL limit is written `itl_p99_ms` in a spec.
        ("itl_p99_ms", l.slo.itl_ms),
        ("e2e_ms", l.slo.e2e_ms),
    ] {
        if let Some(v) = v {
            c.report(&[K("load"), K("slo"), K(key)], check_f64(v, lim::SLO_MS));
        }
    }
}

fn dataset(c: &mut Check<'_, '_, '_, '_>, i: usize, d: &Dataset) {
    let tokens = |c: &mut Check<'_, '_, '_, '_>, key: &str, v: u32, zero_ok: bool| {
        if !(zero_ok && v == 0) {
            c.report(&[K("workloads"), I(i), K(key)], check_u32(v, lim::TOKENS));
        }
    };
    let path = |c: &mut Check<'_, '_, '_, '_>, p: &str| {
        if p.len() > lim::MAX_NAME_LEN {
            c.report(
                &[K("workloads"), I(i), K("path")],
                Err(format!("at most {} bytes", lim::MAX_NAME_LEN)),
            );
        }
    };
    match d {
        Dataset::Random {
            input_len,
            output_len,
            ..
        } => {
            tokens(c, "input_len", *input_len, false);
            tokens(c, "output_len", *output_len, false);
        }
        Dataset::ShareGpt {
            path: p,
            output_len,
        } => {
            path(c, p);
            tokens(c, "output_len", *output_len, true);
        }
        Dataset::SharedPrefix {
            groups,
            prompts_per_group,
            prefix_len,
            suffix_len,
            output_len,
        } => {
            let w = |k| [K("workloads"), I(i), K(k)];
            c.report(&w("groups"), check_u32(*groups, lim::GROUPS));
            c.report(
                &w("prompts_per_group"),
                check_u32(*prompts_per_group, lim::GROUPS),
            );
            let prompts = u64::from(*groups) * u64::from(*prompts_per_group);
            if prompts > lim::MAX_PROMPTS {
                c.report(
                    &w("prompts_per_group"),
                    Err(format!(
                        "groups x prompts_per_group is {prompts}; at most {}",
                        lim::MAX_PROMPTS
                    )),
                );
            }
            tokens(c, "prefix_len", *prefix_len, true);
            tokens(c, "suffix_len", *suffix_len, false);
            tokens(c, "output_len", *output_len, false);
        }
        Dataset::Jsonl {
            path: p,
            output_len,
        } => {
            path(c, p);
            tokens(c, "output_len", *output_len, true);
        }
        Dataset::Trace {
            path: p,
            block_tokens,
            speedup,
        } => {
            path(c, p);
            let w = |k| [K("workloads"), I(i), K(k)];
            c.report(
                &w("trace_block_tokens"),
                check_u32(*block_tokens, lim::TRACE_BLOCK_TOKENS),
            );
            c.report(&w("trace_speedup"), check_f64(*speedup, lim::TRACE_SPEEDUP));
        }
        Dataset::Conversation {
            turns,
            input_len,
            output_len,
            think_time_ms,
            system_prompt_len,
        } => {
            let w = |k| [K("workloads"), I(i), K(k)];
            c.report(&w("turns"), check_u32(*turns, lim::TURNS));
            c.report(
                &w("think_time_ms"),
                check_u32(*think_time_ms, lim::THINK_MS),
            );
            tokens(c, "input_len", *input_len, false);
            tokens(c, "output_len", *output_len, false);
            tokens(c, "system_prompt_len", *system_prompt_len, true);
        }
    }
}

/// Tokens of a conversation's longest prompt: its last turn's, holding every earlier one.
pub(crate) fn conversation_longest(turns: u32, input: u32, output: u32, system: u32) -> u64 {
    u64::from(system)
        + u64::from(input)
        + u64::from(turns.saturating_sub(1)) * (u64::from(input) + u64::from(output))
}
