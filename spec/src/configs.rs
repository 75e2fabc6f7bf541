//! `[[configs]]`: engine configs, `extends` inheritance and flag checking.

use std::collections::BTreeMap;

use fleetbench_engines::{EngineKind, config_id};
use fleetbench_proto::limits::{self as lim, check_u32};
use toml::de::DeValue;

use super::ConfigSpec;
use super::deployment::{RawRouter, Written, deployment, id_suffix, merge_router, raw_router};
use super::flags;
use super::parse::string_map;
use super::target::ExternalTarget;
use super::walk::{Ctx, Span, Table, as_table, describe, suggest};

const CONFIG_KEYS: &[&str] = &[
    "name",
    "description",
    "engine",
    "profile",
    "model",
    "extends",
    "flags",
    "env",
    "target",
    "nodes",
    "replicas",
    "router",
];

/// A flag's value as written. `false` is kept (not dropped) so that it can switch off a flag
/// inherited through `extends`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FlagVal {
    Value(String),
    On,
    Off,
}

/// Where something was written, for errors about it after inheritance.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub(crate) key_span: Span,
    pub(crate) value_span: Span,
    pub(crate) path: String,
}

/// One `[[configs]]` table as written, before `extends` is applied.
struct RawConfig {
    name: Option<String>,
    name_span: Span,
    table_span: Span,
    path: String,
    engine: Option<EngineKind>,
    /// `engine` is written, valid or not (an invalid one is already reported).
    engine_written: bool,
    profile: Option<String>,
    model: Option<String>,
    extends: Option<(String, Span)>,
    flags: BTreeMap<String, (FlagVal, Origin)>,
    env: BTreeMap<String, String>,
    target: Option<ExternalTarget>,
    /// `target` is written, valid or not (an invalid one is already reported).
    target_written: bool,
    /// `nodes`, with where it was written.
    nodes: Option<(u32, Span)>,
    /// `replicas`, with where it was written.
    replicas: Option<(u32, Span)>,
    router: Option<RawRouter>,
    /// Some field could not be read; its error is already recorded.
    broken: bool,
}

/// A config with its ancestors' fields merged in.
#[derive(Default, Clone)]
struct Merged {
    engine: Option<EngineKind>,
    engine_written: bool,
    profile: Option<String>,
    model: Option<String>,
    flags: BTreeMap<String, (FlagVal, Origin)>,
    env: BTreeMap<String, String>,
    target: Option<ExternalTarget>,
    target_written: bool,
    nodes: Option<(u32, Span)>,
    replicas: Option<(u32, Span)>,
    router: Option<RawRouter>,
    broken: bool,
}

pub(crate) fn configs(ctx: &mut Ctx, root: &Table<'_, '_>) -> Option<Vec<ConfigSpec>> {
    if !root.has("configs") {
        root.missing(ctx, "configs", "at least one [[configs]] table");
        return None;
    }
    let items = root.list(ctx, "configs")?;
    let mut raws = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("configs[{i}]");
        match as_table(ctx, &path, item) {
            Some(t) => raws.push(raw_config(ctx, &t)),
            None => return None,
        }
    }
    let mut ok = duplicate_names(ctx, &raws);
    // (index in the file, config), to name the twin of a config that changes nothing.
    let mut out: Vec<(usize, ConfigSpec)> = Vec::new();
    for i in 0..raws.len() {
        let mut stack = Vec::new();
        let Some(merged) = merge(ctx, &raws, i, &mut stack) else {
            ok = false;
            continue;
        };
        let Some(c) = finish(ctx, &raws[i], merged) else {
            ok = false;
            continue;
        };
        if let Some((j, twin)) = out.iter().find(|(_, o)| o.config_id == c.config_id) {
            let msg = format!(
                "same engine, model, flags and env as configs[{j}] ({:?}); a config must differ from the others",
                twin.name
            );
            ctx.error(
                Some(&raws[i].name_span),
                &format!("{}.name", raws[i].path),
                msg,
            );
            ok = false;
        }
        out.push((i, c));
    }
    ok.then(|| out.into_iter().map(|(_, c)| c).collect())
}

fn raw_config(ctx: &mut Ctx, t: &Table<'_, '_>) -> RawConfig {
    t.check_keys(ctx, CONFIG_KEYS);
    let errors_before = ctx.errors.len();
    let name = t.required_string(ctx, "name", "a name for the config");
    let engine = t.get("engine").and_then(|v| {
        let s = super::walk::as_string(ctx, &t.field("engine"), v)?;
        match s.parse::<EngineKind>() {
            // A router is the front of a deployment: the config's `router`, with `replicas`.
            Ok(k) if fleetbench_engines::defaults(k).router => {
                let msg = format!(
                    "{k} is a router, not an engine: a config runs it in front of replicas of an \
                     engine (engine = \"llamacpp\", replicas = 2, router = {{ engine = \"{k}\" }}; \
                     see docs/deployments.md)"
                );
                ctx.error(Some(&v.span()), &t.field("engine"), msg);
                None
            }
            Ok(k) => Some(k),
            Err(e) => {
                ctx.error(Some(&v.span()), &t.field("engine"), e.to_string());
                None
            }
        }
    });
    let profile = t.string(ctx, "profile");
    let model = t.string(ctx, "model");
    let extends = t.get("extends").and_then(|v| {
        let s = super::walk::as_string(ctx, &t.field("extends"), v)?;
        Some((s, v.span()))
    });
    let flags = match t.table(ctx, "flags") {
        Some(ft) => raw_flags(ctx, &ft),
        None => BTreeMap::new(),
    };
    let env = t
        .table(ctx, "env")
        .and_then(|e| {
            env_names(ctx, &e);
            string_map(ctx, &e)
        })
        .unwrap_or_default();
    let target = t
        .table(ctx, "target")
        .and_then(|tt| super::target::target(ctx, &tt));
    let nodes = t
        .u32(ctx, "nodes", 0)
        .and_then(|n| Some((n, t.get("nodes")?.span())));
    let replicas = t
        .u32(ctx, "replicas", 0)
        .and_then(|n| Some((n, t.get("replicas")?.span())));
    let router = raw_router(ctx, t);
    RawConfig {
        name,
        name_span: t.key_span("name"),
        table_span: t.span.clone(),
        path: t.path.clone(),
        engine,
        engine_written: t.has("engine"),
        profile,
        model,
        extends,
        flags,
        env,
        target,
        target_written: t.has("target"),
        nodes,
        replicas,
        router,
        broken: ctx.errors.len() > errors_before,
    }
}

/// Names a process environment can hold portably (`NAME=value` breaks on `=` and NUL, and
/// shells cannot export a name starting with a digit).
fn env_names(ctx: &mut Ctx, t: &Table<'_, '_>) {
    for (k, _) in t.map.iter() {
        let name = k.get_ref().as_ref();
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            let msg = "not a valid environment variable name (letters, digits and _, not starting with a digit)";
            ctx.error(Some(&k.span()), &t.field(name), msg);
        }
    }
}

pub(crate) fn raw_flags(ctx: &mut Ctx, t: &Table<'_, '_>) -> BTreeMap<String, (FlagVal, Origin)> {
    let mut out = BTreeMap::new();
    for (k, v) in t.map.iter() {
        let name = k.get_ref().to_string();
        let path = t.field(&name);
        let value = match v.get_ref() {
            DeValue::String(s) => FlagVal::Value(s.to_string()),
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => FlagVal::Value(n.to_string()),
                Err(_) => FlagVal::Value(i.to_string()),
            },
            DeValue::Float(f) => FlagVal::Value(f.to_string()),
            DeValue::Boolean(true) => FlagVal::On,
            DeValue::Boolean(false) => FlagVal::Off,
            other => {
                let msg = format!(
                    "expected a string, a number, or true/false to switch a flag on/off, got {}",
                    describe(other)
                );
                ctx.error(Some(&v.span()), &path, msg);
                continue;
            }
        };
        if !name.starts_with('-') {
            let msg = format!(
                "flag names start with \"-\" or \"--\", as on the command line (\"--{name}\"?)"
            );
            ctx.error(Some(&k.span()), &path, msg);
            continue;
        }
        let origin = Origin {
            key_span: k.span(),
            value_span: v.span(),
            path,
        };
        out.insert(name, (value, origin));
    }
    out
}

fn duplicate_names(ctx: &mut Ctx, raws: &[RawConfig]) -> bool {
    let mut ok = true;
    for (i, r) in raws.iter().enumerate() {
        let Some(name) = &r.name else { continue };
        if let Some(j) = raws[..i].iter().position(|o| o.name.as_ref() == Some(name)) {
            let msg = format!("duplicate config name {name:?} (also configs[{j}])");
            ctx.error(Some(&r.name_span), &format!("{}.name", r.path), msg);
            ok = false;
        }
    }
    ok
}

/// Applies `extends` chains; `stack` holds the configs being resolved, to catch cycles.
fn merge(ctx: &mut Ctx, raws: &[RawConfig], i: usize, stack: &mut Vec<usize>) -> Option<Merged> {
    let raw = &raws[i];
    let mut merged = match &raw.extends {
        None => Merged::default(),
        Some((base_name, span)) => {
            let field = format!("{}.extends", raw.path);
            let Some(base) = raws.iter().position(|r| r.name.as_ref() == Some(base_name)) else {
                let names = raws.iter().filter_map(|r| r.name.as_deref());
                let msg = match suggest(base_name, names) {
                    Some(s) => format!("no config named {base_name:?} (did you mean {s:?}?)"),
                    None => format!("no config named {base_name:?}"),
                };
                ctx.error(Some(span), &field, msg);
                return None;
            };
            if base == i || stack.contains(&base) {
                let mut chain: Vec<&str> = stack
                    .iter()
                    .chain([&i])
                    .map(|&j| raws[j].name.as_deref().unwrap_or("?"))
                    .collect();
                chain.push(base_name);
                let start = chain.iter().position(|n| n == base_name).unwrap_or(0);
                let msg = format!("extends forms a cycle: {}", chain[start..].join(" -> "));
                ctx.error(Some(span), &field, msg);
                return None;
            }
            stack.push(i);
            let base = merge(ctx, raws, base, stack);
            stack.pop();
            base?
        }
    };
    merged.broken |= raw.broken;
    merged.engine_written |= raw.engine_written;
    if raw.engine.is_some() {
        merged.engine = raw.engine;
    }
    if raw.profile.is_some() {
        merged.profile.clone_from(&raw.profile);
    }
    if raw.model.is_some() {
        merged.model.clone_from(&raw.model);
    }
    for (k, v) in &raw.flags {
        merged.flags.insert(k.clone(), v.clone());
    }
    for (k, v) in &raw.env {
        merged.env.insert(k.clone(), v.clone());
    }
    if raw.target.is_some() {
        merged.target.clone_from(&raw.target);
    }
    merged.target_written |= raw.target_written;
    if raw.nodes.is_some() {
        merged.nodes.clone_from(&raw.nodes);
    }
    if raw.replicas.is_some() {
        merged.replicas.clone_from(&raw.replicas);
    }
    merge_router(&mut merged.router, &raw.router);
    Some(merged)
}

fn finish(ctx: &mut Ctx, raw: &RawConfig, merged: Merged) -> Option<ConfigSpec> {
    let name = raw.name.clone()?;
    if merged.target.is_none() && merged.target_written {
        // Its errors are already reported; an engine's missing keys would only add noise.
        return None;
    }
    if let Some(target) = merged.target {
        return finish_external(ctx, raw, name, merged.engine, merged.model, target, {
            let mut owned = Vec::new();
            if merged.nodes.is_some() {
                owned.push("nodes");
            }
            if merged.replicas.is_some() {
                owned.push("replicas");
            }
            if merged.router.is_some() {
                owned.push("router");
            }
            if merged.profile.is_some() {
                owned.push("profile");
            }
            if !merged.flags.is_empty() {
                owned.push("flags");
            }
            if !merged.env.is_empty() {
                owned.push("env");
            }
            owned
        });
    }
    let Some(kind) = merged.engine else {
        if merged.engine_written {
            return None;
        }
        // A router is no config's engine (see `raw_config`).
        let kinds: Vec<_> = EngineKind::ALL
            .iter()
            .filter(|k| !fleetbench_engines::defaults(**k).router)
            .map(|k| k.as_str())
            .collect();
        let msg = format!("missing: the engine kind, one of: {}", kinds.join(", "));
        ctx.error(Some(&raw.table_span), &format!("{}.engine", raw.path), msg);
        return None;
    };
    let Some(model) = merged.model.filter(|m| !m.trim().is_empty()) else {
        let msg = "missing: the model (a path or name the engine loads)";
        ctx.error(Some(&raw.table_span), &format!("{}.model", raw.path), msg);
        return None;
    };
    let default_profile = merged.profile.as_deref().is_none_or(|p| p == kind.as_str());
    let (flags, flags_ok) = checked_flags(ctx, kind, default_profile, &merged.flags);
    let mut ok = !merged.broken && flags_ok;
    let nodes = match nodes(ctx, raw, kind, merged.nodes.as_ref()) {
        Some(n) => n,
        None => {
            ok = false;
            1
        }
    };
    let deployment = deployment(
        ctx,
        Written {
            path: &raw.path,
            table_span: &raw.table_span,
            replicas: merged.replicas.as_ref(),
            router: merged.router.as_ref(),
            nodes,
        },
    );
    if !ok {
        return None;
    }
    let deployment = deployment.ok()?;
    let mut config_id = config_id(kind, &model, &flags, &merged.env);
    // The same flags on more hosts are another config: the rank count is part of its identity
    // (each rank's engine still has the flags' id, which the agent reports). So are a
    // deployment's replica count and router.
    if nodes > 1 {
        config_id.push_str(&format!("-{nodes}n"));
    }
    if let Some(d) = &deployment {
        config_id.push_str(&id_suffix(d));
    }
    Some(ConfigSpec {
        name,
        kind,
        profile: merged.profile.unwrap_or_else(|| kind.as_str().to_string()),
        model,
        flags,
        env: merged.env,
        config_id,
        target: None,
        nodes,
        deployment,
    })
}

/// Flags as written, checked against `kind`'s rules (each refusal recorded by field, with
/// whether all passed); `false` drops an inherited flag.
pub(crate) fn checked_flags(
    ctx: &mut Ctx,
    kind: EngineKind,
    default_profile: bool,
    written: &BTreeMap<String, (FlagVal, Origin)>,
) -> (Vec<(String, Option<String>)>, bool) {
    let mut ok = true;
    let mut out = Vec::new();
    for (flag, (value, origin)) in written {
        let value = match value {
            FlagVal::Off => continue,
            FlagVal::On => None,
            FlagVal::Value(v) => Some(v.clone()),
        };
        if let Err(problem) = flags::check(kind, default_profile, flag, value.as_deref()) {
            let span = if problem.about_name {
                &origin.key_span
            } else {
                &origin.value_span
            };
            ctx.error(Some(span), &origin.path, problem.message);
            ok = false;
        }
        out.push((flag.clone(), value));
    }
    (out, ok)
}

/// `nodes`: within its bounds, and above 1 only for an engine that can span hosts.
fn nodes(
    ctx: &mut Ctx,
    raw: &RawConfig,
    kind: EngineKind,
    written: Option<&(u32, Span)>,
) -> Option<u32> {
    let Some((n, span)) = written else {
        return Some(1);
    };
    let field = format!("{}.nodes", raw.path);
    if let Err(msg) = check_u32(*n, lim::NODES) {
        ctx.error(Some(span), &field, msg);
        return None;
    }
    if *n > 1 && !fleetbench_engines::gang::spans_hosts(kind) {
        let msg = format!(
            "engine {kind} cannot span hosts: nodes = {n} needs sglang, vllm or sim (a rank per \
             host, started with the engine's own rendezvous flags)"
        );
        ctx.error(Some(span), &field, msg);
        return None;
    }
    Some(*n)
}

/// A config that is an external target: no engine is started, so whatever would configure
/// one (`profile`, `flags`, `env`) is an error naming the field; `engine` only says how to
/// read the target's metrics (default `generic`), `model` is optional.
fn finish_external(
    ctx: &mut Ctx,
    raw: &RawConfig,
    name: String,
    engine: Option<EngineKind>,
    model: Option<String>,
    target: ExternalTarget,
    owned: Vec<&str>,
) -> Option<ConfigSpec> {
    for f in &owned {
        let msg = format!(
            "a config with a target starts no engine, so it takes no {f} (the endpoint is \
             configured where it runs)"
        );
        ctx.error(Some(&raw.table_span), &format!("{}.{f}", raw.path), msg);
    }
    if !owned.is_empty() || raw.broken {
        return None;
    }
    let kind = engine.unwrap_or(EngineKind::Generic);
    let model = model.unwrap_or_default();
    let config_id = config_id(kind, &model, &target.identity(), &BTreeMap::new());
    Some(ConfigSpec {
        name,
        kind,
        profile: String::new(),
        model,
        flags: Vec::new(),
        env: BTreeMap::new(),
        config_id,
        target: Some(target),
        nodes: 1,
        deployment: None,
    })
}
