//! The agent's configuration: one typed, validated struct loaded from a TOML file plus
//! `FLEETBENCH_AGENT__…` environment overrides (`__` separates nested keys, e.g.
//! `FLEETBENCH_AGENT__LISTEN=0.0.0.0:7443`, `FLEETBENCH_AGENT__PROFILES__SIM__PORT=31000`).
//!
//! Everything is checked before any port is bound; an error names the field.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use fleetbench_support::tls::ClientTlsFiles;
use serde::Deserialize;

use crate::profile::{Profile, RawProfile};

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read or parsed, or a value has the wrong type.
    #[error("{path}: {message}")]
    Load { path: String, message: String },
    /// A field holds a value the agent cannot use.
    #[error("config field `{field}`: {message}")]
    Field { field: String, message: String },
}

impl ConfigError {
    pub(crate) fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Field {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// TLS files of the agent's server side.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The agent's certificate chain (PEM).
    pub cert: PathBuf,
    /// The agent's private key (PEM).
    pub key: PathBuf,
    /// The CA a client (controller) certificate must chain to (PEM).
    pub client_ca: PathBuf,
    /// The controller identities (certificate CN, with OU `controller`) this agent answers.
    /// Any other certificate of the CA (another agent's, an operator's) is refused.
    #[serde(default = "default_allowed_clients")]
    pub allowed_clients: Vec<String>,
}

fn default_allowed_clients() -> Vec<String> {
    vec!["fleetbench-controller".into()]
}

/// Self-registration with a controller (`RegisterAgent`, repeated as a heartbeat).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerConfig {
    /// `https://host:port` (or `http://` on loopback) of the controller's gRPC API.
    pub address: String,
    /// `host:port` the controller dials to reach this agent (default: hostname and listen port).
    pub advertise: Option<String>,
    /// Seconds between registrations when the controller does not say (default 30).
    #[serde(default = "default_register_interval")]
    pub interval_s: u64,
    /// Client certificate for an `https://` controller.
    pub tls: Option<ClientTlsFiles>,
}

fn default_register_interval() -> u64 {
    30
}

/// The file format, before validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    name: Option<String>,
    #[serde(default = "default_listen")]
    listen: String,
    #[serde(default)]
    insecure: bool,
    tls: Option<TlsFiles>,
    data_dir: Option<PathBuf>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    controller: Option<ControllerConfig>,
    #[serde(default)]
    profiles: BTreeMap<String, RawProfile>,
    #[serde(default = "default_ring")]
    log_ring_lines: usize,
    #[serde(default = "default_release_wait")]
    release_timeout_s: f64,
    /// Directories dataset files (sharegpt, jsonl, trace) must lie under.
    #[serde(default)]
    dataset_roots: Vec<PathBuf>,
    #[serde(default)]
    engine_user: crate::engine_user::EngineUserConfig,
    /// External targets: allowed origins and secret references (none by default).
    #[serde(default)]
    external: crate::external::RawExternal,
    #[serde(default)]
    gpu: RawGpu,
}

/// `[gpu]`: where GPU telemetry comes from.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    /// `nvml` (default) or `dcgm-exporter`.
    source: Option<String>,
    /// dcgm-exporter's metrics URL, e.g. `http://127.0.0.1:9400/metrics`.
    dcgm_exporter_url: Option<String>,
}

/// Where the agent reads GPU telemetry (facts and the P2P probe always use NVML/CUDA).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GpuTelemetrySource {
    /// NVML, loaded at run time.
    #[default]
    Nvml,
    /// An existing dcgm-exporter's `/metrics` (plain HTTP, as dcgm-exporter serves by default).
    DcgmExporter { url: String },
}

fn gpu_source(raw: RawGpu) -> Result<GpuTelemetrySource, ConfigError> {
    match raw.source.as_deref().unwrap_or("nvml") {
        "nvml" => {
            if raw.dcgm_exporter_url.is_some() {
                return Err(ConfigError::field(
                    "gpu.dcgm_exporter_url",
                    "only used with gpu.source = \"dcgm-exporter\"",
                ));
            }
            Ok(GpuTelemetrySource::Nvml)
        }
        "dcgm-exporter" => {
            let url = raw.dcgm_exporter_url.ok_or_else(|| {
                ConfigError::field(
                    "gpu.dcgm_exporter_url",
                    "required with gpu.source = \"dcgm-exporter\" (e.g. http://127.0.0.1:9400/metrics)",
                )
            })?;
            let ok = url
                .strip_prefix("http://")
                .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
            if !ok {
                return Err(ConfigError::field(
                    "gpu.dcgm_exporter_url",
                    format!("{url:?}: expected http://HOST:PORT/metrics"),
                ));
            }
            Ok(GpuTelemetrySource::DcgmExporter { url })
        }
        other => Err(ConfigError::field(
            "gpu.source",
            format!("{other:?}: expected \"nvml\" or \"dcgm-exporter\""),
        )),
    }
}

fn default_listen() -> String {
    "0.0.0.0:7443".into()
}
fn default_ring() -> usize {
    2000
}
fn default_release_wait() -> f64 {
    120.0
}

/// The agent's validated configuration.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Name reported to the controller (default: the host name).
    pub name: String,
    /// Address the gRPC server binds (`127.0.0.1:0` picks a free port).
    pub listen: SocketAddr,
    /// `None` only when `insecure = true` on a loopback address.
    pub tls: Option<TlsFiles>,
    /// Where each engine run's log file is written (`<data_dir>/runs/<run_id>.log`).
    pub data_dir: PathBuf,
    pub labels: BTreeMap<String, String>,
    pub controller: Option<ControllerConfig>,
    /// Engine profiles by name; the built-in ones (named after their kind) unless replaced.
    pub profiles: BTreeMap<String, Profile>,
    /// Engine log lines kept in memory for `StreamLogs` and crash classification.
    pub log_ring_lines: usize,
    /// How long a stop may wait for the old process group, its port and its GPU memory to be
    /// released before the apply fails.
    pub release_timeout: Duration,
    /// Dataset files are read only under these (canonical) directories; none by default.
    pub dataset_roots: crate::allow::DatasetRoots,
    /// Who engines run as where the agent is root; `None`: always the agent's own user (the
    /// CLI's embedded agent runs the user's own spec as the user).
    pub engine_user: Option<crate::engine_user::EngineUserConfig>,
    /// What a benchmark against an external target may reach and reference.
    pub external: crate::external::ExternalPolicy,
    /// Where GPU telemetry samples come from (`[gpu]`).
    pub gpu_source: GpuTelemetrySource,
}

impl AgentConfig {
    /// A loopback, plaintext agent on `127.0.0.1:0` with the built-in profiles: the CLI's
    /// embedded mode.
    pub fn local(data_dir: impl Into<PathBuf>) -> AgentConfig {
        AgentConfig {
            name: "local".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: None,
            data_dir: data_dir.into(),
            labels: BTreeMap::new(),
            controller: None,
            // The embedded agent runs the user's own spec as the user, on loopback, inside
            // the CLI: any model and any file the user can read. A served agent starts from
            // the locked-down built-ins instead.
            profiles: Profile::builtins()
                .into_iter()
                .map(|(n, mut p)| {
                    p.models.any = true;
                    (n, p)
                })
                .collect(),
            log_ring_lines: default_ring(),
            release_timeout: Duration::from_secs_f64(default_release_wait()),
            dataset_roots: crate::allow::DatasetRoots(vec![PathBuf::from("/")]),
            engine_user: None,
            external: crate::external::ExternalPolicy::open(),
            gpu_source: GpuTelemetrySource::Nvml,
        }
    }

    /// Loads `path` (TOML) with `FLEETBENCH_AGENT__…` overrides from the process environment.
    pub fn load(path: &Path) -> Result<AgentConfig, ConfigError> {
        let env: BTreeMap<String, String> = std::env::vars()
            .filter(|(k, _)| k.starts_with("FLEETBENCH_AGENT__"))
            .collect();
        Self::load_with_env(path, env)
    }

    /// As [`load`](Self::load) with an explicit set of environment overrides (for tests).
    pub fn load_with_env(
        path: &Path,
        env: BTreeMap<String, String>,
    ) -> Result<AgentConfig, ConfigError> {
        let shown = path.display().to_string();
        if !path.is_file() {
            return Err(ConfigError::Load {
                path: shown,
                message: "no such file".into(),
            });
        }
        let env_map: config::Map<String, String> = env.into_iter().collect();
        let raw: RawConfig = config::Config::builder()
            .add_source(config::File::from(path).format(config::FileFormat::Toml))
            .add_source(
                config::Environment::with_prefix("FLEETBENCH_AGENT")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true)
                    .source(Some(env_map)),
            )
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|e| ConfigError::Load {
                path: shown.clone(),
                message: e.to_string(),
            })?;
        let base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        Self::from_raw(raw, &base)
    }

    /// Parses TOML text (paths relative to `base`), without environment overrides.
    pub fn from_toml(text: &str, base: &Path) -> Result<AgentConfig, ConfigError> {
        let raw: RawConfig = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|e| ConfigError::Load {
                path: "<config>".into(),
                message: e.to_string(),
            })?;
        Self::from_raw(raw, base)
    }

    fn from_raw(raw: RawConfig, base: &Path) -> Result<AgentConfig, ConfigError> {
        let listen: SocketAddr = raw.listen.parse().map_err(|e| {
            ConfigError::field(
                "listen",
                format!("{:?} is not an address like 0.0.0.0:7443: {e}", raw.listen),
            )
        })?;
        let abs = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let tls = match (raw.insecure, raw.tls) {
            (true, Some(_)) => {
                return Err(ConfigError::field(
                    "insecure",
                    "insecure = true and a [tls] section exclude each other",
                ));
            }
            (true, None) if !listen.ip().is_loopback() => {
                return Err(ConfigError::field(
                    "insecure",
                    format!(
                        "insecure = true is allowed only on a loopback listen address, \
                         not {listen}; configure [tls] (fleetbench certs init DIR writes the files)"
                    ),
                ));
            }
            (true, None) => None,
            (false, None) => {
                return Err(ConfigError::field(
                    "tls",
                    "missing: give [tls] cert, key and client_ca (or insecure = true on a \
                     loopback listen address)",
                ));
            }
            (false, Some(t)) => {
                if t.allowed_clients.is_empty() {
                    return Err(ConfigError::field(
                        "tls.allowed_clients",
                        "must name at least one controller identity",
                    ));
                }
                let t = TlsFiles {
                    cert: abs(&t.cert),
                    key: abs(&t.key),
                    client_ca: abs(&t.client_ca),
                    allowed_clients: t.allowed_clients,
                };
                for (field, p) in [
                    ("tls.cert", &t.cert),
                    ("tls.key", &t.key),
                    ("tls.client_ca", &t.client_ca),
                ] {
                    if !p.is_file() {
                        return Err(ConfigError::field(
                            field,
                            format!("{} does not exist", p.display()),
                        ));
                    }
                }
                Some(t)
            }
        };
        let data_dir = match raw.data_dir {
            Some(d) => abs(&d),
            None => {
                return Err(ConfigError::field(
                    "data_dir",
                    "missing: where engine logs are written",
                ));
            }
        };
        if raw.log_ring_lines == 0 {
            return Err(ConfigError::field("log_ring_lines", "must be at least 1"));
        }
        if !(raw.release_timeout_s.is_finite() && raw.release_timeout_s > 0.0) {
            return Err(ConfigError::field(
                "release_timeout_s",
                "must be a positive number of seconds",
            ));
        }
        if let Some(c) = &raw.controller {
            if !(c.address.starts_with("http://") || c.address.starts_with("https://")) {
                return Err(ConfigError::field(
                    "controller.address",
                    format!("{:?} must start with http:// or https://", c.address),
                ));
            }
            if c.address.starts_with("https://") && c.tls.is_none() {
                return Err(ConfigError::field(
                    "controller.tls",
                    "an https:// controller needs ca, cert and key",
                ));
            }
            if c.interval_s == 0 {
                return Err(ConfigError::field(
                    "controller.interval_s",
                    "must be at least 1",
                ));
            }
        }
        let controller = raw.controller.map(|mut c| {
            c.tls = c.tls.map(|t| ClientTlsFiles {
                ca: abs(&t.ca),
                cert: abs(&t.cert),
                key: abs(&t.key),
                domain: t.domain,
            });
            c
        });
        let dataset_roots =
            crate::allow::canonical_roots("dataset_roots", &raw.dataset_roots, base)
                .map_err(|m| ConfigError::field("dataset_roots", m))?;
        let gpu_source = gpu_source(raw.gpu)?;
        let mut profiles = Profile::builtins();
        for (name, rp) in raw.profiles {
            let p = Profile::from_raw(&name, rp)?;
            profiles.insert(name, p);
        }
        check_engine_user(&raw.engine_user, &tls, controller.as_ref(), &data_dir)?;
        Ok(AgentConfig {
            name: raw.name.unwrap_or_else(crate::host::hostname),
            listen,
            tls,
            data_dir,
            labels: raw.labels,
            controller,
            profiles,
            log_ring_lines: raw.log_ring_lines,
            release_timeout: Duration::from_secs_f64(raw.release_timeout_s),
            dataset_roots: crate::allow::DatasetRoots(dataset_roots),
            engine_user: Some(raw.engine_user),
            external: crate::external::ExternalPolicy::from_raw(raw.external)?,
            gpu_source,
        })
    }
}

/// Where the agent is root and its engine user exists: that user's groups must resolve and it
/// must not be able to read the agent's keys (an engine could otherwise act as this agent), nor
/// write or replace its data directory (the agent follows what it finds there, as root). A
/// missing user is no error here: engines are refused when asked for, naming it.
fn check_engine_user(
    cfg: &crate::engine_user::EngineUserConfig,
    tls: &Option<TlsFiles>,
    controller: Option<&ControllerConfig>,
    data_dir: &std::path::Path,
) -> Result<(), ConfigError> {
    use crate::engine_user::{
        EngineUserError, agent_is_root, check_data_dir, check_unreadable, resolve,
    };
    if !agent_is_root() {
        return Ok(());
    }
    let creds = match resolve(cfg, "NAME") {
        Ok(c) => c,
        Err(EngineUserError::NoUser { .. }) => return Ok(()),
        Err(e @ EngineUserError::NoGroup { .. }) => {
            return Err(ConfigError::field("engine_user.groups", e.to_string()));
        }
        Err(e) => return Err(ConfigError::field("engine_user.name", e.to_string())),
    };
    let keys = [
        tls.as_ref().map(|t| ("tls.key", &t.key)),
        controller
            .and_then(|c| c.tls.as_ref())
            .map(|t| ("controller.tls.key", &t.key)),
    ];
    for (field, path) in keys.into_iter().flatten() {
        check_unreadable(field, path, &creds).map_err(|m| ConfigError::field(field, m))?;
    }
    check_data_dir(data_dir, &creds).map_err(|m| ConfigError::field("data_dir", m))?;
    Ok(())
}

/// Helper for callers building profiles in code (the CLI's embedded mode, tests).
pub fn profile_from_toml(name: &str, text: &str) -> Result<Profile, ConfigError> {
    let rp: RawProfile = toml_value(text)?;
    Profile::from_raw(name, rp)
}

fn toml_value<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .build()
        .and_then(|c| c.try_deserialize())
        .map_err(|e| ConfigError::Load {
            path: "<profile>".into(),
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests;
