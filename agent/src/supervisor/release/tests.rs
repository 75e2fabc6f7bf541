//! The release check against NVML process lists recorded on an H200 with an engine in its own
//! PID namespace, as the agent's engines are in a Kubernetes pod: asked from the host's namespace
//! (`h200-pidns.nvml.txt`: host ids, which the agent in the pod never sees) and from inside it
//! (`h200-in-pidns.nvml.txt`: this driver reports the namespace's own ids and hides the rest).

use fleetbench_gpu::GpuProcess;

use super::{GpuBaseline, engine_holders};

/// The recording's stages, in order: (title, NVML's processes).
fn recording() -> Vec<(String, Vec<GpuProcess>)> {
    parse(include_str!("h200-pidns.nvml.txt"))
}

fn parse(text: &str) -> Vec<(String, Vec<GpuProcess>)> {
    let mut stages: Vec<(String, Vec<GpuProcess>)> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some(title) = line.strip_prefix("== ") {
            stages.push((title.to_string(), Vec::new()));
            continue;
        }
        let f: Vec<&str> = line.split(", ").collect();
        assert_eq!(f.len(), 3, "{line}");
        let mib: u64 = f[2].trim_end_matches(" MiB").parse().unwrap();
        stages.last_mut().unwrap().1.push(GpuProcess {
            gpu: 0,
            pid: f[1].parse().unwrap(),
            used_bytes: Some(mib << 20),
        });
    }
    stages
}

fn stage(all: &[(String, Vec<GpuProcess>)], prefix: &str) -> Vec<GpuProcess> {
    all.iter()
        .find(|(t, _)| t.starts_with(prefix))
        .unwrap_or_else(|| panic!("no stage {prefix}"))
        .1
        .clone()
}

#[test]
fn an_engine_in_its_own_pid_namespace_is_waited_for_until_its_memory_is_gone() {
    let rec = recording();
    let before = GpuBaseline::of(&stage(&rec, "baseline"));
    let running = stage(&rec, "engine running");
    let exited = stage(&rec, "engine exited");
    // The engine's group as the agent inside the pod sees it: pid 1 (as recorded) and a child.
    let group = [1, 40];
    // Where NVML reports host ids to the agent, matching them with the group's finds nothing
    // while the engine still holds 3.5 GiB: the check that compared them said "free" at once.
    assert!(running.iter().all(|p| !group.contains(&p.pid)));
    assert_eq!(engine_holders(&running, &before, &group), vec![548]);
    // Once it exited only the neighbour remains, which was there before the start.
    assert_eq!(engine_holders(&exited, &before, &group), Vec::<u32>::new());
    assert_eq!(exited.len(), 1, "the neighbour still holds its memory");
}

#[test]
fn on_the_host_the_engine_is_found_by_its_own_pid_too() {
    let rec = recording();
    let before = GpuBaseline::of(&stage(&rec, "baseline"));
    let running = stage(&rec, "engine running");
    // Agent and engine in the host's namespace: NVML's 548 is the group's 548.
    assert_eq!(engine_holders(&running, &before, &[548]), vec![548]);
    // A group member that NVML listed before the start (an id reused) still counts.
    let before_with_548 = GpuBaseline::of(&running);
    assert_eq!(
        engine_holders(&running, &before_with_548, &[548]),
        vec![548]
    );
    assert_eq!(
        engine_holders(&running, &before_with_548, &[]),
        Vec::<u32>::new()
    );
}

#[test]
fn an_idle_gpu_and_no_nvml_hold_nothing() {
    let rec = recording();
    let idle = stage(&rec, "idle");
    assert!(idle.is_empty());
    assert!(engine_holders(&idle, &GpuBaseline::of(&idle), &[1]).is_empty());
    assert!(engine_holders(&[], &GpuBaseline::default(), &[]).is_empty());
    assert!(stage(&rec, "neighbour exited").is_empty());
}

#[test]
fn inside_the_namespace_the_engine_is_found_whichever_ids_nvml_reports() {
    let rec = parse(include_str!("h200-in-pidns.nvml.txt"));
    let before = GpuBaseline::of(&stage(&rec, "baseline"));
    assert!(
        stage(&rec, "baseline").is_empty(),
        "the neighbour is hidden"
    );
    let running = stage(&rec, "engine running");
    let exited = stage(&rec, "engine exited");
    // The engine as the agent knows it (pid 2, as recorded) and as a stranger to the group (a
    // worker that left it): both are waited for, being new since the start.
    assert_eq!(engine_holders(&running, &before, &[2]), vec![2]);
    assert_eq!(engine_holders(&running, &before, &[]), vec![2]);
    assert!(engine_holders(&exited, &before, &[2]).is_empty());
}
