//! Job kinds over the real gRPC API: a submit says what it is (sweep, tuning round, suite
//! run), an old client's submit without a kind is a sweep, GetJob and ListJobs carry the kind,
//! ListJobs filters by it, and `fleetbench jobs` shows and filters it.

mod common;

use fleetbench_proto::controllerpb::{
    GetJobRequest, JobKind, ListJobsRequest, SubmitJobRequest, controller_client::ControllerClient,
};
use tonic::transport::Channel;

fn spec(name: &str) -> String {
    format!(
        r#"name = "{name}"
[[configs]]
name = "A"
engine = "sim"
model = "sim-model"

[[workloads]]
name = "w"
dataset = "random"
input_len = 8
output_len = 8

[load]
concurrency = [1]
requests = 2
"#
    )
}

async fn submit(c: &mut ControllerClient<Channel>, name: &str, kind: i32) -> String {
    let r = c
        .submit_job(SubmitJobRequest {
            spec_toml: spec(name),
            file_name: format!("{name}.toml"),
            kind,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    r.job_id
}

async fn listed(c: &mut ControllerClient<Channel>, kind: JobKind) -> Vec<(String, i32)> {
    let mut jobs: Vec<(String, i32)> = c
        .list_jobs(ListJobsRequest {
            limit: 0,
            kind: kind as i32,
        })
        .await
        .unwrap()
        .into_inner()
        .jobs
        .into_iter()
        .map(|j| (j.name, j.kind))
        .collect();
    jobs.sort();
    jobs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_carry_their_kind_and_are_listed_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = common::start_local(common::local_config(dir.path(), &[])).await;
    let mut c = common::client(ctl.addr).await;

    // An older client sends no kind: a sweep.
    let old = submit(&mut c, "old-client", JobKind::Unspecified as i32).await;
    let sweep = submit(&mut c, "sweep", JobKind::Sweep as i32).await;
    let tune = submit(&mut c, "tune-round", JobKind::Tune as i32).await;
    let regress = submit(&mut c, "suite-run", JobKind::Regress as i32).await;

    for (id, kind) in [
        (&old, JobKind::Sweep),
        (&sweep, JobKind::Sweep),
        (&tune, JobKind::Tune),
        (&regress, JobKind::Regress),
    ] {
        let job = c
            .get_job(GetJobRequest { job_id: id.clone() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(job.kind, kind as i32, "{job:?}");
    }

    let sw = JobKind::Sweep as i32;
    assert_eq!(
        listed(&mut c, JobKind::Unspecified).await,
        [
            ("old-client".to_string(), sw),
            ("suite-run".to_string(), JobKind::Regress as i32),
            ("sweep".to_string(), sw),
            ("tune-round".to_string(), JobKind::Tune as i32),
        ]
    );
    assert_eq!(
        listed(&mut c, JobKind::Sweep).await,
        [("old-client".to_string(), sw), ("sweep".to_string(), sw)]
    );
    assert_eq!(
        listed(&mut c, JobKind::Tune).await,
        [("tune-round".to_string(), JobKind::Tune as i32)]
    );
    assert_eq!(
        listed(&mut c, JobKind::Regress).await,
        [("suite-run".to_string(), JobKind::Regress as i32)]
    );

    // A kind this controller does not know is refused, naming the field.
    let err = c
        .list_jobs(ListJobsRequest { limit: 0, kind: 42 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().starts_with("kind: 42"), "{}", err.message());

    // The CLI lists the kind and filters by it.
    let url = ctl.url();
    let cli = |args: &[&str]| {
        let url = url.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let cwd = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(fleetbench_testkit::workspace_bin("fleetbench"))
                .arg("jobs")
                .args(["--controller", &url])
                .args(&args)
                .current_dir(cwd)
                .env_remove("FLEETBENCH_CONTROLLER")
                .env_remove("FLEETBENCH_TOKEN")
                .output()
                .expect("run fleetbench jobs")
        })
    };
    let all = cli(&[]).await.unwrap();
    assert!(all.status.success(), "{all:?}");
    let out = String::from_utf8_lossy(&all.stdout).to_string();
    let kind_of = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .and_then(|l| l.split_whitespace().nth(2))
            .map(str::to_string)
    };
    assert!(out.lines().next().unwrap().contains("KIND"), "{out}");
    assert_eq!(kind_of("old-client").as_deref(), Some("sweep"), "{out}");
    assert_eq!(kind_of("tune-round").as_deref(), Some("tune"), "{out}");
    assert_eq!(kind_of("suite-run").as_deref(), Some("regress"), "{out}");
    let tunes = cli(&["--kind", "tune"]).await.unwrap();
    assert!(tunes.status.success(), "{tunes:?}");
    let out = String::from_utf8_lossy(&tunes.stdout);
    let names: Vec<&str> = out
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(names, ["tune-round"], "{out}");
    let bad = cli(&["--kind", "bogus"]).await.unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--kind"),
        "{bad:?}"
    );
    ctl.shutdown().await;
}
