//! Who may call what on the controller API. A caller's role comes from its client certificate
//! (the subject's OU, written by `fleetbench certs`) or from a scoped bearer token:
//!
//! | role | may |
//! |---|---|
//! | viewer | read jobs, results, agents, runs, suite history, watch jobs |
//! | operator | a viewer's reads, submit and cancel jobs, drain agents |
//! | agent | register itself (only under the name its certificate carries) |
//! | admin | everything, including recording suite runs (the `last-passing` baseline) |
//!
//! The controller's own certificate (OU `controller`) counts as admin. With neither TLS nor a
//! token the API listens on loopback only (the config refuses anything else) and every caller
//! is the local user, an admin.

use std::sync::Arc;

use fleetbench_support::tls::{Role, peer_identity};
use tonic::{Request, Status};

/// A role on the controller API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApiRole {
    Viewer,
    Operator,
    Agent,
    Admin,
}

impl ApiRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ApiRole::Viewer => "viewer",
            ApiRole::Operator => "operator",
            ApiRole::Agent => "agent",
            ApiRole::Admin => "admin",
        }
    }
}

/// The authenticated caller, put into each request's extensions by [`Authorize`].
#[derive(Debug, Clone)]
pub struct Caller {
    pub role: ApiRole,
    /// The certificate's CN, when the caller came with one.
    pub name: Option<String>,
    /// The certificate's subject alternative names (host names, IPs); empty for a token.
    pub hosts: Vec<String>,
}

/// What a method needs.
pub(crate) const READ: &[ApiRole] = &[ApiRole::Viewer, ApiRole::Operator, ApiRole::Admin];
pub(crate) const OPERATE: &[ApiRole] = &[ApiRole::Operator, ApiRole::Admin];
pub(crate) const REGISTER: &[ApiRole] = &[ApiRole::Agent, ApiRole::Admin];
pub(crate) const ADMIN: &[ApiRole] = &[ApiRole::Admin];

/// The caller of `req` when its role is one of `allowed`; PERMISSION_DENIED naming the role
/// and what was needed otherwise.
pub(crate) fn require<T>(
    req: &Request<T>,
    allowed: &[ApiRole],
    what: &str,
) -> Result<Caller, Status> {
    let caller = req
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("no caller identity"))?;
    if allowed.contains(&caller.role) {
        return Ok(caller);
    }
    let needs: Vec<&str> = allowed.iter().map(|r| r.as_str()).collect();
    Err(Status::permission_denied(format!(
        "{what} needs the role {}; this caller{} is a {}",
        needs.join(" or "),
        caller
            .name
            .as_ref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default(),
        caller.role.as_str()
    )))
}

/// The interceptor: finds the caller's role from its token or certificate.
#[derive(Debug, Clone)]
pub struct Authorize {
    /// `(token, role)`; compared in constant time.
    pub(crate) tokens: Arc<Vec<(String, ApiRole)>>,
    /// TLS is on: client certificates name roles.
    pub(crate) tls: bool,
    /// Whether this controller leads: a standby refuses every call, naming the leader.
    pub(crate) role: crate::leader::RoleRx,
}

/// The metadata key a standby puts the leader's API URL under.
pub const LEADER_KEY: &str = "fleetbench-leader";

/// UNAVAILABLE for a controller that does not lead, with the leader's URL (message and
/// [`LEADER_KEY`] metadata) when known: clients retry there.
pub(crate) fn not_leading(role: &crate::leader::Role) -> Option<Status> {
    use crate::leader::Role;
    match role {
        Role::Leader { .. } => None,
        Role::Starting => Some(Status::unavailable(
            "this controller is starting: it does not lead yet (try again, or another \
             controller of the same store)",
        )),
        Role::Standby { leader } if leader.address.is_empty() => Some(Status::unavailable(
            "this controller is a standby and the leader is not known yet (try again, or \
             another controller of the same store)",
        )),
        Role::Standby { leader } => {
            let mut s = Status::unavailable(format!(
                "this controller is a standby; the leader ({}, epoch {}) is at {}",
                leader.holder, leader.epoch, leader.address
            ));
            if let Ok(v) = leader.address.parse() {
                s.metadata_mut().insert(LEADER_KEY, v);
            }
            Some(s)
        }
    }
}

pub(crate) fn cert_role(r: Role) -> ApiRole {
    match r {
        Role::Viewer => ApiRole::Viewer,
        Role::Operator => ApiRole::Operator,
        Role::Agent => ApiRole::Agent,
        Role::Controller => ApiRole::Admin,
    }
}

impl tonic::service::Interceptor for Authorize {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let token = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.strip_prefix("Bearer ").unwrap_or(v).to_string());
        let cert = request
            .peer_certs()
            .and_then(|c| c.first().and_then(|d| peer_identity(d.as_ref())));
        let caller = match (token, cert) {
            (Some(t), _) if !self.tokens.is_empty() => {
                let role = self
                    .tokens
                    .iter()
                    .find(|(expected, _)| constant_time_eq(t.as_bytes(), expected.as_bytes()))
                    .map(|(_, r)| *r)
                    .ok_or_else(|| Status::unauthenticated("bearer token does not match"))?;
                Caller {
                    role,
                    name: None,
                    hosts: Vec::new(),
                }
            }
            (_, Some(id)) if self.tls => match id.role {
                Some(r) => Caller {
                    role: cert_role(r),
                    name: Some(id.name),
                    hosts: id.hosts,
                },
                None => {
                    return Err(Status::permission_denied(format!(
                        "client certificate {id} names no role (OU)"
                    )));
                }
            },
            _ if self.tokens.is_empty() && !self.tls => Caller {
                role: ApiRole::Admin,
                name: None,
                hosts: Vec::new(),
            },
            _ => {
                return Err(Status::unauthenticated(
                    "missing `authorization: Bearer TOKEN` (use --token or FLEETBENCH_TOKEN)",
                ));
            }
        };
        // Who the caller is comes first: an unknown caller learns nothing, not even the leader.
        if let Some(s) = not_leading(&self.role.borrow()) {
            return Err(s);
        }
        request.extensions_mut().insert(caller);
        Ok(request)
    }
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
