//! The flag reader against engines' own argument lists: the real `llama-server --help` of the
//! packaged build (run here), and SGLang's and vLLM's help pages recorded from their upstream
//! argument definitions (`engines/testdata/README.md` says how). Each is applied to the
//! built-in policy as the agent does, with and without a profile's pass-through.

use std::collections::BTreeSet;
use std::process::Command;

use fleetbench_engines::EngineKind;
use fleetbench_engines::flags::{EngineArgs, FlagError, FlagPolicy};

fn llama_help() -> String {
    let ll = fleetbench_testkit::llama_cpp();
    let out = Command::new(&ll.server)
        .arg("--help")
        .env("LD_LIBRARY_PATH", ll.server.parent().unwrap())
        .output()
        .expect("run llama-server --help");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn policy(kind: EngineKind, help: &str, pass: &[&str]) -> FlagPolicy {
    let args = EngineArgs::parse(help).expect("a help page");
    let mut p = FlagPolicy::builtin(kind);
    let pass: Vec<String> = pass.iter().map(|s| s.to_string()).collect();
    p.apply_engine_args(&args, &pass)
        .expect("pass-through names are listed");
    p
}

fn check(p: &FlagPolicy, name: &str, value: Option<&str>) -> Result<String, FlagError> {
    p.check(name, value, &BTreeSet::new()).map(|c| c.canonical)
}

#[test]
fn llama_server_help_is_read_and_every_table_flag_is_in_it() {
    let help = llama_help();
    let args = EngineArgs::parse(&help).unwrap();
    assert!(args.options.len() > 150, "{} options", args.options.len());
    let ctx = args.find("-c").unwrap();
    assert_eq!(ctx.names[0], "--ctx-size");
    assert!(ctx.takes_value);
    let fa = args.find("--flash-attn").unwrap();
    assert_eq!(fa.choices.as_deref().unwrap(), ["on", "off", "auto"]);
    // `--kv-unified` and `--no-kv-unified` share a row but are opposite settings.
    assert_ne!(args.find("-kvu"), args.find("-no-kvu"));
    assert!(!args.find("--no-kv-unified").unwrap().takes_value);

    let builtin = FlagPolicy::builtin(EngineKind::Llamacpp);
    let p = policy(EngineKind::Llamacpp, &help, &[]);
    // This build lists every flag of the table: nothing is lost by asking it.
    let before: BTreeSet<String> = builtin.rules().into_iter().map(|r| r.name).collect();
    let after: BTreeSet<String> = p.rules().into_iter().map(|r| r.name).collect();
    assert!(before.is_subset(&after), "{:?}", before.difference(&after));
    assert_eq!(check(&p, "-lv", Some("3")).unwrap(), "--verbosity");
    assert_eq!(
        check(&p, "--log-verbosity", Some("3")).unwrap(),
        "--verbosity"
    );

    // Unknown to fleetbench: refused, unless the profile passes it through; then typed by
    // the engine's own list (its choices), and still canonicalised.
    assert!(matches!(
        check(&p, "--rope-scaling", Some("yarn")),
        Err(FlagError::NotAllowed { .. })
    ));
    let p = policy(EngineKind::Llamacpp, &help, &["--rope-scaling"]);
    assert_eq!(
        check(&p, "--rope-scaling", Some("yarn")).unwrap(),
        "--rope-scaling"
    );
    let e = check(&p, "--rope-scaling", Some("cubic")).unwrap_err();
    assert!(e.to_string().contains("none, linear, yarn"), "{e}");
}

#[test]
fn sglang_recorded_help_fixes_the_table_and_passes_through_new_flags() {
    let help = fixture("sglang-launch-server-help.txt");
    let p = policy(EngineKind::Sglang, &help, &[]);
    // The shorthands recipes use, written out for the engine.
    assert_eq!(check(&p, "--tp", Some("8")).unwrap(), "--tp-size");
    assert_eq!(check(&p, "--dp", Some("2")).unwrap(), "--dp-size");
    assert_eq!(check(&p, "--ep", Some("8")).unwrap(), "--ep-size");
    assert!(check(&p, "--cuda-graph-max-bs", Some("0")).is_ok());
    for v in ["deepep_v2", "pplx", "megamoe", "ascend_tp"] {
        assert!(check(&p, "--moe-a2a-backend", Some(v)).is_ok(), "{v}");
    }
    // A table flag this build does not list is refused before any restart, naming why.
    let e = check(&p, "--cuda-graph-backend-decode", Some("full")).unwrap_err();
    assert!(matches!(e, FlagError::NotInEngine { .. }), "{e}");
    assert!(e.to_string().contains("--help does not list it"), "{e}");
    // A flag fleetbench does not know: off by default, on by exact name with its choices.
    assert!(check(&p, "--linear-attn-kernel-backend", Some("flashkda")).is_err());
    let p = policy(EngineKind::Sglang, &help, &["--linear-attn-kernel-backend"]);
    assert!(check(&p, "--linear-attn-kernel-backend", Some("flashkda")).is_ok());
    assert!(check(&p, "--linear-attn-kernel-backend", Some("cuda")).is_err());
    // Pass-through never opens a risky flag: that is allow_flags' job.
    let mut q = FlagPolicy::builtin(EngineKind::Sglang);
    let e = q
        .apply_engine_args(
            &EngineArgs::parse(&help).unwrap(),
            &["--trust-remote-code".into()],
        )
        .unwrap_err();
    assert!(e.contains("allow_flags"), "{e}");
    // And a name the build does not list cannot be passed through.
    let e = q
        .apply_engine_args(
            &EngineArgs::parse(&help).unwrap(),
            &["--made-up-flag".into()],
        )
        .unwrap_err();
    assert!(e.contains("not in the engine's own argument list"), "{e}");
}

#[test]
fn vllm_recorded_help_human_ints_and_a_new_upstream_value_by_pass_through() {
    let help = fixture("vllm-serve-help-all.txt");
    let p = policy(EngineKind::Vllm, &help, &[]);
    for v in ["8k", "8192", "16K", "25.6k", "8Ki"] {
        assert!(
            check(&p, "--max-num-batched-tokens", Some(v)).is_ok(),
            "{v}"
        );
    }
    for v in ["8x", "1.5K", "k", "-8k"] {
        assert!(
            check(&p, "--max-num-batched-tokens", Some(v)).is_err(),
            "{v}"
        );
    }
    assert_eq!(
        check(&p, "-tp", Some("2")).unwrap(),
        "--tensor-parallel-size"
    );
    assert_eq!(
        check(&p, "--no-enable-log-requests", None).unwrap(),
        "--no-enable-log-requests"
    );
    assert!(check(&p, "--max-cudagraph-capture-size", Some("512")).is_ok());
    // Deprecated upstream: no longer in the table (the spec check names the replacement).
    assert!(check(&p, "--disable-log-requests", None).is_err());
    // `nvfp4` is a KV-cache dtype this build lists and the table does not know: refused by
    // the table alone, accepted when the profile passes the flag through; a value the build
    // does not list is still refused.
    assert!(check(&p, "--kv-cache-dtype", Some("nvfp4")).is_err());
    let p = policy(EngineKind::Vllm, &help, &["--kv-cache-dtype"]);
    assert!(check(&p, "--kv-cache-dtype", Some("nvfp4")).is_ok());
    assert!(check(&p, "--kv-cache-dtype", Some("int8_per_token_head")).is_ok());
    assert!(check(&p, "--kv-cache-dtype", Some("fp3")).is_err());
}

#[test]
fn without_the_engine_the_tables_stand_and_pass_through_is_loose_but_named() {
    let mut p = FlagPolicy::builtin(EngineKind::Vllm);
    p.pass_through_unread(&["--kv-cache-dtype".into(), "--new-flag".into()])
        .unwrap();
    assert!(check(&p, "--kv-cache-dtype", Some("nvfp4")).is_ok());
    assert!(check(&p, "--new-flag", None).is_ok());
    assert!(check(&p, "--new-flag", Some("3")).is_ok());
    assert!(check(&p, "--other-new-flag", None).is_err());
    let e = check(&p, "--new-flag", Some("-x")).unwrap_err();
    assert!(e.to_string().contains("does not start with '-'"), "{e}");
    let mut q = FlagPolicy::builtin(EngineKind::Vllm);
    assert!(
        q.pass_through_unread(&["--trust-remote-code".into()])
            .is_err()
    );
}

#[test]
fn sglang_router_help_is_read_and_every_table_flag_is_in_it() {
    let out = Command::new(fleetbench_testkit::engines::sglang_router())
        .args(["launch", "--help"])
        .output()
        .expect("run sglang-router launch --help");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let args = EngineArgs::parse(&help).unwrap();
    let policy_opt = args.find("--policy").unwrap();
    assert_eq!(
        policy_opt.choices.as_deref().unwrap(),
        [
            "random",
            "round_robin",
            "cache_aware",
            "power_of_two",
            "manual"
        ]
    );
    let builtin = FlagPolicy::builtin(EngineKind::SglangRouter);
    let p = policy(EngineKind::SglangRouter, &help, &[]);
    let before: BTreeSet<String> = builtin.rules().into_iter().map(|r| r.name).collect();
    let after: BTreeSet<String> = p.rules().into_iter().map(|r| r.name).collect();
    assert!(before.is_subset(&after), "{:?}", before.difference(&after));
    // argparse takes abbreviations: one that names a worker flag resolves to it, so a profile
    // that pins the worker flags refuses it (the agent pins them all).
    assert_eq!(
        check(&p, "--worker-u", Some("http://x:1")).unwrap(),
        "--worker-urls"
    );
    assert_eq!(
        check(&p, "--poli", Some("round_robin")).unwrap(),
        "--policy"
    );
    assert!(matches!(
        check(&p, "--policy", Some("least_loaded")),
        Err(FlagError::BadValue { .. })
    ));
    assert!(matches!(
        check(&p, "--model-path", Some("/m")),
        Err(FlagError::Gated { .. })
    ));
}
