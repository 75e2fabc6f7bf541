//! Engine profiles: what the agent may start, and turning a caller's `EngineSpec` into an argv
//! (never a shell command line) after checking every part against the profile.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use fleetbench_engines::EngineKind;
use fleetbench_engines::flags::{FlagError, FlagPolicy, FlagRule};
use fleetbench_proto::agentpb;
use nix::sys::signal::Signal;
use serde::Deserialize;

use crate::allow::{EnvRule, MAX_ENV_VARS, ModelAllow, RawEnvEntry, default_env_rules};
use crate::config::ConfigError;
pub use crate::program::resolve_program;

mod plan;
#[cfg(test)]
mod tests;

/// Whether a profile's `flags` add to the kind's built-in rules or replace them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlagsMode {
    #[default]
    Extend,
    Replace,
}

/// `[profiles.NAME]` as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    kind: EngineKind,
    program: Option<String>,
    args: Option<Vec<String>>,
    #[serde(default)]
    flags: Vec<FlagRule>,
    #[serde(default)]
    flags_mode: FlagsMode,
    /// Risky flags (code, weights or files) this profile turns on, by name.
    #[serde(default)]
    allow_flags: Vec<String>,
    /// Flags fleetbench's tables do not know (or whose values the engine knows better), by
    /// exact name: typed from the engine's own argument list. None by default.
    #[serde(default)]
    pass_through: Vec<String>,
    /// Arguments that make the program print its argument list; `[]`: do not ask it.
    help_args: Option<Vec<String>>,
    models: Option<Vec<String>>,
    /// Absolute directories model paths may lie under.
    #[serde(default)]
    model_roots: Vec<PathBuf>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    allowed_env: Option<Vec<RawEnvEntry>>,
    host: Option<String>,
    port: Option<u16>,
    /// The port rank 0 of an engine spanning hosts listens on for its peers when this host
    /// runs rank 0 (see `plan`); none: this host is never rank 0 of a gang.
    rendezvous_port: Option<u16>,
    health_path: Option<String>,
    metrics_path: Option<String>,
    stop_signal: Option<String>,
    grace_s: Option<f64>,
    start_timeout_s: Option<f64>,
    /// Where the agent runs as root: run this profile's engines as root too instead of as the
    /// engine user. Off by default; the engine then can read everything root can.
    #[serde(default)]
    run_as_root: bool,
    /// A router's workers callers may name (`EngineSpec.workers`), as exact origins
    /// (`http://10.0.0.5:8000`). None by default: a router could otherwise be pointed at
    /// anything the agent can reach, and would send it every prompt.
    #[serde(default)]
    allowed_workers: Vec<String>,
    /// The port of a program that serves Prometheus on a port of its own (the router's
    /// `--prometheus-port`, `{metrics_port}` in the fixed args).
    metrics_port: Option<u16>,
}

/// A validated engine profile.
#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    pub kind: EngineKind,
    /// As configured: an absolute path, or a name looked up next to the agent's executable and
    /// then on `PATH`.
    pub program: String,
    /// Fixed arguments; `{port}`, `{model}` and `{host}` are substituted.
    pub args: Vec<String>,
    /// Flags callers may set, under every spelling (the profile's rules over the built-in
    /// tables, before the engine's own list narrows or extends them).
    pub flags: FlagPolicy,
    /// Exact flag names passed through, typed from the engine's own list.
    pub pass_through: Vec<String>,
    /// `program help_args…` prints the engine's argument list; `None`: not asked.
    pub help_args: Option<Vec<String>>,
    engine_args: crate::engine_args::Cache,
    /// Settings the fixed arguments pin (canonical flag names): no caller flag may set them.
    pub pinned: BTreeSet<String>,
    /// Models callers may ask for; none unless the profile lists them.
    pub models: ModelAllow,
    /// Environment set for every run of this profile.
    pub env: BTreeMap<String, String>,
    /// Environment variables callers may set: exact names with value rules.
    pub allowed_env: Vec<EnvRule>,
    pub host: String,
    pub port: u16,
    /// `rendezvous_port`; 0: none.
    pub rendezvous_port: u16,
    pub health_path: String,
    /// `None`: the engine has no Prometheus endpoint.
    pub metrics_path: Option<String>,
    pub stop_signal: Signal,
    pub grace: Duration,
    pub start_timeout: Duration,
    /// Its engines keep the agent's user even where the agent is root (`run_as_root`).
    pub run_as_root: bool,
    /// A router: callers name its workers, and only these origins (canonical, see
    /// `external::origin`); empty for an engine, and by default.
    pub router: bool,
    pub allowed_workers: Vec<String>,
    /// Where the program serves Prometheus when not on its API port.
    pub metrics_port: Option<u16>,
}

/// Why a request was refused. Nothing has been started when one of these is returned.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RequestError {
    /// The spec names a profile (and so a program) the agent does not offer.
    #[error(
        "engine profile {profile:?} is not allowed: not configured on this agent (available: {available})"
    )]
    UnknownProfile { profile: String, available: String },
    /// The profile's fixed arguments need a model and none was given.
    #[error("model: required by profile {profile:?}")]
    MissingModel { profile: String },
    /// The model is not in the profile's allowed list (or looks like a flag).
    #[error("model {model:?} is not allowed by profile {profile:?}{allowed}")]
    ModelNotAllowed {
        model: String,
        profile: String,
        allowed: String,
    },
    /// A flag or its value broke the profile's rules.
    #[error("{0}")]
    Flag(#[from] FlagError),
    /// An environment variable the profile does not let callers set.
    #[error(
        "environment variable {var:?} is not allowed by profile {profile:?} (allowed: {allowed})"
    )]
    EnvNotAllowed {
        var: String,
        profile: String,
        allowed: String,
    },
    /// An allowed environment variable with a value its rule refuses.
    #[error("environment variable {var:?}: expected {expected}, got {got:?}")]
    EnvValue {
        var: String,
        expected: String,
        got: String,
    },
    /// More environment variables than any engine needs.
    #[error("env: at most {MAX_ENV_VARS} variables, got {0}")]
    TooManyEnv(usize),
    /// A rank of an engine spanning hosts that this kind or these values cannot make.
    #[error("gang: {0}")]
    Gang(#[from] fleetbench_engines::gang::GangError),
    /// Workers a router may not be given (or given to an engine, which takes none); `field`
    /// names the request's field (`workers[1]`).
    #[error("{field}: {message}")]
    Workers { field: String, message: String },
    /// The profile's program cannot be found or run.
    #[error("program {program:?} of profile {profile:?}: {reason}")]
    Program {
        program: String,
        profile: String,
        reason: String,
    },
}

/// Everything the supervisor needs to start one engine run.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    pub profile: String,
    pub kind: EngineKind,
    /// Program first.
    pub argv: Vec<String>,
    /// Added to the agent's own environment.
    pub env: BTreeMap<String, String>,
    pub host: String,
    pub port: u16,
    pub base_url: String,
    pub health_url: String,
    pub metrics_url: Option<String>,
    pub stop_signal: Signal,
    pub grace: Duration,
    pub start_timeout: Duration,
    pub config_id: String,
    pub spec: agentpb::EngineSpec,
    /// The user the engine is switched to; `None`: the agent's own. [`Profile::plan`] leaves it
    /// `None`; the service sets it from `[engine_user]` (crate::engine_user).
    pub run_as: Option<crate::engine_user::Credentials>,
    /// Variables of the agent's own environment the engine does not inherit: the secrets of
    /// `[external] secret_env` (an engine user could read them from `/proc/PID/environ`), unless
    /// the profile's `env` sets the name itself. Set by the service.
    pub withheld_env: Vec<String>,
}

impl LaunchPlan {
    /// The engine a router's workers run (`EngineSpec.workers_kind`): how their metrics read.
    pub fn workers_kind(&self) -> EngineKind {
        crate::convert::kind_from_proto(self.spec.workers_kind)
    }

    /// A router's workers' Prometheus endpoints, at their kind's metrics path.
    pub fn worker_metrics_urls(&self) -> Vec<String> {
        let path = fleetbench_engines::defaults::defaults(self.workers_kind()).metrics_path;
        self.spec
            .workers
            .iter()
            .map(|w| format!("{}{path}", w.trim_end_matches('/')))
            .collect()
    }
}

fn parse_signal(s: &str) -> Option<Signal> {
    let up = s.trim().to_ascii_uppercase();
    let full = if up.starts_with("SIG") {
        up
    } else {
        format!("SIG{up}")
    };
    Signal::from_str(&full).ok()
}

impl Profile {
    /// One profile per built-in kind, named after it, with the kind's defaults.
    pub fn builtins() -> BTreeMap<String, Profile> {
        EngineKind::ALL
            .into_iter()
            .filter_map(|kind| {
                let d = fleetbench_engines::defaults::defaults(kind);
                if d.program.is_empty() {
                    return None;
                }
                let raw = RawProfile {
                    kind,
                    program: None,
                    args: None,
                    flags: Vec::new(),
                    flags_mode: FlagsMode::Extend,
                    allow_flags: Vec::new(),
                    pass_through: Vec::new(),
                    help_args: None,
                    models: None,
                    model_roots: Vec::new(),
                    env: BTreeMap::new(),
                    allowed_env: None,
                    host: None,
                    port: None,
                    rendezvous_port: None,
                    health_path: None,
                    metrics_path: None,
                    stop_signal: None,
                    grace_s: None,
                    start_timeout_s: None,
                    run_as_root: false,
                    allowed_workers: Vec::new(),
                    metrics_port: None,
                };
                // Built-in defaults are valid by construction; a program missing on this host
                // is reported when the profile is used, not at start-up.
                Profile::build(kind.as_str(), raw, false).ok().map(|mut p| {
                    // The simulated engine loads no weights and runs nothing a model name
                    // points at: its model is only a label, so any label is allowed. Every
                    // real engine's built-in profile allows no model until the config lists it.
                    if d.model_is_label {
                        p.models.any = true;
                    }
                    (kind.as_str().to_string(), p)
                })
            })
            .collect()
    }

    /// Validates a configured profile; its program must be found now.
    pub fn from_raw(name: &str, raw: RawProfile) -> Result<Profile, ConfigError> {
        Profile::build(name, raw, true)
    }

    fn build(name: &str, raw: RawProfile, check_program: bool) -> Result<Profile, ConfigError> {
        let field = |f: &str| format!("profiles.{name}.{f}");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(ConfigError::field(
                format!("profiles.{name}"),
                "profile names use letters, digits, '-' and '_'",
            ));
        }
        let d = fleetbench_engines::defaults::defaults(raw.kind);
        // fleetbench's own simulator (kind sim, its program found next to the agent) loads no
        // weights and runs nothing a request names, so it keeps the agent's user; every other
        // program drops to the engine user unless the profile names run_as_root.
        let run_as_root = raw.run_as_root || (d.model_is_label && raw.program.is_none());
        let program = raw.program.unwrap_or_else(|| d.program.to_string());
        if program.is_empty() {
            return Err(ConfigError::field(
                field("program"),
                format!("kind {} has no default program: give one", raw.kind),
            ));
        }
        if check_program {
            resolve_program(&program)
                .map_err(|reason| ConfigError::field(field("program"), reason))?;
        }
        let args = raw
            .args
            .unwrap_or_else(|| d.fixed_args.iter().map(|a| a.to_string()).collect());
        let mut flags = match raw.flags_mode {
            FlagsMode::Extend => FlagPolicy::builtin(raw.kind),
            FlagsMode::Replace => FlagPolicy::known(raw.kind),
        };
        for (i, rule) in raw.flags.into_iter().enumerate() {
            flags
                .add_rule(rule)
                .map_err(|e| ConfigError::field(format!("{}[{i}].name", field("flags")), e))?;
        }
        for (i, name) in raw.allow_flags.iter().enumerate() {
            flags
                .allow(name)
                .map_err(|e| ConfigError::field(format!("{}[{i}]", field("allow_flags")), e))?;
        }
        {
            let mut probe = flags.clone();
            probe
                .pass_through_unread(&raw.pass_through)
                .map_err(|e| ConfigError::field(field("pass_through"), e))?;
        }
        let help_args = match raw.help_args {
            Some(a) if a.is_empty() => None,
            Some(a) => Some(a),
            None => crate::engine_args::default_help_args(raw.kind),
        };
        let mut pinned = flags.pinned(&args);
        // No caller flag may name an upstream: the workers are the agent's to write.
        let worker_flags: Vec<String> = d.worker_flags.iter().map(|f| f.to_string()).collect();
        pinned.extend(flags.pinned(&worker_flags));
        let allowed_workers = raw
            .allowed_workers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let f = format!("{}[{i}]", field("allowed_workers"));
                if !d.router {
                    return Err(ConfigError::field(
                        f,
                        format!("kind {} routes to no workers", raw.kind),
                    ));
                }
                let canon = crate::external::origin(w).map_err(|m| ConfigError::field(&f, m))?;
                if w.trim_end_matches('/').matches('/').count() > 2 {
                    return Err(ConfigError::field(
                        f,
                        format!("{w:?}: an origin is scheme://host:port, without a path"),
                    ));
                }
                Ok(canon)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let metrics_port = match (raw.metrics_port, d.metrics_port) {
            (Some(0), _) => {
                return Err(ConfigError::field(
                    field("metrics_port"),
                    "0 is not a TCP port",
                ));
            }
            (p, default) => p.or(default),
        };
        let mut names = raw.models.unwrap_or_default();
        let any = names.iter().any(|m| m == "*");
        names.retain(|m| m != "*");
        for r in &raw.model_roots {
            if !r.is_absolute() {
                return Err(ConfigError::field(
                    field("model_roots"),
                    format!("{} is not an absolute path", r.display()),
                ));
            }
        }
        let roots = crate::allow::canonical_roots(
            &field("model_roots"),
            &raw.model_roots,
            std::path::Path::new("/"),
        )
        .map_err(|e| ConfigError::field(field("model_roots"), e))?;
        let models = ModelAllow { names, roots, any };
        let allowed_env = match raw.allowed_env {
            None => default_env_rules(raw.kind),
            Some(entries) => entries
                .into_iter()
                .enumerate()
                .map(|(i, e)| {
                    EnvRule::from_raw(e).map_err(|m| {
                        ConfigError::field(format!("{}[{i}]", field("allowed_env")), m)
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        let host = raw.host.unwrap_or_else(|| "127.0.0.1".into());
        let port = raw.port.unwrap_or(d.default_port);
        let rendezvous_port = match raw.rendezvous_port {
            None => 0,
            Some(0) => {
                return Err(ConfigError::field(
                    field("rendezvous_port"),
                    "0 is not a TCP port (leave the field out for none)",
                ));
            }
            Some(p) if p == port => {
                return Err(ConfigError::field(
                    field("rendezvous_port"),
                    format!("{p} is the engine's own port"),
                ));
            }
            Some(_) if !fleetbench_engines::gang::spans_hosts(raw.kind) => {
                return Err(ConfigError::field(
                    field("rendezvous_port"),
                    format!("engine kind {} cannot span hosts", raw.kind),
                ));
            }
            Some(p) => p,
        };
        let health_path = raw.health_path.unwrap_or_else(|| d.health_path.to_string());
        if !health_path.starts_with('/') {
            return Err(ConfigError::field(
                field("health_path"),
                format!("{health_path:?} must start with '/'"),
            ));
        }
        let metrics_path = match raw.metrics_path {
            Some(p) if p.is_empty() => None,
            Some(p) => Some(p),
            None => default_metrics_path(&d),
        };
        if let Some(p) = &metrics_path
            && !p.starts_with('/')
        {
            return Err(ConfigError::field(
                field("metrics_path"),
                format!("{p:?} must start with '/'"),
            ));
        }
        let stop_name = raw
            .stop_signal
            .unwrap_or_else(|| d.stop_signal.as_str().to_string());
        let stop_signal = parse_signal(&stop_name).ok_or_else(|| {
            ConfigError::field(
                field("stop_signal"),
                format!("{stop_name:?} is not a signal name like SIGTERM"),
            )
        })?;
        let secs = |f: &str, v: Option<f64>, default: f64| -> Result<Duration, ConfigError> {
            let v = v.unwrap_or(default);
            if v.is_finite() && v > 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(ConfigError::field(
                    field(f),
                    format!("{v} is not a positive number of seconds"),
                ))
            }
        };
        let grace = secs("grace_s", raw.grace_s, d.grace_s as f64)?;
        let start_timeout = secs(
            "start_timeout_s",
            raw.start_timeout_s,
            d.start_timeout_s as f64,
        )?;
        let mut env: BTreeMap<String, String> = d
            .env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.extend(raw.env);
        Ok(Profile {
            name: name.to_string(),
            kind: raw.kind,
            program,
            args,
            flags,
            pass_through: raw.pass_through,
            help_args,
            engine_args: Default::default(),
            pinned,
            models,
            env,
            allowed_env,
            host,
            port,
            rendezvous_port,
            health_path,
            metrics_path,
            stop_signal,
            grace,
            start_timeout,
            run_as_root,
            router: d.router,
            allowed_workers,
            metrics_port,
        })
    }

    /// The profile as `GetHost` reports it.
    pub fn info(&self) -> agentpb::EngineProfileInfo {
        agentpb::EngineProfileInfo {
            name: self.name.clone(),
            kind: crate::convert::kind_to_proto(self.kind) as i32,
            program: resolve_program(&self.program)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|e| format!("{} ({e})", self.program)),
            flags: self
                .flags
                .rules()
                .iter()
                .map(|r| agentpb::FlagRuleInfo {
                    name: r.name.clone(),
                    r#type: crate::convert::describe_flag_type(&r.ty),
                })
                .collect(),
            allows_any_model: self.models.any,
            rendezvous_port: u32::from(self.rendezvous_port),
        }
    }
}

fn default_metrics_path(d: &fleetbench_engines::defaults::KindDefaults) -> Option<String> {
    let p = d.metrics_path.to_string();
    if p.is_empty() { None } else { Some(p) }
}
