//! fleetbench-gpu: the host's GPUs as the agent sees them.
//!
//! - [`Gpus`]: NVML loaded once at run time (no build-time driver); facts, telemetry samples
//!   (PCIe/NVLink rates from a background thread because NVML blocks ~20 ms per PCIe read), and
//!   the processes holding GPU memory. Without a driver it reports no GPUs and why.
//! - [`p2p`]: the peer-to-peer probe through the CUDA driver API (cudarc, loaded at run time).
//! - [`convert`]: to and from the agent's protobuf types.

pub mod convert;
mod gpus;
mod nvml;
pub mod p2p;
mod source;
mod types;

pub use gpus::Gpus;
pub use types::{GpuInfo, GpuProcess, GpuSampleData};
