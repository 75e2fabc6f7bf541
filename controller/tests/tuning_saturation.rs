//! A saturation search end to end (the simulated engine on an agent process): the bracket
//! and bisection land within one step of the knee the simulator's model implies, in fewer
//! levels than the fixed list.

use fleetbench_fleetkit::sim_fleet;

use fleetbench_rounds::tuning;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturation_lands_within_one_step_of_the_models_knee() {
    let path = fleetbench_testkit::repo_root().join("examples/tune-saturation.toml");
    // One backend keeps the test short; the example searches two. The example's knee is where
    // the latency curve crosses the SLO, 4-6% of p99 E2E per bisection step: on a loaded 2-core
    // CI machine that is within the noise, and the search once landed 15 below the model's
    // knee. The test makes the knee sharp instead: a running-requests cap of 40, past which
    // requests queue for a whole request time (p99 E2E 1.43 s at 40, 2.86 s at 48), and an SLO
    // between the two. The curve knee stays measured by `benches/tuning_search.rs`.
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace(
            "[\"triton\", \"flashinfer_cutlass\"]",
            "[\"flashinfer_cutlass\"]",
        )
        .replace(
            "\"--max-running-requests\" = 512",
            "\"--max-running-requests\" = 40",
        )
        .replace("slo = { e2e_ms = 1600 }", "slo = { e2e_ms = 2000 }");
    assert!(
        text.contains("= 40,") && text.contains("e2e_ms = 2000"),
        "{text}"
    );
    let (spec, search) = tuning::parse("sat.toml", &text).unwrap();
    let cands = tuning::space::candidates(&spec, &search);
    assert_eq!(cands.len(), 1);
    let params = sim_fleet::model_params(&spec, &cands[0]).unwrap();
    let slo = fleetbench_sim::model::Slo {
        e2e_p99_ms: spec.load.slo.e2e_ms,
        ..Default::default()
    };
    let knee = fleetbench_sim::model::knee(&params, 128, 64, slo);
    assert_eq!(knee, 40, "the model's knee is the running-requests cap");

    let dir = tempfile::tempdir().unwrap();
    let fleet = sim_fleet::Fleet::start(dir.path(), 1).await;
    let client = fleet.client().await;
    let o = tuning::saturation::run_saturation(&client, "sat.toml", &text)
        .await
        .unwrap();
    fleet.stop().await;
    let report = tuning::render::saturation(&o);
    let r = &o.results[0];
    assert!(
        knee.abs_diff(r.saturation) <= o.bounds.resolution,
        "model knee {knee}\n{report}"
    );
    let miss = r.first_miss.expect("a level that misses the SLO");
    assert!(miss - r.saturation <= o.bounds.resolution, "{report}");
    assert!(r.probes.len() < o.fixed_list_levels, "{report}");
    assert_eq!(o.best.as_deref(), Some(r.config.as_str()));
}
