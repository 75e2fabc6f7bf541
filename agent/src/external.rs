//! External targets: load driven from this agent against an endpoint fleetbench does not own
//! (a router, a gateway, a Kubernetes Service), as a job's `target` asks.
//!
//! Two things widen this agent's trust, so both are off until its config names them in
//! `[external]`: where load may go (exact origins, `scheme://host:port`: an agent that sends
//! requests anywhere a caller names is a relay into the network it sits in), and which secrets
//! a job may reference (exact environment variable names and exact file paths: a caller that
//! could name any variable or file could read the agent's own credentials, and would send them
//! to the target). A secret is resolved here, at the moment of use, and lives only in the load
//! generator's header map, whose `Debug` prints no value; errors name the reference, never the
//! value.

use std::path::PathBuf;

use fleetbench_engines::EngineKind;
use fleetbench_loadgen::ClientOptions;
use fleetbench_proto::agentpb;
use serde::Deserialize;

use crate::config::ConfigError;

/// The longest secret read from a file (an API key or a token, not a document).
const MAX_SECRET_LEN: usize = 8192;

/// `[external]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExternal {
    /// Origins (`https://gw.example:8443`) that load and metrics scrapes may go to.
    #[serde(default)]
    origins: Vec<String>,
    /// Environment variables of the agent a job may reference as `env:NAME`.
    #[serde(default)]
    secret_env: Vec<String>,
    /// Files a job may reference as `file:/path` (absolute, exact).
    #[serde(default)]
    secret_files: Vec<PathBuf>,
    /// Files a job may name as `ca_cert` (absolute, exact).
    #[serde(default)]
    ca_files: Vec<PathBuf>,
    /// Any origin, variable and file: only the CLI's embedded agent, which runs the user's own
    /// spec as the user, sets it. A served agent's config cannot.
    #[serde(skip)]
    any: bool,
}

/// What external targets may do on this agent. The default allows none.
#[derive(Debug, Clone, Default)]
pub struct ExternalPolicy {
    any: bool,
    origins: Vec<String>,
    secret_env: Vec<String>,
    secret_files: Vec<PathBuf>,
    ca_files: Vec<PathBuf>,
}

/// Why an external target was refused; `field` names the request's field.
#[derive(Debug, Clone, thiserror::Error)]
#[error("target.{field}: {message}")]
pub struct TargetError {
    pub field: String,
    pub message: String,
}

fn refuse(field: impl Into<String>, message: impl Into<String>) -> TargetError {
    TargetError {
        field: field.into(),
        message: message.into(),
    }
}

/// `scheme://host[:port]` of `url`, lower-case, with the scheme's default port made explicit,
/// so that `https://GW` and `https://gw:443` are one origin.
pub(crate) fn origin(url: &str) -> Result<String, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("{url:?} is not an http:// or https:// URL"))?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err(format!("{url:?}: only http:// and https:// are supported")),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err(format!("{url:?}: a host is needed, and no user:password@"));
    }
    let authority = authority.to_ascii_lowercase();
    // An IPv6 literal keeps its brackets; the port follows the last ':' after them.
    let has_port = match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    };
    if has_port {
        let (host, port) = authority.rsplit_once(':').unwrap_or_default();
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{url:?}: {port:?} is not a port"))?;
        Ok(format!("{scheme}://{host}:{port}"))
    } else {
        Ok(format!("{scheme}://{authority}:{default_port}"))
    }
}

impl ExternalPolicy {
    /// The agent's own variables that jobs may reference as secrets: read only by the load
    /// generator at the moment of use, never inherited by an engine (see `LaunchPlan`).
    pub fn secret_env_names(&self) -> &[String] {
        &self.secret_env
    }

    /// Everything allowed: the CLI's embedded agent, run by the user for the user's own spec.
    pub fn open() -> ExternalPolicy {
        ExternalPolicy {
            any: true,
            ..ExternalPolicy::default()
        }
    }

    /// Validates `[external]`; errors name the field.
    pub fn from_raw(raw: RawExternal) -> Result<ExternalPolicy, ConfigError> {
        let origins = raw
            .origins
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let canon = origin(o)
                    .map_err(|m| ConfigError::field(format!("external.origins[{i}]"), m))?;
                let bare = o.trim_end_matches('/');
                if bare.matches('/').count() > 2 {
                    return Err(ConfigError::field(
                        format!("external.origins[{i}]"),
                        format!("{o:?}: an origin is scheme://host:port, without a path"),
                    ));
                }
                Ok(canon)
            })
            .collect::<Result<_, _>>()?;
        for (i, n) in raw.secret_env.iter().enumerate() {
            let valid = !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if !valid {
                return Err(ConfigError::field(
                    format!("external.secret_env[{i}]"),
                    format!("{n:?}: an exact variable name (A-Z, 0-9, '_'); no patterns"),
                ));
            }
        }
        let abs = |field: &str, v: &[PathBuf]| -> Result<(), ConfigError> {
            for (i, p) in v.iter().enumerate() {
                if !p.is_absolute() || p.components().any(|c| c.as_os_str() == "..") {
                    return Err(ConfigError::field(
                        format!("external.{field}[{i}]"),
                        format!("{} is not an absolute path without '..'", p.display()),
                    ));
                }
            }
            Ok(())
        };
        abs("secret_files", &raw.secret_files)?;
        abs("ca_files", &raw.ca_files)?;
        Ok(ExternalPolicy {
            any: raw.any,
            origins,
            secret_env: raw.secret_env,
            secret_files: raw.secret_files,
            ca_files: raw.ca_files,
        })
    }

    fn check_origin(&self, field: &str, url: &str) -> Result<(), TargetError> {
        let o = origin(url).map_err(|m| refuse(field, m))?;
        if self.any || self.origins.contains(&o) {
            return Ok(());
        }
        Err(refuse(
            field,
            format!(
                "{o} is not an allowed origin of this agent (external.origins: {})",
                if self.origins.is_empty() {
                    "none; external targets are off".to_string()
                } else {
                    self.origins.join(", ")
                }
            ),
        ))
    }

    /// The secret a reference names, read now. Errors name the reference, never a value.
    fn resolve(&self, field: &str, reference: &str) -> Result<String, TargetError> {
        let value = if let Some(name) = reference.strip_prefix("env:") {
            if !self.any && !self.secret_env.iter().any(|n| n == name) {
                return Err(refuse(
                    field,
                    format!(
                        "env:{name} is not allowed by this agent (external.secret_env: {})",
                        list(&self.secret_env)
                    ),
                ));
            }
            std::env::var(name)
                .map_err(|_| refuse(field, format!("env:{name} is not set on this agent")))?
        } else if let Some(path) = reference.strip_prefix("file:") {
            let p = PathBuf::from(path);
            if !self.any && !self.secret_files.contains(&p) {
                let allowed: Vec<String> = self
                    .secret_files
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                return Err(refuse(
                    field,
                    format!(
                        "file:{path} is not allowed by this agent (external.secret_files: {})",
                        list(&allowed)
                    ),
                ));
            }
            let bytes = std::fs::read(&p)
                .map_err(|e| refuse(field, format!("file:{path}: {}", e.kind())))?;
            if bytes.len() > MAX_SECRET_LEN {
                return Err(refuse(
                    field,
                    format!("file:{path} is longer than {MAX_SECRET_LEN} bytes"),
                ));
            }
            String::from_utf8(bytes)
                .map_err(|_| refuse(field, format!("file:{path} is not UTF-8 text")))?
                .trim()
                .to_string()
        } else {
            return Err(refuse(
                field,
                "a secret is given by reference, \"env:NAME\" or \"file:/path\" (on the agent), \
                 never as a value",
            ));
        };
        if value.is_empty() {
            return Err(refuse(field, format!("{reference} is empty")));
        }
        Ok(value)
    }

    /// Checks `t` against this policy and builds the load generator's access options, secrets
    /// resolved. Nothing is sent yet.
    pub fn client_options(
        &self,
        t: &agentpb::ExternalTarget,
    ) -> Result<ClientOptions, TargetError> {
        self.check_origin("base_url", &t.base_url)?;
        for (i, u) in t.metrics_urls.iter().enumerate() {
            let field = format!("metrics_urls[{i}]");
            if !u.starts_with("http://") {
                return Err(refuse(
                    &field,
                    format!("{u:?}: engine metrics are scraped over http:// only"),
                ));
            }
            self.check_origin(&field, u)?;
        }
        let ca_cert = if t.ca_cert.is_empty() {
            None
        } else {
            let p = PathBuf::from(&t.ca_cert);
            if !self.any && !self.ca_files.contains(&p) {
                let allowed: Vec<String> = self
                    .ca_files
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                return Err(refuse(
                    "ca_cert",
                    format!(
                        "{} is not allowed by this agent (external.ca_files: {})",
                        p.display(),
                        list(&allowed)
                    ),
                ));
            }
            Some(p)
        };
        let mut headers: Vec<(String, String)> = t
            .headers
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        for (i, h) in t.secret_headers.iter().enumerate() {
            let v = self.resolve(&format!("secret_headers[{i}] ({})", h.name), &h.value)?;
            headers.push((h.name.clone(), v));
        }
        let api_key = if t.api_key_ref.is_empty() {
            None
        } else {
            Some(self.resolve("api_key", &t.api_key_ref)?)
        };
        Ok(ClientOptions {
            headers,
            api_key,
            ca_cert,
        })
    }
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The engine kind the target's metrics are read as.
pub(crate) fn metrics_kind(t: &agentpb::ExternalTarget) -> EngineKind {
    crate::convert::kind_from_proto(t.metrics_kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(
        origins: &[&str],
        env: &[&str],
        files: &[&str],
    ) -> Result<ExternalPolicy, ConfigError> {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        ExternalPolicy::from_raw(RawExternal {
            origins: v(origins),
            secret_env: v(env),
            secret_files: files.iter().map(PathBuf::from).collect(),
            ca_files: Vec::new(),
            any: false,
        })
    }

    fn target(url: &str) -> agentpb::ExternalTarget {
        agentpb::ExternalTarget {
            base_url: url.into(),
            ..Default::default()
        }
    }

    #[test]
    fn origins_are_exact_and_normalised() {
        assert_eq!(
            origin("https://GW.example/v1").unwrap(),
            "https://gw.example:443"
        );
        assert_eq!(origin("http://[::1]:8000/x").unwrap(), "http://[::1]:8000");
        assert!(origin("ftp://x").is_err());
        assert!(origin("https://user:pw@gw").is_err());
        let p = policy(&["https://gw.example"], &[], &[]).unwrap();
        assert!(
            p.check_origin("base_url", "https://gw.example:443/v1")
                .is_ok()
        );
        let e = p
            .check_origin("base_url", "https://gw.example.evil")
            .unwrap_err();
        assert!(e.to_string().starts_with("target.base_url:"), "{e}");
        let e = ExternalPolicy::default()
            .client_options(&target("http://127.0.0.1:1"))
            .unwrap_err();
        assert!(e.to_string().contains("external targets are off"), "{e}");
        assert!(policy(&["https://gw/v1"], &[], &[]).is_err());
        assert!(policy(&[], &["KEY_*"], &[]).is_err());
        assert!(policy(&[], &[], &["rel/path"]).is_err());
    }

    #[test]
    fn secrets_resolve_only_by_allowed_reference_and_errors_hold_no_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "tok-secret-123\n").unwrap();
        let p = policy(
            &["http://127.0.0.1:9"],
            &["FLEETBENCH_EXT_TEST_KEY"],
            &[file.to_str().unwrap()],
        )
        .unwrap();
        // SAFETY: this test alone reads or writes this variable.
        unsafe { std::env::set_var("FLEETBENCH_EXT_TEST_KEY", "sk-env-456") };
        let mut t = target("http://127.0.0.1:9");
        t.api_key_ref = "env:FLEETBENCH_EXT_TEST_KEY".into();
        t.secret_headers.push(agentpb::Header {
            name: "X-Token".into(),
            value: format!("file:{}", file.display()),
        });
        let o = p.client_options(&t).unwrap();
        assert_eq!(o.api_key.as_deref(), Some("sk-env-456"));
        assert_eq!(o.headers, vec![("X-Token".into(), "tok-secret-123".into())]);
        assert!(!format!("{o:?}").contains("sk-env-456"));

        t.api_key_ref = "sk-literal".into();
        let e = p.client_options(&t).unwrap_err();
        assert!(e.to_string().contains("by reference"), "{e}");
        assert!(!e.to_string().contains("sk-literal"), "{e}");
        t.api_key_ref = "env:HOME".into();
        let e = p.client_options(&t).unwrap_err();
        assert!(e.to_string().contains("env:HOME is not allowed"), "{e}");
        t.api_key_ref = "file:/etc/shadow".into();
        let e = p.client_options(&t).unwrap_err();
        assert!(
            e.to_string().contains("file:/etc/shadow is not allowed"),
            "{e}"
        );
        t.api_key_ref = String::new();
        t.ca_cert = "/etc/ssl/other.pem".into();
        let e = p.client_options(&t).unwrap_err();
        assert!(e.to_string().starts_with("target.ca_cert:"), "{e}");
        t.ca_cert = String::new();
        t.metrics_urls = vec!["http://10.0.0.1:8000/metrics".into()];
        let e = p.client_options(&t).unwrap_err();
        assert!(e.to_string().starts_with("target.metrics_urls[0]:"), "{e}");
    }
}
