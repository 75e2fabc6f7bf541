//! Every job spec under `examples/` is valid: users copy them, and the README runs one.

use fleetbench_spec::parse;

#[test]
fn every_example_parses() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        // Regression suites are read by their own parser; a tuning example (`[search]`) is
        // refused by name by the plain parser, never half-read.
        let parsed = if text.lines().any(|l| l.trim() == "[suite]") {
            fleetbench_spec::suite::parse_suite(&name, &text).map(|(spec, _)| spec)
        } else {
            parse(&name, &text)
        };
        match parsed {
            Ok(spec) => {
                assert!(!spec.expand_trials().is_empty(), "{name}: no trials");
                checked.push(name);
            }
            Err(errors) => {
                let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
                let reserved = rendered
                    .iter()
                    .all(|e| e.contains("tuning searches ([search]) are not supported"));
                assert!(reserved, "{name} does not parse:\n{}", rendered.join("\n"));
            }
        }
    }
    for required in ["quickstart.toml", "sglang-ab.toml", "vllm.toml"] {
        assert!(
            checked.iter().any(|c| c == required),
            "examples/{required} missing or invalid"
        );
    }
}

#[test]
fn the_quickstart_tells_the_ab_story() {
    let text = include_str!("../../examples/quickstart.toml");
    let spec = parse("quickstart.toml", text).unwrap();
    let names: Vec<_> = spec.configs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["A-triton", "B-cutlass"]);
    let b = &spec.configs[1];
    let flag = |name: &str| {
        b.flags
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.clone())
    };
    let crash_above: u32 = flag("--crash-above-batch").unwrap().parse().unwrap();
    let top = match &spec.load.levels {
        fleetbench_spec::Levels::Concurrency(c) => *c.last().unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(top > crash_above, "B must crash at the top level");
    assert!(spec.repeats >= 2, "significance needs two repeats");
}
