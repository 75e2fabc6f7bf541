//! A tuning search end to end on 3 agent processes running the simulated engine: successive
//! halving and the full grid both find the config the simulator's model makes best, the
//! halving spends fewer engine-minutes, and candidates that cannot start (out of GPU memory)
//! are pruned with their classification while the search goes on.

use fleetbench_fleetkit::sim_fleet;

use fleetbench_rounds::tuning::{self, search::Fate};

const SPEC: &str = r#"name = "tune-small"
repeats = 2

[[configs]]
name = "start"
engine = "sim"
model = "fleetbench/sim-moe-30b-a3b"
flags = { "--moe-runner-backend" = "triton", "--max-running-requests" = 32, "--gpu-memory-gb" = 141, "--time-scale" = 0.5, "--stream-interval" = 8, "--seed" = 1 }

[[workloads]]
name = "random-128-64"
dataset = "random"
input_len = 128
output_len = 64
ignore_eos = true

[load]
concurrency = [128]
requests = 384

[search]
strategy = "successive-halving"
eta = 2
rungs = 2

[search.flags]
"--moe-runner-backend" = ["triton", "flashinfer_cutlass"]
"--max-running-requests" = [32, 128]
# 8 GB cannot hold the weights: these candidates fail at start.
"--gpu-memory-gb" = [141, 8]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halving_and_grid_find_the_models_best_and_halving_costs_less() {
    let (spec, space) = tuning::parse("tune.toml", SPEC).unwrap();
    let (model_best, _) = sim_fleet::model_best(&spec, &space, 128, 64);
    let dir = tempfile::tempdir().unwrap();
    let fleet = sim_fleet::Fleet::start(dir.path(), 3).await;
    let mut client = fleet.client().await;

    let sh = tuning::search::run_search(&mut client, "tune.toml", SPEC, |_| {})
        .await
        .unwrap();
    let grid_text = SPEC.replace(
        "strategy = \"successive-halving\"\neta = 2\nrungs = 2",
        "strategy = \"grid\"",
    );
    let grid = tuning::search::run_search(&mut client, "tune.toml", &grid_text, |_| {})
        .await
        .unwrap();
    fleet.stop().await;

    let report = format!(
        "{}\n{}",
        tuning::render::search(&sh),
        tuning::render::search(&grid)
    );
    assert_eq!(sh.candidates.len(), 8, "{report}");
    assert_eq!(sh.best.as_deref(), Some(model_best.as_str()), "{report}");
    assert_eq!(grid.best.as_deref(), Some(model_best.as_str()), "{report}");
    for o in [&sh, &grid] {
        let pruned: Vec<_> = o
            .candidates
            .iter()
            .filter(|c| matches!(c.fate, Fate::Pruned(_)))
            .collect();
        assert_eq!(pruned.len(), 4, "{report}");
        for c in pruned {
            assert_eq!(c.candidate.flags["--gpu-memory-gb"].as_deref(), Some("8"));
            let Fate::Pruned(why) = &c.fate else {
                unreachable!()
            };
            assert!(why.contains("failed to start"), "{why}");
        }
        assert!(
            o.best_run_id.is_some() && o.start_run_id.is_some(),
            "{report}"
        );
        assert!(!o.pareto.is_empty(), "{report}");
    }
    // Each search ends with a confirmation round of its finalists (the winner's curse: the
    // round that picked the best cannot also measure its margin). Before issue 12 the halving
    // had 2 rounds and the grid 1, and the margin came from the picking round.
    assert_eq!(sh.rounds.len(), 3);
    assert_eq!(grid.rounds.len(), 2);
    for o in [&sh, &grid] {
        let last = o.rounds.last().unwrap();
        assert!(last.confirmation && last.repeats == 3 && last.requests_fraction == 1.0);
        assert!((2..=3).contains(&last.candidates), "{report}");
        // The best's figures are the confirmation round's.
        let best = o.best_result().unwrap();
        assert_eq!(best.measured.as_ref().unwrap().score_repeats.len(), 3);
    }
    assert!(
        sh.engine_minutes < grid.engine_minutes,
        "halving {} vs grid {} engine-minutes\n{report}",
        sh.engine_minutes,
        grid.engine_minutes
    );
    let m = sh.margin.as_ref().expect("a margin over the runner-up");
    assert!(
        m.relative > 0.0 && (0.0..=1.0).contains(&m.confidence) && m.repeats == 3,
        "{m:?}"
    );
    assert!((m.confidence - (1.0 - m.p)).abs() < 1e-12, "{m:?}");
    assert!(
        report.contains("in the confirmation round (3 fresh repeats)")
            && report.contains("(95%), p "),
        "{report}"
    );
    // From one repeat a side nothing measured the spread: no interval, no confidence.
    let mut one = sh.clone();
    one.margin.as_mut().unwrap().repeats = 1;
    let text = tuning::render::search(&one);
    assert!(
        text.contains("from one repeat each: no spread measured") && !text.contains("(95%)"),
        "{text}"
    );
}
