//! A config's deployment: `replicas = N` of its engine behind a router (`[configs.router]`).
//!
//! ```toml
//! [[configs]]
//! name = "cache-aware"
//! engine = "llamacpp"
//! model = "/models/m.gguf"
//! replicas = 2
//! router = { engine = "sglang-router", profile = "router", flags = { "--policy" = "cache_aware" } }
//! ```
//!
//! The router is an engine kind of its own whose agent profile allowlists the replicas it may
//! front; its flags are checked against its own rules here as an engine's are, and are part of
//! the config's identity with the replica count (two policies over the same replicas are two
//! configs a job compares). `extends` merges `router` field by field and its flags by name, so
//! a config can change the policy alone.

use std::collections::BTreeMap;

use fleetbench_engines::{EngineKind, config_id};
use fleetbench_proto::limits::{self as lim, check_u32};

use super::configs::{FlagVal, Origin, checked_flags, raw_flags};
use super::walk::{Ctx, Span, Table};
use super::{DeploymentSpec, RouterSpec};

const ROUTER_KEYS: &[&str] = &["engine", "profile", "flags"];

/// `router` as written (before `extends` is applied), or merged from a config's ancestors.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawRouter {
    kind: Option<EngineKind>,
    /// `engine` is written, valid or not (an invalid one is already reported).
    kind_written: bool,
    profile: Option<String>,
    flags: BTreeMap<String, (FlagVal, Origin)>,
    /// Where the `router` table was written, for errors about it as a whole.
    span: Option<Span>,
}

/// Reads `router`; `None` when the config has none.
pub(crate) fn raw_router(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<RawRouter> {
    let rt = t.table(ctx, "router")?;
    rt.check_keys(ctx, ROUTER_KEYS);
    let kind = rt.get("engine").and_then(|v| {
        let field = rt.field("engine");
        let s = super::walk::as_string(ctx, &field, v)?;
        match s.parse::<EngineKind>() {
            Ok(k) if fleetbench_engines::defaults(k).router => Some(k),
            Ok(k) => {
                let msg = format!("{k} is an engine, not a router; routers: {}", routers());
                ctx.error(Some(&v.span()), &field, msg);
                None
            }
            Err(e) => {
                ctx.error(Some(&v.span()), &field, e.to_string());
                None
            }
        }
    });
    let flags = match rt.table(ctx, "flags") {
        Some(ft) => raw_flags(ctx, &ft),
        None => BTreeMap::new(),
    };
    Some(RawRouter {
        kind,
        kind_written: rt.has("engine"),
        profile: rt.string(ctx, "profile"),
        flags,
        span: Some(rt.span.clone()),
    })
}

fn routers() -> String {
    EngineKind::ALL
        .iter()
        .filter(|k| fleetbench_engines::defaults(**k).router)
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `extends`: a config's `router` over its ancestor's, field by field, flags by name.
pub(crate) fn merge_router(base: &mut Option<RawRouter>, raw: &Option<RawRouter>) {
    let Some(raw) = raw else { return };
    let merged = base.get_or_insert_with(RawRouter::default);
    if raw.kind.is_some() {
        merged.kind = raw.kind;
    }
    merged.kind_written |= raw.kind_written;
    if raw.profile.is_some() {
        merged.profile.clone_from(&raw.profile);
    }
    for (k, v) in &raw.flags {
        merged.flags.insert(k.clone(), v.clone());
    }
    merged.span.clone_from(&raw.span);
}

/// What a config says of its deployment, merged: `replicas` and `router`, with where the
/// config was written and its path for errors.
pub(crate) struct Written<'a> {
    pub(crate) path: &'a str,
    pub(crate) table_span: &'a Span,
    pub(crate) replicas: Option<&'a (u32, Span)>,
    pub(crate) router: Option<&'a RawRouter>,
    pub(crate) nodes: u32,
}

/// The deployment a config describes (`Ok(None)`: one server), its errors recorded by field.
pub(crate) fn deployment(ctx: &mut Ctx, w: Written<'_>) -> Result<Option<DeploymentSpec>, ()> {
    let (replicas, router) = match (w.replicas, w.router) {
        (None, None) => return Ok(None),
        (Some((_, span)), None) => {
            let msg = "replicas need a router in front of them: add router = { engine = \
                       \"sglang-router\", profile = \"...\" } (its agent profile allowlists the \
                       replicas' hosts)";
            ctx.error(Some(span), &format!("{}.replicas", w.path), msg);
            return Err(());
        }
        (None, Some(_)) => {
            let msg = "missing: how many replicas the router fronts (replicas = N, one host each)";
            ctx.error(Some(w.table_span), &format!("{}.replicas", w.path), msg);
            return Err(());
        }
        (Some(r), Some(router)) => (r, router),
    };
    let (n, span) = replicas;
    let field = format!("{}.replicas", w.path);
    if let Err(msg) = check_u32(*n, lim::REPLICAS) {
        ctx.error(Some(span), &field, msg);
        return Err(());
    }
    if w.nodes > 1 {
        let msg = format!(
            "a replica spanning hosts is not supported: give replicas or nodes, not both (nodes = \
             {})",
            w.nodes
        );
        ctx.error(Some(span), &field, msg);
        return Err(());
    }
    if router.kind.is_none() && router.kind_written {
        return Err(());
    }
    let kind = router.kind.unwrap_or(EngineKind::SglangRouter);
    let default_profile = router.profile.as_deref().is_none_or(|p| p == kind.as_str());
    let (out_flags, ok) = checked_flags(ctx, kind, default_profile, &router.flags);
    if !ok {
        return Err(());
    }
    Ok(Some(DeploymentSpec {
        replicas: *n,
        router: RouterSpec {
            kind,
            profile: router
                .profile
                .clone()
                .unwrap_or_else(|| kind.as_str().to_string()),
            flags: out_flags,
        },
    }))
}

/// The suffix a deployment adds to its engine's config id: the replica count and the router's
/// own identity (kind and flags), so a policy or a replica count is a config of its own.
pub(crate) fn id_suffix(d: &DeploymentSpec) -> String {
    let router = config_id(d.router.kind, "", &d.router.flags, &BTreeMap::new());
    format!("-{}r{router}", d.replicas)
}
