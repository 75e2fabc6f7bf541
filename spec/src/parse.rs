//! The top of a spec: job fields, `[hosts]`, `[load]`, and the tables later work adds.

use std::collections::BTreeMap;
use std::time::Duration;

use toml::de::DeTable;

use super::walk::{Ctx, Table, as_f64, as_string, as_u32};
use super::{
    Bound, HostSelector, JobSpec, Levels, LoadSpec, Order, Slo, SpecError, configs, workloads,
};

const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "repeats",
    "order",
    "order_seed",
    "hosts",
    "configs",
    "workloads",
    "load",
    "search",
    "suite",
];

/// Parses and validates a job spec. On failure returns every problem found, sorted by line.
/// `file_name` only labels the errors.
pub fn parse(file_name: &str, text: &str) -> Result<JobSpec, Vec<SpecError>> {
    parse_ext(file_name, text, "", |_, _| Some(())).map(|(spec, ())| spec)
}

/// Parses a spec that may carry the extension table `key` (`search`, `suite`; "" for none),
/// read by `ext` (given the table when present) with its errors located like the rest.
pub(crate) fn parse_ext<T>(
    file_name: &str,
    text: &str,
    key: &str,
    ext: impl FnOnce(&mut Ctx, Option<Table<'_, '_>>) -> Option<T>,
) -> Result<(JobSpec, T), Vec<SpecError>> {
    let mut ctx = Ctx::new(file_name, text);
    let (doc, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        for e in &syntax {
            let msg = e.message().trim().replace('\n', "; ");
            ctx.error(e.span().as_ref(), "", format!("invalid TOML: {msg}"));
        }
        return Err(finish(ctx.errors));
    }
    let root = Table {
        map: doc.get_ref(),
        span: doc.span(),
        path: String::new(),
    };
    let spec = job(&mut ctx, &root, key);
    if let Some(spec) = &spec {
        super::bounds::check(&mut ctx, &root, spec);
    }
    let table = match root.get(key) {
        Some(_) if !key.is_empty() => root.table(&mut ctx, key),
        _ => None,
    };
    let extra = ext(&mut ctx, table);
    match (spec, extra) {
        (Some(spec), Some(extra)) if ctx.errors.is_empty() => Ok((spec, extra)),
        _ => Err(finish(ctx.errors)),
    }
}

fn finish(mut errors: Vec<SpecError>) -> Vec<SpecError> {
    errors.sort_by_key(|e| e.line);
    errors.dedup();
    errors
}

fn job(ctx: &mut Ctx, root: &Table<'_, '_>, allowed: &str) -> Option<JobSpec> {
    root.check_keys(ctx, TOP_KEYS);
    reserved(ctx, root, allowed);
    let name = root.required_string(ctx, "name", "a name for the job");
    let description = root.string(ctx, "description").unwrap_or_default();
    let repeats = if root.has("repeats") {
        root.u32(ctx, "repeats", 1)
    } else {
        Some(1)
    };
    let order = order(ctx, root);
    let hosts = match root.get("hosts") {
        Some(_) => root.table(ctx, "hosts").and_then(|t| hosts(ctx, &t)),
        None => Some(HostSelector::default()),
    };
    let configs = configs::configs(ctx, root);
    let workloads = workloads::workloads(ctx, root);
    let load = match root.get("load") {
        Some(_) => root.table(ctx, "load").and_then(|t| load(ctx, &t)),
        None => {
            root.missing(ctx, "load", "a [load] table with the load levels");
            None
        }
    };
    if let (Some(cs), Some(h)) = (&configs, &hosts)
        && let Some(c) = cs.iter().find(|c| c.target.is_some())
    {
        if h.names.is_empty() {
            let msg = format!(
                "config {:?} is an external target: name the agent hosts that drive its load \
                 (hosts.names), so the load never comes from an arbitrary GPU host",
                c.name
            );
            ctx.error(None, "hosts.names", msg);
        }
        if let Some(l) = &load
            && l.reset_cache
        {
            let msg = format!(
                "config {:?} is an external target, whose cache fleetbench cannot empty",
                c.name
            );
            ctx.error(None, "load.reset_cache", msg);
        }
    }
    Some(JobSpec {
        name: name?,
        description,
        repeats: repeats?,
        order: order?,
        hosts: hosts?,
        configs: configs?,
        workloads: workloads?,
        load: load?,
    })
}

/// Tables another reader takes (`parse_ext` with that key); refused by name here so that a
/// suite or a search never half-runs as a plain job.
fn reserved(ctx: &mut Ctx, root: &Table<'_, '_>, allowed: &str) {
    for (key, msg) in [
        (
            "search",
            "tuning searches ([search]) are not supported by this version yet",
        ),
        (
            "suite",
            "this is a regression suite: run it with `fleetbench regress`, not as a job",
        ),
    ] {
        if root.has(key) && key != allowed {
            ctx.error(Some(&root.key_span(key)), key, msg);
        }
    }
}

fn order(ctx: &mut Ctx, root: &Table<'_, '_>) -> Option<Order> {
    let seed = match root.get("order_seed") {
        Some(sv) => {
            let n = as_f64(ctx, "order_seed", sv)?;
            if !(n >= 0.0 && n.fract() == 0.0 && n < 9.0e15) {
                ctx.error(
                    Some(&sv.span()),
                    "order_seed",
                    format!("expected a non-negative integer, got {n}"),
                );
                return None;
            }
            Some(n as u64)
        }
        None => None,
    };
    // Absent: blocked, the default (its seed may still be pinned).
    let word = match root.get("order") {
        Some(v) => as_string(ctx, "order", v)?,
        None => "blocked".to_string(),
    };
    let order = match word.as_str() {
        "interleaved" => Order::Interleaved,
        "sequential" => Order::Sequential,
        "blocked" => Order::Blocked { seed },
        other => {
            let msg =
                format!("expected \"interleaved\", \"sequential\" or \"blocked\", got {other:?}");
            let span = root.get("order").map(|v| v.span());
            ctx.error(span.as_ref(), "order", msg);
            return None;
        }
    };
    if seed.is_some() && !order.is_blocked() {
        let msg = "only applies to order = \"blocked\" (the other orders are not shuffled)";
        ctx.error(Some(&root.key_span("order_seed")), "order_seed", msg);
        return None;
    }
    Some(order)
}

fn hosts(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<HostSelector> {
    t.check_keys(ctx, &["names", "labels", "gpu_model", "gpu_count"]);
    let names = if t.has("names") {
        t.string_list(ctx, "names")
    } else {
        Some(Vec::new())
    };
    let labels = match t.get("labels") {
        Some(_) => t.table(ctx, "labels").and_then(|l| string_map(ctx, &l)),
        None => Some(BTreeMap::new()),
    };
    let gpu_model = match t.get("gpu_model") {
        Some(_) => t.string(ctx, "gpu_model").map(Some),
        None => Some(None),
    };
    let gpu_count = match t.get("gpu_count") {
        Some(_) => t.u32(ctx, "gpu_count", 1).map(Some),
        None => Some(None),
    };
    Some(HostSelector {
        names: names?,
        labels: labels?,
        gpu_model: gpu_model?,
        gpu_count: gpu_count?,
    })
}

/// A table whose values are strings (labels, env). Numbers and booleans are accepted and kept
/// as written, since `CUDA_LAUNCH_BLOCKING = 1` is what people type.
pub(crate) fn string_map(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<BTreeMap<String, String>> {
    use toml::de::DeValue;
    let mut out = BTreeMap::new();
    let mut ok = true;
    for (k, v) in t.map.iter() {
        let key = k.get_ref().to_string();
        let value = match v.get_ref() {
            DeValue::String(s) => s.to_string(),
            DeValue::Integer(i) => i.to_string(),
            DeValue::Float(f) => f.to_string(),
            DeValue::Boolean(b) => b.to_string(),
            other => {
                let msg = format!("expected a string, got {}", super::walk::describe(other));
                ctx.error(Some(&v.span()), &t.field(&key), msg);
                ok = false;
                continue;
            }
        };
        out.insert(key, value);
    }
    ok.then_some(out)
}

const LOAD_KEYS: &[&str] = &[
    "concurrency",
    "request_rate",
    "max_concurrency",
    "burstiness",
    "warmup",
    "requests",
    "duration",
    "percentiles",
    "slo",
    "ramp_up",
    "window",
    "reset_cache",
    "clients",
];

fn load(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<LoadSpec> {
    t.check_keys(ctx, LOAD_KEYS);
    let levels = levels(ctx, t);
    let warmup = if t.has("warmup") {
        t.u32(ctx, "warmup", 0)
    } else {
        Some(0)
    };
    let bound = bound(ctx, t);
    let percentiles = percentiles(ctx, t);
    let slo = match t.get("slo") {
        Some(_) => t.table(ctx, "slo").and_then(|s| slo(ctx, &s)),
        None => Some(Slo::default()),
    };
    let ramp_up = match t.get("ramp_up") {
        Some(_) => duration(ctx, t, "ramp_up", true),
        None => Some(Duration::ZERO),
    };
    let window = match t.get("window") {
        Some(_) => duration(ctx, t, "window", false).map(Some),
        None => Some(None),
    };
    let reset_cache = match t.get("reset_cache") {
        Some(_) => t.bool(ctx, "reset_cache"),
        None => Some(false),
    };
    let clients = if t.has("clients") {
        t.u32(ctx, "clients", 1)
    } else {
        Some(1)
    };
    let (ramp_up, window) = (ramp_up?, window?);
    Some(LoadSpec {
        levels: levels?,
        warmup: warmup?,
        bound: bound?,
        percentiles: percentiles?,
        slo: slo?,
        steady: t.has("ramp_up") || window.is_some(),
        ramp_up,
        window,
        reset_cache: reset_cache?,
        clients: clients?,
    })
}

/// A duration field such as `"30s"`; `zero_ok`: whether `"0s"` is allowed.
fn duration(ctx: &mut Ctx, t: &Table<'_, '_>, key: &str, zero_ok: bool) -> Option<Duration> {
    let v = t.get(key)?;
    let field = t.field(key);
    let text = as_string(ctx, &field, v)?;
    match humantime::parse_duration(&text) {
        Ok(d) if zero_ok || !d.is_zero() => Some(d),
        Ok(_) => {
            ctx.error(Some(&v.span()), &field, "must be longer than 0s");
            None
        }
        Err(e) => {
            let msg = format!("expected a duration such as \"30s\" or \"2m\", got {text:?} ({e})");
            ctx.error(Some(&v.span()), &field, msg);
            None
        }
    }
}

fn levels(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<Levels> {
    match (t.has("concurrency"), t.has("request_rate")) {
        (true, true) => {
            let msg = "give either concurrency (closed loop) or request_rate (open loop), not both";
            ctx.error(
                Some(&t.key_span("request_rate")),
                &t.field("request_rate"),
                msg,
            );
            None
        }
        (false, false) => {
            let what = "the load levels: concurrency = [...] or request_rate = [...]";
            t.missing(ctx, "concurrency", what);
            None
        }
        (true, false) => {
            for key in ["max_concurrency", "burstiness"] {
                if t.has(key) {
                    let msg = "only applies to request_rate levels (concurrency is already a cap)";
                    ctx.error(Some(&t.key_span(key)), &t.field(key), msg);
                }
            }
            let items = t.list(ctx, "concurrency")?;
            let path = t.field("concurrency");
            let values: Vec<_> = items
                .iter()
                .enumerate()
                .map(|(i, v)| as_u32(ctx, &format!("{path}[{i}]"), v, 1))
                .collect();
            let values: Vec<u32> = values.into_iter().collect::<Option<_>>()?;
            no_repeats(ctx, t, "concurrency", &values)?;
            Some(Levels::Concurrency(values))
        }
        (false, true) => {
            let items = t.list(ctx, "request_rate")?;
            let path = t.field("request_rate");
            let values: Vec<_> = items
                .iter()
                .enumerate()
                .map(|(i, v)| super::walk::positive_f64(ctx, &format!("{path}[{i}]"), v))
                .collect();
            let max_concurrency = match t.get("max_concurrency") {
                Some(_) => t.u32(ctx, "max_concurrency", 1).map(Some),
                None => Some(None),
            };
            let burstiness = match t.get("burstiness") {
                Some(_) => t.positive_f64(ctx, "burstiness"),
                None => Some(1.0),
            };
            let rates: Vec<f64> = values.into_iter().collect::<Option<_>>()?;
            no_repeats(ctx, t, "request_rate", &rates)?;
            Some(Levels::RequestRate {
                rates,
                max_concurrency: max_concurrency?,
                burstiness: burstiness?,
            })
        }
    }
}

/// A level listed twice would be stored under the same key as its twin.
fn no_repeats<T: PartialEq + std::fmt::Display>(
    ctx: &mut Ctx,
    t: &Table<'_, '_>,
    key: &str,
    values: &[T],
) -> Option<()> {
    let mut ok = true;
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            let span = t
                .get(key)
                .and_then(|l| l.get_ref().as_array().map(|a| a[i].span()));
            let msg = format!("level {v} is listed twice");
            ctx.error(span.as_ref(), &format!("{}[{i}]", t.field(key)), msg);
            ok = false;
        }
    }
    ok.then_some(())
}

fn bound(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<Bound> {
    match (t.has("requests"), t.has("duration")) {
        (true, true) => {
            let msg = "give either requests or duration per level, not both";
            ctx.error(Some(&t.key_span("duration")), &t.field("duration"), msg);
            None
        }
        (false, false) => {
            let what = "how long each level runs: requests = N or duration = \"60s\"";
            t.missing(ctx, "requests", what);
            None
        }
        (true, false) => t.u32(ctx, "requests", 1).map(Bound::Requests),
        (false, true) => {
            let v = t.get("duration")?;
            let field = t.field("duration");
            let text = as_string(ctx, &field, v)?;
            match humantime::parse_duration(&text) {
                Ok(d) if !d.is_zero() => Some(Bound::Duration(d)),
                Ok(_) => {
                    ctx.error(Some(&v.span()), &field, "must be longer than 0s");
                    None
                }
                Err(e) => {
                    let msg = format!(
                        "expected a duration such as \"30s\" or \"2m\", got {text:?} ({e})"
                    );
                    ctx.error(Some(&v.span()), &field, msg);
                    None
                }
            }
        }
    }
}

fn percentiles(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<Vec<f64>> {
    let mut out = vec![50.0, 99.0];
    if t.has("percentiles") {
        let items = t.list(ctx, "percentiles")?;
        let path = t.field("percentiles");
        let mut ok = true;
        for (i, v) in items.iter().enumerate() {
            let field = format!("{path}[{i}]");
            match as_f64(ctx, &field, v) {
                Some(p) if p > 0.0 && p < 100.0 => out.push(p),
                Some(p) => {
                    let msg = format!("a percentile is between 0 and 100 (exclusive), got {p}");
                    ctx.error(Some(&v.span()), &field, msg);
                    ok = false;
                }
                None => ok = false,
            }
        }
        if !ok {
            return None;
        }
    } else {
        out.extend([90.0, 95.0]);
    }
    out.sort_by(f64::total_cmp);
    out.dedup();
    Some(out)
}

fn slo(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<Slo> {
    if t.has("itl_ms") {
        // It meant a request's TPOT in goodput and the p99 of per-token ITL in tuning.
        let msg = "itl_ms is no longer accepted: it meant two different figures. Write \
                   tpot_ms (each request's time per output token, for goodput) and/or \
                   itl_p99_ms (the level's p99 of per-token inter-token latency, for tuning)";
        ctx.error(Some(&t.key_span("itl_ms")), &t.field("itl_ms"), msg);
        return None;
    }
    t.check_keys(
        ctx,
        &[
            "ttft_ms",
            "tpot_ms",
            "itl_p99_ms",
            "e2e_ms",
            "max_error_rate",
        ],
    );
    let mut get = |key: &str| match t.get(key) {
        Some(_) => t.positive_f64(ctx, key).map(Some),
        None => Some(None),
    };
    let ttft_ms = get("ttft_ms");
    let tpot_ms = get("tpot_ms");
    let itl_ms = get("itl_p99_ms");
    let e2e_ms = get("e2e_ms");
    let max_error_rate = match t.get("max_error_rate") {
        None => Some(super::DEFAULT_MAX_ERROR_RATE),
        Some(v) => match t.f64(ctx, "max_error_rate") {
            Some(r) if (0.0..=1.0).contains(&r) => Some(r),
            Some(r) => {
                let msg = format!(
                    "an error rate is a share of requests, between 0 and 1 (0.01 = one in a \
                     hundred), got {r}"
                );
                ctx.error(Some(&v.span()), &t.field("max_error_rate"), msg);
                None
            }
            None => None,
        },
    };
    Some(Slo {
        ttft_ms: ttft_ms?,
        itl_ms: itl_ms?,
        e2e_ms: e2e_ms?,
        tpot_ms: tpot_ms?,
        max_error_rate: max_error_rate?,
    })
}
