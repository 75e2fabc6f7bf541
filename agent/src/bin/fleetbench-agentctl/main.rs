//! `fleetbench-agentctl`: an operator's gRPC client for one agent. It shows what the agent
//! knows (host, engine, logs, metrics), applies and stops engines, runs a quick benchmark and
//! the GPU peer-to-peer probe. It is also how the agent is checked by hand on a GPU machine.
//!
//! ```text
//! fleetbench-agentctl --agent https://gpu7:7443 --ca ca.pem --cert ctl.pem --key ctl.key host
//! fleetbench-agentctl --agent http://127.0.0.1:7443 apply --profile sim --model m --flag --max-running-requests=64
//! ```

mod args;
mod print;
mod replicas;

use anyhow::{Context, Result, bail};
use clap::Parser;
use fleetbench_proto::agentpb::{self, agent_client::AgentClient};
use fleetbench_support::grpc::{self, ClientTls};
use tonic::transport::Channel;

use args::{Cli, Command, Connection};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            // A refusal by the agent reads as its code and message, not tonic's debug form.
            match e.downcast_ref::<tonic::Status>() {
                Some(s) => {
                    let mut line = format!("{:?}: {}", s.code(), s.message());
                    let mut src = std::error::Error::source(s);
                    while let Some(cause) = src {
                        line.push_str(&format!(": {cause}"));
                        src = cause.source();
                    }
                    eprintln!("fleetbench-agentctl: {line}");
                    if matches!(
                        s.code(),
                        tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::Unavailable
                    ) || s.message().contains("h2 protocol error")
                    {
                        eprintln!(
                            "  the connection failed: check that --agent says https for an agent \
                             with TLS (http for an insecure one) and that --cert is a client \
                             certificate signed by the CA the agent trusts"
                        );
                    }
                }
                None => eprintln!("fleetbench-agentctl: {e:#}"),
            }
            std::process::ExitCode::from(2)
        }
    }
}

async fn connect(c: &Connection) -> Result<AgentClient<Channel>> {
    let tls = match c.agent.split_once("://").map(|(scheme, _)| scheme) {
        Some("https") => {
            let (Some(ca), Some(cert), Some(key)) = (&c.ca, &c.cert, &c.key) else {
                bail!(
                    "--agent {} is https: --ca, --cert and --key are required",
                    c.agent
                );
            };
            Some(ClientTls {
                ca,
                cert,
                key,
                domain: c.domain.as_deref(),
            })
        }
        Some("http") => None,
        other => bail!(
            "--agent {}: scheme must be https or http, not {other:?}",
            c.agent
        ),
    };
    let channel = grpc::endpoint(&c.agent, tls)
        .context("--agent")?
        .connect()
        .await
        .with_context(|| format!("cannot connect to the agent at {}", c.agent))?;
    Ok(AgentClient::new(channel).max_decoding_message_size(64 * 1024 * 1024))
}

/// How long an operator's lease lasts: agentctl does not renew it, and releases it when done;
/// if agentctl dies first, the agent ends it (and stops the engine) after this.
const OPERATOR_LEASE_TTL_MS: u32 = 600_000;

/// With --take-lease: takes the engine's lease from its holder (saying whose it was), and
/// returns its epoch.
async fn take_lease(
    client: &mut AgentClient<Channel>,
    t: &args::TakeLease,
    what: &str,
) -> Result<Option<u64>> {
    if !t.take_lease {
        return Ok(None);
    }
    let before = client
        .get_engine(agentpb::GetEngineRequest {})
        .await?
        .into_inner();
    let user = std::env::var("USER").unwrap_or_else(|_| "operator".into());
    let lease = client
        .acquire_lease(agentpb::AcquireLeaseRequest {
            owner: format!("fleetbench-agentctl ({user})"),
            job_id: String::new(),
            trial_id: String::new(),
            ttl_ms: OPERATOR_LEASE_TTL_MS,
            take: true,
            reason: if t.lease_reason.is_empty() {
                format!("fleetbench-agentctl {what}")
            } else {
                t.lease_reason.clone()
            },
        })
        .await?
        .into_inner();
    match before.lease {
        Some(old) => eprintln!(
            "took the lease from {} (job {:?} trial {:?}, epoch {}): now epoch {}",
            old.owner, old.job_id, old.trial_id, old.epoch, lease.epoch
        ),
        None => eprintln!("took the lease (no one held it): epoch {}", lease.epoch),
    }
    Ok(Some(lease.epoch))
}

async fn run(cli: Cli) -> Result<std::process::ExitCode> {
    let mut client = connect(&cli.conn).await?;
    let ok = std::process::ExitCode::SUCCESS;
    match cli.command {
        Command::Host { json } => {
            let h = client
                .get_host(agentpb::GetHostRequest {})
                .await?
                .into_inner();
            print::host(&h, json);
        }
        Command::Apply(a) => {
            let mut request = a.request()?;
            let lease = take_lease(&mut client, &a.lease, "apply").await?;
            request.lease_epoch = lease.unwrap_or(0);
            let mut stream = client.apply_engine(request).await?.into_inner();
            let mut failed = false;
            let mut ready = false;
            while let Some(ev) = stream.message().await? {
                print::engine_event(&ev, a.json);
                match ev.event {
                    Some(agentpb::engine_event::Event::Failed(_)) => failed = true,
                    Some(agentpb::engine_event::Event::Ready(_)) => ready = true,
                    _ => {}
                }
            }
            if let Some(epoch) = lease {
                // The engine stays up, unleased, as an operator's engine did before leases.
                client
                    .release_lease(agentpb::ReleaseLeaseRequest {
                        epoch,
                        keep_engine: true,
                    })
                    .await?;
            }
            if failed || !ready {
                if !ready && !failed {
                    eprintln!("the event stream ended before the engine was ready");
                }
                return Ok(std::process::ExitCode::from(1));
            }
        }
        Command::Stop { lease, json } => {
            let epoch = take_lease(&mut client, &lease, "stop").await?;
            let s = client
                .stop_engine(agentpb::StopEngineRequest {
                    lease_epoch: epoch.unwrap_or(0),
                })
                .await?
                .into_inner();
            if let Some(epoch) = epoch {
                client
                    .release_lease(agentpb::ReleaseLeaseRequest {
                        epoch,
                        keep_engine: true,
                    })
                    .await?;
            }
            print::status(&s, json);
        }
        Command::Engine { json, watch: false } => {
            let s = client
                .get_engine(agentpb::GetEngineRequest {})
                .await?
                .into_inner();
            print::status(&s, json);
        }
        Command::Engine { json, watch: true } => {
            // Keep-alives are not printed; they only keep the stream (and its proxies) open.
            let mut stream = client
                .watch_engine(agentpb::WatchEngineRequest {
                    keepalive_ms: 10_000,
                })
                .await?
                .into_inner();
            while let Some(ev) = stream.message().await? {
                if let Some(agentpb::engine_watch_event::Event::Status(s)) = ev.event {
                    print::status(&s, json);
                    if !json {
                        println!();
                    }
                    std::io::Write::flush(&mut std::io::stdout())?;
                }
            }
        }
        Command::Logs { follow, tail, json } => {
            let mut stream = client
                .stream_logs(agentpb::StreamLogsRequest { tail, follow })
                .await?
                .into_inner();
            while let Some(line) = stream.message().await? {
                print::log_line(&line, json);
            }
        }
        Command::Metrics(m) => {
            let mut stream = client
                .stream_metrics(agentpb::StreamMetricsRequest {
                    interval_ms: m.interval_ms,
                    gpu: true,
                    engine: true,
                    process: true,
                    engine_raw: m.raw,
                })
                .await?
                .into_inner();
            let mut n = 0u64;
            while let Some(sample) = stream.message().await? {
                print::metrics_sample(&sample, m.json, m.raw);
                n += 1;
                if m.count.is_some_and(|c| n >= c) {
                    break;
                }
            }
        }
        Command::Bench(b) => {
            let request = b.request()?;
            let mut stream = client.run_benchmark(request).await?.into_inner();
            let mut bad = false;
            if !b.json {
                print::level_header();
            }
            while let Some(ev) = stream.message().await? {
                if let Some(agentpb::benchmark_event::Event::Level(l)) = &ev.event {
                    bad |= l.outcome != agentpb::LevelOutcome::Ok as i32;
                }
                print::bench_event(&ev, b.json);
            }
            if bad {
                return Ok(std::process::ExitCode::from(1));
            }
        }
        Command::ProbeP2p(p) => {
            let r = client
                .probe_p2p(agentpb::ProbeP2pRequest {
                    buffer_bytes: p.buffer_mib * 1024 * 1024,
                    repeats: p.repeats,
                    pairs: Vec::new(),
                })
                .await?
                .into_inner();
            print::p2p(&r, p.json);
        }
    }
    Ok(ok)
}
