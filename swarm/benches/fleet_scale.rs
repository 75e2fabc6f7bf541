//! What a fleet costs the controller, printed (not asserted): a real `fleetbench-controller`
//! process with N stand-in agents (default 1,000) registering, heartbeated and relaying
//! telemetry at 1 Hz; its CPU (from /proc/PID/stat over a window) and memory (VmRSS, and the
//! peak VmHWM) while idle and while a job runs one trial on every host.
//!
//! `cargo build --release -p fleetbench-controller && cargo bench -p fleetbench-swarm --bench fleet_scale`
//! (`FLEETBENCH_SCALE_AGENTS=200` for a smaller fleet; `FLEETBENCH_SCALE_STORE=postgres://...`
//! for a PostgreSQL store, an empty database). Goals at 1,000 hosts on a 2-core machine:
//! controller CPU below half a core, memory below 1 GiB. Every wait is bounded.

use fleetbench_fleetkit::swarm_fleet;

use fleetbench_proto::Word;
use std::time::{Duration, Instant};

const SETTLE: Duration = Duration::from_secs(10);
const WINDOW: Duration = Duration::from_secs(30);

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rfind(')').map(|i| &stat[i + 1..]).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime and stime (fields 14 and 15) are the 12th and 13th after the command name.
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as f64 } else { 100.0 }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// CPU of `pid` in cores over the time since `ticks` were read at `at`.
fn cores_since(pid: u32, ticks: u64, at: Instant) -> f64 {
    (cpu_ticks(pid) - ticks) as f64 / clk_tck() / at.elapsed().as_secs_f64()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    let agents: usize = std::env::var("FLEETBENCH_SCALE_AGENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "fleet_scale: {agents} stand-in agents, heartbeat 1 s, telemetry 1 Hz; {} cores, load average {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        loadavg()
    );
    // FLEETBENCH_SCALE_STORE: the store (a fresh, empty PostgreSQL database, or SQLite);
    // default: SQLite in a temporary directory.
    let store = std::env::var("FLEETBENCH_SCALE_STORE")
        .unwrap_or_else(|_| format!("sqlite://{}", dir.path().join("controller.db").display()));
    println!(
        "store: {}",
        store.split_once("://").map(|(s, _)| s).unwrap_or("?")
    );
    let ctl = swarm_fleet::controller_on(dir.path(), &store, "1s", "telemetry_interval = \"1s\"\n");
    let pid = ctl.child.id();
    let started = Instant::now();
    // Start-up of 10 s: every trial is placed before a host frees up (one trial per host).
    let swarm = swarm_fleet::swarm(dir.path(), ctl.addr, agents, "10s");
    let swarm_pid = swarm.child.id();
    let mut c = swarm_fleet::client(ctl.addr).await;
    let took = swarm_fleet::wait_ready(&mut c, agents, Duration::from_secs(300)).await;
    println!(
        "registered and ready: {agents} agents in {:.1} s (since the controller started: {:.1} s)",
        took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    tokio::time::sleep(SETTLE).await;
    let (t0, s0, at) = (cpu_ticks(pid), cpu_ticks(swarm_pid), Instant::now());
    tokio::time::sleep(WINDOW).await;
    let idle = cores_since(pid, t0, at);
    let swarm_idle = cores_since(swarm_pid, s0, at);
    println!(
        "idle fleet ({}s window): controller CPU {:.3} cores, RSS {:.1} MiB (peak {:.1} MiB); \
         stand-ins' process {:.3} cores; load average {}",
        WINDOW.as_secs(),
        idle,
        mib(status_kib(pid, "VmRSS:")),
        mib(status_kib(pid, "VmHWM:")),
        swarm_idle,
        loadavg()
    );

    let spec = swarm_fleet::spread_spec(agents, 1.0);
    let (t0, s0, at) = (cpu_ticks(pid), cpu_ticks(swarm_pid), Instant::now());
    let id = swarm_fleet::submit(&mut c, &spec).await;
    let job = swarm_fleet::wait_job(
        &mut c,
        &id,
        Duration::from_secs(900),
        Duration::from_secs(10),
    )
    .await;
    let busy = cores_since(pid, t0, at);
    let swarm_busy = cores_since(swarm_pid, s0, at);
    let wall = at.elapsed().as_secs_f64();
    let (levels, hosts) = swarm_fleet::levels_and_hosts(&mut c, &id).await;
    println!(
        "job over the fleet: {} in {wall:.1} s; {} of {} trials, {levels} levels stored (each once) on {hosts} hosts; \
         controller CPU {:.3} cores (mean over the job), RSS {:.1} MiB, peak {:.1} MiB; \
         stand-ins' process {:.3} cores; load average {}",
        fleetbench_proto::controllerpb::JobState::word_of(job.state),
        job.trials_done,
        job.trials_total,
        busy,
        mib(status_kib(pid, "VmRSS:")),
        mib(status_kib(pid, "VmHWM:")),
        swarm_busy,
        loadavg()
    );
    if job.state != fleetbench_proto::controllerpb::JobState::Succeeded as i32 {
        println!("job error: {}", job.error);
    }
    println!(
        "goals: CPU < 0.5 cores ({}), peak memory < 1024 MiB ({})",
        if idle.max(busy) < 0.5 {
            "met"
        } else {
            "NOT met"
        },
        if mib(status_kib(pid, "VmHWM:")) < 1024.0 {
            "met"
        } else {
            "NOT met"
        },
    );
    drop(swarm);
    drop(ctl);
}
