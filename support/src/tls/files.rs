//! TLS material as fleetbench's config files name it: the same `[… .tls]` tables, with the same
//! keys and the same meaning, in the controller's and the agent's config.

use std::path::PathBuf;

use serde::Deserialize;
use tonic::transport::ServerTlsConfig;

use super::{TlsError, server_tls};
use crate::grpc::ClientTls;

/// The client side of mTLS (the controller's `agent_tls`, an agent's `[controller.tls]`): the
/// CA the server's certificate must chain to, this process's certificate and key.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClientTlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The name the server's certificate carries; default: the host of the address called.
    pub domain: Option<String>,
}

impl ClientTlsFiles {
    /// The material for [`crate::grpc::endpoint`].
    pub fn client(&self) -> ClientTls<'_> {
        ClientTls {
            ca: &self.ca,
            cert: &self.cert,
            key: &self.key,
            domain: self.domain.as_deref(),
        }
    }
}

/// The server side of mTLS (the controller's `[api.tls]` and `[metrics.tls]`): this server's
/// certificate and key, and the CA a client's certificate must chain to.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServerTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

impl ServerTlsFiles {
    /// Loads the files into tonic's server config (see [`server_tls`]).
    pub fn load(&self) -> Result<ServerTlsConfig, TlsError> {
        server_tls(&self.cert, &self.key, &self.client_ca)
    }

    /// A config that follows the files when a renewal rewrites them (see
    /// [`ReloadingTls`](super::ReloadingTls)).
    pub fn reloading(
        &self,
        auth: super::ClientAuth,
    ) -> Result<std::sync::Arc<super::ReloadingTls>, TlsError> {
        super::ReloadingTls::new(self.clone(), auth)
    }
}
