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
