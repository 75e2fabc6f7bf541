//! Where and how each signal is exported, from the standard `OTEL_EXPORTER_OTLP_*` variables.
//!
//! Per signal (traces, metrics), the signal's own variable wins over the general one:
//! endpoint, protocol, headers and certificate. The rules follow the OpenTelemetry exporter
//! specification, with one documented difference: when no protocol is given, fleetbench uses
//! `grpc` (its behaviour before the variable was honoured, so existing deployments keep
//! working) unless the endpoint is on port 4318, OTLP/HTTP's registered port, which means
//! `http/protobuf`. For OTLP/HTTP the general endpoint is a base URL to which `/v1/traces` or
//! `/v1/metrics` is appended; a signal's own endpoint is used as given.
//!
//! Everything is read and checked here, before any exporter is built, so a bad value is an
//! error naming its variable when the process starts, not a silent drop at the first export.

use std::path::PathBuf;

use super::{TelemetryConfig, TelemetryError};

pub(crate) const ENV_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
pub(crate) const ENV_HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
pub(crate) const ENV_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CERTIFICATE";

/// The wire format of one signal's export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// One signal's export, resolved and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SignalExport {
    /// The URL requests go to (for OTLP/HTTP, with the signal's path).
    pub endpoint: String,
    pub protocol: Protocol,
    /// `(name, value)`, values URL-decoded.
    pub headers: Vec<(String, String)>,
    /// The CA file to trust instead of the system's store (https only) and its PEM text.
    pub ca_cert: Option<(PathBuf, Vec<u8>)>,
}

impl SignalExport {
    pub fn tls(&self) -> bool {
        self.endpoint.starts_with("https://")
    }
}

/// Where each signal goes; `None` means that signal is not exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoints {
    pub traces: Option<SignalExport>,
    pub metrics: Option<SignalExport>,
}

#[derive(Clone, Copy)]
struct Signal {
    /// `TRACES` or `METRICS`, as in the variable names.
    upper: &'static str,
    /// The OTLP/HTTP path appended to a base URL.
    path: &'static str,
}

const TRACES: Signal = Signal {
    upper: "TRACES",
    path: "/v1/traces",
};
const METRICS: Signal = Signal {
    upper: "METRICS",
    path: "/v1/metrics",
};

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn setting(variable: impl Into<String>, reason: impl Into<String>) -> TelemetryError {
    TelemetryError::Setting {
        variable: variable.into(),
        reason: reason.into(),
    }
}

/// The config's endpoint serves both signals (a base URL, like the general variable);
/// otherwise the signal's own variable, then the general one.
pub(crate) fn resolve_endpoints(
    config: &TelemetryConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Endpoints, TelemetryError> {
    if env(super::ENV_SDK_DISABLED).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(Endpoints {
            traces: None,
            metrics: None,
        });
    }
    Ok(Endpoints {
        traces: resolve_signal(config, env, TRACES)?,
        metrics: resolve_signal(config, env, METRICS)?,
    })
}

/// The signal's own variable if set, else the general one: `(variable, value)`.
fn pick(
    env: &dyn Fn(&str) -> Option<String>,
    general: &str,
    signal: Signal,
) -> Option<(String, String)> {
    let specific = general.replacen("OTLP_", &format!("OTLP_{}_", signal.upper), 1);
    non_empty(env(&specific))
        .map(|v| (specific, v))
        .or_else(|| non_empty(env(general)).map(|v| (general.to_string(), v)))
}

fn resolve_signal(
    config: &TelemetryConfig,
    env: &dyn Fn(&str) -> Option<String>,
    signal: Signal,
) -> Result<Option<SignalExport>, TelemetryError> {
    // (variable it came from, value, whether it is a base URL)
    let (variable, endpoint, base) = match non_empty(config.otlp_endpoint.clone()) {
        Some(e) => ("otlp_endpoint".to_string(), e, true),
        None => match pick(env, super::ENV_OTLP_ENDPOINT, signal) {
            Some((var, e)) => {
                let base = var == super::ENV_OTLP_ENDPOINT;
                (var, e, base)
            }
            None => return Ok(None),
        },
    };
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|e| setting(&variable, format!("{endpoint:?} is not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        // Without a scheme the gRPC exporter would silently try TLS (opentelemetry-otlp 0.33),
        // which is never what a plain `host:4317` meant.
        _ => {
            return Err(setting(
                &variable,
                format!(
                    "the endpoint needs a scheme: write http://{endpoint} for a plain-text \
                     collector or https://{endpoint} for TLS"
                ),
            ));
        }
    }
    let protocol = match pick(env, ENV_PROTOCOL, signal) {
        Some((var, p)) => match p.as_str() {
            "grpc" => Protocol::Grpc,
            "http/protobuf" => Protocol::HttpProtobuf,
            "http/json" => {
                return Err(setting(
                    var,
                    "http/json is not supported: use http/protobuf or grpc",
                ));
            }
            other => {
                return Err(setting(
                    var,
                    format!("{other:?} is not one of grpc, http/protobuf"),
                ));
            }
        },
        None if uri.port_u16() == Some(4318) => Protocol::HttpProtobuf,
        None => Protocol::Grpc,
    };
    let endpoint = if protocol == Protocol::HttpProtobuf && base {
        format!("{}{}", endpoint.trim_end_matches('/'), signal.path)
    } else {
        endpoint
    };
    let headers = match pick(env, ENV_HEADERS, signal) {
        Some((var, text)) => parse_headers(&text).map_err(|reason| setting(var, reason))?,
        None => Vec::new(),
    };
    let ca_cert = match pick(env, ENV_CERTIFICATE, signal) {
        // A CA for a plain-text endpoint has nothing to check: the specification applies it to
        // secure connections only, and a general variable may serve a signal sent in clear.
        Some(_) if uri.scheme_str() == Some("http") => None,
        Some((var, path)) => {
            let path = PathBuf::from(path);
            let pem = std::fs::read(&path)
                .map_err(|e| setting(&var, format!("cannot read {}: {e}", path.display())))?;
            if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                return Err(setting(
                    &var,
                    format!("{}: no CERTIFICATE section found", path.display()),
                ));
            }
            Some((path, pem))
        }
        None => None,
    };
    Ok(Some(SignalExport {
        endpoint,
        protocol,
        headers,
        ca_cert,
    }))
}

/// `key1=value1,key2=value2` with URL-encoded values (W3C baggage form, as the specification
/// says). Errors name the entry's key, never its value (it is often a token).
fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, item) in text.split(',').map(str::trim).enumerate() {
        if item.is_empty() {
            continue;
        }
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("entry {} is not key=value", i + 1));
        };
        let key = key.trim();
        if http::HeaderName::from_bytes(key.as_bytes()).is_err() {
            return Err(format!("{key:?} is not a valid header name"));
        }
        let value = url_decode(value.trim())
            .ok_or_else(|| format!("the value of {key} is not valid URL encoding"))?;
        if http::HeaderValue::from_str(&value).is_err() {
            return Err(format!(
                "the value of {key} holds a character not allowed in a header"
            ));
        }
        out.push((key.to_ascii_lowercase(), value));
    }
    Ok(out)
}

fn url_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn resolve(pairs: &[(&str, &str)]) -> Result<Endpoints, TelemetryError> {
        resolve_endpoints(&TelemetryConfig::default(), &env_of(pairs))
    }

    #[test]
    fn http_protobuf_appends_signal_paths_to_the_general_endpoint_only() {
        let e = resolve(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/base/"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://m:9000/custom",
            ),
        ])
        .unwrap();
        let t = e.traces.unwrap();
        assert_eq!(t.endpoint, "http://c:4318/base/v1/traces");
        assert_eq!(t.protocol, Protocol::HttpProtobuf);
        let m = e.metrics.unwrap();
        assert_eq!(
            m.endpoint, "http://m:9000/custom",
            "a signal's own endpoint is as given"
        );
    }

    #[test]
    fn protocol_defaults_to_grpc_except_on_the_otlp_http_port() {
        let e = resolve(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")]).unwrap();
        assert_eq!(e.traces.unwrap().protocol, Protocol::Grpc);
        let e = resolve(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap();
        let t = e.traces.unwrap();
        assert_eq!(t.protocol, Protocol::HttpProtobuf);
        assert_eq!(t.endpoint, "http://c:4318/v1/traces");
        // A signal's own protocol wins over the general one.
        let e = resolve(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
        ])
        .unwrap();
        assert_eq!(e.traces.unwrap().protocol, Protocol::Grpc);
        assert_eq!(e.metrics.unwrap().protocol, Protocol::HttpProtobuf);
    }

    #[test]
    fn headers_are_decoded_and_bad_settings_name_their_variable() {
        let e = resolve(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "X-Tenant=a%20b, api-key=k%3D1",
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-only=traces"),
        ])
        .unwrap();
        assert_eq!(
            e.metrics.unwrap().headers,
            [
                ("x-tenant".into(), "a b".into()),
                ("api-key".into(), "k=1".into())
            ]
        );
        assert_eq!(
            e.traces.unwrap().headers,
            [("x-only".to_string(), "traces".to_string())]
        );
        let err = |pairs: &[(&str, &str)]| resolve(pairs).unwrap_err().to_string();
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317");
        let m = err(&[base, ("OTEL_EXPORTER_OTLP_HEADERS", "novalue-secret")]);
        assert!(
            m.contains("OTEL_EXPORTER_OTLP_HEADERS") && !m.contains("secret"),
            "{m}"
        );
        let m = err(&[base, ("OTEL_EXPORTER_OTLP_HEADERS", "k=%zz")]);
        assert!(m.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{m}");
        let m = err(&[base, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        assert!(
            m.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && m.contains("http/json"),
            "{m}"
        );
        let m = err(&[base, ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift")]);
        assert!(m.contains("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), "{m}");
        let m = err(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4317"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
        ]);
        assert!(
            m.contains("OTEL_EXPORTER_OTLP_CERTIFICATE") && m.contains("/nonexistent"),
            "{m}"
        );
        let m = err(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "c:4317")]);
        assert!(
            m.contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") && m.contains("http://c:4317"),
            "{m}"
        );
        // A CA is not read for a plain-text endpoint.
        assert!(
            resolve(&[
                base,
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem")
            ])
            .is_ok()
        );
    }
}
