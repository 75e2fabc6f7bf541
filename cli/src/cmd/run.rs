//! `fleetbench run` (being built; see the issue that owns it).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`fleetbench run` is not built yet")
}
