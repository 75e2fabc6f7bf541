//! Tuning searches on the simulated engine, measured against the simulator's model:
//!
//! - `search`: `examples/tune-sim.toml` (3 searched flags + a constraint, 36 candidates) by
//!   successive halving and by the full grid on 3 agents: the best config each finds, the
//!   model's best, and the engine-minutes of both.
//! - `saturation`: `examples/tune-saturation.toml`: each config's saturation point against
//!   the model's knee, and the levels it took against the fixed list.
//!
//! ```sh
//! cargo bench -p fleetbench-controller --bench tuning_search -- [search|saturation] [AGENTS]
//! ```
//! (build the workspace binaries first: it starts `fleetbench-agent` processes.)

use fleetbench_fleetkit::sim_fleet;

use fleetbench_rounds::tuning::{self, render, saturation, search};

fn example(name: &str) -> String {
    let path = fleetbench_testkit::repo_root().join("examples").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let what = args.first().map_or("all", String::as_str).to_string();
    let agents: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let fleet = sim_fleet::Fleet::start(dir.path(), agents).await;
    let mut client = fleet.client().await;
    if what == "all" || what == "search" {
        let text = example("tune-sim.toml");
        let (spec, space) = tuning::parse("tune-sim.toml", &text).unwrap();
        let (model_best, model_tok_s) = sim_fleet::model_best(&spec, &space, 128, 64);
        let sh = search::run_search(&mut client, "tune-sim.toml", &text, |l| println!("{l}"))
            .await
            .expect("successive halving");
        print!("{}", render::search(&sh));
        let grid_text = text
            .replace("strategy = \"successive-halving\"", "strategy = \"grid\"")
            .replace("eta = 3\n", "")
            .replace("rungs = 3\n", "");
        let grid = search::run_search(&mut client, "tune-sim.toml", &grid_text, |l| {
            println!("{l}")
        })
        .await
        .expect("grid");
        print!("{}", render::search(&grid));
        println!(
            "\n== search over {} candidates on {agents} agents",
            sh.candidates.len()
        );
        println!("model's best:           {model_best} ({model_tok_s:.1} tok/s)");
        println!(
            "successive halving:     {}",
            sh.best.as_deref().unwrap_or("-")
        );
        println!(
            "full grid:              {}",
            grid.best.as_deref().unwrap_or("-")
        );
        println!(
            "engine-minutes:         successive halving {:.2}, full grid {:.2} ({:.0}%)",
            sh.engine_minutes,
            grid.engine_minutes,
            100.0 * sh.engine_minutes / grid.engine_minutes
        );
    }
    if what == "all" || what == "saturation" {
        let text = example("tune-saturation.toml");
        let (spec, space) = tuning::parse("tune-saturation.toml", &text).unwrap();
        let o = saturation::run_saturation(&client, "tune-saturation.toml", &text)
            .await
            .expect("saturation search");
        print!("{}", render::saturation(&o));
        let slo = fleetbench_sim::model::Slo {
            e2e_p99_ms: spec.load.slo.e2e_ms,
            ttft_p99_ms: spec.load.slo.ttft_ms,
            itl_p99_ms: spec.load.slo.itl_ms,
        };
        println!("\n== saturation, resolution {}", o.bounds.resolution);
        for c in tuning::space::candidates(&spec, &space) {
            let p = sim_fleet::model_params(&spec, &c).expect("starts");
            let knee = fleetbench_sim::model::knee(&p, 128, 64, slo);
            let r = o.results.iter().find(|r| r.config == c.name).unwrap();
            println!(
                "{:<8} model knee {knee:>4}, found {:>4} (first miss {}), {} levels vs {} in the fixed list: {}",
                c.name,
                r.saturation,
                r.first_miss.map_or("-".into(), |m| m.to_string()),
                r.probes.len(),
                o.fixed_list_levels,
                if knee.abs_diff(r.saturation) <= o.bounds.resolution {
                    "within one step"
                } else {
                    "OFF"
                }
            );
        }
    }
    fleet.stop().await;
}
