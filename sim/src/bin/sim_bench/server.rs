//! The simulator under test: started as a child process (pinned to CPUs when asked) and
//! killed on drop, and the CPU time it spends.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn pin_self(cpu: usize) {
    // SAFETY: plain syscall on a zeroed, locally owned cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

pub(crate) fn start_sim(args: &[String], cpu: Option<usize>) -> anyhow::Result<Server> {
    start_sim_on(args, cpu.map(|c| vec![c]))
}

/// Starts the simulator pinned to `cpus` (all of them when `None`).
pub(crate) fn start_sim_on(args: &[String], cpus: Option<Vec<usize>>) -> anyhow::Result<Server> {
    let exe = std::env::current_exe()?.with_file_name("fleetbench-sim");
    let mut cmd = Command::new(&exe);
    cmd.args(["--host", "127.0.0.1", "--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(cpus) = cpus {
        // SAFETY: sched_setaffinity is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                for &cpu in &cpus {
                    libc::CPU_SET(cpu, &mut set);
                }
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                Ok(())
            });
        }
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("start {}", exe.display()))?;
    let mut out = child.stdout.take().context("stdout")?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while std::io::Read::read(&mut out, &mut b)? == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let line = String::from_utf8_lossy(&line).to_string();
    let port = line
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .with_context(|| format!("unexpected first line {line:?}"))?;
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut sink);
    });
    let server = Server { child, port };
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let _ = s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
            if r.starts_with("HTTP/1.1 200") {
                return Ok(server);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("simulator not ready within 30 s")
}

pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let p = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of the file, 12 and 13 after the ")".
    p(11) + p(12)
}
