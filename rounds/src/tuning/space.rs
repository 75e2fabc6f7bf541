//! From a search space to candidates, and from candidates to the job specs that run them.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use fleetbench_spec::search::{FlagChoice, SWITCH_ON, SearchSpec, Strategy, toml_flag_value};
use fleetbench_spec::{ConfigSpec, JobSpec};

/// One point of the space: the searched flags' values after constraints (a flag a
/// constraint drops is absent).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Candidate {
    pub name: String,
    pub flags: BTreeMap<String, FlagChoice>,
}

impl Candidate {
    /// `--a=1 --b` style, for tables.
    pub fn describe(&self) -> String {
        self.flags
            .iter()
            .filter_map(|(k, v)| match v.as_deref() {
                None => None,
                Some(SWITCH_ON) => Some(k.clone()),
                Some(v) => Some(format!("{k}={v}")),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Every combination of the searched flags, constraints applied, duplicates (combinations a
/// constraint made equal) removed, in a stable order.
pub fn grid(search: &SearchSpec) -> Vec<BTreeMap<String, FlagChoice>> {
    let mut points: Vec<BTreeMap<String, FlagChoice>> = vec![BTreeMap::new()];
    for f in &search.flags {
        let mut next = Vec::with_capacity(points.len() * f.values.len());
        for p in &points {
            for v in &f.values {
                let mut q = p.clone();
                q.insert(f.name.clone(), v.clone());
                next.push(q);
            }
        }
        points = next;
    }
    let mut out: Vec<BTreeMap<String, FlagChoice>> = Vec::new();
    for mut p in points {
        for c in &search.constraints {
            let holds = c.when.iter().all(|(k, v)| p.get(k) == Some(v));
            if !holds {
                p.remove(&c.flag);
            }
        }
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The candidates a strategy starts from, named `c00`, `c01`, … (the starting config keeps its
/// own name when it is one of them).
pub fn candidates(spec: &JobSpec, search: &SearchSpec) -> Vec<Candidate> {
    let mut points = grid(search);
    if let Strategy::Random { budget, seed } = search.strategy {
        let mut rng = StdRng::seed_from_u64(seed);
        points.shuffle(&mut rng);
        points.truncate(budget as usize);
    }
    let start = start_point(&spec.configs[0], search);
    let width = points.len().saturating_sub(1).to_string().len().max(2);
    points
        .into_iter()
        .enumerate()
        .map(|(i, flags)| Candidate {
            name: if flags == start {
                spec.configs[0].name.clone()
            } else {
                format!("c{i:0width$}")
            },
            flags,
        })
        .collect()
}

/// The starting config's values of the searched flags (absent: not given).
pub fn start_point(base: &ConfigSpec, search: &SearchSpec) -> BTreeMap<String, FlagChoice> {
    let mut out = BTreeMap::new();
    for f in &search.flags {
        let v = base
            .flags
            .iter()
            .find(|(n, _)| n == &f.name)
            .map(|(_, v)| Some(v.clone().unwrap_or_else(|| SWITCH_ON.to_string())));
        out.insert(f.name.clone(), v.unwrap_or(None));
    }
    for c in &search.constraints {
        if !c.when.iter().all(|(k, v)| out.get(k) == Some(v)) {
            out.remove(&c.flag);
        }
    }
    out
}

/// What a round changes in the spec: its name, the configs, repeats, and per level either
/// a request count or a duration, and (saturation) the concurrency list.
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    pub job_name: String,
    pub candidates: Vec<Candidate>,
    pub repeats: u32,
    /// Fraction of the spec's per-level budget (requests or duration).
    pub budget_fraction: f64,
    pub concurrency: Option<Vec<u32>>,
    /// Requests per level instead of the scaled spec value (saturation probes).
    pub requests: Option<u32>,
}

/// The job spec of a round: the search file without `[search]`, its one config replaced by
/// one config per candidate (the starting config's table with the candidate's flags).
pub fn round_toml(text: &str, round: &Round) -> Result<String, toml::de::Error> {
    let mut doc: toml::Table = toml::from_str(text)?;
    doc.remove("search");
    doc.insert("name".into(), toml::Value::String(round.job_name.clone()));
    doc.insert(
        "repeats".into(),
        toml::Value::Integer(i64::from(round.repeats)),
    );
    let base = doc
        .get("configs")
        .and_then(|c| c.as_array())
        .and_then(|a| a.first())
        .and_then(|c| c.as_table())
        .cloned()
        .unwrap_or_default();
    let mut configs = Vec::new();
    for c in &round.candidates {
        let mut t = base.clone();
        t.insert("name".into(), toml::Value::String(c.name.clone()));
        let mut flags = t
            .get("flags")
            .and_then(|f| f.as_table())
            .cloned()
            .unwrap_or_default();
        for (k, v) in &c.flags {
            let value = match v {
                Some(v) => toml_flag_value(v),
                None => toml::Value::Boolean(false),
            };
            flags.insert(k.clone(), value);
        }
        t.insert("flags".into(), toml::Value::Table(flags));
        configs.push(toml::Value::Table(t));
    }
    doc.insert("configs".into(), toml::Value::Array(configs));
    if let Some(load) = doc.get_mut("load").and_then(|l| l.as_table_mut()) {
        // A cheap run is shorter, never narrower, and never a burst: at least BURST_FACTOR
        // requests per slot of the highest concurrency (or all the spec asks for), so no
        // rung ranks candidates by their first synchronized wave.
        let widest = match &round.concurrency {
            Some(cs) => cs.iter().copied().max().map(i64::from),
            None => load
                .get("concurrency")
                .and_then(|c| c.as_array())
                .and_then(|a| a.iter().filter_map(toml::Value::as_integer).max()),
        }
        .unwrap_or(8);
        if let Some(n) = round.requests {
            load.insert("requests".into(), toml::Value::Integer(i64::from(n)));
        } else if let Some(n) = load.get("requests").and_then(|r| r.as_integer()) {
            let floor = i64::from(fleetbench_proto::BURST_FACTOR) * widest;
            let scaled = ((n as f64 * round.budget_fraction).round() as i64).max(floor.min(n));
            load.insert("requests".into(), toml::Value::Integer(scaled));
        }
        if let Some(d) = load.get("duration").and_then(|d| d.as_str())
            && let Ok(d) = humantime::parse_duration(d)
        {
            let ms = (d.as_millis() as f64 * round.budget_fraction)
                .round()
                .max(500.0) as u64;
            load.insert("duration".into(), toml::Value::String(format!("{ms}ms")));
        }
        if let Some(cs) = &round.concurrency {
            let list = cs
                .iter()
                .map(|&c| toml::Value::Integer(i64::from(c)))
                .collect();
            load.insert("concurrency".into(), toml::Value::Array(list));
        }
    }
    Ok(toml::to_string(&doc).unwrap_or_default())
}
