//! Regression detection, measured: runs the detection suite (`tests/sim_fleet`) against
//! a tagged baseline N times with no change and N times with a 10% slower build (sim
//! `--slowdown 1.10`), each run with its own jitter seed, and prints the pass and fail rates.
//!
//! ```sh
//! cargo bench -p fleetbench-controller --bench regress_detection -- [N] [AGENTS]
//! ```
//! (build the workspace binaries first: it starts `fleetbench-agent` processes.)

use fleetbench_fleetkit::sim_fleet;

use std::time::Instant;

use fleetbench_controller::regress::StoreHistory;
use fleetbench_rounds::regress::{self, Status};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let n: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(20);
    let agents: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let fleet = sim_fleet::Fleet::start(dir.path(), agents).await;
    let mut client = fleet.client().await;
    let mut history = StoreHistory::new(&fleet.controller.store, Some(&fleet.controller.metrics));
    let started = Instant::now();
    let base = sim_fleet::detection_suite(1, 1.0, 5, false, 0.05);
    let first = regress::run_suite(&mut client, &mut history, "detect.toml", &base, "base")
        .await
        .expect("baseline run");
    println!(
        "baseline: job {} ({} checks)",
        first.job.id,
        first.verdicts.len()
    );
    let (mut passes, mut fails) = (0, 0);
    for i in 0..n {
        for (slowdown, label) in [(1.0, "no change"), (1.10, "10% slower")] {
            let seed = 100 + u64::from(i) * 2 + u64::from(slowdown > 1.0);
            let text = sim_fleet::detection_suite(seed, slowdown, 5, true, 0.05);
            let o = regress::run_suite(&mut client, &mut history, "detect.toml", &text, "")
                .await
                .expect("suite run");
            let worst = o
                .verdicts
                .iter()
                .map(|v| format!("{} {}", v.metric.name(), v.detail))
                .collect::<Vec<_>>()
                .join("; ");
            let regressed = o.verdicts.iter().any(|v| v.status == Status::Regressed);
            println!(
                "run {:>2} {label:<10} seed {seed:>3}: {}  ({worst})",
                i + 1,
                if regressed { "FAIL" } else { "pass" }
            );
            match (slowdown > 1.0, regressed) {
                (false, false) => passes += 1,
                (true, true) => fails += 1,
                _ => {}
            }
        }
    }
    println!(
        "no change:   passed {passes}/{n} ({:.0}%)",
        100.0 * f64::from(passes) / f64::from(n)
    );
    println!(
        "10% slower:  failed {fails}/{n} ({:.0}%)",
        100.0 * f64::from(fails) / f64::from(n)
    );
    println!(
        "{} suite runs on {agents} agents in {:.0}s",
        2 * n + 1,
        started.elapsed().as_secs_f64()
    );
    fleet.stop().await;
}
