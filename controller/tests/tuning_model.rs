//! The tuning example against the simulator's model: the space is what the docs say (3+
//! flags, 24+ candidates, a constraint), and the model gives it one clear best config, the
//! truth the search benchmark and the end-to-end test compare with.

use fleetbench_fleetkit::sim_fleet;

use fleetbench_rounds::tuning;
use fleetbench_sim::model;
use fleetbench_spec::search::{SWITCH_ON, SearchSpec};
use fleetbench_spec::{JobSpec, Levels};

fn example(name: &str) -> (JobSpec, SearchSpec) {
    let path = fleetbench_testkit::repo_root().join("examples").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    tuning::parse(name, &text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The model's output tokens/s for each candidate at the spec's one concurrency level.
pub fn model_scores(spec: &JobSpec, search: &SearchSpec) -> Vec<(String, f64)> {
    let Levels::Concurrency(cs) = &spec.load.levels else {
        panic!("concurrency levels")
    };
    let mut out: Vec<(String, f64)> = tuning::space::candidates(spec, search)
        .iter()
        .map(|c| {
            let params = sim_fleet::model_params(spec, c).expect("fits in memory");
            let p = model::closed_loop(&params, cs[0], 128, 64, 1152);
            (c.describe(), p.output_tokens_per_s)
        })
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

#[test]
fn the_example_space_has_one_clear_best_config_in_the_model() {
    let (spec, search) = example("tune-sim.toml");
    assert!(search.flags.len() >= 3);
    assert!(!search.constraints.is_empty());
    let cands = tuning::space::candidates(&spec, &search);
    assert_eq!(
        cands.len(),
        36,
        "3 backends x 4 caps x (off + 2 graph sizes)"
    );
    // The constraint drops the graph batch size whenever graphs are off.
    assert!(cands.iter().all(|c| {
        c.flags.get("--disable-cuda-graph") != Some(&Some(SWITCH_ON.to_string()))
            || !c.flags.contains_key("--cuda-graph-max-bs")
    }));
    let scores = model_scores(&spec, &search);
    for (name, s) in scores.iter().take(6) {
        println!("{s:>10.1}  {name}");
    }
    let (best, runner) = (&scores[0], &scores[1]);
    assert!(
        best.1 > runner.1 * 1.05,
        "the best ({best:?}) must lead the runner-up ({runner:?}) by more than noise"
    );
}

#[test]
fn the_saturation_example_has_knees_inside_its_bracket() {
    let (spec, search) = example("tune-saturation.toml");
    let b = search.saturation.expect("bracket");
    let slo = fleetbench_sim::model::Slo {
        e2e_p99_ms: spec.load.slo.e2e_ms,
        ..Default::default()
    };
    for c in tuning::space::candidates(&spec, &search) {
        let params = sim_fleet::model_params(&spec, &c).expect("fits in memory");
        let knee = model::knee(&params, 128, 64, slo);
        println!("{}: knee {knee}", c.describe());
        assert!(
            knee > b.low * 2 && knee < b.high / 2,
            "{knee} not well inside the bracket"
        );
    }
}
