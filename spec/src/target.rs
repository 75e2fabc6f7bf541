//! `[configs.target]`: a config that is an endpoint fleetbench does not own (a router, a
//! gateway, a Kubernetes Service). No engine is started for it; the load is driven from the
//! job's hosts against its URL.
//!
//! Secrets (the API key, secret header values) are written as references the agent resolves,
//! `env:NAME` or `file:/path`, never as values: a job spec is kept in git, stored by the
//! controller and echoed in events, so a value written here would leak everywhere. A value that
//! is not a reference is refused, and the error never repeats it.

use std::collections::BTreeMap;

use super::parse::string_map;
use super::walk::{Ctx, Table};

const TARGET_KEYS: &[&str] = &[
    "url",
    "ca_cert",
    "api_key",
    "headers",
    "secret_headers",
    "metrics",
];

/// An external target, validated.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExternalTarget {
    /// `http://` or `https://` base URL of the OpenAI-compatible API.
    pub url: String,
    /// PEM file on the agent; empty: the system's store.
    pub ca_cert: String,
    /// A reference, `env:NAME` or `file:/path`; empty: no key.
    pub api_key: String,
    /// Plain headers, sent as written.
    pub headers: BTreeMap<String, String>,
    /// Header name -> reference.
    pub secret_headers: BTreeMap<String, String>,
    /// Engine-side Prometheus endpoints (http://), scraped around every level.
    pub metrics: Vec<String>,
}

impl ExternalTarget {
    /// The server this target loads: scheme, host and port (the default port written out),
    /// lower-cased. A gateway's paths, tenants and headers share one server's capacity.
    pub fn origin(&self) -> String {
        let (scheme, rest) = self.url.split_once("://").unwrap_or(("http", &self.url));
        let scheme = scheme.to_ascii_lowercase();
        let authority = rest
            .split(['/', '?', '#'])
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let has_port = authority.rsplit_once(':').is_some_and(|(host, port)| {
            !port.is_empty() && !port.contains(']') && !host.is_empty()
        });
        if has_port {
            format!("{scheme}://{authority}")
        } else {
            let port = if scheme == "https" { 443 } else { 80 };
            format!("{scheme}://{authority}:{port}")
        }
    }
}

/// Whether `v` is a secret reference; the error (without the value) says what is expected.
fn reference(v: &str) -> Result<(), String> {
    let ok = match v.split_once(':') {
        Some(("env", name)) => {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        }
        Some(("file", path)) => path.starts_with('/') && !path.split('/').any(|p| p == ".."),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(
            "a secret is written as a reference the agent resolves, \"env:NAME\" (A-Z, 0-9, _) \
             or \"file:/absolute/path\", never as a value (the value given is not repeated here)"
                .into(),
        )
    }
}

fn url_ok(v: &str, https: bool) -> Result<(), String> {
    let rest = v
        .strip_prefix("http://")
        .or_else(|| v.strip_prefix("https://").filter(|_| https));
    let Some(rest) = rest else {
        return Err(if https {
            format!("{v:?} is not an http:// or https:// URL")
        } else {
            format!("{v:?} is not an http:// URL (engine metrics are scraped over http://)")
        });
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err(format!(
            "{v:?}: a host is needed, and credentials never go in the URL (use api_key)"
        ));
    }
    Ok(())
}

/// Reads `target = { … }` of a config; `None` when broken (errors recorded).
pub(crate) fn target(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<ExternalTarget> {
    t.check_keys(ctx, TARGET_KEYS);
    let before = ctx.errors.len();
    let mut out = ExternalTarget::default();
    if let Some(url) = t.required_string(ctx, "url", "the endpoint's base URL") {
        if let Err(m) = url_ok(&url, true) {
            ctx.error(Some(&t.key_span("url")), &t.field("url"), m);
        }
        out.url = url.trim_end_matches('/').to_string();
    }
    if let Some(ca) = t.string(ctx, "ca_cert") {
        if !ca.starts_with('/') {
            let m = format!("{ca:?}: an absolute path of a PEM file on the agent's host");
            ctx.error(Some(&t.key_span("ca_cert")), &t.field("ca_cert"), m);
        }
        out.ca_cert = ca;
    }
    if let Some(k) = t.string(ctx, "api_key") {
        if let Err(m) = reference(&k) {
            ctx.error(Some(&t.key_span("api_key")), &t.field("api_key"), m);
        }
        out.api_key = k;
    }
    if let Some(h) = t.table(ctx, "headers")
        && let Some(m) = string_map(ctx, &h)
    {
        for k in m.keys() {
            if k.eq_ignore_ascii_case("authorization") {
                let msg = "Authorization carries a secret: give it as api_key or under \
                           secret_headers, by reference";
                ctx.error(Some(&h.key_span(k)), &h.field(k), msg);
            }
        }
        out.headers = m;
    }
    if let Some(h) = t.table(ctx, "secret_headers")
        && let Some(m) = string_map(ctx, &h)
    {
        for (k, v) in &m {
            if let Err(msg) = reference(v) {
                ctx.error(Some(&h.key_span(k)), &h.field(k), msg);
            }
        }
        out.secret_headers = m;
    }
    if let Some(list) = t.string_list(ctx, "metrics") {
        for (i, u) in list.iter().enumerate() {
            if let Err(m) = url_ok(u, false) {
                ctx.error(
                    Some(&t.key_span("metrics")),
                    &format!("{}[{i}]", t.field("metrics")),
                    m,
                );
            }
        }
        out.metrics = list;
    }
    (ctx.errors.len() == before).then_some(out)
}

impl ExternalTarget {
    /// What the agent's `RunBenchmark` receives.
    pub fn to_pb(
        &self,
        kind: fleetbench_engines::EngineKind,
    ) -> fleetbench_proto::agentpb::ExternalTarget {
        use fleetbench_proto::agentpb;
        let headers = |m: &BTreeMap<String, String>| {
            m.iter()
                .map(|(name, value)| agentpb::Header {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect()
        };
        agentpb::ExternalTarget {
            base_url: self.url.clone(),
            ca_cert: self.ca_cert.clone(),
            headers: headers(&self.headers),
            secret_headers: headers(&self.secret_headers),
            api_key_ref: self.api_key.clone(),
            metrics_urls: self.metrics.clone(),
            metrics_kind: super::kind_to_pb(kind) as i32,
        }
    }

    /// The target's part of the config identity: everything that decides where and how the
    /// load goes (references, never values, as only references are known here).
    pub(crate) fn identity(&self) -> Vec<(String, Option<String>)> {
        let mut v = vec![("target.url".to_string(), Some(self.url.clone()))];
        if !self.ca_cert.is_empty() {
            v.push(("target.ca_cert".into(), Some(self.ca_cert.clone())));
        }
        if !self.api_key.is_empty() {
            v.push(("target.api_key".into(), Some(self.api_key.clone())));
        }
        for (k, x) in &self.headers {
            v.push((format!("target.headers.{k}"), Some(x.clone())));
        }
        for (k, x) in &self.secret_headers {
            v.push((format!("target.secret_headers.{k}"), Some(x.clone())));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_only() {
        assert!(reference("env:GW_KEY").is_ok());
        assert!(reference("file:/etc/fleetbench/key").is_ok());
        assert!(reference("sk-1234").is_err());
        assert!(reference("env:lower").is_err());
        assert!(reference("file:relative").is_err());
        assert!(reference("file:/a/../b").is_err());
        assert!(!reference("sk-1234").unwrap_err().contains("sk-1234"));
        assert!(url_ok("https://gw", true).is_ok());
        assert!(url_ok("https://gw", false).is_err());
        assert!(url_ok("http://u:p@gw", true).is_err());
    }

    #[test]
    fn origin_is_scheme_host_and_port() {
        let t = |url: &str| ExternalTarget {
            url: url.into(),
            ..Default::default()
        };
        assert_eq!(
            t("https://GW.internal/v1").origin(),
            "https://gw.internal:443"
        );
        assert_eq!(
            t("https://gw.internal:443").origin(),
            "https://gw.internal:443"
        );
        assert_eq!(
            t("http://10.0.0.7:8000/x?y").origin(),
            "http://10.0.0.7:8000"
        );
        assert_eq!(t("http://10.0.0.7").origin(), "http://10.0.0.7:80");
        assert_eq!(t("http://[::1]:9000").origin(), "http://[::1]:9000");
        assert_eq!(t("http://[::1]").origin(), "http://[::1]:80");
    }
}
