//! The per-watt objective and per-level GPU power where people read them.
//!
//! No GPU here, and NVML is never faked: a per-watt search on agents without GPUs is refused
//! before anything runs, naming the host; and `fleetbench jobs JOB` (table and `--json`) shows
//! the power kept with each stored level. The measurement itself is proven on a GPU host.

use fleetbench_fleetkit::sim_fleet;

use std::time::Duration;

use fleetbench_controller::store::{NewJob, Store, TrialRow};
use fleetbench_proto::agentpb::{LevelOutcome, LevelResult, LoadLevel};
use fleetbench_proto::controllerpb::{
    ConfigInfo, JobKind, ListAgentsRequest, StoredLevel, TrialState,
};
use fleetbench_rounds::tuning::{self, TuneError};

const SPEC: &str = r#"name = "tune-watt"

[[configs]]
name = "start"
engine = "sim"
model = "fleetbench/sim-moe-30b-a3b"
flags = { "--time-scale" = 0.25 }

[[workloads]]
name = "w"
dataset = "random"
input_len = 16
output_len = 16

[load]
concurrency = [8]
requests = 16

[search]
objective = "output_tokens_per_s_per_watt"

[search.flags]
"--max-running-requests" = [16, 32]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_watt_search_on_a_host_without_gpus_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = sim_fleet::Fleet::start(dir.path(), 1).await;
    let mut client = fleet.client().await;
    let mut lines = Vec::new();
    let err = tuning::search::run_search(&mut client, "watt.toml", SPEC, |l| lines.push(l))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, TuneError::NoPowerHost { host, .. } if host == "host-0"),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with(
            "objective output_tokens_per_s_per_watt needs GPU power; host host-0 reported none"
        ),
        "{text}"
    );
    // The agent said why it has no GPUs (its facts), and the message carries it.
    let agents = client
        .list_agents(ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .agents;
    let reason = &agents[0].facts.as_ref().unwrap().gpu_unavailable_reason;
    assert!(text.contains(reason.as_str()), "{text} / {reason}");
    assert!(lines.is_empty(), "no rung ran: {lines:?}");
    let jobs = fleet.controller.store.list_jobs(10).await.unwrap();
    assert!(jobs.is_empty(), "nothing was submitted: {jobs:?}");
    fleet.stop().await;
}

fn stored(trial: &TrialRow, index: u32, tok_s: f64, watts: Option<f64>) -> StoredLevel {
    trial.stored_level(
        format!("{}-a1", trial.id),
        "gpu-a",
        1,
        LevelResult {
            level_index: index,
            level: Some(LoadLevel {
                concurrency: Some(8 * (index + 1)),
                ..Default::default()
            }),
            outcome: LevelOutcome::Ok as i32,
            completed: 64,
            output_tokens_per_s: tok_s,
            duration_s: 2.0,
            ..Default::default()
        },
        watts,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleetbench_jobs_shows_each_levels_gpu_power() {
    let dir = tempfile::tempdir().unwrap();
    // The store `fleetbench jobs` reads when no controller is given: ./fleetbench-data.
    let db = dir.path().join("fleetbench-data/controller.db");
    let store = Store::open(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let trial = TrialRow {
        id: "jw-t000".into(),
        job_id: "jw".into(),
        position: 0,
        config_index: 0,
        workload_index: 0,
        repeat: 0,
        config_id: "id-a".into(),
        config_name: "a".into(),
        workload: "w".into(),
        level_count: 2,
        state: TrialState::Done,
        attempts: 1,
        reason: String::new(),
    };
    let config = ConfigInfo {
        config_id: "id-a".into(),
        name: "a".into(),
        job_id: "jw".into(),
        ..Default::default()
    };
    let job = NewJob {
        id: "jw".into(),
        name: "watts".into(),
        kind: JobKind::Tune,
        spec_toml: String::new(),
        file_name: "w.toml".into(),
        tag: String::new(),
        created_unix_ms: 1,
    };
    store
        .insert_job(&job, &[config], std::slice::from_ref(&trial))
        .await
        .unwrap();
    store
        .put_level(&stored(&trial, 0, 1000.0, Some(612.4)))
        .await
        .unwrap();
    store
        .put_level(&stored(&trial, 1, 1500.0, None))
        .await
        .unwrap();
    store.close().await;

    let cli = |args: &'static [&'static str]| {
        let cwd = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(fleetbench_testkit::workspace_bin("fleetbench"))
                .args(args)
                .current_dir(cwd)
                .env_remove("FLEETBENCH_CONTROLLER")
                .output()
                .expect("run fleetbench")
        })
    };
    let json = tokio::time::timeout(Duration::from_secs(120), cli(&["jobs", "jw", "--json"]))
        .await
        .unwrap()
        .unwrap();
    assert!(json.status.success(), "{json:?}");
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let watts: Vec<serde_json::Value> = doc["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["gpu_power_w"].clone())
        .collect();
    assert_eq!(watts, [serde_json::json!(612.4), serde_json::Value::Null]);

    let table = tokio::time::timeout(Duration::from_secs(120), cli(&["jobs", "jw"]))
        .await
        .unwrap()
        .unwrap();
    assert!(table.status.success(), "{table:?}");
    let out = String::from_utf8_lossy(&table.stdout);
    assert!(out.contains("GPU W"), "{out}");
    let row = |level: &str| {
        out.lines()
            .find(|l| l.split_whitespace().any(|w| w == level))
            .unwrap_or_else(|| panic!("no row for {level} in:\n{out}"))
            .split_whitespace()
            .last()
            .unwrap()
            .to_string()
    };
    assert_eq!(row("c=8"), "612", "{out}");
    assert_eq!(row("c=16"), "-", "{out}");
    // The comparison of the same job carries the power too.
    let compare = tokio::time::timeout(Duration::from_secs(120), cli(&["compare", "jw", "--json"]))
        .await
        .unwrap()
        .unwrap();
    assert!(compare.status.success(), "{compare:?}");
    let doc: serde_json::Value = serde_json::from_slice(&compare.stdout).unwrap();
    let first = &doc["groups"][0]["configs"][0];
    assert_eq!(first["gpu_power_w"], serde_json::json!(612.4), "{doc}");
    let compare = tokio::time::timeout(Duration::from_secs(120), cli(&["compare", "jw"]))
        .await
        .unwrap()
        .unwrap();
    assert!(compare.status.success(), "{compare:?}");
    let out = String::from_utf8_lossy(&compare.stdout);
    assert!(out.contains("GPU W"), "{out}");
    let c8 = out
        .lines()
        .find(|l| l.trim_start().starts_with("c=8"))
        .unwrap_or_else(|| panic!("no c=8 row in:\n{out}"));
    assert!(c8.split_whitespace().any(|w| w == "612"), "{out}");
}
