use super::*;

fn generic(extra: &str) -> Profile {
    let text = format!(
        "kind = \"generic\"\nprogram = \"/bin/sleep\"\nargs = [\"{{port}}\"]\nflags_mode = \"replace\"\n{extra}"
    );
    crate::config::profile_from_toml("g", &text).unwrap()
}

fn spec(flags: &[(&str, Option<&str>)]) -> agentpb::EngineSpec {
    agentpb::EngineSpec {
        profile: "g".into(),
        model: String::new(),
        flags: flags
            .iter()
            .map(|(n, v)| agentpb::Flag {
                name: n.to_string(),
                value: v.map(String::from),
            })
            .collect(),
        env: Default::default(),
        port: 4242,
        gang: None,
        ..Default::default()
    }
}

#[test]
fn argv_is_fixed_args_then_checked_flags() {
    let p = generic(
        "[[flags]]\nname = \"--n\"\ntype = \"int\"\nmin = 1\n[[flags]]\nname = \"--fast\"\ntype = \"switch\"\n",
    );
    let plan = p
        .plan(&spec(&[("--n", Some("3")), ("--fast", None)]))
        .unwrap();
    assert_eq!(plan.argv, vec!["/bin/sleep", "4242", "--n", "3", "--fast"]);
    assert_eq!(plan.base_url, "http://127.0.0.1:4242");
    let err = p.plan(&spec(&[("--n", Some("0"))])).unwrap_err();
    assert!(err.to_string().contains("--n"), "{err}");
    let err = p.plan(&spec(&[("--other", None)])).unwrap_err();
    assert!(err.to_string().contains("--other"), "{err}");
    let err = p
        .plan(&spec(&[("--n", Some("1")), ("--n", Some("2"))]))
        .unwrap_err();
    assert!(
        matches!(err, RequestError::Flag(FlagError::Repeated { .. })),
        "{err}"
    );
}

#[test]
fn env_and_models_are_checked() {
    let err = crate::config::profile_from_toml(
        "g",
        "kind = \"generic\"\nprogram = \"/bin/sleep\"\nallowed_env = [\"FOO_*\"]\n",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("prefixes are not allowed"),
        "{err}"
    );
    let p = generic(
        "allowed_env = [\"FOO_BAR\", { name = \"LEVEL\", type = \"choice\", values = [\"a\"] }]\nmodels = [\"m1\"]\n",
    );
    let mut s = spec(&[]);
    s.env.insert("LEVEL".into(), "b".into());
    let err = p.plan(&s).unwrap_err();
    assert!(err.to_string().contains("expected one of a"), "{err}");
    s.env.insert("LEVEL".into(), "a".into());
    s.env.insert("FOO_BAR".into(), "/etc/passwd".into());
    let err = p.plan(&s).unwrap_err();
    assert!(err.to_string().contains("no paths"), "{err}");
    s.env.clear();
    s.env.insert("LD_PRELOAD".into(), "/tmp/x.so".into());
    let err = p.plan(&s).unwrap_err();
    assert!(err.to_string().contains("LD_PRELOAD"), "{err}");
    s.env.clear();
    s.env.insert("FOO_BAR".into(), "1".into());
    s.model = "m2".into();
    let err = p.plan(&s).unwrap_err();
    assert!(err.to_string().contains("m2"), "{err}");
    s.model = "m1".into();
    let plan = p.plan(&s).unwrap();
    assert_eq!(plan.env["FOO_BAR"], "1");
}

#[test]
fn config_id_ignores_flag_order() {
    let p = generic(
        "[[flags]]\nname = \"--a\"\ntype = \"switch\"\n[[flags]]\nname = \"--b\"\ntype = \"switch\"\n",
    );
    let x = p.plan(&spec(&[("--a", None), ("--b", None)])).unwrap();
    let y = p.plan(&spec(&[("--b", None), ("--a", None)])).unwrap();
    assert_eq!(x.config_id, y.config_id);
}

#[test]
fn programs_resolve_or_are_named() {
    assert!(resolve_program("/bin/sh").is_ok());
    assert!(resolve_program("sh").is_ok());
    assert!(resolve_program("./sh").is_err());
    assert!(resolve_program("definitely-not-a-program-xyz").is_err());
    let err = crate::config::profile_from_toml(
        "x",
        "kind = \"generic\"\nprogram = \"/nonexistent/prog\"\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("profiles.x.program"), "{err}");
}

fn sim_profile(extra: &str) -> Profile {
    let text =
        format!("kind = \"sim\"\nprogram = \"/bin/sleep\"\nport = 4242\nmodels = [\"m\"]\n{extra}");
    crate::config::profile_from_toml("s", &text).unwrap()
}

#[test]
fn a_gang_adds_the_engines_rendezvous_flags_and_pins_them() {
    let p = sim_profile("rendezvous_port = 5000\n");
    assert_eq!(p.info().rendezvous_port, 5000);
    let mut s = spec(&[("--ttft-ms", Some("5"))]);
    s.profile = "s".into();
    s.model = "m".into();
    let alone = p.plan(&s).unwrap();
    s.gang = Some(agentpb::Gang {
        nnodes: 2,
        node_rank: 1,
        dist_init_addr: "10.0.0.1:5000".into(),
    });
    let rank = p.plan(&s).unwrap();
    let tail: Vec<&str> = rank
        .argv
        .iter()
        .rev()
        .take(6)
        .rev()
        .map(|a| a.as_str())
        .collect();
    assert_eq!(
        tail,
        [
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--dist-init-addr",
            "10.0.0.1:5000"
        ]
    );
    // Every rank runs the same config: the gang is not part of its identity.
    assert_eq!(rank.config_id, alone.config_id);
    // A caller's rendezvous flag is refused by name, gang or not.
    for flag in ["--nnodes", "--node-rank", "--dist-init-addr"] {
        let mut bad = s.clone();
        bad.flags.push(agentpb::Flag {
            name: flag.into(),
            value: Some("1".into()),
        });
        let e = p.plan(&bad).unwrap_err().to_string();
        assert!(
            e.contains(flag) && e.contains("set by the agent"),
            "{flag}: {e}"
        );
        bad.gang = None;
        assert!(p.plan(&bad).is_err(), "{flag} without a gang");
    }
    // Values that make no gang are refused naming the field.
    s.gang.as_mut().unwrap().node_rank = 2;
    let e = p.plan(&s).unwrap_err().to_string();
    assert!(e.contains("node_rank"), "{e}");
}

#[test]
fn llamacpp_refuses_a_gang_and_a_rendezvous_port() {
    let text =
        "kind = \"llamacpp\"\nprogram = \"/bin/sleep\"\nmodels = [\"m\"]\nrendezvous_port = 5000\n";
    let e = crate::config::profile_from_toml("l", text)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rendezvous_port") && e.contains("cannot span hosts"),
        "{e}"
    );
    let p = crate::config::profile_from_toml(
        "l",
        "kind = \"llamacpp\"\nprogram = \"/bin/sleep\"\nmodels = [\"m\"]\n",
    )
    .unwrap();
    let mut s = spec(&[]);
    s.profile = "l".into();
    s.model = "m".into();
    s.gang = Some(agentpb::Gang {
        nnodes: 2,
        node_rank: 0,
        dist_init_addr: "10.0.0.1:5000".into(),
    });
    let e = p.plan(&s).unwrap_err().to_string();
    assert!(e.contains("llamacpp cannot span hosts"), "{e}");
}

/// A router profile on a program that exists everywhere (only its argv is looked at).
fn router(extra: &str) -> Profile {
    let text =
        format!("kind = \"sglang-router\"\nprogram = \"/bin/sleep\"\nmetrics_port = 4343\n{extra}");
    crate::config::profile_from_toml("router", &text).unwrap()
}

fn router_spec(workers: &[&str], flags: &[(&str, Option<&str>)]) -> agentpb::EngineSpec {
    agentpb::EngineSpec {
        profile: "router".into(),
        workers: workers.iter().map(|w| w.to_string()).collect(),
        workers_kind: agentpb::EngineKind::Llamacpp as i32,
        ..spec(flags)
    }
}

#[test]
fn a_router_gets_only_allowed_workers_and_no_flag_names_one() {
    let p = router("allowed_workers = [\"http://127.0.0.1:9101\", \"http://LOCALHOST:9102/\"]\n");
    let plan = p
        .plan(&router_spec(
            &["http://127.0.0.1:9101", "http://localhost:9102"],
            &[("--policy", Some("round_robin"))],
        ))
        .unwrap();
    let argv = plan.argv[1..].join(" ");
    assert_eq!(
        argv,
        "launch --host 127.0.0.1 --port 4242 --worker-urls http://127.0.0.1:9101 \
         http://localhost:9102 --prometheus-host 127.0.0.1 --prometheus-port 4343 --policy \
         round_robin"
    );
    assert_eq!(
        plan.metrics_url.as_deref(),
        Some("http://127.0.0.1:4343/metrics")
    );
    assert_eq!(plan.health_url, "http://127.0.0.1:4242/readiness");
    assert_eq!(
        plan.worker_metrics_urls(),
        [
            "http://127.0.0.1:9101/metrics",
            "http://localhost:9102/metrics"
        ]
    );

    let refused = |workers: &[&str], flags: &[(&str, Option<&str>)]| {
        p.plan(&router_spec(workers, flags))
            .unwrap_err()
            .to_string()
    };
    let e = refused(&["http://127.0.0.1:9101", "http://10.0.0.7:9101"], &[]);
    assert!(
        e.starts_with("workers[1]: http://10.0.0.7:9101 is not an allowed worker"),
        "{e}"
    );
    assert!(refused(&[], &[]).starts_with("workers: profile \"router\" is a router"));
    assert!(refused(&["http://127.0.0.1:9101/v1"], &[]).starts_with("workers[0]:"));
    assert!(refused(&["http://127.0.0.1:9101", "http://127.0.0.1:9101/"], &[]).contains("twice"));
    // Every flag that would name an upstream, under any spelling, is pinned.
    for (flag, value) in [
        ("--worker-urls", Some("http://10.0.0.7:1")),
        ("--worker-u", Some("http://10.0.0.7:1")),
        ("--prefill", Some("http://10.0.0.7:1")),
        ("--service-discovery", None),
        ("--prometheus-port", Some("1")),
    ] {
        let e = refused(&["http://127.0.0.1:9101"], &[(flag, value)]);
        assert!(e.contains("is set by the agent"), "{flag}: {e}");
    }
    // The built-in router profile allows no worker.
    let builtin = Profile::builtins();
    let b = &builtin["sglang-router"];
    assert!(b.allowed_workers.is_empty());
    assert_eq!(b.metrics_port, Some(29000));
    // An engine takes no workers, and its profile cannot allow any.
    let e = generic("").plan(&router_spec(&["http://127.0.0.1:9101"], &[]));
    assert!(e.unwrap_err().to_string().contains("not a router"));
    let e = crate::config::profile_from_toml(
        "g",
        "kind = \"generic\"\nprogram = \"/bin/sleep\"\nallowed_workers = [\"http://a:1\"]\n",
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("profiles.g.allowed_workers[0]"),
        "{e}"
    );
}
