//! Property tests: no input makes the engine-knowledge parsers panic, and the flag policy's
//! answers are consistent. Fixed case counts so CI time is fixed (about a second in all).

use std::collections::BTreeSet;

use fleetbench_engines::flags::{FlagPolicy, JsonKey, check_json};
use fleetbench_engines::{EngineKind, ExitInfo};
use proptest::prelude::*;

const KINDS: [EngineKind; 5] = [
    EngineKind::Sglang,
    EngineKind::Vllm,
    EngineKind::Llamacpp,
    EngineKind::Sim,
    EngineKind::Generic,
];

/// Flag names near real ones: real spellings, prefixes, `=` forms, junk.
fn flag_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "--tp-size",
            "--tensor-parallel-size",
            "--trust-remote-code",
            "-tp",
            "-O",
            "--speculative-config",
            "--no-enable-prefix-caching",
            "--max-num-seqs",
            "-np",
            "--parallel",
            "--port",
            "--model",
        ])
        .prop_map(String::from),
        "--[a-z-]{0,30}(=[ -~]{0,20})?",
        "-[a-zA-Z]{1,4}",
        any::<String>(),
    ]
}

fn value() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        "[0-9-]{1,12}",
        r#"\{("[a-z_]{1,24}": ([0-9]{1,12}|"[a-z]{1,8}"|true|\[[0-9, ]{0,20}\]|\{\}),? ?){0,4}\}"#,
        any::<String>(),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn flag_checks_never_panic_and_accepted_flags_are_canonical(
        kind in prop::sample::select(KINDS.to_vec()),
        name in flag_name(),
        value in value(),
        pin_tp in any::<bool>(),
    ) {
        let mut p = FlagPolicy::builtin(kind);
        let _ = p.allow("--speculative-config");
        let pins = if pin_tp {
            p.pinned(&["--tp-size".to_string(), "8".to_string(), "--port".into(), "1".into()])
        } else {
            BTreeSet::new()
        };
        if let Ok(c) = p.check(&name, value.as_deref(), &pins) {
            // What was accepted is a listed canonical flag, not pinned, and checking its
            // canonical spelling gives the same answer.
            prop_assert!(p.rules().iter().any(|r| r.name == c.canonical));
            prop_assert!(!pins.contains(&c.conflict_key));
            let again = p.check(&c.canonical, c.value.as_deref(), &pins).unwrap();
            prop_assert_eq!(&again.canonical, &c.canonical);
            if let Some(v) = &c.value {
                prop_assert!(!v.chars().any(|ch| ch.is_control()));
                prop_assert!(!v.starts_with('-') || v.parse::<f64>().is_ok());
            }
            // Never a risky switch on a built-in profile.
            prop_assert_ne!(c.canonical.as_str(), "--trust-remote-code");
        }
    }

    #[test]
    fn json_values_never_panic(text in any::<String>(), json in value()) {
        let keys = [("n".to_string(), JsonKey::Int { min: Some(1), max: Some(8) })]
            .into_iter()
            .collect();
        let _ = check_json(&keys, &text);
        if let Some(j) = json {
            let _ = check_json(&keys, &j);
        }
    }

    #[test]
    fn prometheus_text_never_panics(text in any::<String>(), lines in prop::collection::vec(
        prop_oneof![
            "# (TYPE|HELP) [a-z_:]{1,20} [a-z ]{0,20}",
            r#"[a-z_:]{1,20}(\{[a-z_]{1,8}="[ -~]{0,10}"(,[a-z_]{1,8}="[^"]{0,10}")*\})? [-+0-9.eE]{1,12}( [0-9]{1,13})?"#,
            any::<String>(),
        ], 0..20)) {
        let _ = fleetbench_engines::prom::parse(&text);
        let joined = lines.join("\n");
        let e = fleetbench_engines::prom::parse(&joined);
        prop_assert!(e.series.len() <= lines.len());
        for kind in KINDS {
            let _ = fleetbench_engines::map_metrics(kind, &joined);
        }
    }

    #[test]
    fn the_log_classifier_never_panics(
        kind in prop::sample::select(KINDS.to_vec()),
        lines in prop::collection::vec(prop_oneof![
            "Traceback \\(most recent call last\\):",
            "  File \"[a-z/]{1,20}.py\", line [0-9]{1,4}, in [a-z_]{1,10}",
            "[A-Za-z]{1,20}Error: [ -~]{0,40}",
            "torch.OutOfMemoryError: CUDA out of memory[ -~]{0,40}",
            "NCCL (WARN|error)[ -~]{0,40}",
            any::<String>(),
        ], 0..40),
        code in prop::option::of(any::<i32>()),
        signal in prop::option::of(any::<i32>()),
    ) {
        let exit = ExitInfo { code, signal, ..Default::default() };
        let _ = fleetbench_engines::classify(kind, &exit, &lines);
        let _ = fleetbench_engines::logs::parse_all(kind, lines.iter().map(String::as_str));
    }
}
