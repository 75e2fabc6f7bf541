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
    models: Option<Vec<String>>,
    /// Absolute directories model paths may lie under.
    #[serde(default)]
    model_roots: Vec<PathBuf>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    allowed_env: Option<Vec<RawEnvEntry>>,
    host: Option<String>,
    port: Option<u16>,
    health_path: Option<String>,
    metrics_path: Option<String>,
    stop_signal: Option<String>,
    grace_s: Option<f64>,
    start_timeout_s: Option<f64>,
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
    /// Flags callers may set, under every spelling.
    pub flags: FlagPolicy,
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
    pub health_path: String,
    /// `None`: the engine has no Prometheus endpoint.
    pub metrics_path: Option<String>,
    pub stop_signal: Signal,
    pub grace: Duration,
    pub start_timeout: Duration,
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
                    models: None,
                    model_roots: Vec::new(),
                    env: BTreeMap::new(),
                    allowed_env: None,
                    host: None,
                    port: None,
                    health_path: None,
                    metrics_path: None,
                    stop_signal: None,
                    grace_s: None,
                    start_timeout_s: None,
                };
                // Built-in defaults are valid by construction; a program missing on this host
                // is reported when the profile is used, not at start-up.
                Profile::build(kind.as_str(), raw, false).ok().map(|mut p| {
                    // The simulated engine loads no weights and runs nothing a model name
                    // points at: its model is only a label, so any label is allowed. Every
                    // real engine's built-in profile allows no model until the config lists it.
                    if kind == EngineKind::Sim {
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
        let pinned = flags.pinned(&args);
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
        Ok(Profile {
            name: name.to_string(),
            kind: raw.kind,
            program,
            args,
            flags,
            pinned,
            models,
            env: raw.env,
            allowed_env,
            host,
            port,
            health_path,
            metrics_path,
            stop_signal,
            grace,
            start_timeout,
        })
    }

    /// Checks `spec` against this profile and builds the argv. Nothing runs here.
    pub fn plan(&self, spec: &agentpb::EngineSpec) -> Result<LaunchPlan, RequestError> {
        let program = resolve_program(&self.program).map_err(|reason| RequestError::Program {
            program: self.program.clone(),
            profile: self.name.clone(),
            reason,
        })?;
        let model = spec.model.trim();
        let needs_model = self.args.iter().any(|a| a.contains("{model}"));
        if model.is_empty() && needs_model {
            return Err(RequestError::MissingModel {
                profile: self.name.clone(),
            });
        }
        if !model.is_empty()
            && let Err(why) = self.models.check(model)
        {
            return Err(RequestError::ModelNotAllowed {
                model: model.chars().take(200).collect(),
                profile: self.name.clone(),
                allowed: format!(": {why} (allowed: {})", self.models.describe()),
            });
        }
        let port = if spec.port == 0 {
            self.port
        } else {
            u16::try_from(spec.port).unwrap_or(0)
        };
        if port == 0 {
            return Err(RequestError::Flag(FlagError::BadValue {
                flag: "port".into(),
                expected: "a TCP port 1-65535".into(),
                got: spec.port.to_string(),
            }));
        }
        let subst = |a: &str| {
            a.replace("{port}", &port.to_string())
                .replace("{model}", model)
                .replace("{host}", &self.host)
        };
        let fixed: Vec<String> = self.args.iter().map(|a| subst(a)).collect();

        let checked = self.flags.check_all(
            spec.flags
                .iter()
                .map(|f| (f.name.as_str(), f.value.as_deref())),
            &self.pinned,
        )?;
        let mut flags: Vec<(String, Option<String>)> = Vec::new();
        let mut flag_args: Vec<String> = Vec::new();
        for c in checked {
            // The canonical name, so the engine sees exactly the flag that was checked.
            flag_args.push(c.canonical.clone());
            flag_args.extend(c.value.clone());
            flags.push((c.canonical, c.value));
        }

        if spec.env.len() > MAX_ENV_VARS {
            return Err(RequestError::TooManyEnv(spec.env.len()));
        }
        let mut env = self.env.clone();
        let mut spec_env: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in &spec.env {
            let Some(rule) = self.allowed_env.iter().find(|r| &r.name == k) else {
                return Err(RequestError::EnvNotAllowed {
                    var: k.chars().take(200).collect(),
                    profile: self.name.clone(),
                    allowed: if self.allowed_env.is_empty() {
                        "none".into()
                    } else {
                        self.allowed_env
                            .iter()
                            .map(|r| r.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                });
            };
            rule.check(v).map_err(|expected| RequestError::EnvValue {
                var: k.clone(),
                expected,
                got: v.chars().take(200).collect(),
            })?;
            spec_env.insert(k.clone(), v.clone());
            env.insert(k.clone(), v.clone());
        }

        let mut argv = vec![program.to_string_lossy().into_owned()];
        argv.extend(fixed);
        argv.extend(flag_args);
        let base_url = format!("http://{}:{port}", url_host(&self.host));
        let config_id = fleetbench_engines::config_id(self.kind, model, &flags, &spec_env);
        let mut spec = spec.clone();
        spec.port = u32::from(port);
        Ok(LaunchPlan {
            profile: self.name.clone(),
            kind: self.kind,
            argv,
            env,
            host: self.host.clone(),
            port,
            health_url: format!("{base_url}{}", self.health_path),
            metrics_url: self.metrics_path.as_ref().map(|p| format!("{base_url}{p}")),
            base_url,
            stop_signal: self.stop_signal,
            grace: self.grace,
            start_timeout: self.start_timeout,
            config_id,
            spec,
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
        }
    }
}

fn default_metrics_path(d: &fleetbench_engines::defaults::KindDefaults) -> Option<String> {
    let p = d.metrics_path.to_string();
    if p.is_empty() { None } else { Some(p) }
}

fn url_host(host: &str) -> String {
    match host {
        "0.0.0.0" => "127.0.0.1".into(),
        "::" => "[::1]".into(),
        h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
        h => h.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(extra: &str) -> Profile {
        let text = format!(
            "kind = \"generic\"\nprogram = \"/bin/sleep\"\nargs = [\"{{port}}\"]\nflags_mode = \"replace\"\n{extra}"
        );
        crate::config::profile_from_toml("g", &text).unwrap()
    }

    fn spec(flags: &[(&str, Option<&str>)]) -> agentpb::EngineSpec {
        agentpb::EngineSpec {
            profile: "g".into(),
            model: String::new(),
            flags: flags
                .iter()
                .map(|(n, v)| agentpb::Flag {
                    name: n.to_string(),
                    value: v.map(String::from),
                })
                .collect(),
            env: Default::default(),
            port: 4242,
        }
    }

    #[test]
    fn argv_is_fixed_args_then_checked_flags() {
        let p = generic(
            "[[flags]]\nname = \"--n\"\ntype = \"int\"\nmin = 1\n[[flags]]\nname = \"--fast\"\ntype = \"switch\"\n",
        );
        let plan = p
            .plan(&spec(&[("--n", Some("3")), ("--fast", None)]))
            .unwrap();
        assert_eq!(plan.argv, vec!["/bin/sleep", "4242", "--n", "3", "--fast"]);
        assert_eq!(plan.base_url, "http://127.0.0.1:4242");
        let err = p.plan(&spec(&[("--n", Some("0"))])).unwrap_err();
        assert!(err.to_string().contains("--n"), "{err}");
        let err = p.plan(&spec(&[("--other", None)])).unwrap_err();
        assert!(err.to_string().contains("--other"), "{err}");
        let err = p
            .plan(&spec(&[("--n", Some("1")), ("--n", Some("2"))]))
            .unwrap_err();
        assert!(
            matches!(err, RequestError::Flag(FlagError::Repeated { .. })),
            "{err}"
        );
    }

    #[test]
    fn env_and_models_are_checked() {
        let err = crate::config::profile_from_toml(
            "g",
            "kind = \"generic\"\nprogram = \"/bin/sleep\"\nallowed_env = [\"FOO_*\"]\n",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("prefixes are not allowed"),
            "{err}"
        );
        let p = generic(
            "allowed_env = [\"FOO_BAR\", { name = \"LEVEL\", type = \"choice\", values = [\"a\"] }]\nmodels = [\"m1\"]\n",
        );
        let mut s = spec(&[]);
        s.env.insert("LEVEL".into(), "b".into());
        let err = p.plan(&s).unwrap_err();
        assert!(err.to_string().contains("expected one of a"), "{err}");
        s.env.insert("LEVEL".into(), "a".into());
        s.env.insert("FOO_BAR".into(), "/etc/passwd".into());
        let err = p.plan(&s).unwrap_err();
        assert!(err.to_string().contains("no paths"), "{err}");
        s.env.clear();
        s.env.insert("LD_PRELOAD".into(), "/tmp/x.so".into());
        let err = p.plan(&s).unwrap_err();
        assert!(err.to_string().contains("LD_PRELOAD"), "{err}");
        s.env.clear();
        s.env.insert("FOO_BAR".into(), "1".into());
        s.model = "m2".into();
        let err = p.plan(&s).unwrap_err();
        assert!(err.to_string().contains("m2"), "{err}");
        s.model = "m1".into();
        let plan = p.plan(&s).unwrap();
        assert_eq!(plan.env["FOO_BAR"], "1");
    }

    #[test]
    fn config_id_ignores_flag_order() {
        let p = generic(
            "[[flags]]\nname = \"--a\"\ntype = \"switch\"\n[[flags]]\nname = \"--b\"\ntype = \"switch\"\n",
        );
        let x = p.plan(&spec(&[("--a", None), ("--b", None)])).unwrap();
        let y = p.plan(&spec(&[("--b", None), ("--a", None)])).unwrap();
        assert_eq!(x.config_id, y.config_id);
    }

    #[test]
    fn programs_resolve_or_are_named() {
        assert!(resolve_program("/bin/sh").is_ok());
        assert!(resolve_program("sh").is_ok());
        assert!(resolve_program("./sh").is_err());
        assert!(resolve_program("definitely-not-a-program-xyz").is_err());
        let err = crate::config::profile_from_toml(
            "x",
            "kind = \"generic\"\nprogram = \"/nonexistent/prog\"\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("profiles.x.program"), "{err}");
    }
}
