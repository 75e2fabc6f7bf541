//! Workspace binaries as real child processes: started, found on the address they print, and
//! stopped when the test lets go of them.
//!
//! Every fleetbench server prints `<name> listening on <addr>` on stdout once its port is bound
//! (the binaries bind `127.0.0.1:0`, so the address is only known then); [`Launch::spawn`] waits
//! for that line. Stderr, where the logs go, is kept in a file that the panic message shows
//! when the process never comes up.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a binary may take to bind its port: generous, CI machines are loaded.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long [`Listening::terminate`] waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// A running server process; dropped, it is stopped as [`Listening::terminate`] does.
pub struct Listening {
    pub child: Child,
    /// The address from its `listening on` line.
    pub addr: SocketAddr,
    /// A name for messages (the agent's name, "controller", ...).
    pub name: String,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl Listening {
    /// SIGKILL, as a crash or a power cut would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait up to 20 s for a clean stop (an agent stops its engine first), then
    /// SIGKILL. Returns whether it stopped on SIGTERM.
    pub fn terminate(&mut self) -> bool {
        self.terminate_within(STOP_GRACE)
    }

    /// As [`Listening::terminate`], with another grace period.
    pub fn terminate_within(&mut self, grace: Duration) -> bool {
        // Through kill(1): std's Child only sends SIGKILL, and the test crates keep no libc.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        false
    }

    /// What it has written to stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}

/// A workspace binary to start: arguments, environment, where its log goes.
pub struct Launch {
    command: Command,
    bin: String,
    name: String,
    log: PathBuf,
}

impl Launch {
    /// `bin` from the workspace's target directory, its stderr into `log`.
    pub fn new(bin: &str, log: impl Into<PathBuf>) -> Launch {
        Launch {
            command: Command::new(crate::workspace_bin(bin)),
            bin: bin.to_string(),
            name: bin.to_string(),
            log: log.into(),
        }
    }

    /// The name [`Listening::name`] carries.
    pub fn name(mut self, name: &str) -> Launch {
        self.name = name.to_string();
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Launch
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.command.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Launch {
        self.command.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: &str) -> Launch {
        self.command.env_remove(key);
        self
    }

    /// Runs the binary through `wrapper` (a program and its first arguments, e.g. `unshare
    /// --mount sh -c SCRIPT sh`), which gets the binary's path and arguments after its own and
    /// must exec them (so the process stopped is the binary). Call it after `args` and `env`.
    pub fn through<S: AsRef<std::ffi::OsStr>>(mut self, wrapper: &[S]) -> Launch {
        let mut c = Command::new(wrapper[0].as_ref());
        c.args(&wrapper[1..])
            .arg(self.command.get_program())
            .args(self.command.get_args());
        for (k, v) in self.command.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        self.command = c;
        self
    }

    /// Starts it and waits for its `listening on` line. Panics with its log when it exits or
    /// stays silent: a server that cannot start is a broken test setup.
    pub fn spawn(mut self) -> Listening {
        let err = std::fs::File::create(&self.log)
            .unwrap_or_else(|e| panic!("log file {}: {e}", self.log.display()));
        let mut child = self
            .command
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.bin));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Reads on to the end, so the child never blocks on a full pipe.
            let mut sent = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if !sent && let Some(a) = line.split(" listening on ").nth(1) {
                    let _ = tx.send(a.trim().to_string());
                    sent = true;
                }
            }
        });
        let Ok(addr) = rx.recv_timeout(START_TIMEOUT) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not report its address; log:\n{}",
                self.bin,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        };
        Listening {
            child,
            // Servers print a bare address; the simulator prints a URL.
            addr: addr
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .parse()
                .unwrap_or_else(|e| panic!("{} printed address {addr:?}: {e}", self.bin)),
            name: self.name,
            log: self.log,
        }
    }
}

/// A plaintext loopback agent config with one simulated-engine profile `sim` on `sim_port`,
/// its data directory `data`; `security` is `insecure = true` or a `tls = {…}` line.
pub fn sim_agent_config(name: &str, data: &Path, sim_port: u16, security: &str) -> String {
    format!(
        "name = \"{name}\"\nlisten = \"127.0.0.1:0\"\n{security}\ndata_dir = \"{}\"\n\
         [profiles.sim]\nkind = \"sim\"\nport = {sim_port}\n{SIM_MODELS}\n",
        data.display()
    )
}

/// The model names the test fleets' simulated engines may be asked for: a served agent allows
/// no model unless its profile lists it.
pub const SIM_MODELS: &str = "models = [\"sim-model\", \"m\", \"/m\", \"fleetbench/sim-moe-30b-a3b\", \"fleetbench/sim-dense-8b\"]";

/// An agent launch with this whole config, written to `dir/name/agent.toml` (its data
/// directory `dir/name`, its log `dir/name/agent.log`).
pub fn agent(dir: &Path, name: &str, toml: &str) -> Launch {
    let data = dir.join(name);
    std::fs::create_dir_all(&data).expect("agent data directory");
    let cfg = data.join("agent.toml");
    std::fs::write(&cfg, toml).expect("agent config");
    Launch::new("fleetbench-agent", data.join("agent.log"))
        .name(name)
        .args([Path::new("--config"), &cfg])
}

/// A plaintext sim agent `dir/name` (see [`sim_agent_config`]) with its engine on a free port
/// of its own, so that agents on one machine do not collide.
pub fn sim_agent(dir: &Path, name: &str) -> Launch {
    let port = crate::free_port();
    agent(
        dir,
        name,
        &sim_agent_config(name, &dir.join(name), port, "insecure = true"),
    )
}
