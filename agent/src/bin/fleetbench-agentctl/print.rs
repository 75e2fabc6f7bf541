//! How `fleetbench-agentctl` prints what the agent sends: one line per event or sample for
//! people, or one JSON object per line with `--json`.

use fleetbench_proto::Word;
use fleetbench_proto::agentpb::{self, benchmark_event, engine_event};
use serde_json::{Map, Value, json};

fn opt<T: Into<Value>>(v: Option<T>) -> Value {
    v.map(Into::into).unwrap_or(Value::Null)
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

pub fn host(h: &agentpb::HostFacts, as_json: bool) {
    if as_json {
        let gpus: Vec<Value> = h
            .gpus
            .iter()
            .map(|g| {
                json!({"index": g.index, "name": g.name, "uuid": g.uuid, "pci_bus_id": g.pci_bus_id,
                       "memory_total_bytes": g.memory_total_bytes, "pcie_link_gen": g.pcie_link_gen,
                       "pcie_link_width": g.pcie_link_width, "nvlink_active_count": g.nvlink_active_count,
                       "numa_node": opt(g.numa_node), "power_limit_w": opt(g.power_limit_w)})
            })
            .collect();
        let profiles: Vec<Value> = h
            .profiles
            .iter()
            .map(|p| {
                json!({"name": p.name,
                       "kind": agentpb::EngineKind::word_of(p.kind),
                       "program": p.program,
                       "flags": p.flags.iter().map(|f| json!({"name": f.name, "type": f.r#type})).collect::<Vec<_>>(),
                       "allows_any_model": p.allows_any_model})
            })
            .collect();
        let v = json!({"hostname": h.hostname, "agent_version": h.agent_version, "os": h.os,
            "kernel": h.kernel, "cpu_count": h.cpu_count, "memory_total_bytes": h.memory_total_bytes,
            "driver_version": h.driver_version, "cuda_driver_version": h.cuda_driver_version,
            "gpu_unavailable_reason": h.gpu_unavailable_reason, "gpus": gpus, "profiles": profiles,
            "labels": h.labels, "lease": h.lease.as_ref().map(lease_json), "lease_note": h.lease_note});
        println!("{v}");
        return;
    }
    println!(
        "{} (agent {}) {} {}; {} CPUs, {:.1} GiB",
        h.hostname,
        h.agent_version,
        h.os,
        h.kernel,
        h.cpu_count,
        gib(h.memory_total_bytes)
    );
    if h.gpus.is_empty() {
        println!("GPUs: none ({})", h.gpu_unavailable_reason);
    } else {
        println!(
            "GPUs: {} (driver {}, CUDA {})",
            h.gpus.len(),
            h.driver_version,
            h.cuda_driver_version
        );
        for g in &h.gpus {
            println!(
                "  [{}] {} {} {:.0} GiB, PCIe gen{} x{}, {} NVLinks",
                g.index,
                g.name,
                g.pci_bus_id,
                gib(g.memory_total_bytes),
                g.pcie_link_gen,
                g.pcie_link_width,
                g.nvlink_active_count
            );
        }
    }
    for p in &h.profiles {
        let kind = agentpb::EngineKind::word_of(p.kind);
        println!(
            "profile {} ({kind}): {} ({} flags{})",
            p.name,
            p.program,
            p.flags.len(),
            if p.allows_any_model {
                ", any model"
            } else {
                ""
            }
        );
    }
    print_lease(h.lease.as_ref(), &h.lease_note);
}

fn crash_json(c: &agentpb::Crash) -> Value {
    json!({"class": agentpb::CrashClass::word_of(c.class), "exception_type": c.exception_type,
           "message": c.message, "frames": c.frames, "log_tail": c.log_tail,
           "exit_code": opt(c.exit_code), "signal": opt(c.signal), "summary": c.summary})
}

fn print_crash(c: &agentpb::Crash) {
    println!("FAILED {}", c.summary);
    for f in &c.frames {
        println!("    at {f}");
    }
    if !c.log_tail.is_empty() {
        println!("  log tail:");
        for l in c.log_tail.iter().rev().take(20).rev() {
            println!("  | {l}");
        }
    }
}

pub fn engine_event(ev: &agentpb::EngineEvent, as_json: bool) {
    let Some(event) = &ev.event else { return };
    if as_json {
        let (kind, body) = match event {
            engine_event::Event::Stopping(s) => {
                ("stopping", json!({"pid": s.pid, "reason": s.reason}))
            }
            engine_event::Event::Stopped(s) => (
                "stopped",
                json!({"pid": s.pid, "took_s": s.took_s, "killed": s.killed}),
            ),
            engine_event::Event::Spawned(s) => (
                "spawned",
                json!({"pid": s.pid, "argv": s.argv, "run_id": s.run_id,
                       "config_id": s.config_id, "log_path": s.log_path}),
            ),
            engine_event::Event::Fact(f) => ("fact", json!({"key": f.key, "value": f.value})),
            engine_event::Event::Waiting(w) => (
                "waiting",
                json!({"elapsed_s": w.elapsed_s, "message": w.message}),
            ),
            engine_event::Event::Ready(r) => (
                "ready",
                json!({"elapsed_s": r.elapsed_s, "base_url": r.base_url,
                       "facts": r.facts.iter().map(|f| (f.key.clone(), Value::from(f.value.clone()))).collect::<Map<_, _>>()}),
            ),
            engine_event::Event::Failed(c) => ("failed", crash_json(c)),
        };
        println!(
            "{}",
            json!({"unix_ms": ev.unix_ms, "event": kind, "data": body})
        );
        return;
    }
    match event {
        engine_event::Event::Stopping(s) => println!("stopping pid {}: {}", s.pid, s.reason),
        engine_event::Event::Stopped(s) => println!(
            "stopped pid {} in {:.1}s{}",
            s.pid,
            s.took_s,
            if s.killed { " (SIGKILL)" } else { "" }
        ),
        engine_event::Event::Spawned(s) => {
            println!(
                "spawned pid {} run {} config {}: {}",
                s.pid,
                s.run_id,
                s.config_id,
                s.argv.join(" ")
            );
            println!("  log: {}", s.log_path);
        }
        engine_event::Event::Fact(f) => println!("fact {} = {}", f.key, short(&f.value, 160)),
        engine_event::Event::Waiting(w) => println!("waiting {:.0}s: {}", w.elapsed_s, w.message),
        engine_event::Event::Ready(r) => {
            println!("ready in {:.1}s at {}", r.elapsed_s, r.base_url)
        }
        engine_event::Event::Failed(c) => print_crash(c),
    }
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

pub fn status(s: &agentpb::EngineStatus, as_json: bool) {
    if as_json {
        let spec = s.spec.as_ref().map(|sp| {
            json!({"profile": sp.profile, "model": sp.model, "port": sp.port, "env": sp.env,
                   "flags": sp.flags.iter().map(|f| json!({"name": f.name, "value": opt(f.value.clone())})).collect::<Vec<_>>()})
        });
        let v = json!({"state": agentpb::EngineState::word_of(s.state), "spec": spec, "config_id": s.config_id,
            "run_id": s.run_id, "pid": s.pid, "base_url": s.base_url, "since_unix_ms": s.since_unix_ms,
            "facts": s.facts.iter().map(|f| (f.key.clone(), Value::from(f.value.clone()))).collect::<Map<_, _>>(),
            "last_crash": s.last_crash.as_ref().map(crash_json), "log_path": s.log_path, "argv": s.argv,
            "lease": s.lease.as_ref().map(lease_json), "lease_note": s.lease_note});
        println!("{v}");
        return;
    }
    println!("state: {}", agentpb::EngineState::word_of(s.state));
    if let Some(sp) = &s.spec {
        let flags: Vec<String> = sp
            .flags
            .iter()
            .map(|f| match &f.value {
                Some(v) => format!("{}={v}", f.name),
                None => f.name.clone(),
            })
            .collect();
        println!(
            "engine: profile {} model {} {}",
            sp.profile,
            sp.model,
            flags.join(" ")
        );
    }
    if !s.config_id.is_empty() {
        println!(
            "config {} run {} pid {} at {}",
            s.config_id, s.run_id, s.pid, s.base_url
        );
    }
    if !s.argv.is_empty() {
        println!("argv: {}", s.argv.join(" "));
    }
    for f in &s.facts {
        println!("  {} = {}", f.key, short(&f.value, 160));
    }
    if !s.log_path.is_empty() {
        println!("log: {}", s.log_path);
    }
    if let Some(c) = &s.last_crash {
        print_crash(c);
    }
    print_lease(s.lease.as_ref(), &s.lease_note);
}

fn lease_json(l: &agentpb::Lease) -> Value {
    json!({"epoch": l.epoch, "owner": l.owner, "job_id": l.job_id, "trial_id": l.trial_id,
           "ttl_ms": l.ttl_ms, "acquired_unix_ms": l.acquired_unix_ms,
           "expires_unix_ms": l.expires_unix_ms})
}

/// The lease line of `engine` and `host`.
pub fn print_lease(l: Option<&agentpb::Lease>, note: &str) {
    match l {
        Some(l) => println!(
            "lease: epoch {} held by {} for job {:?} trial {:?}, expires in {:.1} s",
            l.epoch,
            l.owner,
            l.job_id,
            l.trial_id,
            (l.expires_unix_ms - fleetbench_proto::now_unix_ms()) as f64 / 1000.0
        ),
        None => println!("lease: none"),
    }
    if !note.is_empty() {
        println!("last lease: {note}");
    }
}

pub fn log_line(l: &agentpb::LogLine, as_json: bool) {
    if as_json {
        let stream = agentpb::LogStream::word_of(l.stream);
        println!(
            "{}",
            json!({"unix_ms": l.unix_ms, "stream": stream, "run_id": l.run_id, "line": l.line})
        );
    } else {
        println!("{}", l.line);
    }
}

pub fn metrics_sample(s: &agentpb::MetricsSample, as_json: bool, raw: bool) {
    let e = s.engine.clone().unwrap_or_default();
    let p = s.process.unwrap_or_default();
    if as_json {
        let gpus: Vec<Value> = s
            .gpus
            .iter()
            .map(|g| {
                json!({"index": g.index, "uuid": g.uuid, "utilization_pct": opt(g.utilization_pct),
                    "memory_utilization_pct": opt(g.memory_utilization_pct),
                    "memory_used_bytes": opt(g.memory_used_bytes), "memory_total_bytes": opt(g.memory_total_bytes),
                    "power_w": opt(g.power_w), "energy_mj": opt(g.energy_mj), "sm_clock_mhz": opt(g.sm_clock_mhz),
                    "memory_clock_mhz": opt(g.memory_clock_mhz), "temperature_c": opt(g.temperature_c),
                    "pcie_tx_bytes_per_s": opt(g.pcie_tx_bytes_per_s), "pcie_rx_bytes_per_s": opt(g.pcie_rx_bytes_per_s),
                    "nvlink_tx_bytes_per_s": opt(g.nvlink_tx_bytes_per_s), "nvlink_rx_bytes_per_s": opt(g.nvlink_rx_bytes_per_s)})
            })
            .collect();
        let mut engine = json!({"scraped": e.scraped, "error": e.error,
            "running_requests": opt(e.running_requests), "queued_requests": opt(e.queued_requests),
            "kv_cache_usage": opt(e.kv_cache_usage), "generation_tokens_per_s": opt(e.generation_tokens_per_s),
            "prompt_tokens_total": opt(e.prompt_tokens_total), "generation_tokens_total": opt(e.generation_tokens_total)});
        if raw {
            engine["raw"] = e
                .raw
                .iter()
                .map(|r| json!({"name": r.name, "labels": r.labels, "value": finite(r.value)}))
                .collect();
        }
        let v = json!({"unix_ms": s.unix_ms, "config_id": s.config_id, "gpus": gpus, "engine": engine,
            "process": {"process_count": p.process_count, "cpu_pct": p.cpu_pct, "rss_bytes": p.rss_bytes}});
        println!("{v}");
        return;
    }
    let engine = if e.scraped {
        format!(
            "run {} queue {} kv {} gen {} tok/s prompt_total {} gen_total {}",
            fmt_opt(e.running_requests, 0),
            fmt_opt(e.queued_requests, 0),
            fmt_opt(e.kv_cache_usage.map(|x| x * 100.0), 1) + "%",
            fmt_opt(e.generation_tokens_per_s, 1),
            fmt_opt(e.prompt_tokens_total, 0),
            fmt_opt(e.generation_tokens_total, 0)
        )
    } else if e.error.is_empty() {
        "engine -".to_string()
    } else {
        format!("engine: {}", e.error)
    };
    let gpus: Vec<String> = s
        .gpus
        .iter()
        .map(|g| {
            format!(
                "gpu{} {}% {:.1}/{:.0}GiB {}W",
                g.index,
                fmt_opt(g.utilization_pct, 0),
                g.memory_used_bytes.map(gib).unwrap_or(0.0),
                g.memory_total_bytes.map(gib).unwrap_or(0.0),
                fmt_opt(g.power_w, 0)
            )
        })
        .collect();
    println!(
        "{} | {} | procs {} cpu {:.1}% rss {:.0}MiB{}{}",
        s.unix_ms,
        engine,
        p.process_count,
        p.cpu_pct,
        p.rss_bytes as f64 / (1u64 << 20) as f64,
        if gpus.is_empty() { "" } else { " | " },
        gpus.join(" ")
    );
    if raw {
        for r in &e.raw {
            let labels: Vec<String> = r.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            println!("    {}{{{}}} {}", r.name, labels.join(","), r.value);
        }
    }
}

/// JSON has no NaN or infinity; those become strings.
fn finite(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        json!(x.to_string())
    }
}

fn dist_json(d: &Option<agentpb::Distribution>) -> Value {
    match d {
        None => Value::Null,
        Some(d) => json!({"count": d.count, "mean": d.mean, "min": d.min, "max": d.max,
                          "percentiles": d.percentiles}),
    }
}

fn p(d: &Option<agentpb::Distribution>, key: &str) -> String {
    d.as_ref()
        .and_then(|d| d.percentiles.get(key).copied())
        .map(|v| format!("{v:.1}"))
        .unwrap_or_else(|| "-".into())
}

pub fn level_header() {
    println!(
        "{:>5} {:>8} {:>7} {:>6} {:>10} {:>8} {:>9} {:>9} {:>8} {:>8}",
        "level",
        "outcome",
        "conc",
        "done",
        "out tok/s",
        "req/s",
        "ttft p50",
        "ttft p99",
        "itl p50",
        "itl p99"
    );
}

pub fn bench_event(ev: &agentpb::BenchmarkEvent, as_json: bool) {
    let Some(event) = &ev.event else { return };
    match event {
        benchmark_event::Event::Progress(pr) => {
            if as_json {
                println!(
                    "{}",
                    json!({"unix_ms": ev.unix_ms, "event": "progress", "level_index": pr.level_index,
                           "completed": pr.completed, "failed": pr.failed, "total": pr.total, "elapsed_s": pr.elapsed_s})
                );
            } else if pr.elapsed_s.fract() < 0.2 || pr.completed == pr.total {
                // The agent reports every 200 ms; about one line a second is enough to read.
                eprintln!(
                    "  level {}: {}/{} done, {} failed, {:.1}s",
                    pr.level_index, pr.completed, pr.total, pr.failed, pr.elapsed_s
                );
            }
        }
        benchmark_event::Event::Level(l) => {
            let conc = l.level.as_ref().and_then(|x| x.concurrency);
            if as_json {
                println!(
                    "{}",
                    json!({"unix_ms": ev.unix_ms, "event": "level", "level_index": l.level_index,
                        "concurrency": opt(conc), "outcome": agentpb::LevelOutcome::word_of(l.outcome),
                        "crash": l.crash.as_ref().map(crash_json), "completed": l.completed, "failed": l.failed,
                        "failures_by_kind": l.failures_by_kind, "duration_s": l.duration_s,
                        "input_tokens": l.input_tokens, "output_tokens": l.output_tokens,
                        "output_tokens_per_s": l.output_tokens_per_s, "total_tokens_per_s": l.total_tokens_per_s,
                        "requests_per_s": l.requests_per_s, "peak_concurrency": l.peak_concurrency,
                        "ttft_ms": dist_json(&l.ttft_ms), "itl_ms": dist_json(&l.itl_ms),
                        "tpot_ms": dist_json(&l.tpot_ms), "e2e_ms": dist_json(&l.e2e_ms),
                        "queue_ms": dist_json(&l.queue_ms), "error": l.error,
                        "deployment": l.deployment.as_ref().map(crate::replicas::json)})
                );
                return;
            }
            println!(
                "{:>5} {:>8} {:>7} {:>6} {:>10.1} {:>8.2} {:>9} {:>9} {:>8} {:>8}",
                l.level_index,
                agentpb::LevelOutcome::word_of(l.outcome),
                conc.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                l.completed,
                l.output_tokens_per_s,
                l.requests_per_s,
                p(&l.ttft_ms, "p50"),
                p(&l.ttft_ms, "p99"),
                p(&l.itl_ms, "p50"),
                p(&l.itl_ms, "p99"),
            );
            if !l.error.is_empty() {
                println!("      error: {}", l.error);
            }
            if l.failed > 0 {
                println!("      failed: {} {:?}", l.failed, l.failures_by_kind);
            }
            if let Some(c) = &l.crash {
                print_crash(c);
            }
            if let Some(d) = &l.deployment {
                crate::replicas::print(d);
            }
        }
    }
}

pub fn p2p(r: &agentpb::P2pReport, as_json: bool) {
    if as_json {
        let devices: Vec<Value> = r
            .devices
            .iter()
            .map(|d| {
                json!({"index": d.index, "name": d.name, "pci_bus_id": d.pci_bus_id,
                   "pcie_link_gen": d.pcie_link_gen, "pcie_link_width": d.pcie_link_width,
                   "nvlink_active_count": d.nvlink_active_count, "nvlink_speed_gbps": d.nvlink_speed_gbps,
                   "d2d_bandwidth_gbps": d.d2d_bandwidth_gbps})
            })
            .collect();
        let pairs: Vec<Value> = r
            .pairs
            .iter()
            .map(|x| {
                json!({"src": x.src, "dst": x.dst, "nvml_read": x.nvml_read, "nvml_write": x.nvml_write,
                   "nvml_nvlink": x.nvml_nvlink, "nvml_atomics": x.nvml_atomics, "topology": x.topology,
                   "nvlink_count": x.nvlink_count, "nvlink_speed_gbps": x.nvlink_speed_gbps,
                   "cuda_can_access_peer": x.cuda_can_access_peer,
                   "uni_enabled_gbps": opt(x.uni_enabled_gbps), "uni_disabled_gbps": opt(x.uni_disabled_gbps),
                   "bidi_enabled_gbps": opt(x.bidi_enabled_gbps), "bidi_disabled_gbps": opt(x.bidi_disabled_gbps),
                   "latency_enabled_us": opt(x.latency_enabled_us), "latency_disabled_us": opt(x.latency_disabled_us),
                   "expected_gbps": x.expected_gbps, "expected_link": x.expected_link, "findings": x.findings})
            })
            .collect();
        println!(
            "{}",
            json!({"devices": devices, "pairs": pairs, "unavailable_reason": r.unavailable_reason,
                   "wall_s": r.wall_s, "buffer_bytes": r.buffer_bytes, "repeats": r.repeats, "notes": r.notes})
        );
        return;
    }
    if !r.unavailable_reason.is_empty() {
        println!("P2P not measured: {}", r.unavailable_reason);
    }
    for d in &r.devices {
        println!(
            "gpu{} {} {} PCIe gen{} x{}, {} NVLinks, d2d {:.0} GB/s",
            d.index,
            d.name,
            d.pci_bus_id,
            d.pcie_link_gen,
            d.pcie_link_width,
            d.nvlink_active_count,
            d.d2d_bandwidth_gbps
        );
    }
    if !r.pairs.is_empty() {
        println!(
            "{:>3} {:>3} {:>10} {:>6} {:>9} {:>9} {:>9} {:>8} {:>8}  expected",
            "src", "dst", "topology", "peer", "uni GB/s", "bidi", "no-p2p", "lat us", "no-p2p"
        );
    }
    for x in &r.pairs {
        println!(
            "{:>3} {:>3} {:>10} {:>6} {:>9} {:>9} {:>9} {:>8} {:>8}  {:.0} GB/s {}",
            x.src,
            x.dst,
            x.topology,
            x.cuda_can_access_peer,
            fmt_opt(x.uni_enabled_gbps, 1),
            fmt_opt(x.bidi_enabled_gbps, 1),
            fmt_opt(x.uni_disabled_gbps, 1),
            fmt_opt(x.latency_enabled_us, 2),
            fmt_opt(x.latency_disabled_us, 2),
            x.expected_gbps,
            x.expected_link
        );
        for f in &x.findings {
            println!("      ! {f}");
        }
    }
    for n in &r.notes {
        println!("note: {n}");
    }
    println!(
        "({:.1}s, {} MiB buffers, {} repeats)",
        r.wall_s,
        r.buffer_bytes >> 20,
        r.repeats
    );
}
