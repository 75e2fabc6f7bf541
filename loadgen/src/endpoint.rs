//! How the load generator may reach an endpoint it does not own: extra headers, an API key sent
//! as `Authorization: Bearer`, and the CA to trust for `https://`.
//!
//! Kept apart from the workload (`BenchConfig`'s other fields) because it is the only part that
//! holds a secret: its `Debug` never prints a header value or the key, so a configuration can be
//! logged.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Headers that the client sets itself or that describe the connection, not the request: a
/// user's value would break the framing or the keep-alive the measurement relies on.
const RESERVED: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "upgrade",
];

/// Access to the endpoint. The default sends no extra header and trusts the operating system's
/// certificate store for `https://`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientOptions {
    /// Sent with every request (set-up calls included), in this order: `(name, value)`.
    pub headers: Vec<(String, String)>,
    /// Sent as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// PEM file of the CA(s) to trust for `https://` instead of the system's store.
    pub ca_cert: Option<PathBuf>,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("ClientOptions")
            .field("headers", &names)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}

/// Why [`ClientOptions`] cannot be used: `field` is `headers`, `api_key` or `ca_cert`.
#[derive(Debug)]
pub(crate) struct Invalid {
    pub field: &'static str,
    pub message: String,
}

impl ClientOptions {
    /// The header map sent with every request, checked: names and values must be valid HTTP,
    /// reserved names are refused, and `Authorization` may come from the key or a header, not
    /// both. Messages name the header, never its value (it may be a secret).
    pub(crate) fn header_map(&self) -> Result<http::HeaderMap, Invalid> {
        let bad = |field, message: String| Invalid { field, message };
        let mut map = http::HeaderMap::new();
        for (name, value) in &self.headers {
            let n = http::HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| bad("headers", format!("{name:?} is not a valid header name")))?;
            if RESERVED.contains(&n.as_str()) {
                return Err(bad(
                    "headers",
                    format!("{n} is set by the client itself and cannot be given"),
                ));
            }
            let mut v = http::HeaderValue::from_str(value.trim()).map_err(|_| {
                bad(
                    "headers",
                    format!("the value of {n} holds a character not allowed in a header"),
                )
            })?;
            v.set_sensitive(true);
            map.append(n, v);
        }
        if let Some(key) = &self.api_key {
            let key = key.trim();
            if key.is_empty() {
                return Err(bad("api_key", "is empty".into()));
            }
            if map.contains_key(http::header::AUTHORIZATION) {
                return Err(bad(
                    "api_key",
                    "an Authorization header is given too: give one or the other".into(),
                ));
            }
            let mut v = http::HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                bad(
                    "api_key",
                    "holds a character not allowed in a header (a line break?)".into(),
                )
            })?;
            v.set_sensitive(true);
            map.insert(http::header::AUTHORIZATION, v);
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(headers: &[(&str, &str)], key: Option<&str>) -> ClientOptions {
        ClientOptions {
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            api_key: key.map(str::to_string),
            ca_cert: None,
        }
    }

    #[test]
    fn the_key_becomes_a_bearer_header_and_headers_repeat() {
        let map = opts(&[("X-Tenant", "a"), ("x-tenant", "b")], Some(" sk-1 "))
            .header_map()
            .unwrap();
        assert_eq!(map["authorization"], "Bearer sk-1");
        let tenants: Vec<_> = map.get_all("x-tenant").iter().collect();
        assert_eq!(tenants, ["a", "b"]);
    }

    #[test]
    fn bad_values_name_the_field_and_never_the_secret() {
        let err = |o: ClientOptions| {
            let e = o.header_map().unwrap_err();
            (e.field, e.message)
        };
        let (f, m) = err(opts(&[("bad name", "x")], None));
        assert_eq!(f, "headers");
        assert!(m.contains("bad name"), "{m}");
        let (f, m) = err(opts(&[("Host", "evil")], None));
        assert_eq!(f, "headers");
        assert!(m.contains("host"), "{m}");
        let (f, m) = err(opts(&[("X-Key", "secret\nvalue")], None));
        assert_eq!(f, "headers");
        assert!(!m.contains("secret"), "{m}");
        let (f, _) = err(opts(&[("Authorization", "Bearer a")], Some("b")));
        assert_eq!(f, "api_key");
        assert_eq!(err(opts(&[], Some("  "))).0, "api_key");
        let (f, m) = err(opts(&[], Some("sk\r\nX: y")));
        assert_eq!(f, "api_key");
        assert!(!m.contains("sk"), "{m}");
    }

    #[test]
    fn debug_output_hides_values_and_the_key() {
        let text = format!("{:?}", opts(&[("X-Api-Key", "hidden-1")], Some("hidden-2")));
        assert!(text.contains("X-Api-Key"), "{text}");
        assert!(!text.contains("hidden"), "{text}");
    }
}
