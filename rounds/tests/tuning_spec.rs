//! `[search]` validation: every problem located as file:line: field: message, and the space
//! (lists, ranges, switches, constraints) expanded into candidates.

use fleetbench_rounds::tuning::space;
use fleetbench_spec::search::{Objective, SWITCH_ON, Strategy, parse_search};

const HEAD: &str = r#"name = "t"
[[configs]]
name = "start"
engine = "sim"
model = "m"
flags = { "--time-scale" = 0.5 }
[[workloads]]
name = "w"
dataset = "random"
input_len = 8
output_len = 8
[load]
concurrency = [4]
requests = 8
"#;

fn errors(search: &str) -> Vec<String> {
    parse_search("t.toml", &format!("{HEAD}{search}"))
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_space_expands_with_constraints_into_plain_job_configs() {
    let text = format!(
        "{HEAD}[search]\nstrategy = \"random\"\nbudget = 100\nseed = 3\n[search.flags]\n\"--max-running-requests\" = {{ min = 16, max = 64, step = 16 }}\n\"--disable-cuda-graph\" = [false, true]\n\"--cuda-graph-max-bs\" = [32, 160]\n[[search.constraints]]\nflag = \"--cuda-graph-max-bs\"\nwhen = {{ \"--disable-cuda-graph\" = false }}\n"
    );
    let (spec, search) = parse_search("t.toml", &text).unwrap();
    assert_eq!(
        search.strategy,
        Strategy::Random {
            budget: 100,
            seed: 3
        }
    );
    assert_eq!(search.objective, Objective::OutputTokensPerS);
    let switch = search
        .flags
        .iter()
        .find(|f| f.name == "--disable-cuda-graph")
        .unwrap();
    assert_eq!(
        switch.values,
        [None, Some(SWITCH_ON.to_string())],
        "off, then on"
    );
    let grid = space::grid(&search);
    // 4 caps x (graphs off, or on with 2 sizes): the constraint merges the graphs-off pairs.
    assert_eq!(grid.len(), 12);
    let cands = space::candidates(&spec, &search);
    assert_eq!(cands.len(), 12, "a budget above the space takes it all");
    // A round's job spec is a plain job with one config per candidate.
    let round = space::Round {
        job_name: "t rung 1".into(),
        candidates: cands.clone(),
        repeats: 1,
        budget_fraction: 0.5,
        concurrency: None,
        requests: None,
    };
    let job = fleetbench_spec::parse("t.toml", &space::round_toml(&text, &round).unwrap()).unwrap();
    assert_eq!(job.configs.len(), 12);
    let off = job
        .configs
        .iter()
        .find(|c| c.flags.iter().any(|(k, _)| k == "--disable-cuda-graph"))
        .unwrap();
    assert!(off.flags.iter().all(|(k, _)| k != "--cuda-graph-max-bs"));
    assert!(
        off.flags
            .contains(&("--time-scale".into(), Some("0.5".into()))),
        "fixed flags kept"
    );
    assert_eq!(
        job.load.bound,
        fleetbench_spec::Bound::Requests(8),
        "half of 8 would be one request per slot of c=4 (a burst): a rung keeps 4 per slot, \
         capped by the spec's own 8"
    );
}

#[test]
fn every_problem_is_located() {
    let got = errors(
        "[search]\nstrategy = \"bayes\"\nobjective = \"latency\"\n[search.flags]\n\"--max-running-requests\" = { min = 64, max = 16, step = 16 }\n\"--cuda-graph-max-bs\" = []\nmoe = [\"triton\"]\n[[search.constraints]]\nflag = \"--tp-size\"\nwhen = { \"--cuda-graph-max-bs\" = 8 }\n",
    );
    let want = [
        "t.toml:16: search.strategy: expected \"grid\", \"random\" or \"successive-halving\", got \"bayes\"",
        "t.toml:17: search.objective: expected one of: output_tokens_per_s, requests_per_s, output_tokens_per_s_per_gpu, output_tokens_per_s_per_watt, saturation, got \"latency\"",
        "t.toml:19: search.flags.\"--max-running-requests\".max: max (16) is below min (64)",
        "t.toml:20: search.flags.\"--cuda-graph-max-bs\": must not be empty",
        "t.toml:21: search.flags.moe: flag names start with \"-\" or \"--\" (\"--moe\"?)",
    ];
    assert_eq!(got, want);
    let got = errors(
        "[search]\nobjective = \"saturation\"\n[search.flags]\n\"--max-running-requests\" = [16, 32]\n[[search.constraints]]\nflag = \"--tp-size\"\nwhen = { \"--max-running-requests\" = 8 }\n",
    );
    let want = [
        "t.toml:15: search.saturation: missing: the bracket of a saturation search: saturation = { low = 1, high = 512 }",
        "t.toml:20: search.constraints[0].flag: \"--tp-size\" is not a searched flag (one of: --max-running-requests)",
        "t.toml:21: search.constraints[0].when.\"--max-running-requests\": 8 is not one of the values searched for --max-running-requests",
    ];
    assert_eq!(got, want);
}

#[test]
fn the_per_watt_objective_is_named_like_the_others() {
    let text = format!(
        "{HEAD}[search]\nobjective = \"output_tokens_per_s_per_watt\"\n[search.flags]\n\"--max-running-requests\" = [16, 32]\n"
    );
    let (_, search) = parse_search("t.toml", &text).unwrap();
    assert_eq!(search.objective, Objective::OutputTokensPerSPerWatt);
    assert_eq!(search.objective.name(), "output_tokens_per_s_per_watt");
    // A near miss is refused with the valid names.
    let got = errors(
        "[search]\nobjective = \"output_tokens_per_watt\"\n[search.flags]\n\"--max-running-requests\" = [16, 32]\n",
    );
    assert_eq!(
        got,
        [
            "t.toml:16: search.objective: expected one of: output_tokens_per_s, requests_per_s, output_tokens_per_s_per_gpu, output_tokens_per_s_per_watt, saturation, got \"output_tokens_per_watt\""
        ]
    );
}

#[test]
fn the_per_watt_example_parses_and_asks_for_gpu_hosts() {
    let text = include_str!("../../examples/tune-watt.toml");
    let (spec, search) = parse_search("tune-watt.toml", text).unwrap();
    assert_eq!(search.objective, Objective::OutputTokensPerSPerWatt);
    assert_eq!(spec.hosts.gpu_count, Some(1));
    assert_eq!(space::candidates(&spec, &search).len(), 4);
}

#[test]
fn a_random_search_draws_its_budget_reproducibly() {
    let text = |seed: u32| {
        format!(
            "{HEAD}[search]\nstrategy = \"random\"\nbudget = 5\nseed = {seed}\n[search.flags]\n\"--max-running-requests\" = {{ min = 16, max = 256, step = 16 }}\n\"--moe-runner-backend\" = [\"triton\", \"flashinfer_cutlass\"]\n"
        )
    };
    let draw = |seed| {
        let (spec, search) = parse_search("t.toml", &text(seed)).unwrap();
        space::candidates(&spec, &search)
    };
    let a = draw(1);
    assert_eq!(a.len(), 5);
    let mut flags: Vec<_> = a.iter().map(|c| c.flags.clone()).collect();
    flags.sort();
    flags.dedup();
    assert_eq!(flags.len(), 5, "distinct candidates");
    assert_eq!(a, draw(1), "the same seed draws the same candidates");
    assert_ne!(a, draw(2), "another seed draws others");
}
