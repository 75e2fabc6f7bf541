//! An engine left behind by an agent that died without stopping it.
//!
//! A clean agent stop ends the engine's whole group, and the engine's own process gets SIGTERM
//! from the kernel when the agent dies (`PR_SET_PDEATHSIG`, set at spawn). But a SIGKILLed agent
//! runs no code, and an engine worker that ignores SIGTERM outlives its parent with its GPU
//! memory and its port. So the agent notes the running engine's process group in its data
//! directory, and the next agent on that directory ends whatever is left of that group before
//! it serves: the same SIGTERM, grace, SIGKILL as any stop.
//!
//! Workers that left the group (`setsid`, as some launchers do for their children) are not
//! found by the group id, so while the engine runs the supervisor adds each such worker to the
//! note (pid and start time, one a line), and the next agent stops those too, with their own
//! descendants.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::group::{GroupOps, ProcStat, read_stat, scan_all, stop_sequence};

/// The note's file name in the data directory.
const NOTE: &str = "engine.pgid";
/// How long leftovers get to exit on SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(10);
const KILL_WAIT: Duration = Duration::from_secs(5);

fn note_path(data_dir: &Path) -> PathBuf {
    data_dir.join(NOTE)
}

/// Notes the group of a just-started engine: its leader's pid (the group id) and the leader's
/// start time, which tells a later agent the leader from an unrelated process reusing the pid.
pub fn record(data_dir: &Path, pgid: u32) {
    let Some(stat) = read_stat(pgid as i32) else {
        return; // already gone: nothing can be left behind
    };
    if let Err(e) = crate::private_file::write(
        &note_path(data_dir),
        format!("{pgid} {}\n", stat.start_ticks),
    ) {
        tracing::warn!(error = %e, "could not note the engine's process group; a SIGKILLed agent's engine would not be found");
    }
}

/// Notes the members of a running engine that left its group (`strays`: pid, start time), after
/// the group's own line; an empty list leaves the group's line alone.
pub fn record_strays(data_dir: &Path, pgid: u32, strays: &[(i32, u64)]) {
    let Some(stat) = read_stat(pgid as i32) else {
        return;
    };
    let mut text = format!("{pgid} {}\n", stat.start_ticks);
    for (pid, start) in strays {
        text.push_str(&format!("{pid} {start}\n"));
    }
    if let Err(e) = crate::private_file::write(&note_path(data_dir), text) {
        tracing::warn!(error = %e, "could not note the engine's detached workers");
    }
}

/// Forgets the note once the engine's group has been stopped.
pub fn clear(data_dir: &Path) {
    let _ = std::fs::remove_file(note_path(data_dir));
}

/// What [`reclaim`] found and did.
#[derive(Debug, Clone, PartialEq)]
pub struct Reclaimed {
    pub pgid: i32,
    /// Processes of the group that were still running.
    pub processes: usize,
    /// SIGKILL was needed.
    pub killed: bool,
    /// None of them is left.
    pub gone: bool,
}

/// Stops what is left of the group noted by a previous agent, if anything, then forgets it.
pub async fn reclaim(data_dir: &Path) -> Option<Reclaimed> {
    reclaim_within(data_dir, GRACE).await
}

/// As [`reclaim`], with SIGKILL after `grace`.
async fn reclaim_within(data_dir: &Path, grace: Duration) -> Option<Reclaimed> {
    let text = std::fs::read_to_string(note_path(data_dir)).ok()?;
    clear(data_dir);
    let pair = |line: &str| {
        let mut f = line.split_whitespace().map(str::parse::<u64>);
        match (f.next(), f.next()) {
            (Some(Ok(pid)), Some(Ok(start))) => i32::try_from(pid).ok().map(|p| (p, start)),
            _ => None,
        }
    };
    let mut lines = text.lines();
    let Some((pgid, start_ticks)) = lines.next().and_then(pair) else {
        tracing::warn!(file = %note_path(data_dir).display(), "unreadable engine note ignored");
        return None;
    };
    let mut group = Leftover {
        pgid,
        leader_start: start_ticks,
        strays: lines.filter_map(pair).collect(),
    };
    let processes = group.members().len();
    if processes == 0 {
        return None;
    }
    tracing::warn!(
        pgid = group.pgid,
        processes,
        "a previous agent left its engine running; stopping it before serving"
    );
    let out = stop_sequence(
        &mut group,
        Signal::SIGTERM,
        grace,
        KILL_WAIT,
        Duration::from_millis(50),
    )
    .await;
    Some(Reclaimed {
        pgid: group.pgid,
        processes,
        killed: out.killed,
        gone: out.gone,
    })
}

/// The noted group as it is now.
struct Leftover {
    pgid: i32,
    leader_start: u64,
    /// Workers that had left the group (pid, start time).
    strays: Vec<(i32, u64)>,
}

impl Leftover {
    /// Running processes in the group. While any process has the group id as its group, the
    /// kernel hands that number to no new process; so if a process with the leader's pid runs
    /// but started at another time, the old group had ended and the number now belongs to
    /// someone else's group, which is left alone.
    fn members(&self) -> Vec<ProcStat> {
        let own = std::process::id() as i32;
        let all = scan_all();
        let reused = all
            .iter()
            .any(|p| p.pid == self.pgid && p.start_ticks != self.leader_start);
        let live = |p: &ProcStat| p.pid != own && p.state != 'Z' && p.state != 'X';
        // A stray is known by its pid and start time (a reused pid is someone else's).
        let mut members: Vec<ProcStat> = all
            .iter()
            .filter(|p| {
                live(p)
                    && ((!reused && p.pgrp == self.pgid)
                        || self.strays.contains(&(p.pid, p.start_ticks)))
            })
            .copied()
            .collect();
        // The strays' own children, to a fixed point.
        loop {
            let before = members.len();
            for p in &all {
                if live(p)
                    && !members.iter().any(|m| m.pid == p.pid)
                    && members
                        .iter()
                        .any(|m| m.pid == p.ppid && m.pgrp != self.pgid)
                {
                    members.push(*p);
                }
            }
            if members.len() == before {
                break;
            }
        }
        members
    }
}

impl GroupOps for Leftover {
    fn send(&mut self, sig: Signal) {
        for p in self.members() {
            if p.pgrp == self.pgid {
                let _ = killpg(Pid::from_raw(self.pgid), sig);
            } else {
                let _ = nix::sys::signal::kill(Pid::from_raw(p.pid), sig);
            }
        }
    }

    fn alive(&mut self) -> bool {
        !self.members().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_note_or_an_empty_group_is_nothing_to_do() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(reclaim(dir.path()).await, None);
        // A group id no process has (pid_max is at most 2^22).
        std::fs::write(dir.path().join(NOTE), "99999999 1\n").unwrap();
        assert_eq!(reclaim(dir.path()).await, None);
        assert!(!dir.path().join(NOTE).exists(), "the note is forgotten");
        std::fs::write(dir.path().join(NOTE), "garbage").unwrap();
        assert_eq!(reclaim(dir.path()).await, None);
    }

    /// Waits until `pid` ignores SIGTERM (bit 15 of SigIgn in /proc/PID/status): a loaded
    /// machine can take longer to start bash than the test takes to signal it.
    fn ignores_term(pid: i32) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let ignored = status
                .lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
                .unwrap_or(0);
            if ignored & (1 << (libc::SIGTERM - 1)) != 0 {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{pid} never trapped SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[tokio::test]
    async fn the_noted_group_is_stopped_but_a_reused_pid_is_not_touched() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        // A leader in a group of its own that ignores SIGTERM, as a stuck engine worker would.
        let mut child = std::process::Command::new("bash")
            .args(["-c", "trap '' TERM; while :; do sleep 0.1; done"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        // Until bash has run its trap, a SIGTERM would end it (and the test would see no kill).
        ignores_term(pid as i32);
        let start = read_stat(pid as i32).unwrap().start_ticks;

        // Another start time: an unrelated process that got the pid, left alone.
        std::fs::write(dir.path().join(NOTE), format!("{pid} {}\n", start + 1)).unwrap();
        assert_eq!(reclaim(dir.path()).await, None);
        assert!(
            child.try_wait().unwrap().is_none(),
            "a reused pid was signalled"
        );

        // A worker that left the group (setsid), noted while the engine ran.
        let mut stray = std::process::Command::new("setsid")
            .args(["bash", "-c", "trap '' TERM; while :; do sleep 0.1; done"])
            .spawn()
            .unwrap();
        let stray_pid = stray.id() as i32;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let stray_stat = loop {
            // setsid(1) forks when it is a group leader; here it is not, so the pid stays.
            if let Some(s) = read_stat(stray_pid).filter(|s| s.pgrp == stray_pid) {
                break s;
            }
            assert!(std::time::Instant::now() < deadline, "setsid did not take");
            std::thread::sleep(Duration::from_millis(20));
        };
        ignores_term(stray_pid);
        record(dir.path(), pid);
        record_strays(dir.path(), pid, &[(stray_pid, stray_stat.start_ticks)]);
        let grace = Duration::from_millis(300);
        let r = reclaim_within(dir.path(), grace)
            .await
            .expect("the noted group is found");
        assert_eq!(r.pgid, pid as i32);
        assert!(r.processes >= 2 && r.killed && r.gone, "{r:?}");
        assert!(child.wait().unwrap().code().is_none(), "ended by a signal");
        assert!(
            stray.wait().unwrap().code().is_none(),
            "the detached worker was ended too"
        );
        assert!(!dir.path().join(NOTE).exists());
    }
}
