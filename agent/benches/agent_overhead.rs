//! The agent's own cost, printed (not asserted): CPU and RSS of a real `fleetbench-agent`
//! process while a client streams metrics at 10 Hz from a running simulated engine, and the
//! delay between the engine answering its readiness probe and the agent reporting `ready`.
//!
//! `cargo bench -p fleetbench-agent --bench agent_overhead` (build `fleetbench-sim` for the same
//! profile first: `cargo build --release -p fleetbench-sim`). Goals: < 1% of a core, < 30 MiB
//! RSS, < 1 s readiness delay.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fleetbench_proto::agentpb::{self, agent_client::AgentClient, engine_event::Event};
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint};

const STREAM_SECONDS: u64 = 20;
const READY_ROUNDS: usize = 5;
/// Every wait of a readiness round is bounded by this.
const READY_LIMIT: Duration = Duration::from_secs(60);

fn proc_cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rfind(')').map(|i| &stat[i + 1..]).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the command name.
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as f64 } else { 100.0 }
}

struct Measure {
    pid: u32,
    ticks: u64,
    at: Instant,
}

impl Measure {
    fn start(pid: u32) -> Self {
        Measure {
            pid,
            ticks: proc_cpu_ticks(pid),
            at: Instant::now(),
        }
    }
    /// Percent of one core since `start`.
    fn cpu_pct(&self) -> f64 {
        let dt = self.at.elapsed().as_secs_f64();
        (proc_cpu_ticks(self.pid) - self.ticks) as f64 / clk_tck() / dt * 100.0
    }
}

async fn apply_and_time_ready(
    c: &mut AgentClient<Channel>,
    port: u16,
    delay_s: &str,
) -> (Duration, f64) {
    let spec = agentpb::EngineSpec {
        profile: "sim".into(),
        model: "bench-model".into(),
        flags: vec![agentpb::Flag {
            name: "--startup-delay-s".into(),
            value: Some(delay_s.into()),
        }],
        env: Default::default(),
        port: u32::from(port),
        gang: None,
        ..Default::default()
    };
    // An independent observer polls the engine's /health every 5 ms, from the moment the agent
    // reports the new engine spawned: the old engine is gone by then (the agent stops it
    // first), so the first 200 is the new engine's. (Watching for the old one's port to close
    // instead could miss a close shorter than one poll and then wait forever.)
    let (spawned_tx, spawned_rx) = tokio::sync::oneshot::channel::<()>();
    let observer = tokio::spawn(async move {
        spawned_rx.await.ok()?;
        let http = fleetbench_agent::http::HttpClient::new();
        let url = format!("http://127.0.0.1:{port}/health");
        let deadline = Instant::now() + READY_LIMIT;
        while Instant::now() < deadline {
            if matches!(http.get(&url, Duration::from_millis(200), 1024).await, Ok(r) if r.status == 200)
            {
                return Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    });
    let mut spawned_tx = Some(spawned_tx);
    let mut s = c
        .apply_engine(agentpb::ApplyEngineRequest {
            spec: Some(spec),
            run_id: String::new(),
            ..Default::default()
        })
        .await
        .expect("apply")
        .into_inner();
    let mut reported = None;
    let mut agent_elapsed = 0.0;
    let deadline = tokio::time::Instant::now() + READY_LIMIT;
    while let Ok(Some(e)) = tokio::time::timeout_at(deadline, s.next()).await {
        match e.expect("event").event {
            Some(Event::Spawned(_)) => {
                if let Some(tx) = spawned_tx.take() {
                    let _ = tx.send(());
                }
            }
            Some(Event::Ready(r)) => {
                reported = Some(Instant::now());
                agent_elapsed = r.elapsed_s;
            }
            _ => {}
        }
    }
    let reported =
        reported.unwrap_or_else(|| panic!("the engine was not ready within {READY_LIMIT:?}"));
    let engine_ready = observer
        .await
        .expect("observer")
        .unwrap_or_else(|| panic!("the observer saw no 200 within {READY_LIMIT:?}"));
    (
        reported.saturating_duration_since(engine_ready),
        agent_elapsed,
    )
}

/// The next metrics sample, waiting at most 10 s.
async fn next_sample(s: &mut tonic::Streaming<agentpb::MetricsSample>) -> agentpb::MetricsSample {
    tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("a metrics sample within 10 s")
        .expect("the metrics stream ended")
        .expect("metrics sample")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let certs =
        fleetbench_support::tls::generate_dev_certs(&dir.path().join("certs"), &[], false).unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\n[profiles.sim]\nkind = \"sim\"\nmodels = [\"bench-model\"]\n[tls]\ncert = {:?}\nkey = {:?}\nclient_ca = {:?}\n",
            dir.path().join("data"),
            certs.agent_cert,
            certs.agent_key,
            certs.ca_cert
        ),
    )
    .unwrap();
    let agent_bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_fleetbench-agent"));
    let sim = agent_bin.with_file_name("fleetbench-sim");
    assert!(
        sim.exists(),
        "{} missing: cargo build --release -p fleetbench-sim (same profile as this bench)",
        sim.display()
    );
    let mut child = Command::new(&agent_bin)
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("fleetbench-agent listening on ")
        .expect("address line")
        .to_string();
    let pid = child.id();
    let tls = fleetbench_support::tls::client_tls(
        &certs.ca_cert,
        &certs.controller_cert,
        &certs.controller_key,
        "localhost",
    )
    .unwrap();
    let ch = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = AgentClient::new(ch);
    let port = fleetbench_testkit::free_port();

    println!(
        "agent {} (pid {pid}), engine fleetbench-sim on port {port}",
        agent_bin.display()
    );
    println!(
        "\nreadiness: engine's first 200 on /health (observer polling every 5 ms) -> agent's Ready event"
    );
    let mut delays = Vec::new();
    for round in 0..READY_ROUNDS {
        // Start-up delays off the probe's 200 ms grid, so the figure is not a lucky alignment.
        let delay = format!("{:.2}", 0.55 + 0.13 * round as f64);
        let (d, elapsed) = apply_and_time_ready(&mut c, port, &delay).await;
        println!(
            "  round {round}: reported {:>6.1} ms after the engine was ready (agent: ready {elapsed:.2} s after spawn)",
            d.as_secs_f64() * 1e3
        );
        delays.push(d.as_secs_f64() * 1e3);
    }
    delays.sort_by(f64::total_cmp);
    println!(
        "  median {:.1} ms, max {:.1} ms (goal < 1000 ms)",
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = Measure::start(pid);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_cpu = idle.cpu_pct();
    println!(
        "\nagent idle with a ready engine (5 s): CPU {idle_cpu:.2}% of a core, RSS {:.1} MiB",
        rss_kib(pid) as f64 / 1024.0
    );

    let mut stream = c
        .stream_metrics(agentpb::StreamMetricsRequest {
            interval_ms: 100,
            gpu: true,
            engine: true,
            process: true,
            engine_raw: false,
        })
        .await
        .unwrap()
        .into_inner();
    // Warm up the stream (connection pool, first full /proc scan).
    for _ in 0..10 {
        next_sample(&mut stream).await;
    }
    let m = Measure::start(pid);
    let mut n = 0u64;
    let mut scraped = 0u64;
    let mut peak_rss = 0;
    let until = Instant::now() + Duration::from_secs(STREAM_SECONDS);
    while Instant::now() < until {
        let s = next_sample(&mut stream).await;
        n += 1;
        scraped += u64::from(s.engine.is_some_and(|e| e.scraped));
        peak_rss = peak_rss.max(rss_kib(pid));
    }
    let cpu = m.cpu_pct();
    println!(
        "streaming metrics at 10 Hz for {STREAM_SECONDS} s: {n} samples ({scraped} with the engine scraped), \
         agent CPU {cpu:.2}% of a core (goal < 1%), peak RSS {:.1} MiB (goal < 30 MiB)",
        peak_rss as f64 / 1024.0
    );
    drop(stream);
    let _ = c.stop_engine(agentpb::StopEngineRequest::default()).await;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}
