//! The controller's configuration: one typed struct, read from a TOML file and
//! `FLEETBENCH_CONTROLLER__…` environment variables (`__` separates nested keys, e.g.
//! `FLEETBENCH_CONTROLLER__API__TOKEN`), validated as a whole before anything binds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fleetbench_support::tls::{ClientTlsFiles, ServerTlsFiles};
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
    pub tls: Option<ServerTlsFiles>,
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

/// Who may scrape `/metrics`. The series name jobs, hosts, models and configs: what a viewer
/// reads through the API, so `viewer` asks for at least that role.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsAuth {
    /// Anyone who reaches the port: loopback only unless `metrics.unauthenticated_off_loopback`.
    #[default]
    None,
    /// A viewer, operator or admin: a bearer token of `api.token`/`[[api.tokens]]` or a client
    /// certificate of one of those roles (with `[metrics.tls]`).
    Viewer,
}

/// `[metrics]`: how `/metrics` (at `metrics_listen`) is protected.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    #[serde(default)]
    pub auth: MetricsAuth,
    /// HTTPS for `/metrics`: server certificate and key, and the CA scrapers' client
    /// certificates chain to (a client certificate is optional; a token also works).
    pub tls: Option<ServerTlsFiles>,
    /// Serve `/metrics` to anyone beyond loopback (no TLS, no auth). Off by default; a
    /// non-loopback `metrics_listen` without auth is refused unless this names the choice.
    #[serde(default)]
    pub unauthenticated_off_loopback: bool,
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
    agent_tls: Option<ClientTlsFiles>,
    #[serde(default)]
    hosts: Vec<HostConfig>,
    #[serde(default = "default_store")]
    store_url: String,
    metrics_listen: Option<String>,
    #[serde(default)]
    metrics: MetricsConfig,
    #[serde(default = "default_heartbeat")]
    heartbeat_interval: String,
    #[serde(default = "default_attempts")]
    trial_attempts: u32,
    #[serde(default = "default_host_wait")]
    host_wait: String,
    #[serde(default = "default_lease_ttl")]
    lease_ttl: String,
    #[serde(default = "default_telemetry_interval")]
    telemetry_interval: String,
    #[serde(default = "default_metrics_job_ttl")]
    metrics_job_ttl: String,
    otlp_endpoint: Option<String>,
    #[serde(default)]
    suites: Vec<crate::regress::schedule::ScheduledSuite>,
    #[serde(default = "default_store_retry_for")]
    store_retry_for: String,
    advertise_url: Option<String>,
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
fn default_store_retry_for() -> String {
    "60s".into()
}
fn default_lease_ttl() -> String {
    "15s".into()
}
fn default_telemetry_interval() -> String {
    "500ms".into()
}
fn default_metrics_job_ttl() -> String {
    "10m".into()
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
    pub agent_tls: Option<ClientTlsFiles>,
    pub hosts: Vec<HostConfig>,
    /// `sqlite://PATH` or `postgres://…`.
    pub store_url: String,
    /// Where `/metrics` is served; none: not served.
    pub metrics_listen: Option<SocketAddr>,
    /// Who may scrape it, over what.
    pub metrics: MetricsConfig,
    pub heartbeat_interval: Duration,
    /// Attempts a trial gets (a lost host costs one) before it counts as failed.
    pub trial_attempts: u32,
    /// How long a job waits for a matching ready host before it fails.
    pub host_wait: Duration,
    /// TTL of the agent lease a trial holds on its host (renewed every third of it): how long
    /// a partitioned host keeps its engine, and how long before its trial runs elsewhere.
    pub lease_ttl: Duration,
    /// The interval of the telemetry each busy host streams during a trial (100 ms or more).
    /// Each level's GPU power is the mean of the samples inside it: a level shorter than a few
    /// intervals gets a coarse figure.
    pub telemetry_interval: Duration,
    /// How long `/metrics` keeps a job's per-job series after the job ends (results live in the
    /// store; Prometheus holds live series only).
    pub metrics_job_ttl: Duration,
    pub otlp_endpoint: Option<String>,
    /// Resume queued/running jobs found in the store at start (a restarted controller picks its
    /// jobs up). The CLI's embedded controller turns it off: a job whose `fleetbench run` was
    /// killed ends as failed instead of competing with the new run for the local host.
    pub resume_jobs: bool,
    /// Regression suites run on a cron schedule (`[[suites]] path, cron, tag`).
    pub suites: Vec<crate::regress::schedule::ScheduledSuite>,
    /// How long store operations retry transient errors (`store_retry_for`, default 60 s)
    /// before the job they serve fails.
    pub store_retry: crate::store::RetryPolicy,
    /// The API URL clients reach this controller at, which a standby names to clients
    /// (`advertise_url`; default `http[s]://` the bound listen address).
    pub advertise_url: Option<String>,
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
            metrics: MetricsConfig::default(),
            heartbeat_interval: Duration::from_secs(1),
            trial_attempts: default_attempts(),
            host_wait: Duration::from_secs(30),
            lease_ttl: Duration::from_secs(15),
            telemetry_interval: Duration::from_millis(500),
            metrics_job_ttl: Duration::from_secs(600),
            otlp_endpoint: None,
            resume_jobs: true,
            suites: Vec::new(),
            store_retry: crate::store::RetryPolicy::default(),
            advertise_url: None,
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

/// `/metrics` beyond loopback needs auth over TLS, or the named opt-in to an open endpoint; a
/// token is never accepted over plaintext off loopback, as on the API.
fn check_metrics(
    listen: Option<SocketAddr>,
    m: &MetricsConfig,
    has_tokens: bool,
    p: &mut Vec<String>,
) {
    if let Some(tls) = &m.tls
        && let Err(e) = tls.reloading(fleetbench_support::tls::ClientAuth::Optional)
    {
        p.push(format!("metrics.tls: {e}"));
    }
    if m.auth == MetricsAuth::Viewer && m.tls.is_none() && !has_tokens {
        p.push(
            "metrics.auth: \"viewer\" needs a way to prove the role: a token (api.token or \
             [[api.tokens]]) or client certificates ([metrics.tls])"
                .into(),
        );
    }
    if m.auth == MetricsAuth::Viewer && m.unauthenticated_off_loopback {
        p.push(
            "metrics.unauthenticated_off_loopback: contradicts metrics.auth = \"viewer\"".into(),
        );
    }
    let Some(a) = listen.filter(|a| !a.ip().is_loopback()) else {
        return;
    };
    match m.auth {
        MetricsAuth::None if !m.unauthenticated_off_loopback => p.push(format!(
            "metrics_listen: {a} is not a loopback address and /metrics has no auth (its series \
             name jobs, hosts and models): set [metrics] auth = \"viewer\" with [metrics.tls] \
             (scrapers present a viewer certificate or token), or name the open endpoint with \
             metrics.unauthenticated_off_loopback = true"
        )),
        MetricsAuth::Viewer if m.tls.is_none() => p.push(format!(
            "metrics_listen: {a} is not a loopback address and metrics.tls is not set; a bearer \
             token is never accepted over plaintext off loopback: configure [metrics.tls]"
        )),
        _ => {}
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
        let store_retry = crate::store::RetryPolicy {
            budget: duration("store_retry_for", &self.store_retry_for, &mut p),
            ..crate::store::RetryPolicy::default()
        };
        if let Some(u) = &self.advertise_url
            && !(u.starts_with("http://") || u.starts_with("https://"))
        {
            p.push(format!(
                "advertise_url: {u:?} is not an http:// or https:// URL"
            ));
        }
        let lease_ttl = duration("lease_ttl", &self.lease_ttl, &mut p);
        if lease_ttl < Duration::from_secs(1) || lease_ttl > Duration::from_secs(600) {
            p.push(format!(
                "lease_ttl: {:?} is outside 1s to 10m (the agents' bounds)",
                self.lease_ttl
            ));
        }
        let telemetry_interval = duration("telemetry_interval", &self.telemetry_interval, &mut p);
        if telemetry_interval < Duration::from_millis(100)
            || telemetry_interval > Duration::from_secs(60)
        {
            p.push(format!(
                "telemetry_interval: {:?} is outside 100ms..60s (agents refuse faster streams)",
                self.telemetry_interval
            ));
        }
        let metrics_job_ttl = duration("metrics_job_ttl", &self.metrics_job_ttl, &mut p);
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
            && let Err(e) = tls.reloading(fleetbench_support::tls::ClientAuth::Required)
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
        check_metrics(
            metrics_listen,
            &self.metrics,
            api_token.is_some() || !scoped_tokens.is_empty(),
            &mut p,
        );
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
            metrics: self.metrics,
            heartbeat_interval,
            trial_attempts: self.trial_attempts,
            host_wait,
            lease_ttl,
            telemetry_interval,
            metrics_job_ttl,
            otlp_endpoint: self.otlp_endpoint,
            resume_jobs: true,
            suites: self.suites,
            store_retry,
            advertise_url: self.advertise_url,
        })
    }
}

#[cfg(test)]
mod tests;
