//! The controller's side of its agents: the one place agent clients are built ([`client`]) and
//! the inventory of hosts with their heartbeats ([`inventory`]).

pub mod client;
pub mod inventory;

pub use client::{AgentClient, AgentConnector, ClientError};
pub use inventory::{HostSnapshot, Inventory, Lease};
