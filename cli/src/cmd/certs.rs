//! `fleetbench certs init DIR`: a development CA plus agent and controller certificates, so
//! mTLS works without openssl.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Write ca.pem/ca.key, agent.pem/agent.key (server) and controller.pem/controller.key
    /// (client) into DIR.
    Init {
        /// Directory to write into (created if missing).
        dir: PathBuf,
        /// Extra names or IP addresses of the agent's host (localhost and 127.0.0.1 are always
        /// included); repeat or separate with commas.
        #[arg(long = "agent-name", value_delimiter = ',')]
        agent_names: Vec<String>,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Init {
            dir,
            agent_names,
            force,
        } => {
            let certs = fleetbench_support::tls::generate_dev_certs(&dir, &agent_names, force)?;
            println!(
                "wrote a development CA and certificates to {}:",
                dir.display()
            );
            println!(
                "  CA:          {} (key {})",
                certs.ca_cert.display(),
                certs.ca_key.display()
            );
            println!(
                "  agent:       {} (key {})",
                certs.agent_cert.display(),
                certs.agent_key.display()
            );
            println!(
                "  controller:  {} (key {})",
                certs.controller_cert.display(),
                certs.controller_key.display()
            );
            println!();
            println!("agent.toml:");
            println!("  [tls]");
            println!("  cert = {:?}", certs.agent_cert.display().to_string());
            println!("  key = {:?}", certs.agent_key.display().to_string());
            println!("  client_ca = {:?}", certs.ca_cert.display().to_string());
            println!();
            println!(
                "Keep ca.key private: anyone holding it can mint certificates your agents accept."
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
