//! The controller's configuration: one typed struct, read from a TOML file and
//! `FLEETBENCH_CONTROLLER__…` environment variables (`__` separates nested keys, e.g.
//! `FLEETBENCH_CONTROLLER__API__TOKEN`), validated as a whole before anything binds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Errors loading the configuration. `Invalid` lists every problem, each naming its field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or the environment could not be read or has the wrong shape.
    #[error("controller config {source_name}: {source}")]
    Load {
        source_name: String,
        source: config::ConfigError,
    },
    /// Values that parse but make no sense together; one line per problem (`field: message`).
    #[error("invalid controller config:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
}

/// How the API authenticates clients. Without TLS and token the API listens on loopback only.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiAuth {
    /// Server certificate, key, and the CA client certificates must chain to (mTLS).
    pub tls: Option<ApiTls>,
    /// A bearer token clients send as `authorization: Bearer TOKEN`.
    pub token: Option<String>,
    /// A file holding the bearer token (first line), instead of `token`.
    pub token_file: Option<PathBuf>,
    /// Tokens scoped to one role each (`[[api.tokens]] role = "viewer"`, `token_file = ...`).
    #[serde(default)]
    pub tokens: Vec<ScopedToken>,
    /// Agent certificate names shared by many agents (a DaemonSet's one cert-manager identity)
    /// that may register any host name not in the config file. Empty by default: an agent's
    /// certificate registers only its own name. Naming one here trusts every holder of that
    /// key to claim any registered host: use per-agent certificates where you can.
    #[serde(default)]
    pub shared_agent_identities: Vec<String>,
}

/// A bearer token that grants one role.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopedToken {
    pub role: crate::authz::ApiRole,
    pub token: Option<String>,
    pub token_file: Option<PathBuf>,
}

/// mTLS material of the API.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

/// Client material the controller presents to agents (mTLS).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The name agents' certificates carry; default: the host part of each agent's address.
    pub domain: Option<String>,
}

/// A host from the config file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    pub name: String,
    /// `host:port` of its agent.
    pub address: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default = "default_listen")]
    listen: String,
    #[serde(default)]
    api: ApiAuth,
    agent_tls: Option<AgentTls>,
    #[serde(default)]
    hosts: Vec<HostConfig>,
    #[serde(default = "default_store")]
    store_url: String,
    metrics_listen: Option<String>,
    #[serde(default = "default_heartbeat")]
    heartbeat_interval: String,
    #[serde(default = "default_attempts")]
    trial_attempts: u32,
    #[serde(default = "default_host_wait")]
    host_wait: String,
    otlp_endpoint: Option<String>,
    #[serde(default)]
    suites: Vec<crate::regress::schedule::ScheduledSuite>,
}

fn default_listen() -> String {
    "127.0.0.1:7070".into()
}
fn default_store() -> String {
    "sqlite://fleetbench-data/controller.db".into()
}
fn default_heartbeat() -> String {
    "2s".into()
}
fn default_attempts() -> u32 {
    3
}
fn default_host_wait() -> String {
    "2m".into()
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// gRPC API address (port 0: any free port).
    pub listen: SocketAddr,
    pub api: ApiAuth,
    /// The bearer token, read from `api.token` or `api.token_file`: an admin's.
    pub api_token: Option<String>,
    /// `[[api.tokens]]`, read: each token with its role.
    pub scoped_tokens: Vec<(String, crate::authz::ApiRole)>,
    pub agent_tls: Option<AgentTls>,
    pub hosts: Vec<HostConfig>,
    /// `sqlite://PATH` or `postgres://…`.
    pub store_url: String,
    /// Where `/metrics` is served; none: not served.
    pub metrics_listen: Option<SocketAddr>,
    pub heartbeat_interval: Duration,
    /// Attempts a trial gets (a lost host costs one) before it counts as failed.
    pub trial_attempts: u32,
    /// How long a job waits for a matching ready host before it fails.
    pub host_wait: Duration,
    pub otlp_endpoint: Option<String>,
    /// Resume queued/running jobs found in the store at start (a restarted controller picks its
    /// jobs up). The CLI's embedded controller turns it off: a job whose `fleetbench run` was
    /// killed ends as failed instead of competing with the new run for the local host.
    pub resume_jobs: bool,
    /// Regression suites run on a cron schedule (`[[suites]] path, cron, tag`).
    pub suites: Vec<crate::regress::schedule::ScheduledSuite>,
}

impl ControllerConfig {
    /// Reads `file` (if given) then the environment, and validates.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut builder = config::Config::builder();
        if let Some(f) = file {
            builder = builder.add_source(config::File::from(f).format(config::FileFormat::Toml));
        }
        builder = builder.add_source(
            config::Environment::with_prefix("FLEETBENCH_CONTROLLER")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true),
        );
        let source_name = file
            .map(|f| f.display().to_string())
            .unwrap_or_else(|| "(environment)".into());
        let raw: RawConfig =
            builder
                .build()
                .and_then(|c| c.try_deserialize())
                .map_err(|source| ConfigError::Load {
                    source_name,
                    source,
                })?;
        raw.validate()
    }

    /// Parses a TOML text (no environment), for tests and embedding.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|source| ConfigError::Load {
                source_name: "(text)".into(),
                source,
            })?;
        raw.validate()
    }

    /// A loopback controller with a store and no static hosts: the embedded mode's start.
    pub fn local(store_url: &str) -> Self {
        ControllerConfig {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            api: ApiAuth::default(),
            api_token: None,
            scoped_tokens: Vec::new(),
            agent_tls: None,
            hosts: Vec::new(),
            store_url: store_url.to_string(),
            metrics_listen: None,
            heartbeat_interval: Duration::from_secs(1),
            trial_attempts: default_attempts(),
            host_wait: Duration::from_secs(30),
            otlp_endpoint: None,
            resume_jobs: true,
            suites: Vec::new(),
        }
    }
}

fn duration(field: &str, text: &str, problems: &mut Vec<String>) -> Duration {
    match humantime::parse_duration(text) {
        Ok(d) if !d.is_zero() => d,
        Ok(_) => {
            problems.push(format!("{field}: must be more than zero"));
            Duration::from_secs(1)
        }
        Err(e) => {
            problems.push(format!(
                "{field}: {text:?} is not a duration such as \"2s\": {e}"
            ));
            Duration::from_secs(1)
        }
    }
}

fn address(field: &str, text: &str, problems: &mut Vec<String>) -> Option<SocketAddr> {
    match text.parse() {
        Ok(a) => Some(a),
        Err(e) => {
            problems.push(format!("{field}: {text:?} is not an IP:port address: {e}"));
            None
        }
    }
}

impl RawConfig {
    fn validate(self) -> Result<ControllerConfig, ConfigError> {
        let mut p = Vec::new();
        let listen = address("listen", &self.listen, &mut p);
        let metrics_listen = self
            .metrics_listen
            .as_deref()
            .and_then(|m| address("metrics_listen", m, &mut p));
        let heartbeat_interval = duration("heartbeat_interval", &self.heartbeat_interval, &mut p);
        let host_wait = duration("host_wait", &self.host_wait, &mut p);
        if self.trial_attempts == 0 {
            p.push("trial_attempts: must be at least 1".into());
        }

        let mut api_token = self.api.token.clone();
        if let Some(f) = &self.api.token_file {
            if api_token.is_some() {
                p.push("api.token_file: give api.token or api.token_file, not both".into());
            }
            match std::fs::read_to_string(f) {
                Ok(t) => api_token = t.lines().next().map(|l| l.trim().to_string()),
                Err(e) => p.push(format!("api.token_file: cannot read {}: {e}", f.display())),
            }
        }
        if api_token.as_deref().is_some_and(|t| t.is_empty()) {
            p.push("api.token: must not be empty".into());
        }
        let mut scoped_tokens = Vec::new();
        for (i, t) in self.api.tokens.iter().enumerate() {
            let text = match (&t.token, &t.token_file) {
                (Some(s), None) => Some(s.clone()),
                (None, Some(f)) => match std::fs::read_to_string(f) {
                    Ok(s) => s.lines().next().map(|l| l.trim().to_string()),
                    Err(e) => {
                        p.push(format!(
                            "api.tokens[{i}].token_file: cannot read {}: {e}",
                            f.display()
                        ));
                        None
                    }
                },
                _ => {
                    p.push(format!("api.tokens[{i}]: give token or token_file (one)"));
                    None
                }
            };
            match text {
                Some(s) if s.len() >= 16 => scoped_tokens.push((s, t.role)),
                Some(_) => p.push(format!(
                    "api.tokens[{i}]: a token has at least 16 characters"
                )),
                None => {}
            }
        }
        if let Some(a) = listen
            && self.api.tls.is_none()
            && (api_token.is_some() || !scoped_tokens.is_empty())
            && !a.ip().is_loopback()
        {
            p.push(format!(
                "listen: {a} is not a loopback address and api.tls is not set; a bearer token is \
                 never accepted over plaintext off loopback (anyone on the path could read it): \
                 configure api.tls (fleetbench certs init writes controller-server.pem)"
            ));
        }
        if let Some(tls) = &self.api.tls
            && let Err(e) = fleetbench_support::tls::server_tls(&tls.cert, &tls.key, &tls.client_ca)
        {
            p.push(format!("api.tls: {e}"));
        }
        if let Some(a) = listen
            && self.api.tls.is_none()
            && api_token.is_none()
            && !a.ip().is_loopback()
        {
            p.push(format!(
                "listen: {a} is not a loopback address; an API without api.tls or api.token \
                 may only listen on loopback"
            ));
        }
        if let Some(t) = &self.agent_tls {
            let domain = t.domain.clone().unwrap_or_else(|| "localhost".into());
            if let Err(e) = fleetbench_support::tls::client_tls(&t.ca, &t.cert, &t.key, &domain) {
                p.push(format!("agent_tls: {e}"));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, h) in self.hosts.iter().enumerate() {
            if h.name.trim().is_empty() {
                p.push(format!("hosts[{i}].name: must not be empty"));
            } else if !names.insert(h.name.clone()) {
                p.push(format!("hosts[{i}].name: {:?} is listed twice", h.name));
            }
            match h.address.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
                _ => p.push(format!(
                    "hosts[{i}].address: {:?} is not host:port",
                    h.address
                )),
            }
        }
        let url = &self.store_url;
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            p.push(format!(
                "store_url: {url:?}: expected sqlite://PATH or postgres://USER@HOST/DB"
            ));
        }
        crate::regress::schedule::validate(&self.suites, &mut p);
        if !p.is_empty() {
            return Err(ConfigError::Invalid(p));
        }
        Ok(ControllerConfig {
            listen: listen.expect("validated"),
            api: self.api,
            api_token,
            scoped_tokens,
            agent_tls: self.agent_tls,
            hosts: self.hosts,
            store_url: self.store_url,
            metrics_listen,
            heartbeat_interval,
            trial_attempts: self.trial_attempts,
            host_wait,
            otlp_endpoint: self.otlp_endpoint,
            resume_jobs: true,
            suites: self.suites,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_loopback_sqlite() {
        let c = ControllerConfig::from_toml("").unwrap();
        assert!(c.listen.ip().is_loopback());
        assert!(c.store_url.starts_with("sqlite://"));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(2));
        assert!(c.hosts.is_empty());
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let err = ControllerConfig::from_toml(
            r#"
            listen = "0.0.0.0:7070"
            store_url = "mysql://x"
            heartbeat_interval = "soon"
            [[hosts]]
            name = "a"
            address = "10.0.0.1"
            [[hosts]]
            name = "a"
            address = "10.0.0.2:7000"
            "#,
        )
        .unwrap_err();
        let text = err.to_string();
        for needle in [
            "listen: 0.0.0.0:7070 is not a loopback address",
            "store_url: \"mysql://x\"",
            "heartbeat_interval: \"soon\"",
            "hosts[0].address: \"10.0.0.1\" is not host:port",
            "hosts[1].name: \"a\" is listed twice",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
    }

    #[test]
    fn a_token_needs_tls_off_loopback_and_unknown_keys_are_refused() {
        let err =
            ControllerConfig::from_toml("listen = \"0.0.0.0:7070\"\n[api]\ntoken = \"s3cret\"\n")
                .unwrap_err();
        assert!(
            err.to_string().contains("never accepted over plaintext"),
            "{err}"
        );
        let c =
            ControllerConfig::from_toml("listen = \"127.0.0.1:7070\"\n[api]\ntoken = \"s3cret\"\n")
                .unwrap();
        assert_eq!(c.api_token.as_deref(), Some("s3cret"));
        let err = ControllerConfig::from_toml("lisen = \"127.0.0.1:1\"").unwrap_err();
        assert!(err.to_string().contains("lisen"), "{err}");
    }

    #[test]
    fn missing_tls_files_are_named() {
        let err = ControllerConfig::from_toml(
            "[agent_tls]\nca = \"/nonexistent/ca.pem\"\ncert = \"/x/c.pem\"\nkey = \"/x/k\"\n",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("agent_tls: cannot read /nonexistent/ca.pem"),
            "{err}"
        );
    }
}
