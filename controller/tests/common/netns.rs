//! Network namespaces for partition tests (root only): a bridge and one namespace per member,
//! links that can be cut and healed, processes and threads inside a namespace. Shared by
//! `partition.rs` (a single-host trial's host cut off) and `gang_partition.rs` (a rank's).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether this process may build namespaces; outside CI a test without root says so and
/// passes, as the other root-only tests do.
pub fn have_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test} needs root (network namespaces), and CI runs as root"
        );
        eprintln!("SKIPPED: {test} needs root to build network namespaces");
        return false;
    }
    assert!(
        Command::new("ip").arg("-V").output().is_ok(),
        "{test} needs `ip` (iproute2; scripts/test.sh installs it)"
    );
    true
}

pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test's network: a bridge in a namespace of its own and one namespace per member, each
/// joined to the bridge by a veth pair. Dropped, it deletes every namespace (and so every link).
pub struct Net {
    pub prefix: String,
    subnet: u8,
    namespaces: Vec<String>,
}

impl Net {
    pub fn build(members: &[&str]) -> Net {
        let pid = std::process::id();
        let mut net = Net {
            prefix: format!("fbpart{pid}"),
            subnet: (pid % 200) as u8 + 20,
            namespaces: Vec::new(),
        };
        let br = net.ns("br");
        ip(&["netns", "add", &br]);
        net.namespaces.push(br.clone());
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &br, "link", "set", "br0", "up"]);
        for (i, m) in members.iter().enumerate() {
            let ns = net.ns(m);
            ip(&["netns", "add", &ns]);
            net.namespaces.push(ns.clone());
            // Link names live inside the namespaces: no clash with anything else on the host.
            let leg = format!("b-{m}");
            ip(&[
                "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &leg, "netns",
                &br,
            ]);
            ip(&["-n", &br, "link", "set", &leg, "master", "br0"]);
            ip(&["-n", &br, "link", "set", &leg, "up"]);
            let addr = format!("{}/24", net.addr(i));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        net
    }

    pub fn ns(&self, member: &str) -> String {
        format!("{}{member}", self.prefix)
    }

    /// The address of the i-th member.
    pub fn addr(&self, i: usize) -> String {
        format!("10.213.{}.{}", self.subnet, 10 + i)
    }
}

/// Cuts (or heals) a member's link at the bridge of the network named `prefix`: its packets go
/// nowhere, and nothing tells either side (no RST, no FIN), as with a switch port or a cable gone.
pub fn set_link(prefix: &str, member: &str, up: bool) {
    ip(&[
        "-n",
        &format!("{prefix}br"),
        "link",
        "set",
        &format!("b-{member}"),
        if up { "up" } else { "down" },
    ]);
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A workspace binary run inside a namespace; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct NsProc {
    pub child: Child,
    pub log: PathBuf,
}

impl NsProc {
    pub fn spawn(ns: &str, bin: &str, config: &Path, log: PathBuf) -> NsProc {
        let out = log.with_extension("out");
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(fleetbench_testkit::workspace_bin(bin))
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info,fleetbench_agent=debug")
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn ip netns exec");
        let p = NsProc { child, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut text = String::new();
            let _ = std::fs::File::open(&out).and_then(|mut f| f.read_to_string(&mut text));
            if text.contains(" listening on ") {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "{bin} in {ns} did not start; log:\n{}",
                p.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NsProc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `f` on a thread inside network namespace `ns` (sockets are made in the namespace of
/// the thread that creates them), with a runtime of its own.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on a valid namespace descriptor changes only this thread's namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// What [`start_fleet`] starts: each agent (its process and the address the controller dials)
/// by name, and the controller.
pub struct Fleet {
    pub agents: std::collections::BTreeMap<String, (NsProc, String)>,
    pub controller: NsProc,
}

/// Mutual-TLS agents in their namespaces (agent `names[i]` on member `i + 1`'s address, port
/// `agent_port`, each with a `sim` profile on port 18080 plus the profile lines `extra` gives
/// for its name), and the controller in member `c`'s namespace on `api_port` with the agents
/// as configured hosts, a SQLite store `dir/controller.db`, 500 ms heartbeats and a lease TTL
/// of `lease_ttl_s`.
#[allow(clippy::too_many_arguments)]
pub fn start_fleet(
    net: &Net,
    dir: &Path,
    certs: &fleetbench_support::tls::DevCerts,
    names: &[&str],
    agent_port: u16,
    api_port: u16,
    lease_ttl_s: u64,
    extra: impl Fn(&str) -> String,
) -> Fleet {
    let mut agents = std::collections::BTreeMap::new();
    let mut hosts_toml = String::new();
    for (i, name) in names.iter().enumerate() {
        let addr = format!("{}:{agent_port}", net.addr(i + 1));
        let data = dir.join(name);
        std::fs::create_dir_all(&data).unwrap();
        let cfg = data.join("agent.toml");
        std::fs::write(
            &cfg,
            format!(
                "name = \"{name}\"\nlisten = \"{addr}\"\ndata_dir = {data:?}\n\
                 tls = {{ cert = {:?}, key = {:?}, client_ca = {:?} }}\n\
                 [profiles.sim]\nkind = \"sim\"\nport = 18080\n{}{}\n",
                certs.agent_cert,
                certs.agent_key,
                certs.ca_cert,
                extra(name),
                fleetbench_testkit::process::SIM_MODELS
            ),
        )
        .unwrap();
        hosts_toml.push_str(&format!(
            "[[hosts]]\nname = \"{name}\"\naddress = \"{addr}\"\n"
        ));
        let p = NsProc::spawn(
            &net.ns(name),
            "fleetbench-agent",
            &cfg,
            data.join("agent.log"),
        );
        agents.insert(name.to_string(), (p, addr));
    }
    let ccfg = dir.join("controller.toml");
    std::fs::write(
        &ccfg,
        format!(
            "listen = \"127.0.0.1:{api_port}\"\nstore_url = \"sqlite://{}\"\n\
             heartbeat_interval = \"500ms\"\nhost_wait = \"60s\"\nlease_ttl = \"{lease_ttl_s}s\"\n\
             [agent_tls]\nca = {:?}\ncert = {:?}\nkey = {:?}\ndomain = \"localhost\"\n{hosts_toml}",
            dir.join("controller.db").display(),
            certs.ca_cert,
            certs.controller_cert,
            certs.controller_key,
        ),
    )
    .unwrap();
    let controller = NsProc::spawn(
        &net.ns("c"),
        "fleetbench-controller",
        &ccfg,
        dir.join("controller.log"),
    );
    Fleet { agents, controller }
}
