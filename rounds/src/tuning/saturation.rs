//! Saturation search: for each config, the highest concurrency whose level still meets the
//! SLO, found by bracketing (doubling from `low`) and bisecting, instead of walking a fixed
//! list. Configs are searched at the same time (one job per probe, all through the
//! scheduler), each config's probes in sequence since each depends on the last.

use std::collections::BTreeMap;

use fleetbench_proto::controllerpb::JobKind;

use super::score;
use super::space::{self, Candidate, Round};
use super::{TuneError, parse};
use crate::fleet::Fleet;
use fleetbench_spec::Levels;
use fleetbench_spec::search::{Objective, Saturation};

/// One probe: a concurrency and whether every repeat met the SLO there.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub concurrency: u32,
    pub meets: bool,
    pub output_tokens_per_s: f64,
    pub job_id: String,
}

/// A config's saturation point.
#[derive(Debug, Clone, PartialEq)]
pub struct SaturationResult {
    pub config: String,
    pub flags: String,
    /// The highest concurrency measured to meet the SLO (0: not even `low`).
    pub saturation: u32,
    /// The lowest concurrency measured to miss it (None: `high` still met it).
    pub first_miss: Option<u32>,
    pub probes: Vec<Probe>,
    /// Why it stopped early (failed to start, …).
    pub failure: Option<String>,
}

/// The outcome of a saturation search.
#[derive(Debug, Clone, PartialEq)]
pub struct SaturationOutcome {
    pub name: String,
    pub bounds: Saturation,
    pub results: Vec<SaturationResult>,
    /// Levels the fixed `[load] concurrency` list would have run per config.
    pub fixed_list_levels: usize,
    /// The best config (highest saturation point).
    pub best: Option<String>,
}

/// Runs a search spec with `objective = "saturation"`.
pub async fn run_saturation<F: Fleet + Clone>(
    fleet: &F,
    file_name: &str,
    text: &str,
) -> Result<SaturationOutcome, TuneError> {
    let (spec, search) = parse(file_name, text)?;
    debug_assert_eq!(search.objective, Objective::Saturation);
    let bounds = search.saturation.unwrap_or(Saturation {
        low: 1,
        high: 512,
        resolution: 1,
    });
    let fixed_list_levels = match &spec.load.levels {
        Levels::Concurrency(cs) => cs.len(),
        Levels::RequestRate { rates, .. } => rates.len(),
    };
    let cands = space::candidates(&spec, &search);
    // One config's probes per host at a time: a probe job left waiting for a host longer than
    // the controller's host_wait would fail.
    let parallel = fleet.clone().hosts().await.unwrap_or(1).max(1);
    let searches = cands.into_iter().map(|c| {
        let mut fleet = fleet.clone();
        let spec = &spec;
        async move { one(&mut fleet, file_name, text, spec, c, bounds).await }
    });
    use futures::StreamExt as _;
    let results: Vec<SaturationResult> = futures::stream::iter(searches)
        .buffered(parallel)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let best = results
        .iter()
        .filter(|r| r.failure.is_none() && r.saturation > 0)
        .max_by_key(|r| r.saturation)
        .map(|r| r.config.clone());
    Ok(SaturationOutcome {
        name: spec.name.clone(),
        bounds,
        results,
        fixed_list_levels,
        best,
    })
}

async fn one<F: Fleet>(
    fleet: &mut F,
    file_name: &str,
    text: &str,
    spec: &fleetbench_spec::JobSpec,
    cand: Candidate,
    b: Saturation,
) -> Result<SaturationResult, TuneError> {
    let mut out = SaturationResult {
        config: cand.name.clone(),
        flags: cand.describe(),
        saturation: 0,
        first_miss: None,
        probes: Vec::new(),
        failure: None,
    };
    let mut cache: BTreeMap<u32, bool> = BTreeMap::new();
    // Each probe runs as many requests per concurrency slot as the spec's widest fixed level
    // does, so a wide level is measured past its ramp-up as a narrow one is.
    let per_slot = match (&spec.load.levels, spec.load.bound) {
        (Levels::Concurrency(cs), fleetbench_spec::Bound::Requests(n)) => {
            let widest = cs.iter().copied().max().unwrap_or(1).max(1);
            Some(n.div_ceil(widest).max(1))
        }
        _ => None,
    };
    let mut probe = async |c: u32, out: &mut SaturationResult| -> Result<bool, TuneError> {
        if let Some(m) = cache.get(&c) {
            return Ok(*m);
        }
        let round = Round {
            job_name: format!("{} {} c={c}", spec.name, cand.name),
            candidates: vec![cand.clone()],
            repeats: spec.repeats,
            budget_fraction: 1.0,
            concurrency: Some(vec![c]),
            requests: per_slot.map(|n| n.saturating_mul(c)),
        };
        let toml = space::round_toml(text, &round).map_err(|e| TuneError::Toml(e.to_string()))?;
        let job_id = fleet.submit(&toml, file_name, "", JobKind::Tune).await?;
        fleet.wait(&job_id).await?;
        let res = fleet.results(std::slice::from_ref(&job_id)).await?;
        let m = score::measure(
            &res,
            Objective::OutputTokensPerS,
            &spec.load.slo,
            &score::HostGpus::new(),
        )?;
        let got = m.get(&cand.name);
        if let Some(f) = got.and_then(|m| m.failure.clone())
            && got.is_some_and(|m| m.levels.is_empty())
        {
            out.failure = Some(f);
        }
        let level = got.and_then(|m| m.levels.first());
        let meets = level.is_some_and(|l| l.meets_slo);
        out.probes.push(Probe {
            concurrency: c,
            meets,
            output_tokens_per_s: level.map_or(0.0, |l| l.output_tokens_per_s),
            job_id,
        });
        cache.insert(c, meets);
        Ok(meets)
    };
    if !probe(b.low, &mut out).await? {
        out.first_miss = Some(b.low);
        return Ok(out);
    }
    let mut lo = b.low;
    let mut hi = None;
    let mut c = b.low;
    while hi.is_none() {
        c = (c.saturating_mul(2)).min(b.high);
        if probe(c, &mut out).await? {
            lo = c;
            if c >= b.high {
                break;
            }
        } else {
            hi = Some(c);
        }
        if out.failure.is_some() {
            return Ok(out);
        }
    }
    if let Some(mut h) = hi {
        while h - lo > b.resolution {
            let mid = lo + (h - lo) / 2;
            if probe(mid, &mut out).await? {
                lo = mid;
            } else {
                h = mid;
            }
        }
        out.first_miss = Some(h);
    }
    out.saturation = lo;
    Ok(out)
}
