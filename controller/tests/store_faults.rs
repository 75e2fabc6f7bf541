//! Store faults against a real controller process: a PostgreSQL of this test's own (initdb on
//! a temporary directory, its own port; the shared test server is everyone's) restarted in the
//! middle of a job, and stopped for longer than the controller's retry budget.
//!
//! - Restarted (down for 7 s): the job goes on and completes, every level stored once, no trial re-run (the
//!   controller retried its store calls and took its leader lock again under the same epoch).
//! - Stopped for good: the job fails and every host it held is free again, as
//!   `fleetbench agents --json` shows; once the database is back the failure is recorded.
//! - A PostgreSQL that accepts only TLS (`hostssl`, as managed databases do) is reached with
//!   `sslmode=verify-full` and the CA named by `sslrootcert`; plaintext and a wrong CA are
//!   refused.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use fleetbench_controller::store::Store;
use fleetbench_proto::controllerpb::JobState;

/// A PostgreSQL server of one test: its data in a temporary directory, its own port. Stopped
/// (immediate mode) when dropped.
struct PrivatePg {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl PrivatePg {
    fn start() -> PrivatePg {
        Self::start_with(None)
    }

    /// With `tls`: `ssl = on` with this certificate and key, and only `hostssl` connections
    /// from the network (plaintext refused by pg_hba.conf).
    fn start_with(tls: Option<(&Path, &Path)>) -> PrivatePg {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL is installed (scripts/test.sh installs it)")
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").exists())
            .max()
            .expect("an initdb under /usr/lib/postgresql/*/bin");
        let dir = tempfile::tempdir().unwrap();
        let pg = PrivatePg {
            bin,
            dir,
            port: fleetbench_testkit::free_port(),
        };
        if is_root() {
            // initdb refuses root: the server runs as the `postgres` user scripts/test.sh makes.
            let ok = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(pg.dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown the test's PostgreSQL directory to postgres");
        }
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.data(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        if let Some((cert, key)) = tls {
            let data = PathBuf::from(pg.data());
            std::fs::copy(cert, data.join("server.crt")).unwrap();
            std::fs::copy(key, data.join("server.key")).unwrap();
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
            )
            .unwrap();
            let mut conf = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("postgresql.conf"))
                .unwrap();
            use std::io::Write;
            writeln!(conf, "ssl = on").unwrap();
            if is_root() {
                let ok = Command::new("chown")
                    .args(["-R", "postgres"])
                    .arg(&data)
                    .status()
                    .unwrap()
                    .success();
                assert!(ok);
            }
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                data.join("server.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
        }
        pg.ctl("start");
        pg
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd.args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `pg_ctl start|stop|restart`, waiting until done (fast shutdown: sessions are cut).
    fn ctl(&self, action: &str) {
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories={} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").display().to_string();
        let data = self.data();
        let mut args = vec!["-D", &data, "-l", &log, "-w", "-t", "60", "-o", &opts];
        if action != "start" {
            args.extend(["-m", "fast"]);
        }
        args.push(action);
        self.run("pg_ctl", &args);
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let data = self.data();
        let _ = Command::new(if is_root() { "runuser" } else { "true" })
            .args(if is_root() {
                vec!["-u", "postgres", "--"]
            } else {
                vec![]
            })
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .output();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn config(dir: &Path, url: &str, retry_for: &str, agents: &[&Proc]) -> PathBuf {
    let extra = format!("store_retry_for = \"{retry_for}\"\n");
    let path = dir.join("controller.toml");
    write_controller_config(&path, "127.0.0.1:0", url, &extra, agents)
}

/// Waits until `n` levels of the job have been stored (from its events).
async fn wait_levels(c: &mut Client, job_id: &str, n: usize) {
    stored_levels(&mut watch(c, job_id).await, n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_goes_on_through_a_postgres_restart() {
    let pg = PrivatePg::start();
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "s1", fleetbench_testkit::free_port());
    let ctl = spawn_controller(
        &config(dir.path(), &pg.url(), "60s", &[&agent]),
        &dir.path().join("controller.log"),
    );
    let mut c = client(ctl.addr).await;
    let job_id = submit(&mut c, sim_spec("restart-pg", 1, &["s1"]), "faults.toml").await;
    wait_levels(&mut c, &job_id, 2).await;
    // Down for 7 s, as a restart with crash recovery takes: longer than the pool's 5 s wait
    // for a connection, so the job's store calls fail and are retried.
    let t = Instant::now();
    pg.ctl("stop");
    tokio::time::sleep(Duration::from_secs(7)).await;
    pg.ctl("start");
    println!("PostgreSQL down for {:.2?}", t.elapsed());

    let job = wait_job(&mut c, &job_id, Duration::from_secs(180)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!((job.levels_done, job.levels_total), (8, 8));
    let log = ctl.log_text();
    assert!(
        log.contains("transient store error; retrying"),
        "the restart was not even noticed:\n{log}"
    );
    assert!(
        log.contains("leader lock taken again"),
        "the controller did not take its lock again:\n{log}"
    );
    let store = Store::open(&pg.url()).await.unwrap();
    let levels = store.levels(&job_id).await.unwrap();
    let keys: BTreeSet<_> = levels
        .iter()
        .map(|l| (l.trial_id.clone(), l.result.as_ref().unwrap().level_index))
        .collect();
    assert_eq!((levels.len(), keys.len()), (8, 8));
    // Went on, not started over: one run per trial, one epoch.
    let runs = store.runs(&job_id).await.unwrap();
    assert_eq!(runs.len(), 2, "a trial ran twice: {runs:#?}");
    assert_eq!(store.leader().await.unwrap().epoch, 1);
    store.close().await;
}

fn agents_json(url: &str) -> Vec<serde_json::Value> {
    let out = Command::new(fleetbench_testkit::workspace_bin("fleetbench"))
        .args(["agents", "--json", "--controller", url])
        .env_remove("FLEETBENCH_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "fleetbench agents: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_down_past_the_retry_budget_fails_the_job_and_frees_its_hosts() {
    let pg = PrivatePg::start();
    let dir = tempfile::tempdir().unwrap();
    let a1 = spawn_agent(dir.path(), "d1", fleetbench_testkit::free_port());
    let a2 = spawn_agent(dir.path(), "d2", fleetbench_testkit::free_port());
    let ctl = spawn_controller(
        &config(dir.path(), &pg.url(), "3s", &[&a1, &a2]),
        &dir.path().join("controller.log"),
    );
    let url = format!("http://{}", ctl.addr);
    let mut c = client(ctl.addr).await;
    // 2 configs x 2 repeats on two hosts: both hosts busy.
    let job_id = submit(&mut c, sim_spec("down-pg", 2, &["d1", "d2"]), "faults.toml").await;
    wait_levels(&mut c, &job_id, 1).await;
    let busy = agents_json(&url);
    assert!(
        busy.iter().all(|a| a["health"] == "busy"),
        "both hosts run trials: {busy:#?}"
    );
    pg.ctl("stop");
    let stopped = Instant::now();

    // Every host is given back (the agents answer from memory: no store needed).
    let freed = loop {
        let agents = agents_json(&url);
        if agents
            .iter()
            .all(|a| a["health"] == "ready" && a["current_job_id"] == "")
        {
            break stopped.elapsed();
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(90),
            "hosts still held with the store down: {agents:#?}\n{}",
            ctl.log_text()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!("hosts free {freed:.1?} after the store went down (retry budget 3 s)");
    assert!(
        ctl.log_text().contains("job failed on a store error"),
        "{}",
        ctl.log_text()
    );

    // Back up: the failure is recorded, naming the store.
    pg.ctl("start");
    let job = wait_job(&mut c, &job_id, Duration::from_secs(60)).await;
    assert_eq!(job.state, JobState::Failed as i32, "{job:?}");
    assert!(job.error.contains("store"), "{}", job.error);
    // Nothing measured is lost: the levels stored before stay.
    assert!(job.levels_done >= 1, "{job:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_that_requires_tls_is_reached_over_verified_tls_only() {
    let certs_dir = tempfile::tempdir().unwrap();
    let certs = fleetbench_support::tls::generate_dev_certs(certs_dir.path(), &[], false).unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let other = fleetbench_support::tls::generate_dev_certs(other_dir.path(), &[], false).unwrap();
    let pg = PrivatePg::start_with(Some((
        &certs.controller_server.cert,
        &certs.controller_server.key,
    )));
    let url = pg.url();

    let plain = Store::open(&format!("{url}?sslmode=disable")).await;
    let Err(err) = plain else {
        panic!("plaintext must be refused")
    };
    assert!(err.to_string().contains("no pg_hba.conf entry"), "{err}");

    let wrong_ca = Store::open(&format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        other.ca_cert.display()
    ))
    .await;
    assert!(
        wrong_ca.is_err(),
        "a server certificate of another CA was accepted"
    );

    let store = Store::open(&format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        certs.ca_cert.display()
    ))
    .await
    .expect("verified TLS to the server");
    // The store works over it (migrations ran; a read answers).
    assert_eq!(store.leader().await.unwrap().epoch, 0);

    // A controller process on that URL runs a job to the end, every level stored.
    let tls_url = format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        certs.ca_cert.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "t1", fleetbench_testkit::free_port());
    let ctl = spawn_controller(
        &config(dir.path(), &tls_url, "30s", &[&agent]),
        &dir.path().join("controller.log"),
    );
    let mut c = client(ctl.addr).await;
    let job_id = submit(&mut c, sim_spec("pg-tls", 1, &["t1"]), "tls.toml").await;
    let job = wait_job(&mut c, &job_id, Duration::from_secs(180)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!(store.levels(&job_id).await.unwrap().len(), 8);
    drop(ctl);
    drop(agent);
    store.close().await;
}

/// Two controllers on one PostgreSQL that restarts: every session drops at once, the standby
/// polls 4 times as often as the leader checks, and yet the leader keeps its term (same epoch,
/// same holder): a standby whose session failed holds back for `leader::RESTART_GRACE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_stays_put_across_a_postgres_restart() {
    let pg = PrivatePg::start();
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "r1", fleetbench_testkit::free_port());
    let ha = |name: &str| {
        let listen = format!("127.0.0.1:{}", fleetbench_testkit::free_port());
        write_controller_config(
            &dir.path().join(format!("{name}.toml")),
            &listen,
            &pg.url(),
            "store_retry_for = \"60s\"\n",
            &[&agent],
        )
    };
    let leader = spawn_controller(&ha("c1"), &dir.path().join("c1.log"));
    let standby = spawn_controller(&ha("c2"), &dir.path().join("c2.log"));
    let store = Store::open(&pg.url()).await.unwrap();
    let before = store.leader().await.unwrap();
    assert_eq!(before.epoch, 1);
    store.close().await;

    pg.ctl("stop");
    tokio::time::sleep(Duration::from_secs(3)).await;
    pg.ctl("start");
    // Past the grace and a few of the leader's checks.
    tokio::time::sleep(fleetbench_controller::leader::RESTART_GRACE + Duration::from_secs(3)).await;

    let store = Store::open(&pg.url()).await.unwrap();
    let after = store.leader().await.unwrap();
    assert_eq!(
        (after.epoch, &after.holder),
        (1, &before.holder),
        "leadership moved across the restart:\nleader log:\n{}\nstandby log:\n{}",
        leader.log_text(),
        standby.log_text()
    );
    let mut c = client(leader.addr).await;
    c.list_agents(fleetbench_proto::controllerpb::ListAgentsRequest {})
        .await
        .expect("the leader still serves");
    store.close().await;
    drop(standby);
    drop(leader);
    drop(agent);
}
