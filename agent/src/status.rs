//! The one place where the agent's domain errors become gRPC statuses.

use fleetbench_gpu::p2p::ProbeError;
use fleetbench_loadgen::LoadgenError;
use tonic::Status;

use crate::convert::BenchRequestError;
use crate::lease::LeaseError;
use crate::profile::RequestError;
use crate::supervisor::SupervisorGone;

/// Errors of the agent's RPC handlers.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The engine spec broke the profile's rules (profile, model, flag, value, env).
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A benchmark request field is unusable.
    #[error("benchmark request: {0}")]
    Bench(#[from] BenchRequestError),
    /// The load generator could not be set up against the engine.
    #[error("load generator: {0}")]
    Loadgen(#[from] LoadgenError),
    /// A request field is out of range (e.g. a metrics interval below 100 ms).
    #[error("{field}: {message}")]
    Field { field: String, message: String },
    /// The operation needs a ready engine.
    #[error("{0}")]
    NotReady(String),
    /// The P2P probe refused its options or failed.
    #[error("p2p probe: {0}")]
    Probe(#[from] ProbeError),
    /// The supervisor has shut down.
    #[error(transparent)]
    Gone(#[from] SupervisorGone),
    /// The call's lease epoch does not hold (see `crate::lease`).
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

impl From<RpcError> for Status {
    fn from(e: RpcError) -> Status {
        let msg = e.to_string();
        match e {
            RpcError::Request(RequestError::Program { .. }) => Status::failed_precondition(msg),
            RpcError::Request(_) | RpcError::Bench(_) | RpcError::Field { .. } => {
                Status::invalid_argument(msg)
            }
            RpcError::Loadgen(
                LoadgenError::Config { .. }
                | LoadgenError::Dataset { .. }
                | LoadgenError::Io { .. },
            ) => Status::invalid_argument(msg),
            RpcError::Loadgen(_) => Status::failed_precondition(msg),
            RpcError::NotReady(_) => Status::failed_precondition(msg),
            RpcError::Probe(
                ProbeError::InvalidPair { .. }
                | ProbeError::InvalidOption { .. }
                | ProbeError::BadPairList { .. },
            ) => Status::invalid_argument(msg),
            RpcError::Probe(ProbeError::NoCudaDriver | ProbeError::NoGpus) => {
                Status::failed_precondition(msg)
            }
            RpcError::Probe(_) => Status::internal(msg),
            RpcError::Gone(_) => Status::unavailable(msg),
            // An operator's call while a job holds the lease: the state must change first.
            RpcError::Lease(LeaseError::Held { .. }) => Status::failed_precondition(msg),
            // A stale or foreign epoch: a fencing-token check failed, the caller must stop.
            RpcError::Lease(LeaseError::Fenced { .. } | LeaseError::Busy { .. }) => {
                Status::aborted(msg)
            }
            RpcError::Lease(LeaseError::Field { .. }) => Status::invalid_argument(msg),
            // The host cannot save the epoch: its fault; a controller tries another host.
            RpcError::Lease(LeaseError::Storage { .. }) => Status::unavailable(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbench_engines::flags::FlagError;

    #[test]
    fn refusals_are_invalid_argument_and_name_the_flag() {
        let s: Status = RpcError::from(RequestError::Flag(FlagError::NotAllowed {
            flag: "--evil".into(),
            allowed: "--a".into(),
        }))
        .into();
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(s.message().contains("--evil"));
        let s: Status = RpcError::from(SupervisorGone).into();
        assert_eq!(s.code(), tonic::Code::Unavailable);
    }
}
