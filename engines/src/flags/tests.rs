use super::*;

fn err(kind: EngineKind, name: &str, value: Option<&str>) -> String {
    check_flag(&builtin_rules(kind), name, value)
        .expect_err("must be refused")
        .to_string()
}

#[test]
fn bad_integer_names_the_flag_and_what_was_expected() {
    assert_eq!(
        err(EngineKind::Sglang, "--max-running-requests", Some("lots")),
        r#"flag "--max-running-requests": expected an integer >= 1, got "lots""#
    );
    assert!(
        check_flag(
            &builtin_rules(EngineKind::Sglang),
            "--max-running-requests",
            Some("256")
        )
        .is_ok()
    );
}

#[test]
fn float_bounds_are_enforced() {
    let rules = builtin_rules(EngineKind::Sglang);
    assert!(check_flag(&rules, "--mem-fraction-static", Some("0.85")).is_ok());
    let e = err(EngineKind::Sglang, "--mem-fraction-static", Some("1.5"));
    assert!(e.contains("between 0 and 1"), "{e}");
    let e = err(EngineKind::Vllm, "--gpu-memory-utilization", Some("NaN"));
    assert!(e.contains("--gpu-memory-utilization"), "{e}");
}

#[test]
fn switches_take_no_value_and_valued_flags_need_one() {
    let rules = builtin_rules(EngineKind::Sglang);
    assert!(check_flag(&rules, "--disable-cuda-graph", None).is_ok());
    let e = err(EngineKind::Sglang, "--disable-cuda-graph", Some("true"));
    assert!(e.contains("switch"), "{e}");
    let e = err(EngineKind::Sglang, "--tp-size", None);
    assert!(e.contains("needs a value"), "{e}");
}

#[test]
fn choices_are_listed_when_refused() {
    let rules = builtin_rules(EngineKind::Sglang);
    assert!(check_flag(&rules, "--moe-runner-backend", Some("flashinfer_cutlass")).is_ok());
    assert!(check_flag(&rules, "--attention-backend", Some("fa3")).is_ok());
    let e = err(EngineKind::Sglang, "--moe-runner-backend", Some("cuda"));
    assert!(e.contains("one of auto, deep_gemm, triton"), "{e}");
    let e = err(EngineKind::Llamacpp, "--flash-attn", Some("yes"));
    assert_eq!(
        e,
        r#"flag "--flash-attn": expected one of on, off, auto, got "yes""#
    );
}

#[test]
fn unknown_flag_is_not_allowed_and_lists_the_allowed_ones() {
    let e = check_flag(&builtin_rules(EngineKind::Vllm), "--rm-rf", Some("/")).unwrap_err();
    match &e {
        FlagError::NotAllowed { flag, allowed } => {
            assert_eq!(flag, "--rm-rf");
            assert!(allowed.contains("--max-num-seqs"), "{allowed}");
        }
        other => panic!("unexpected {other:?}"),
    }
    // generic has no built-in rules: everything is refused.
    let e = check_flag(&builtin_rules(EngineKind::Generic), "--x", None).unwrap_err();
    assert!(e.to_string().contains("allowed: none"), "{e}");
}

#[test]
fn both_sglang_generations_of_flag_names_are_known() {
    let rules = builtin_rules(EngineKind::Sglang);
    for (name, value) in [
        ("--cuda-graph-max-bs", Some("256")),
        ("--cuda-graph-max-bs-decode", Some("256")),
        ("--cuda-graph-backend-decode", Some("disabled")),
        ("--enable-dp-attention", None),
        ("--attn-dp-size", Some("8")),
        ("--ep", Some("8")),
        ("--chunked-prefill-size", Some("-1")),
        ("--kv-cache-dtype", Some("fp8_e4m3")),
        ("--schedule-policy", Some("lpm")),
    ] {
        check_flag(&rules, name, value).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn sim_accepts_sglang_flags_and_its_own() {
    let rules = builtin_rules(EngineKind::Sim);
    assert!(check_flag(&rules, "--max-running-requests", Some("64")).is_ok());
    assert!(check_flag(&rules, "--stream-writes", Some("coalesced")).is_ok());
    assert!(check_flag(&rules, "--fault", Some("nan")).is_ok());
    assert!(check_flag(&rules, "--fault", Some("hang-after-requests=5")).is_ok());
    assert!(check_flag(&rules, "--fault", Some("hang-after-requests=x")).is_err());
    assert!(check_flag(&rules, "--fault", Some("hang-after-requests")).is_err());
    let e = err(EngineKind::Sim, "--fault", Some("meltdown"));
    assert!(e.contains("hang-after-requests=N"), "{e}");
    assert!(check_flag(&rules, "--crash-above-batch", Some("0")).is_err());
    assert!(check_flag(&builtin_rules(EngineKind::Sglang), "--ttft-ms", Some("5")).is_err());
}

#[test]
fn llamacpp_aliases_share_rules_and_canonical_names() {
    let rules = builtin_rules(EngineKind::Llamacpp);
    assert!(check_flag(&rules, "-np", Some("4")).is_ok());
    assert!(check_flag(&rules, "--parallel", Some("-1")).is_ok());
    assert!(check_flag(&rules, "-np", Some("-2")).is_err());
    assert_eq!(
        canonical_flag(EngineKind::Llamacpp, "-np"),
        Some("--parallel")
    );
    assert_eq!(
        canonical_flag(EngineKind::Sglang, "--tensor-parallel-size"),
        Some("--tp-size")
    );
    assert_eq!(canonical_flag(EngineKind::Vllm, "--tp-size"), None);
}

/// The sampling flags of the H200 runs: host-side sampling was what limited the server.
#[test]
fn llamacpp_sampling_flags_are_known() {
    let rules = builtin_rules(EngineKind::Llamacpp);
    assert!(check_flag(&rules, "-bs", None).is_ok());
    assert_eq!(
        canonical_flag(EngineKind::Llamacpp, "-bs"),
        Some("--backend-sampling")
    );
    assert!(err(EngineKind::Llamacpp, "--backend-sampling", Some("1")).contains("switch"));
    assert!(check_flag(&rules, "--samplers", Some("top_k;temperature")).is_ok());
    assert!(check_flag(&rules, "--top-k", Some("1")).is_ok());
    assert!(err(EngineKind::Llamacpp, "--top-k", Some("-1")).contains(">= 0"));
}

#[test]
fn check_flags_stops_at_the_first_bad_flag() {
    let flags = vec![
        ("--tensor-parallel-size".to_string(), Some("2".to_string())),
        ("--max-num-seqs".to_string(), Some("x".to_string())),
    ];
    let e = check_flags(EngineKind::Vllm, &flags).unwrap_err();
    assert!(e.to_string().contains("--max-num-seqs"), "{e}");
}

#[test]
fn every_builtin_name_is_unique_per_kind() {
    for kind in EngineKind::ALL {
        let rules = builtin_rules(kind);
        let mut names: Vec<_> = rules.iter().map(|r| r.name.clone()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(n, names.len(), "duplicate flag name in {kind}");
    }
}

mod policy {
    use std::collections::BTreeSet;

    use super::super::*;
    use crate::EngineKind;

    fn pinned(p: &FlagPolicy, args: &[&str]) -> BTreeSet<String> {
        p.pinned(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn aliases_prefixes_and_equals_forms_canonicalise_to_one_name() {
        let p = FlagPolicy::builtin(EngineKind::Sglang);
        let none = BTreeSet::new();
        for (name, value) in [
            ("--tp-size", Some("2")),
            ("--tensor-parallel-size", Some("2")),
            ("--tensor-parallel-size=2", None),
            ("--tp-size=2", None),
            ("--tensor-parallel", Some("2")),
            ("--tp", Some("2")),
            (" --tp-size ", Some("2")),
        ] {
            let c = p.check(name, value, &none).unwrap();
            assert_eq!(c.canonical, "--tp-size", "{name}");
            assert_eq!(c.value.as_deref(), Some("2"), "{name}");
        }
        let v = FlagPolicy::builtin(EngineKind::Vllm);
        let c = v.check("-tp", Some("4"), &none).unwrap();
        assert_eq!(c.canonical, "--tensor-parallel-size");
        // llama.cpp's own parser takes no abbreviations: neither do we.
        let l = FlagPolicy::builtin(EngineKind::Llamacpp);
        assert!(matches!(
            l.check("--paral", Some("4"), &none),
            Err(FlagError::NotAllowed { .. })
        ));
        // A prefix of two flags is refused, naming both.
        let e = p.check("--cuda-graph-max", Some("8"), &none).unwrap_err();
        assert!(matches!(e, FlagError::Ambiguous { .. }), "{e}");
        assert!(e.to_string().contains("--cuda-graph-max-bs-decode"), "{e}");
    }

    #[test]
    fn a_pinned_argument_cannot_be_overridden_under_any_spelling() {
        let p = FlagPolicy::builtin(EngineKind::Sglang);
        let pins = pinned(&p, &["--model-path", "m", "--tp-size", "8", "--port", "1"]);
        for name in [
            "--tp-size",
            "--tensor-parallel-size",
            "--tensor-parallel-size=1",
            "--tensor-para",
            "--port",
        ] {
            let value = (!name.contains('=')).then_some("1");
            let e = p.check(name, value, &pins).unwrap_err();
            assert!(matches!(e, FlagError::Pinned { .. }), "{name}: {e}");
            assert!(e.to_string().contains("cannot be given"), "{e}");
        }
        // vLLM's negated switches set the same thing as the positive one.
        let v = FlagPolicy::builtin(EngineKind::Vllm);
        let pins = pinned(&v, &["--enable-prefix-caching", "-tp", "8"]);
        for name in ["--no-enable-prefix-caching", "--tensor-parallel-size"] {
            assert!(matches!(
                v.check(name, None, &pins),
                Err(FlagError::Pinned { .. })
            ));
        }
    }

    #[test]
    fn repeats_under_two_spellings_are_refused() {
        let p = FlagPolicy::builtin(EngineKind::Sglang);
        let e = p
            .check_all(
                [
                    ("--tp-size", Some("8")),
                    ("--tensor-parallel-size", Some("1")),
                ],
                &BTreeSet::new(),
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"flag "--tensor-parallel-size" is given more than once (as "--tp-size")"#
        );
        let v = FlagPolicy::builtin(EngineKind::Vllm);
        assert!(matches!(
            v.check_all(
                [
                    ("--enable-prefix-caching", None),
                    ("--no-enable-prefix-caching", None)
                ],
                &BTreeSet::new()
            ),
            Err(FlagError::Repeated { .. })
        ));
    }

    #[test]
    fn risky_flags_are_off_until_allowed_by_name() {
        let none = BTreeSet::new();
        for kind in [EngineKind::Sglang, EngineKind::Vllm, EngineKind::Sim] {
            let p = FlagPolicy::builtin(kind);
            let e = p.check("--trust-remote-code", None, &none).unwrap_err();
            assert!(matches!(e, FlagError::Gated { .. }), "{kind}: {e}");
            assert!(e.to_string().contains("allow_flags"), "{e}");
            // An abbreviation is no way around it (the simulator takes none at all).
            let e = p.check("--trust-remote", None, &none).unwrap_err();
            match kind {
                EngineKind::Sim => assert!(matches!(e, FlagError::NotAllowed { .. }), "{e}"),
                _ => assert!(matches!(e, FlagError::Gated { .. }), "{e}"),
            }
            assert!(!p.rules().iter().any(|r| r.name == "--trust-remote-code"));
        }
        let mut p = FlagPolicy::builtin(EngineKind::Vllm);
        let e = p
            .check("--speculative-config", Some("{}"), &none)
            .unwrap_err();
        assert!(matches!(e, FlagError::Gated { .. }), "{e}");
        p.allow("--speculative-config").unwrap();
        p.check(
            "--speculative-config",
            Some(r#"{"method": "ngram", "num_speculative_tokens": 4}"#),
            &none,
        )
        .unwrap();
        assert!(p.allow("--no-such-flag").is_err());
    }

    #[test]
    fn json_flags_are_parsed_and_checked_against_their_keys() {
        let mut p = FlagPolicy::builtin(EngineKind::Vllm);
        p.allow("--speculative-config").unwrap();
        p.allow("-O").unwrap();
        let none = BTreeSet::new();
        let bad = |v: &str| {
            p.check("--speculative-config", Some(v), &none)
                .unwrap_err()
                .to_string()
        };
        let e = bad(r#"{"method": "draft_model", "model": "attacker/evil-repo"}"#);
        assert!(e.contains("one of ngram"), "{e}");
        let e = bad(r#"{"model": "attacker/evil-repo"}"#);
        assert!(e.contains(r#"key "model" is not allowed"#), "{e}");
        let e = bad(r#"{"num_speculative_tokens": 100000}"#);
        assert!(e.contains("between 1 and 64"), "{e}");
        let e = bad("[1, 2]");
        assert!(e.contains("a JSON object"), "{e}");
        let e = bad("not json");
        assert!(e.contains("a JSON object"), "{e}");
        let long = format!(r#"{{"method": "{}"}}"#, "x".repeat(5000));
        assert!(bad(&long).contains("at most 4096 bytes"));
        let c = p
            .check(
                "-O",
                Some(r#"{"cudagraph_capture_sizes": [1, 2, 4, 8], "level": 3}"#),
                &none,
            )
            .unwrap();
        assert_eq!(c.canonical, "--compilation-config");
        assert!(
            p.check(
                "-O",
                Some(r#"{"inductor_passes": {"x": "evil.mod"}}"#),
                &none
            )
            .is_err()
        );
    }

    #[test]
    fn malformed_names_and_values_are_refused() {
        let p = FlagPolicy::builtin(EngineKind::Sglang);
        let none = BTreeSet::new();
        for (n, v) in [
            ("tp-size", Some("1")),
            ("--", None),
            ("--tp-size=1", Some("2")),
            ("--tp size", Some("1")),
        ] {
            assert!(
                matches!(p.check(n, v, &none), Err(FlagError::Malformed { .. })),
                "{n}"
            );
        }
        let e = p
            .check("--served-model-name", Some("--trust-remote-code"), &none)
            .unwrap_err();
        assert!(e.to_string().contains("does not start with '-'"), "{e}");
        let e = p
            .check("--served-model-name", Some("a\nb"), &none)
            .unwrap_err();
        assert!(e.to_string().contains("control"), "{e}");
    }

    #[test]
    fn replace_mode_knows_aliases_but_allows_only_what_the_profile_adds() {
        let mut p = FlagPolicy::known(EngineKind::Sglang);
        let none = BTreeSet::new();
        assert!(matches!(
            p.check("--tp-size", Some("2"), &none),
            Err(FlagError::NotAllowed { .. })
        ));
        p.add_rule(FlagRule::new(
            "--tensor-parallel-size",
            FlagType::Int {
                min: Some(1),
                max: Some(8),
            },
        ))
        .unwrap();
        let c = p.check("--tp-size", Some("8"), &none).unwrap();
        assert_eq!(c.canonical, "--tp-size");
        assert!(p.check("--tp-size", Some("9"), &none).is_err());
        // Retyping a risky flag does not turn it on.
        p.add_rule(FlagRule::new("--trust-remote-code", FlagType::Switch))
            .unwrap();
        assert!(matches!(
            p.check("--trust-remote-code", None, &none),
            Err(FlagError::Gated { .. })
        ));
    }
}
