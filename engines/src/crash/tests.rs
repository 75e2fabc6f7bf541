use super::*;

fn lines(s: &str) -> Vec<String> {
    s.lines().map(str::to_string).collect()
}

#[test]
fn signal_without_evidence_is_killed_by_signal() {
    let exit = ExitInfo {
        signal: Some(9),
        ..Default::default()
    };
    let c = classify(
        EngineKind::Sglang,
        &exit,
        &lines("[2026-01-01 00:00:00] loading"),
    );
    assert_eq!(c.class, CrashClass::KilledBySignal);
    assert!(c.summary.contains("SIGKILL (9)"), "{}", c.summary);
}

#[test]
fn a_kill_from_outside_is_not_the_configs_unless_the_log_or_the_kernel_says_otherwise() {
    let outside = ExitInfo {
        signal: Some(9),
        from_outside: true,
        ..Default::default()
    };
    // Nothing in the log: someone else's doing. A traceback printed before (a request's error,
    // a signal handler) does not make it the config's.
    for log in [
        "[2026-01-01 00:00:00] serving",
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    g()\nValueError: bad request",
    ] {
        let c = classify(EngineKind::Sglang, &outside, &lines(log));
        assert_eq!(c.class, CrashClass::KilledExternally, "{log}");
        assert!(
            c.summary.contains("killed from outside fleetbench")
                && c.summary.contains("SIGKILL (9)"),
            "{}",
            c.summary
        );
    }
    // A specific cause in the log is still the config's.
    let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
    assert_eq!(
        classify(EngineKind::Vllm, &outside, &lines(oom)).class,
        CrashClass::Oom
    );
    // The kernel's OOM killer (the cgroup counted it): host memory, the config's.
    let kernel = ExitInfo {
        signal: Some(9),
        oom_killer: true,
        ..Default::default()
    };
    let c = classify(EngineKind::Sglang, &kernel, &lines("serving"));
    assert_eq!(c.class, CrashClass::Oom);
    assert!(c.summary.contains("OOM killer"), "{}", c.summary);
    assert_eq!(
        CrashClass::parse("killed_externally"),
        Some(CrashClass::KilledExternally)
    );
}

#[test]
fn exit_code_and_timeouts_without_evidence() {
    let exit = ExitInfo {
        code: Some(3),
        ..Default::default()
    };
    let c = classify(EngineKind::Generic, &exit, &lines("bye"));
    assert_eq!(c.class, CrashClass::ExitCode);
    assert_eq!(c.summary, "exit_code: bye; exit code 3");
    let exit = ExitInfo {
        startup_timed_out: true,
        ..Default::default()
    };
    assert_eq!(
        classify(EngineKind::Vllm, &exit, &[]).class,
        CrashClass::StartupTimeout
    );
    let exit = ExitInfo {
        unhealthy: true,
        ..Default::default()
    };
    assert_eq!(
        classify(EngineKind::Sim, &exit, &[]).class,
        CrashClass::Unhealthy
    );
}

#[test]
fn port_in_use_before_start_wins() {
    let exit = ExitInfo {
        code: Some(1),
        port_in_use_before_start: true,
        ..Default::default()
    };
    let c = classify(EngineKind::Sglang, &exit, &[]);
    assert_eq!(c.class, CrashClass::PortInUse);
}

#[test]
fn nan_needs_a_detection_word_and_ignores_config_dumps() {
    let exit = ExitInfo {
        code: Some(1),
        ..Default::default()
    };
    let c = classify(
        EngineKind::Sglang,
        &exit,
        &lines("server_args={'enable_nan_detection': True, 'x': 'nan detected'}\nbye"),
    );
    assert_eq!(c.class, CrashClass::ExitCode);
    let c = classify(
        EngineKind::Sglang,
        &exit,
        &lines("[2026-01-01 00:00:00 TP0] NaN detected! sampler: next_token_logits"),
    );
    assert_eq!(c.class, CrashClass::Nan);
}

#[test]
fn class_names_round_trip() {
    for c in CrashClass::ALL {
        assert_eq!(CrashClass::parse(c.as_str()), Some(c));
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            format!("\"{}\"", c.as_str())
        );
    }
}

#[test]
fn a_traceback_beats_an_error_line_that_looks_like_a_usage_error() {
    let tail = lines(
        "Traceback (most recent call last):\n  File \"/x/y.py\", line 3, in f\n    g()\nRuntimeError: error: bad state",
    );
    let c = classify(
        EngineKind::Sglang,
        &ExitInfo {
            code: Some(1),
            ..Default::default()
        },
        &tail,
    );
    assert_eq!(c.class, CrashClass::PythonException);
    assert_eq!(c.exception_type, "RuntimeError");
    assert_eq!(c.message, "error: bad state");
    assert_eq!(c.frames, ["/x/y.py:3 in f: g()"]);
}

/// SGLang 0.5.23's other pool-sizing failure (`mem_cache/kv_cache_configurator.py`, its
/// f-string filled in): the weights left nothing for the KV cache. Not reachable on the CPU
/// build with the tiny model, hence written from the source.
#[test]
fn weights_that_leave_no_room_for_the_kv_cache_are_oom() {
    let tail = lines(
        "Scheduler hit an exception: Traceback (most recent call last):\n  \
         File \"/v/sglang/srt/mem_cache/kv_cache_configurator.py\", line 3051, in profile_max_num_token\n    \
         raise ValueError(\n\
         ValueError: Loaded weights leave no GPU memory for the KV cache under \
         --mem-fraction-static=0.5. Raise --mem-fraction-static above 0.912 (minimum viable = 1 - \
         available/pre = 0.9113). If using speculative decoding, draft weights are now counted.\n\
         Received sigquit from a child process. It usually means the child failed.",
    );
    let own_kill = ExitInfo {
        signal: Some(9),
        from_outside: true,
        ..Default::default()
    };
    let c = classify(EngineKind::Sglang, &own_kill, &tail);
    assert_eq!(c.class, CrashClass::Oom);
    assert_eq!(c.exception_type, "ValueError");
    assert!(
        c.message.starts_with("Loaded weights leave no GPU memory"),
        "{}",
        c.message
    );
}

/// A plain traceback before SGLang's own SIGKILL is the cause; the same SIGKILL without its
/// parent's word that a child failed is someone else's.
#[test]
fn sglangs_own_kill_leaves_the_traceback_in_charge() {
    let child = "Scheduler hit an exception: Traceback (most recent call last):\n  \
                 File \"/v/sglang/srt/managers/tp_worker.py\", line 420, in alloc_memory_pool\n    \
                 assert x > 0\n\
                 AssertionError: max_running_request is zero\n";
    let outside = ExitInfo {
        signal: Some(9),
        from_outside: true,
        ..Default::default()
    };
    let said =
        format!("{child}Received sigquit from a child process. It usually means the child failed.");
    let c = classify(EngineKind::Sglang, &outside, &lines(&said));
    assert_eq!(c.class, CrashClass::PythonException);
    assert_eq!(c.message, "max_running_request is zero");
    assert!(
        c.summary.ends_with("; killed itself with SIGKILL (9)"),
        "{}",
        c.summary
    );
    let c = classify(EngineKind::Sglang, &outside, &lines(child));
    assert_eq!(c.class, CrashClass::KilledExternally);
    // Other engines do not kill themselves so.
    let c = classify(EngineKind::Vllm, &outside, &lines(&said));
    assert_eq!(c.class, CrashClass::KilledExternally);
}

#[test]
fn a_lost_peer_rank_is_its_own_class() {
    // What a rank prints when a peer's process dies (the simulator prints NCCL's lines).
    let tail: Vec<String> = [
        "[2026-12-06 03:13:51] The server is fired up and ready to roll!",
        "[rank0]:[E1206 03:13:52.666345 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.21.5",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "Last error:",
        "socket recv: Connection closed by remote peer 127.0.0.1:49356 (node rank 1)",
    ]
    .map(String::from)
    .to_vec();
    let exit = ExitInfo {
        code: Some(1),
        ..Default::default()
    };
    let c = classify(EngineKind::Sim, &exit, &tail);
    assert_eq!(c.class, CrashClass::RankLost, "{c:?}");
    assert!(c.summary.starts_with("rank_lost: "), "{}", c.summary);
    // A peer that never joined is the same class; a plain NCCL error stays NCCL.
    let never = vec![
        "torch.distributed.DistStoreError: Timed out after 30 seconds waiting for clients. 1/2 clients joined.".to_string(),
    ];
    assert_eq!(
        classify(EngineKind::Sglang, &exit, &never).class,
        CrashClass::RankLost
    );
    let nccl = vec!["NCCL error: unhandled system error".to_string()];
    assert_eq!(
        classify(EngineKind::Sglang, &exit, &nccl).class,
        CrashClass::Nccl
    );
}
