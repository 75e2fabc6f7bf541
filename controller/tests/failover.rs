//! Two controller processes on one PostgreSQL store (a database of this test's own on
//! `FLEETBENCH_TEST_POSTGRES_URL`): one leads, the other stands by and names the leader; the
//! leader killed with SIGKILL mid-job, the standby takes over within a stated bound and the job
//! completes with every level stored exactly once; the deposed epoch can write nothing. And a
//! second controller on one SQLite file is refused.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use fleetbench_controller::store::{Store, StoreError};
use fleetbench_proto::controllerpb::{JobState, ListAgentsRequest, Run};

/// The takeover bound this test holds the standby to (measured figures are printed; on this
/// 2-core machine they are well under a second, see docs/controller.md).
const TAKEOVER_BOUND: Duration = Duration::from_secs(10);

/// A controller of the pair: its own config file `dir/NAME.toml`, a free port, the shared store.
fn ha_config(dir: &Path, name: &str, url: &str, agents: &[&Proc]) -> PathBuf {
    let listen = format!("127.0.0.1:{}", fleetbench_testkit::free_port());
    write_controller_config(&dir.join(format!("{name}.toml")), &listen, url, "", agents)
}

fn cli(args: &[&str]) -> std::process::Output {
    fleetbench_testkit::fleetbench_cli()
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_a_killed_leaders_job_and_stores_every_level_once() {
    let db = TestDatabase::create("failover").await;
    let url = db.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "f1", fleetbench_testkit::free_port());
    let mut leader = spawn_controller(
        &ha_config(dir.path(), "c1", &url, &[&agent]),
        &dir.path().join("c1.log"),
    );
    // The first controller leads before it prints its address; the second one stands by.
    let standby = spawn_controller(
        &ha_config(dir.path(), "c2", &url, &[&agent]),
        &dir.path().join("c2.log"),
    );
    let leader_url = format!("http://{}", leader.addr);
    let standby_url = format!("http://{}", standby.addr);
    let mut s = client(standby.addr).await;
    let refused = s.list_agents(ListAgentsRequest {}).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains(&leader_url),
        "the standby names the leader: {refused:?}"
    );
    assert_eq!(
        refused.metadata().get("fleetbench-leader").unwrap(),
        leader_url.as_str()
    );
    // The CLI given only the standby follows it to the leader.
    let out = cli(&["agents", "--json", "--controller", &standby_url]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is a standby; using the leader"),
        "{out:?}"
    );

    let mut c = client(leader.addr).await;
    // 2 configs x 1 repeat = 2 trials of 4 levels, one after the other on the one host.
    let job_id = submit(&mut c, sim_spec("failover", 1, &["f1"]), "failover.toml").await;
    let mut events = watch(&mut c, &job_id).await;
    let before = stored_levels(&mut events, 3).await;
    drop(events);
    leader.kill();
    let killed = Instant::now();

    // Takeover: the first call the standby serves as the leader.
    let takeover = loop {
        match s.list_agents(ListAgentsRequest {}).await {
            Ok(_) => break killed.elapsed(),
            Err(e) if e.code() == tonic::Code::Unavailable => {}
            Err(e) => panic!("standby: {e:?}"),
        }
        assert!(
            killed.elapsed() < TAKEOVER_BOUND,
            "no takeover within {TAKEOVER_BOUND:?}; standby log:\n{}",
            standby.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!("takeover after SIGKILL of the leader: {takeover:.2?}");

    // The CLI given both addresses uses the new leader (the old one refuses connections).
    let both = format!("{leader_url},{standby_url}");
    let out = cli(&["agents", "--json", "--controller", &both]);
    assert!(out.status.success(), "{out:?}");

    let job = wait_job(&mut s, &job_id, Duration::from_secs(180)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!((job.levels_done, job.levels_total), (8, 8));

    // Straight from the store: each (trial, level) once, the levels measured before the kill
    // kept as they were (same run), the leader's epoch moved on.
    let store = Store::open(&url).await.unwrap();
    let levels = store.levels(&job_id).await.unwrap();
    let keys: BTreeSet<(String, u32)> = levels
        .iter()
        .map(|l| (l.trial_id.clone(), l.result.as_ref().unwrap().level_index))
        .collect();
    assert_eq!((levels.len(), keys.len()), (8, 8), "stored twice or lost");
    for ((trial, idx), run_id) in &before {
        let l = levels
            .iter()
            .find(|l| &l.trial_id == trial && l.result.as_ref().unwrap().level_index == *idx)
            .unwrap();
        assert_eq!(
            &l.run_id, run_id,
            "level {idx} of {trial} was measured again"
        );
    }
    let row = store.leader().await.unwrap();
    assert_eq!(row.epoch, 2, "{row:?}");
    assert_eq!(row.address, standby_url);

    // Fencing: a writer still holding the deposed epoch 1 writes nothing.
    store.set_fence(1);
    let run = Run {
        run_id: format!("{job_id}-late"),
        job_id: job_id.clone(),
        trial_id: levels[0].trial_id.clone(),
        attempt: 99,
        ..Run::default()
    };
    let err = store.put_run(&run).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Fenced {
                mine: 1,
                current: 2,
                ..
            }
        ),
        "{err}"
    );
    let err = store.put_level(&levels[0]).await.unwrap_err();
    assert!(err.is_fenced(), "{err}");
    store.set_fence(0);
    assert!(store.get_run(&run.run_id).await.unwrap().is_none());
    assert_eq!(store.levels(&job_id).await.unwrap().len(), 8);
    store.close().await;
    drop(standby);
    drop(agent);
    db.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_controller_on_one_sqlite_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = controller_config(dir.path(), "127.0.0.1:0", &[]);
    let first = spawn_controller(&cfg, &dir.path().join("c1.log"));
    let out =
        std::process::Command::new(fleetbench_testkit::workspace_bin("fleetbench-controller"))
            .args(["--config", cfg.to_str().unwrap()])
            .output()
            .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is in use by another controller")
            && err.contains(&format!("pid {}", first.child.id()))
            && err.contains("PostgreSQL"),
        "{err}"
    );
    // The first one is unharmed.
    let mut c = client(first.addr).await;
    c.list_agents(ListAgentsRequest {}).await.unwrap();
}

fn signal(p: &Proc, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(p.child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

/// A leader (`old`) and a standby on a database of their own, with one sim agent `z1`.
struct Pair {
    db: TestDatabase,
    url: String,
    _dir: tempfile::TempDir,
    agent: Proc,
    old: Proc,
    standby: Proc,
}

async fn pair(name: &str) -> Pair {
    let db = TestDatabase::create(name).await;
    let url = db.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "z1", fleetbench_testkit::free_port());
    let old = spawn_controller(
        &ha_config(dir.path(), "c1", &url, &[&agent]),
        &dir.path().join("c1.log"),
    );
    let standby = spawn_controller(
        &ha_config(dir.path(), "c2", &url, &[&agent]),
        &dir.path().join("c2.log"),
    );
    Pair {
        db,
        url,
        _dir: dir,
        agent,
        old,
        standby,
    }
}

/// Called right after the leader was frozen: waits until the standby serves, within the bound
/// of a frozen leader (its silent lock session ended by the server, plus slack). Returns a
/// client of the new leader and how long it took.
/// Waits (at most 90 s) for an attached `fleetbench watch` to exit 0; its stdout and stderr.
async fn ended_well(attached: std::process::Child) -> String {
    let pid = attached.id().to_string();
    let waited = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::task::spawn_blocking(move || attached.wait_with_output()),
    )
    .await;
    let Ok(out) = waited else {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid])
            .status();
        panic!("the attached watch still hangs 90 s after the old leader woke");
    };
    let out = out.unwrap().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the attached watch did not end well:\n{text}"
    );
    text
}

async fn takeover_from_frozen(standby: &Proc) -> (Client, Duration) {
    let frozen = Instant::now();
    let mut s = client(standby.addr).await;
    let bound = Duration::from_secs(u64::from(fleetbench_controller::store::IDLE_SESSION_S) + 10);
    loop {
        if s.list_agents(ListAgentsRequest {}).await.is_ok() {
            return (s, frozen.elapsed());
        }
        assert!(
            frozen.elapsed() < bound,
            "no takeover from a frozen leader within {bound:?}:\n{}",
            standby.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A leader frozen inside a fenced write transaction: its session holds a share lock on the
/// `leadership` row that the standby's epoch bump waits for, and its socket stays open. The
/// frozen process's in-flight transaction is stood in for by a session of this test's own with
/// the controller's session settings (`store::postgres_session`), left idle inside
/// `SELECT … FOR SHARE`, which is all the server sees of a frozen client. PostgreSQL ends it
/// after `IDLE_IN_TRANSACTION_S`, and the standby leads within the same bound as for a freeze
/// outside a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_inside_a_fenced_write_loses_the_lead_within_the_bound() {
    use sqlx::{Connection, Executor};
    let Pair {
        db,
        url,
        _dir,
        agent,
        old,
        standby,
    } = pair("frozentx").await;
    let mut c = client(old.addr).await;
    c.list_agents(ListAgentsRequest {}).await.unwrap();

    let store = Store::open(&url).await.unwrap();
    assert_eq!(store.leader().await.unwrap().epoch, 1);
    let mut frozen_tx = sqlx::AnyConnection::connect(&url).await.unwrap();
    frozen_tx
        .execute(sqlx::raw_sql(
            &fleetbench_controller::store::postgres_session(),
        ))
        .await
        .unwrap();
    frozen_tx
        .execute(sqlx::raw_sql(
            "BEGIN; SELECT epoch FROM leadership WHERE id = 1 FOR SHARE",
        ))
        .await
        .unwrap();
    signal(&old, "STOP");
    let (_, takeover) = takeover_from_frozen(&standby).await;
    println!("takeover from a leader frozen (SIGSTOP) inside a fenced write: {takeover:.2?}");
    assert_eq!(store.leader().await.unwrap().epoch, 2);
    // The frozen transaction was ended by the server, not committed.
    let ended = frozen_tx.execute("COMMIT").await;
    assert!(
        ended.is_err(),
        "the idle transaction was still open: {ended:?}"
    );

    signal(&old, "CONT");
    store.close().await;
    drop(old);
    drop(standby);
    drop(agent);
    db.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_loses_the_lead_and_writes_nothing_when_it_wakes() {
    let Pair {
        db,
        url,
        _dir,
        agent,
        old,
        standby,
    } = pair("frozen").await;
    let mut c = client(old.addr).await;
    let job_id = submit(&mut c, sim_spec("frozen", 1, &["z1"]), "frozen.toml").await;
    let mut events = watch(&mut c, &job_id).await;
    stored_levels(&mut events, 2).await;
    drop(events);
    // A user attached to the leader (given only its address) through the freeze: the watch is
    // cut (by keep-alive while frozen, or by the deposed leader when it wakes) and goes on at
    // the new leader to the job's end.
    // One with progress bars, one with JSON Lines (for scripts): both follow.
    let attach = |json: bool| {
        let mut cmd = fleetbench_testkit::fleetbench_cli();
        cmd.args([
            "watch",
            &job_id,
            "--controller",
            &format!("http://{}", old.addr),
        ]);
        if json {
            cmd.arg("--json");
        }
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let attached = attach(false);
    let attached_json = attach(true);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Frozen, not dead: its socket stays open and the kernel answers keep-alives for it; the
    // server ends its silent lock session after idle_session_timeout.
    signal(&old, "STOP");
    let (mut s, takeover) = takeover_from_frozen(&standby).await;
    println!("takeover from a frozen (SIGSTOP) leader: {takeover:.2?}");
    let job = wait_job(&mut s, &job_id, Duration::from_secs(180)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");

    // Woken up, the old leader finds the epoch moved on, stands by, and writes nothing.
    signal(&old, "CONT");
    let woke = Instant::now();
    while !old
        .log_text()
        .contains("deposed: another controller leads now")
    {
        assert!(
            woke.elapsed() < Duration::from_secs(30),
            "the old leader did not step down:\n{}",
            old.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut o = client(old.addr).await;
    let refused = o.list_agents(ListAgentsRequest {}).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    let text = ended_well(attached).await;
    assert!(text.contains("the watch was cut"), "{text}");
    assert!(text.contains("succeeded"), "{text}");
    let json = ended_well(attached_json).await;
    let lines: Vec<serde_json::Value> = json
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        lines.iter().any(|l| l["event"] == "watch_cut"),
        "no watch_cut line:\n{json}"
    );
    let last = lines.last().expect("no JSON line");
    assert_eq!(
        (&last["event"], &last["state"]),
        (&serde_json::json!("job"), &serde_json::json!("succeeded")),
        "{json}"
    );
    let store = Store::open(&url).await.unwrap();
    let levels = store.levels(&job_id).await.unwrap();
    let keys: BTreeSet<(String, u32)> = levels
        .iter()
        .map(|l| (l.trial_id.clone(), l.result.as_ref().unwrap().level_index))
        .collect();
    assert_eq!((levels.len(), keys.len()), (8, 8), "stored twice or lost");
    let job = store.get_job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!(store.leader().await.unwrap().epoch, 2);
    store.close().await;
    drop(standby);
    drop(agent);
    db.remove().await;
}
