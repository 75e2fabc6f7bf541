//! `[search]`: a tuning search. The job's one `[[configs]]` table is the starting config (its
//! flags are the fixed flags); `[search.flags]` gives the space, per flag a list of values
//! (`[false, true]` for a switch) or a range; constraints drop a flag unless others have
//! given values; the objective and the strategy say what is best and how to look for it.
//!
//! ```toml
//! [search]
//! strategy = "successive-halving"   # grid | random | successive-halving
//! objective = "output_tokens_per_s" # requests_per_s | output_tokens_per_s_per_gpu
//!                                   # | output_tokens_per_s_per_watt | saturation
//! [search.flags]
//! "--moe-runner-backend" = ["triton", "flashinfer_cutlass"]
//! "--max-running-requests" = { min = 64, max = 256, step = 64 }
//! "--disable-cuda-graph" = [false, true]
//! "--cuda-graph-max-bs" = [32, 160]
//! [[search.constraints]]
//! flag = "--cuda-graph-max-bs"
//! when = { "--disable-cuda-graph" = false }
//! ```

use std::collections::BTreeMap;

use toml::de::DeValue;

use super::walk::{Ctx, Table, as_f64, as_string, as_table, describe};
use super::{JobSpec, Levels, SpecError, parse::parse_ext};

/// One value a searched flag takes: `None` leaves the flag out (a switch off).
pub type FlagChoice = Option<String>;

/// A searched flag and its values, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchFlag {
    pub name: String,
    /// Each value as the flag's argument; `Some("")` never occurs: a switch on is `Some` of
    /// the empty marker [`SWITCH_ON`].
    pub values: Vec<FlagChoice>,
}

/// The value standing for a switch given without an argument (`--disable-cuda-graph`).
pub const SWITCH_ON: &str = "\u{1}on";

/// A flag that only applies when other flags have given values.
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    pub flag: String,
    /// flag -> required value (as in [`SearchFlag::values`]).
    pub when: BTreeMap<String, FlagChoice>,
}

/// How the space is searched.
#[derive(Debug, Clone, PartialEq)]
pub enum Strategy {
    /// Every candidate at the full budget.
    Grid,
    /// `budget` candidates drawn without replacement (seeded).
    Random { budget: u32, seed: u64 },
    /// Every candidate at a cheap rung; the best `1/eta` go on to the next rung, which runs
    /// `eta` times the requests; the last rung runs the spec's requests and repeats.
    SuccessiveHalving { eta: u32, rungs: u32 },
}

/// What a candidate is scored by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    /// Output tokens/s at the best level that meets the SLO.
    OutputTokensPerS,
    RequestsPerS,
    /// Output tokens/s divided by the GPUs the host has (1 when it has none).
    OutputTokensPerSPerGpu,
    /// Output tokens/s divided by the mean GPU power during the level (W, all the host's
    /// GPUs). Every host must report power: one without GPUs is refused before the search.
    OutputTokensPerSPerWatt,
    /// The highest concurrency that meets the SLO, found per config by bracketing and
    /// bisection between `[search.saturation]` `low` and `high`.
    Saturation,
}

impl Objective {
    pub fn name(self) -> &'static str {
        match self {
            Objective::OutputTokensPerS => "output_tokens_per_s",
            Objective::RequestsPerS => "requests_per_s",
            Objective::OutputTokensPerSPerGpu => "output_tokens_per_s_per_gpu",
            Objective::OutputTokensPerSPerWatt => "output_tokens_per_s_per_watt",
            Objective::Saturation => "saturation",
        }
    }
}

/// Bounds of a saturation search (concurrency).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Saturation {
    /// A level expected to meet the SLO (checked first).
    pub low: u32,
    /// Upper bound of the bracket.
    pub high: u32,
    /// Stop when the bracket is this narrow.
    pub resolution: u32,
}

/// A validated `[search]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchSpec {
    pub flags: Vec<SearchFlag>,
    pub constraints: Vec<Constraint>,
    pub strategy: Strategy,
    pub objective: Objective,
    pub saturation: Option<Saturation>,
}

/// Parses a tuning search: a job spec with exactly one `[[configs]]` and a `[search]` table.
pub fn parse_search(file_name: &str, text: &str) -> Result<(JobSpec, SearchSpec), Vec<SpecError>> {
    let (spec, search) = parse_ext(file_name, text, "search", |ctx, t| match t {
        Some(t) => search(ctx, &t),
        None => {
            ctx.error(
                None,
                "search",
                "missing: a [search] table with the flags to search",
            );
            None
        }
    })?;
    let mut errors = Vec::new();
    if spec.configs.len() != 1 {
        errors.push(SpecError {
            file: file_name.to_string(),
            line: 0,
            field: "configs".into(),
            message: format!(
                "a search starts from exactly one [[configs]] table (its flags are the fixed flags), got {}",
                spec.configs.len()
            ),
        });
    }
    if search.objective == Objective::Saturation
        && !matches!(spec.load.levels, Levels::Concurrency(_))
    {
        errors.push(SpecError {
            file: file_name.to_string(),
            line: 0,
            field: "load.concurrency".into(),
            message: "a saturation search varies the concurrency: give [load] concurrency (its list is what the search replaces)".into(),
        });
    }
    if errors.is_empty() {
        Ok((spec, search))
    } else {
        Err(errors)
    }
}

const KEYS: &[&str] = &[
    "strategy",
    "objective",
    "budget",
    "seed",
    "eta",
    "rungs",
    "flags",
    "constraints",
    "saturation",
];

fn search(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<SearchSpec> {
    t.check_keys(ctx, KEYS);
    let flags = match t.get("flags") {
        Some(_) => t.table(ctx, "flags").and_then(|f| flags(ctx, &f)),
        None => {
            t.missing(ctx, "flags", "the flags to search: [search.flags]");
            None
        }
    };
    let strategy = strategy(ctx, t);
    let objective = match t.get("objective") {
        None => Some(Objective::OutputTokensPerS),
        Some(v) => {
            let s = as_string(ctx, &t.field("objective"), v)?;
            let all = [
                Objective::OutputTokensPerS,
                Objective::RequestsPerS,
                Objective::OutputTokensPerSPerGpu,
                Objective::OutputTokensPerSPerWatt,
                Objective::Saturation,
            ];
            match all.into_iter().find(|o| o.name() == s) {
                Some(o) => Some(o),
                None => {
                    let names: Vec<_> = all.iter().map(|o| o.name()).collect();
                    let msg = format!("expected one of: {}, got {s:?}", names.join(", "));
                    ctx.error(Some(&v.span()), &t.field("objective"), msg);
                    None
                }
            }
        }
    };
    let saturation = match t.get("saturation") {
        None if objective == Some(Objective::Saturation) => {
            t.missing(
                ctx,
                "saturation",
                "the bracket of a saturation search: saturation = { low = 1, high = 512 }",
            );
            None
        }
        None => Some(None),
        Some(_) => t
            .table(ctx, "saturation")
            .and_then(|s| saturation(ctx, &s))
            .map(Some),
    };
    let constraints = match (t.get("constraints"), &flags) {
        (None, _) => Some(Vec::new()),
        (Some(_), Some(f)) => constraints(ctx, t, f),
        (Some(_), None) => None,
    };
    Some(SearchSpec {
        flags: flags?,
        constraints: constraints?,
        strategy: strategy?,
        objective: objective?,
        saturation: saturation?,
    })
}

fn strategy(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<Strategy> {
    let name = match t.get("strategy") {
        None => "grid".to_string(),
        Some(v) => as_string(ctx, &t.field("strategy"), v)?,
    };
    let only = |ctx: &mut Ctx, keys: &[&str], strat: &str| {
        for k in keys {
            if t.has(k) {
                let msg = format!("only applies to strategy = \"{strat}\"");
                ctx.error(Some(&t.key_span(k)), &t.field(k), msg);
            }
        }
    };
    match name.as_str() {
        "grid" => {
            only(ctx, &["budget", "seed"], "random");
            only(ctx, &["eta", "rungs"], "successive-halving");
            Some(Strategy::Grid)
        }
        "random" => {
            only(ctx, &["eta", "rungs"], "successive-halving");
            let budget = if t.has("budget") {
                t.u32(ctx, "budget", 1)
            } else {
                t.missing(ctx, "budget", "how many candidates to draw: budget = N");
                None
            };
            let seed = match t.get("seed") {
                Some(_) => t.u32(ctx, "seed", 0).map(u64::from),
                None => Some(0),
            };
            Some(Strategy::Random {
                budget: budget?,
                seed: seed?,
            })
        }
        "successive-halving" => {
            only(ctx, &["budget", "seed"], "random");
            let eta = match t.get("eta") {
                Some(_) => t.u32(ctx, "eta", 2),
                None => Some(3),
            };
            let rungs = match t.get("rungs") {
                Some(_) => t.u32(ctx, "rungs", 2),
                None => Some(3),
            };
            Some(Strategy::SuccessiveHalving {
                eta: eta?,
                rungs: rungs?,
            })
        }
        other => {
            let v = t.get("strategy")?;
            let msg =
                format!("expected \"grid\", \"random\" or \"successive-halving\", got {other:?}");
            ctx.error(Some(&v.span()), &t.field("strategy"), msg);
            None
        }
    }
}

fn flags(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<Vec<SearchFlag>> {
    let mut out = Vec::new();
    let mut ok = true;
    for (k, v) in t.map.iter() {
        let name = k.get_ref().to_string();
        let path = t.field(&name);
        if !name.starts_with('-') {
            let msg = format!("flag names start with \"-\" or \"--\" (\"--{name}\"?)");
            ctx.error(Some(&k.span()), &path, msg);
            ok = false;
            continue;
        }
        let values = match v.get_ref() {
            DeValue::Array(items) if items.is_empty() => {
                ctx.error(Some(&v.span()), &path, "must not be empty");
                None
            }
            DeValue::Array(items) => {
                let vals: Vec<Option<FlagChoice>> = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| choice(ctx, &format!("{path}[{i}]"), item))
                    .collect();
                vals.into_iter().collect::<Option<Vec<_>>>()
            }
            DeValue::Table(_) => as_table(ctx, &path, v).and_then(|r| range(ctx, &r)),
            other => {
                let msg = format!(
                    "expected a list of values ([false, true] for a switch) or a range {{ min, max, step }}, got {}",
                    describe(other)
                );
                ctx.error(Some(&v.span()), &path, msg);
                None
            }
        };
        match values {
            Some(mut values) => {
                let before = values.len();
                let mut seen = Vec::new();
                values.retain(|x| {
                    let new = !seen.contains(x);
                    seen.push(x.clone());
                    new
                });
                if values.len() != before {
                    ctx.error(Some(&v.span()), &path, "a value is listed twice");
                    ok = false;
                }
                out.push(SearchFlag { name, values });
            }
            None => ok = false,
        }
    }
    if out.is_empty() && ok {
        ctx.error(Some(&t.span), &t.path, "must name at least one flag");
        return None;
    }
    ok.then_some(out)
}

fn choice(ctx: &mut Ctx, path: &str, v: &super::walk::Val<'_>) -> Option<FlagChoice> {
    match v.get_ref() {
        DeValue::Boolean(true) => Some(Some(SWITCH_ON.to_string())),
        DeValue::Boolean(false) => Some(None),
        DeValue::String(s) => Some(Some(s.to_string())),
        DeValue::Integer(_) | DeValue::Float(_) => {
            let x = as_f64(ctx, path, v)?;
            Some(Some(number(x)))
        }
        other => {
            let msg = format!(
                "expected a string, a number or true/false, got {}",
                describe(other)
            );
            ctx.error(Some(&v.span()), path, msg);
            None
        }
    }
}

/// A number as a flag argument: integers without a fraction.
fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

fn range(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<Vec<FlagChoice>> {
    t.check_keys(ctx, &["min", "max", "step"]);
    let mut get = |k: &str| {
        if t.has(k) {
            t.f64(ctx, k)
        } else {
            t.missing(ctx, k, "a range needs min, max and step");
            None
        }
    };
    let (min, max, step) = (get("min"), get("max"), get("step"));
    let (min, max, step) = (min?, max?, step?);
    if step <= 0.0 {
        ctx.error(
            Some(&t.key_span("step")),
            &t.field("step"),
            format!("must be greater than 0, got {step}"),
        );
        return None;
    }
    if max < min {
        let msg = format!("max ({max}) is below min ({min})");
        ctx.error(Some(&t.key_span("max")), &t.field("max"), msg);
        return None;
    }
    let n = ((max - min) / step + 1e-9).floor() as u64 + 1;
    if n > 1000 {
        let msg = format!("{n} values; a range gives at most 1000 (raise step)");
        ctx.error(Some(&t.key_span("step")), &t.field("step"), msg);
        return None;
    }
    Some(
        (0..n)
            .map(|i| Some(number(min + step * i as f64)))
            .collect(),
    )
}

fn constraints(ctx: &mut Ctx, t: &Table<'_, '_>, flags: &[SearchFlag]) -> Option<Vec<Constraint>> {
    let items = t.list(ctx, "constraints")?;
    let path = t.field("constraints");
    let mut out = Vec::new();
    let mut ok = true;
    let names: Vec<&str> = flags.iter().map(|f| f.name.as_str()).collect();
    for (i, item) in items.iter().enumerate() {
        let Some(c) = as_table(ctx, &format!("{path}[{i}]"), item) else {
            ok = false;
            continue;
        };
        c.check_keys(ctx, &["flag", "when"]);
        let flag = c.required_string(ctx, "flag", "the flag this constraint limits");
        if let Some(f) = &flag
            && !names.contains(&f.as_str())
        {
            let msg = format!(
                "{f:?} is not a searched flag (one of: {})",
                names.join(", ")
            );
            ctx.error(Some(&c.get("flag")?.span()), &c.field("flag"), msg);
            ok = false;
        }
        let when = match c.get("when") {
            None => {
                c.missing(ctx, "when", "the condition: when = { \"--flag\" = value }");
                None
            }
            Some(_) => c.table(ctx, "when").and_then(|w| {
                let mut m = BTreeMap::new();
                let mut good = true;
                for (k, v) in w.map.iter() {
                    let name = k.get_ref().to_string();
                    let field = w.field(&name);
                    let Some(f) = flags.iter().find(|f| f.name == name) else {
                        let msg = format!("{name:?} is not a searched flag");
                        ctx.error(Some(&k.span()), &field, msg);
                        good = false;
                        continue;
                    };
                    match choice(ctx, &field, v) {
                        Some(val) if f.values.contains(&val) => {
                            m.insert(name, val);
                        }
                        Some(_) => {
                            let msg = format!(
                                "{} is not one of the values searched for {name}",
                                describe(v.get_ref())
                            );
                            ctx.error(Some(&v.span()), &field, msg);
                            good = false;
                        }
                        None => good = false,
                    }
                }
                good.then_some(m)
            }),
        };
        match (flag, when) {
            (Some(flag), Some(when)) => out.push(Constraint { flag, when }),
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

fn saturation(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<Saturation> {
    t.check_keys(ctx, &["low", "high", "resolution"]);
    let low = if t.has("low") {
        t.u32(ctx, "low", 1)
    } else {
        Some(1)
    };
    let high = if t.has("high") {
        t.u32(ctx, "high", 2)
    } else {
        t.missing(ctx, "high", "the top of the bracket: high = N");
        None
    };
    let resolution = if t.has("resolution") {
        t.u32(ctx, "resolution", 1)
    } else {
        Some(1)
    };
    let (low, high, resolution) = (low?, high?, resolution?);
    if high <= low {
        let msg = format!("high ({high}) must be above low ({low})");
        ctx.error(Some(&t.key_span("high")), &t.field("high"), msg);
        return None;
    }
    Some(Saturation {
        low,
        high,
        resolution,
    })
}

/// A flag set's text for a candidate's TOML: `SWITCH_ON` becomes `true`.
pub fn toml_flag_value(v: &str) -> toml::Value {
    if v == SWITCH_ON {
        toml::Value::Boolean(true)
    } else {
        toml::Value::String(v.to_string())
    }
}
