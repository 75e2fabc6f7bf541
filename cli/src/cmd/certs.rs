//! `fleetbench certs init DIR` and `fleetbench certs issue DIR`: a CA and one certificate per
//! identity (controller server and client, agents, operator, viewer), so mTLS works without
//! openssl. What each file is for: `fleetbench_support::tls` (module `issue`) and docs/deploy.md.

use std::path::PathBuf;
use std::process::ExitCode;

use fleetbench_support::tls::{self, AgentCert, CertPair, InitOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Write a CA and the certificates of every identity into DIR: ca.pem/ca.key,
    /// controller-server.pem (the API, serverAuth), controller.pem (dials agents, clientAuth),
    /// agent.pem (shared agent certificate), agents/NAME.pem per --agent, operator.pem and
    /// viewer.pem (the CLI, clientAuth).
    Init {
        /// Directory to write into (created if missing).
        dir: PathBuf,
        /// Extra names or IP addresses of the shared agent certificate agent.pem (localhost and
        /// 127.0.0.1 are always included); repeat or separate with commas.
        #[arg(long = "agent-name", value_delimiter = ',')]
        agent_names: Vec<String>,
        /// A per-agent certificate agents/NAME.pem for NAME and its ADDRESS (host or IP, a
        /// port is ignored): `--agent gpu-7=10.0.0.7:7443`; repeat or separate with commas.
        #[arg(long = "agent", value_delimiter = ',')]
        agents: Vec<String>,
        /// Extra names of the controller's API certificate (its DNS or Service name; localhost,
        /// 127.0.0.1 and fleetbench-controller are always included).
        #[arg(long = "controller-name", value_delimiter = ',')]
        controller_names: Vec<String>,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
    /// Issue agents/NAME.pem for more agents with the CA already in DIR (ca.pem, ca.key).
    Issue {
        /// Directory holding ca.pem and ca.key.
        dir: PathBuf,
        /// `NAME` or `NAME=ADDRESS`; repeat or separate with commas.
        #[arg(long = "agent", value_delimiter = ',', required = true)]
        agents: Vec<String>,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
}

fn parse_agents(specs: &[String]) -> anyhow::Result<Vec<(String, Option<String>)>> {
    specs
        .iter()
        .map(|s| tls::parse_agent_spec(s).map_err(|e| anyhow::anyhow!("--agent {s:?}: {e}")))
        .collect()
}

fn pair(what: &str, p: &CertPair) {
    println!(
        "  {what:<20} {} (key {})",
        p.cert.display(),
        p.key.display()
    );
}

fn print_agents(agents: &[AgentCert]) {
    for a in agents {
        pair(&format!("agent {}", a.name), &a.files);
        println!("  {:<20} names: {}", "", a.sans.join(", "));
    }
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Init {
            dir,
            agent_names,
            agents,
            controller_names,
            force,
        } => {
            let opts = InitOptions {
                agent_names,
                agents: parse_agents(&agents)?,
                controller_names,
                overwrite: force,
            };
            let c = tls::init_certs(&dir, &opts)?;
            println!("wrote a CA and certificates to {}:", dir.display());
            pair(
                "CA",
                &CertPair {
                    cert: c.ca_cert.clone(),
                    key: c.ca_key.clone(),
                },
            );
            pair("controller API", &c.controller_server);
            pair(
                "controller client",
                &CertPair {
                    cert: c.controller_cert.clone(),
                    key: c.controller_key.clone(),
                },
            );
            pair(
                "agent (shared)",
                &CertPair {
                    cert: c.agent_cert.clone(),
                    key: c.agent_key.clone(),
                },
            );
            print_agents(&c.agents);
            pair("operator (CLI)", &c.operator);
            pair("viewer (CLI)", &c.viewer);
            println!();
            println!(
                "controller.toml: [api] tls = {{ cert = controller-server.pem, key = controller-server.key, client_ca = ca.pem }}"
            );
            println!(
                "                 [agent_tls] ca = ca.pem, cert = controller.pem, key = controller.key"
            );
            println!(
                "agent.toml:      [tls] cert = agents/NAME.pem (or agent.pem), key = …key, client_ca = ca.pem"
            );
            println!(
                "fleetbench CLI:  --tls-ca ca.pem --tls-cert operator.pem --tls-key operator.key"
            );
            println!();
            println!(
                "Keep ca.key off the controller and the agents: anyone holding it can mint \
                 certificates your fleet accepts. `fleetbench certs issue` needs it to add agents."
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Issue { dir, agents, force } => {
            let certs = tls::issue_agent_certs(&dir, &parse_agents(&agents)?, force)?;
            println!("issued with the CA in {}:", dir.display());
            print_agents(&certs);
            Ok(ExitCode::SUCCESS)
        }
    }
}
