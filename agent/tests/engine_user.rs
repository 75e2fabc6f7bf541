//! Engines under their own user (issue 13): an agent run as root starts its engines as the
//! engine user (`[engine_user] name`), which cannot read the agent's key; a missing engine user
//! refuses engines, naming it; `run_as_root` is the named opt-in; a key the engine user could
//! read stops the agent at start. As another user (nothing to drop) the engine runs as the
//! agent's own user. CI runs as root, with the `fleetbench-engine` user scripts/test.sh makes.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use fleetbench_proto::agentpb;

const ENGINE_USER: &str = "fleetbench-engine";

/// `(real, effective, saved, fs)` uids and the supplementary groups of `pid`.
fn ids(pid: u32) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> Vec<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    (field("Uid:"), field("Gid:"), field("Groups:"))
}

/// `(uid, gid, groups)` of the engine user, from the same lookups the agent makes.
fn engine_user() -> (u32, u32, Vec<u32>) {
    let c = fleetbench_agent::engine_user::resolve(
        &fleetbench_agent::engine_user::EngineUserConfig::default(),
        "test",
    )
    .unwrap_or_else(|e| {
        panic!("{e}\n(scripts/test.sh creates {ENGINE_USER} where it runs as root)")
    });
    (c.uid, c.gid, c.groups)
}

/// Reads `path` as `uid`/`gid`/`groups` in a child process (the engine's credentials, switched
/// the way the agent switches them); the error text when it cannot.
fn read_as(path: &Path, uid: u32, gid: u32, groups: &[u32]) -> Result<(), String> {
    let groups: Vec<libc::gid_t> = groups.to_vec();
    let mut cmd = std::process::Command::new("head");
    cmd.args(["-c", "1"]).arg(path);
    // SAFETY: only async-signal-safe calls on memory allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The agent's directory and its certificates' opened to traversal, so that only a file's own
/// mode keeps the engine user out.
fn open_dirs(agent: &Agent) {
    for d in [agent.dir.path(), &agent.dir.path().join("certs")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The simulator copied where any user may run it.
fn sim_for_anyone(dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sim = dir.join("fleetbench-sim");
    std::fs::copy(fleetbench_testkit::workspace_bin("fleetbench-sim"), &sim).unwrap();
    sim
}

fn profiles(sim_port: u16, sim: &Path, user: &str) -> String {
    format!(
        "[engine_user]\nname = {user:?}\n\n\
         [profiles.dropped]\nkind = \"sim\"\nprogram = {sim:?}\nport = {sim_port}\nmodels = [\"sim-model\"]\n\n\
         [profiles.rooted]\nkind = \"sim\"\nprogram = {sim:?}\nport = {sim_port}\nmodels = [\"sim-model\"]\nrun_as_root = true\n"
    )
}

async fn start_engine(agent: &Agent, profile: &str, port: u16) -> Result<u32, tonic::Status> {
    let mut c = agent.client().await.unwrap();
    let mut stream = c
        .apply_engine(agentpb::ApplyEngineRequest {
            spec: Some(spec(profile, "sim-model", port, &[])),
            run_id: String::new(),
            lease_epoch: 0,
        })
        .await?
        .into_inner();
    let mut events = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(e) = tokio_stream::StreamExt::next(&mut stream).await {
            events.push(e.unwrap().event.unwrap());
        }
    })
    .await
    .expect("apply stream ended");
    assert!(ready(&events).is_some(), "not ready: {events:?}");
    Ok(spawned(&events).expect("spawned").pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_run_as_the_engine_user_and_cannot_read_the_agent_key() {
    let port = fleetbench_testkit::free_port();
    if !nix::unistd::geteuid().is_root() {
        // Nothing to drop: the engine runs as the agent's (this test's) user.
        let agent = Agent::start("").unwrap();
        let pid = start_engine(&agent, "sim", port).await.unwrap();
        let me = nix::unistd::getuid().as_raw();
        assert_eq!(ids(pid).0, vec![me; 4], "engine uid as a non-root agent");
        return;
    }
    let (uid, gid, groups) = engine_user();
    assert_ne!(uid, 0);
    let bin = tempfile::tempdir().unwrap();
    let sim = sim_for_anyone(bin.path());
    let agent = Agent::start(&profiles(port, &sim, ENGINE_USER)).unwrap();
    open_dirs(&agent);

    let pid = start_engine(&agent, "dropped", port).await.unwrap();
    let (u, g, sup) = ids(pid);
    assert_eq!(u, vec![uid; 4], "engine uids (real, effective, saved, fs)");
    assert_eq!(g, vec![gid; 4], "engine gids");
    assert_eq!(sup, groups, "engine supplementary groups");
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        env.split(|b| *b == 0)
            .any(|kv| kv == format!("USER={ENGINE_USER}").as_bytes()),
        "the engine's USER"
    );

    // The agent's key: unreadable as the engine user, although every directory above it may
    // be traversed and a world-readable file beside it is read (the attempt itself works).
    let key = &agent.certs.agent_key;
    let err = read_as(key, uid, gid, &groups).expect_err("the engine user read the agent key");
    assert!(err.contains("Permission denied"), "{err}");
    let beside = agent.dir.path().join("certs").join("beside.txt");
    std::fs::write(&beside, "x").unwrap();
    std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o644)).unwrap();
    read_as(&beside, uid, gid, &groups).expect("the engine user reads a world-readable file");

    // The named opt-in: root, as the agent.
    let pid = start_engine(&agent, "rooted", port).await.unwrap();
    assert_eq!(ids(pid).0, vec![0; 4], "run_as_root engine");
    let mut c = agent.client().await.unwrap();
    c.stop_engine(agentpb::StopEngineRequest { lease_epoch: 0 })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_engine_user_refuses_engines_and_a_readable_key_refuses_the_agent() {
    if !nix::unistd::geteuid().is_root() {
        return; // both rules are about dropping root; as another user there is nothing to drop
    }
    let port = fleetbench_testkit::free_port();
    let sim = fleetbench_testkit::workspace_bin("fleetbench-sim");
    let agent = Agent::start(&profiles(port, &sim, "fleetbench-no-such-engine-user")).unwrap();
    let s = start_engine(&agent, "dropped", port)
        .await
        .expect_err("an engine started without its user");
    assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{}", s.message());
    for w in [
        "fleetbench-no-such-engine-user",
        "engine_user.name",
        "run_as_root",
    ] {
        assert!(s.message().contains(w), "{w:?} not in {}", s.message());
    }
    let mut c = agent.client().await.unwrap();
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.pid, 0, "nothing started: {st:?}");

    // A key the engine user could read: the agent does not start, naming the field.
    engine_user();
    let key = &agent.certs.agent_key;
    std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cfg = std::fs::read_to_string(agent.dir.path().join("agent.toml"))
        .unwrap()
        .replace("fleetbench-no-such-engine-user", ENGINE_USER);
    let cfg_path = agent.dir.path().join("agent-engine-user.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let out = std::process::Command::new(fleetbench_testkit::workspace_bin("fleetbench-agent"))
        .arg("--config")
        .arg(&cfg_path)
        .arg("--check")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "started with a readable key: {text}");
    for w in ["tls.key", "mode 0644", ENGINE_USER] {
        assert!(text.contains(w), "{w:?} not in {text}");
    }
}

/// The secrets a job may reference on this agent (`[external] secret_env`) are the agent's own
/// variables, read by the load generator at the moment of use: an engine does not inherit them
/// (an engine user could read them from `/proc/PID/environ`). Other variables still are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_external_secrets_do_not_reach_its_engines() {
    let port = fleetbench_testkit::free_port();
    let agent = Agent::start_with_env(
        "[external]\nsecret_env = [\"FLEETBENCH_TEST_TARGET_KEY\"]\n",
        &[
            ("FLEETBENCH_TEST_TARGET_KEY", "tok-secret-9f2c"),
            ("FLEETBENCH_TEST_PLAIN", "plain-value"),
        ],
    )
    .unwrap();
    let pid = start_engine(&agent, "sim", port).await.unwrap();
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
    assert!(
        vars.iter()
            .any(|kv| *kv == b"FLEETBENCH_TEST_PLAIN=plain-value"),
        "the engine inherits the agent's other variables"
    );
    assert!(
        !env.windows(15).any(|w| w == b"tok-secret-9f2c"),
        "the external secret reached the engine's environment"
    );
    let mut c = agent.client().await.unwrap();
    c.stop_engine(agentpb::StopEngineRequest { lease_epoch: 0 })
        .await
        .unwrap();
}

/// The start time of `pid` in clock ticks (`/proc/PID/stat` field 22), as the agent notes it.
fn start_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// A root agent whose data directory the engine user can write would follow what an engine
/// planted there: here the note of a previous engine's process group, which the agent stops at
/// start. With the directory the engine user's (or anyone's to write), the agent exits with
/// code 2 naming the directory and why, binds nothing and signals nobody; once the directory is
/// root's alone again, the same note is acted on (the victim is stopped: the attack was real).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_the_engine_user_can_write_stops_a_root_agent_before_it_acts() {
    if !nix::unistd::geteuid().is_root() {
        return; // a non-root agent drops to nobody: its engines are its own user already
    }
    let (uid, gid, _) = engine_user();
    let mut agent = Agent::start("").unwrap();
    assert!(agent.terminate(Duration::from_secs(20)));
    let data = agent.data_dir();
    /// Killed when the test ends, however it ends.
    struct Victim(std::process::Child);
    impl Drop for Victim {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut victim = Victim(
        std::process::Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let pid = victim.0.id();
    // What an engine running as the engine user could write into a directory it can write.
    let note = data.join("engine.pgid");
    let plant = || std::fs::write(&note, format!("{pid} {}\n", start_ticks(pid))).unwrap();
    let set =
        |mode: u32| std::fs::set_permissions(&data, std::fs::Permissions::from_mode(mode)).unwrap();
    for (what, owner, mode, why) in [
        (
            "the engine user's",
            Some((uid, gid)),
            0o700,
            "owned by the engine user",
        ),
        ("world-writable", None, 0o777, "writable by every user"),
        (
            "world-writable, sticky",
            None,
            0o1777,
            "writable by every user",
        ),
    ] {
        plant();
        std::os::unix::fs::chown(
            &data,
            owner.map(|o| o.0).or(Some(0)),
            owner.map(|o| o.1).or(Some(0)),
        )
        .unwrap();
        set(mode);
        let (status, stderr, listened) = agent.run_to_exit(Duration::from_secs(30));
        assert_eq!(status.code(), Some(2), "{what}: {status}: {stderr}");
        assert!(!listened, "{what}: the agent bound its port: {stderr}");
        for w in [&*data.to_string_lossy(), why, "data_dir", ENGINE_USER] {
            assert!(stderr.contains(w), "{what}: {w:?} not in {stderr}");
        }
        assert!(
            victim.0.try_wait().unwrap().is_none(),
            "{what}: the agent signalled the process group the planted note named"
        );
        eprintln!("{what}: exit {status}: {}", stderr.trim());
    }
    // Root's alone again: the agent starts and acts on the note (the victim is stopped).
    std::os::unix::fs::chown(&data, Some(0), Some(0)).unwrap();
    set(0o700);
    plant();
    agent.relaunch();
    assert!(
        eventually(Duration::from_secs(30), || victim
            .0
            .try_wait()
            .unwrap()
            .is_some())
        .await,
        "the agent did not act on the note"
    );
}

/// The flag reader's `--help` probe runs as the engine would (issue 22): as the engine user,
/// without the agent's external secrets, in a working directory it may enter but not write
/// (`python -m` imports from there first: nothing can be planted for a root process to run),
/// with HOME and TMPDIR in a scratch directory of its own that is gone afterwards. The fake
/// engine's `--help` writes what it saw where the test reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_help_probe_runs_as_the_engine_user_in_a_directory_it_cannot_write() {
    if !nix::unistd::geteuid().is_root() {
        return; // nothing to drop: the probe runs as the agent, in a 0700 directory of its own
    }
    let (uid, gid, _) = engine_user();
    let port = fleetbench_testkit::free_port();
    let bin = tempfile::tempdir().unwrap();
    let sim = sim_for_anyone(bin.path());
    let out = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(out.path(), Some(uid), Some(gid)).unwrap();
    let o = out.path().display();
    let script = bin.path().join("fake-engine");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             if [ \"$1\" = --help ]; then\n\
               id -u > {o}/uid\n\
               pwd > {o}/cwd\n\
               if touch ./planted.py 2>/dev/null; then echo writable; else echo not-writable; fi > {o}/cwd-writable\n\
               ls -A . > {o}/cwd-entries\n\
               echo \"$HOME\" > {o}/home\n\
               if touch \"$HOME/x\" && touch \"$TMPDIR/x\"; then echo ok; else echo no; fi > {o}/scratch-writable\n\
               env > {o}/env\n\
               echo 'usage: fake-engine [--port PORT]'\n\
               exit 0\n\
             fi\n\
             exec {sim:?} \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = Agent::start_with_env(
        &format!(
            "[engine_user]\nname = {ENGINE_USER:?}\n\n\
             [external]\nsecret_env = [\"FLEETBENCH_TEST_TARGET_KEY\"]\n\n\
             [profiles.probed]\nkind = \"sim\"\nprogram = {script:?}\nhelp_args = [\"--help\"]\n\
             port = {port}\nmodels = [\"sim-model\"]\n"
        ),
        &[("FLEETBENCH_TEST_TARGET_KEY", "tok-secret-9f2c")],
    )
    .unwrap();
    open_dirs(&agent);
    let pid = start_engine(&agent, "probed", port).await.unwrap();
    assert_eq!(ids(pid).0, vec![uid; 4], "the engine itself");
    let read = |name: &str| {
        std::fs::read_to_string(out.path().join(name))
            .unwrap_or_else(|e| panic!("the probe did not write {name}: {e}"))
            .trim()
            .to_string()
    };
    assert_eq!(read("uid"), uid.to_string(), "the probe's uid");
    assert_eq!(
        read("cwd-writable"),
        "not-writable",
        "the probe could write its working directory"
    );
    assert_eq!(
        read("cwd-entries"),
        "",
        "the probe's working directory was not empty"
    );
    let cwd = read("cwd");
    assert!(cwd.contains("fleetbench-help-"), "{cwd}");
    let home = read("home");
    assert!(
        home.contains("fleetbench-help-") && home != cwd,
        "HOME {home}, cwd {cwd}"
    );
    assert_eq!(
        read("scratch-writable"),
        "ok",
        "HOME and TMPDIR are the probe's own"
    );
    let env = read("env");
    assert!(env.contains(&format!("USER={ENGINE_USER}")), "{env}");
    assert!(
        !env.contains("tok-secret-9f2c"),
        "the external secret reached the probe"
    );
    for d in [&cwd, &home] {
        assert!(!Path::new(d).exists(), "left behind: {d}");
    }
    let mut c = agent.client().await.unwrap();
    c.stop_engine(agentpb::StopEngineRequest { lease_epoch: 0 })
        .await
        .unwrap();
}
