//! The job spec parser and validator (`fleetbench_spec`): any text gives a spec or
//! located errors, never a panic; a spec that parses has every number in range, expands to at
//! most `MAX_TRIALS` trials, and what it sends the agent passes the agent's own bounds (a spec
//! the controller accepts never fails at the agent for a number the agent refuses).
#![no_main]

use fleetbench_spec::{self as spec, Bound, JobSpec, Levels};
use fleetbench_proto::limits as lim;
use libfuzzer_sys::fuzz_target;

fn check(s: &JobSpec) {
    assert!(
        lim::check_u32(s.repeats, lim::REPEATS).is_ok(),
        "repeats {}",
        s.repeats
    );
    match &s.load.levels {
        Levels::Concurrency(v) => {
            for c in v {
                assert!(
                    lim::check_u32(*c, lim::CONCURRENCY).is_ok(),
                    "concurrency {c}"
                );
            }
        }
        Levels::RequestRate { rates, .. } => {
            for r in rates {
                assert!(lim::check_f64(*r, lim::REQUEST_RATE).is_ok(), "rate {r}");
            }
        }
    }
    match s.load.bound {
        Bound::Requests(n) => assert!(lim::check_u32(n, lim::REQUESTS).is_ok(), "requests {n}"),
        Bound::Duration(d) => assert!(
            lim::check_f64(d.as_secs_f64(), lim::DURATION_S).is_ok(),
            "duration {d:?}"
        ),
    }
    let trials = s.expand_trials();
    assert!(
        trials.len() as u64 <= lim::MAX_TRIALS,
        "{} trials",
        trials.len()
    );
    for w in 0..s.workloads.len() {
        let mut req = s.benchmark_request(w);
        req.run_id = "fuzz-run".into();
        if let Err(e) = fleetbench_agent::bounds::check_benchmark(&req) {
            panic!("the spec accepted workload {w} but the agent refuses it: {e}");
        }
    }
    for c in 0..s.configs.len() {
        let e = s.engine_spec(c);
        if let Err(err) = fleetbench_agent::bounds::check_apply(&e, "fuzz-run") {
            panic!("the spec accepted config {c} but the agent refuses it: {err}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match spec::parse("fuzz.toml", &text) {
        Ok(s) => check(&s),
        Err(errors) => {
            assert!(!errors.is_empty(), "an error result without errors");
            let _ = spec::render_errors(&errors);
        }
    }
    if let Ok((s, _)) = spec::suite::parse_suite("fuzz.toml", &text) {
        check(&s);
    }
    if let Ok((s, _)) = spec::search::parse_search("fuzz.toml", &text) {
        check(&s);
    }
});
