//! The engine's process group as the kernel sees it (`/proc`), and the stop sequence.
//!
//! Engines fork workers (SGLang schedulers, vLLM EngineCore and workers) and some of those detach
//! or get reparented when their parent dies. The agent makes itself a child subreaper, so such
//! orphans are reparented to the agent rather than to init, and it remembers every process it has
//! seen in the group: a member is anything in the engine's process group, any descendant of a
//! member, or a process seen as a member before that is still alive.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// The fields of `/proc/<pid>/stat` the agent uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    /// User plus system CPU time, clock ticks.
    pub cpu_ticks: u64,
    /// Start time after boot, clock ticks: with the pid, identifies a process across pid reuse.
    pub start_ticks: u64,
    pub rss_pages: u64,
}

/// Parses one `/proc/<pid>/stat` line. The command name is in parentheses and may itself hold
/// spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<ProcStat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let pid = line[..open].trim().parse().ok()?;
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); field n is rest[n - 3].
    let field = |n: usize| rest.get(n - 3).copied();
    let num = |n: usize| field(n).and_then(|s| s.parse::<u64>().ok());
    Some(ProcStat {
        pid,
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        pgrp: field(5)?.parse().ok()?,
        cpu_ticks: num(14)? + num(15)?,
        start_ticks: num(22)?,
        rss_pages: num(24)?,
    })
}

/// Reads one process's stat; `None` when it has gone.
pub fn read_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Every process on the host.
pub fn scan_all() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter_map(read_stat)
        .collect()
}

/// Tracks the members of one engine run's process tree.
#[derive(Debug, Clone)]
pub struct GroupTracker {
    /// The engine's direct child; its pid is the group id.
    pub root: i32,
    /// pid -> start time of every process seen as a member.
    known: HashMap<i32, u64>,
    own_pid: i32,
}

impl GroupTracker {
    pub fn new(root: i32) -> Self {
        GroupTracker {
            root,
            known: HashMap::new(),
            own_pid: std::process::id() as i32,
        }
    }

    /// Members among `all` (a full `/proc` scan), remembered for later scans.
    pub fn members_of(&mut self, all: &[ProcStat]) -> Vec<ProcStat> {
        let mut members: HashMap<i32, ProcStat> = HashMap::new();
        for p in all {
            if p.pid == self.own_pid {
                continue;
            }
            let known_alive = self.known.get(&p.pid) == Some(&p.start_ticks);
            if p.pgrp == self.root || p.pid == self.root || known_alive {
                members.insert(p.pid, *p);
            }
        }
        // Descendants of members, to a fixed point (a detached worker keeps its parent link
        // until that parent dies).
        loop {
            let before = members.len();
            for p in all {
                if p.pid != self.own_pid
                    && !members.contains_key(&p.pid)
                    && members.contains_key(&p.ppid)
                {
                    members.insert(p.pid, *p);
                }
            }
            if members.len() == before {
                break;
            }
        }
        for p in members.values() {
            self.known.insert(p.pid, p.start_ticks);
        }
        let mut v: Vec<ProcStat> = members.into_values().collect();
        v.sort_by_key(|p| p.pid);
        v
    }

    /// Members now (full scan).
    pub fn scan(&mut self) -> Vec<ProcStat> {
        self.members_of(&scan_all())
    }

    /// Members that are still running (zombies have released everything but their pid).
    pub fn live(&mut self) -> Vec<ProcStat> {
        let members = self.scan();
        reap_orphan_zombies(&members, self.root);
        members
            .into_iter()
            .filter(|p| p.state != 'Z' && p.state != 'X')
            .collect()
    }

    /// Every pid ever seen as a member (for GPU-memory checks after the group is gone).
    pub fn known_pids(&self) -> Vec<u32> {
        self.known.keys().map(|p| *p as u32).collect()
    }

    /// Sends `sig` to the group and, by pid, to members that left it.
    pub fn signal(&mut self, sig: Signal) {
        let _ = killpg(Pid::from_raw(self.root), sig);
        for p in self.scan() {
            if p.pgrp != self.root && p.state != 'Z' {
                let _ = kill(Pid::from_raw(p.pid), sig);
            }
        }
    }
}

/// Reaps zombies that were reparented to the agent (as subreaper). The engine's own child is
/// left to tokio, which waits for it.
fn reap_orphan_zombies(members: &[ProcStat], root: i32) {
    let own = std::process::id() as i32;
    for p in members {
        if p.state == 'Z' && p.ppid == own && p.pid != root {
            let _ = nix::sys::wait::waitpid(
                Pid::from_raw(p.pid),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            );
        }
    }
}

/// Makes the agent the reaper of orphaned descendants, so an engine worker whose parent dies is
/// reparented to the agent (and stays visible and killable) instead of to init.
pub fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// What the stop sequence needs from a process group (a trait so the timing can be tested with
/// paused time and no processes).
pub trait GroupOps {
    fn send(&mut self, sig: Signal);
    /// Whether any member still runs.
    fn alive(&mut self) -> bool;
}

impl GroupOps for GroupTracker {
    fn send(&mut self, sig: Signal) {
        self.signal(sig);
    }
    fn alive(&mut self) -> bool {
        !self.live().is_empty()
    }
}

/// How a stop went.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopOutcome {
    /// SIGKILL was needed.
    pub killed: bool,
    /// Every member was gone at the end.
    pub gone: bool,
    pub took: Duration,
}

/// `stop_signal` to the group, wait up to `grace`, then SIGKILL and wait up to `kill_wait`.
pub async fn stop_sequence<G: GroupOps>(
    group: &mut G,
    stop_signal: Signal,
    grace: Duration,
    kill_wait: Duration,
    poll: Duration,
) -> StopOutcome {
    let start = Instant::now();
    let t0 = tokio::time::Instant::now();
    if !group.alive() {
        return StopOutcome {
            killed: false,
            gone: true,
            took: start.elapsed(),
        };
    }
    group.send(stop_signal);
    if wait_gone(group, t0 + grace, poll).await {
        return StopOutcome {
            killed: false,
            gone: true,
            took: start.elapsed(),
        };
    }
    group.send(Signal::SIGKILL);
    let gone = wait_gone(group, tokio::time::Instant::now() + kill_wait, poll).await;
    StopOutcome {
        killed: true,
        gone,
        took: start.elapsed(),
    }
}

async fn wait_gone<G: GroupOps>(
    group: &mut G,
    deadline: tokio::time::Instant,
    poll: Duration,
) -> bool {
    loop {
        if !group.alive() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(poll).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_handles_odd_names() {
        let line = "4242 (python3 (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 3 0 98765 1000000 2560 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.pgrp, 4242);
        assert_eq!(s.cpu_ticks, 200);
        assert_eq!(s.start_ticks, 98765);
        assert_eq!(s.rss_pages, 2560);
    }

    fn st(pid: i32, ppid: i32, pgrp: i32, start: u64) -> ProcStat {
        ProcStat {
            pid,
            state: 'S',
            ppid,
            pgrp,
            cpu_ticks: 0,
            start_ticks: start,
            rss_pages: 0,
        }
    }

    #[test]
    fn members_include_descendants_and_remembered_orphans() {
        let mut t = GroupTracker::new(100);
        let all = vec![
            st(100, 1, 100, 10),
            st(101, 100, 100, 11),
            st(102, 101, 555, 12), // left the group (setsid), still a descendant
            st(200, 1, 200, 13),   // unrelated
        ];
        let m: Vec<i32> = t.members_of(&all).iter().map(|p| p.pid).collect();
        assert_eq!(m, vec![100, 101, 102]);
        // Parent chain gone, 102 reparented to init: still a member because it was seen before.
        let all = vec![st(102, 1, 555, 12), st(200, 1, 200, 13)];
        let m: Vec<i32> = t.members_of(&all).iter().map(|p| p.pid).collect();
        assert_eq!(m, vec![102]);
        // pid 102 reused by another process (different start time): not a member.
        let all = vec![st(102, 1, 555, 99)];
        assert!(t.members_of(&all).is_empty());
    }

    struct Fake {
        sent: Vec<(Signal, Duration)>,
        dies_after_term: Option<Duration>,
        t0: tokio::time::Instant,
        alive: bool,
    }

    impl GroupOps for Fake {
        fn send(&mut self, sig: Signal) {
            self.sent.push((sig, self.t0.elapsed()));
            if sig == Signal::SIGKILL {
                self.alive = false;
            }
        }
        fn alive(&mut self) -> bool {
            if let (Some(d), Some((Signal::SIGTERM, at))) =
                (self.dies_after_term, self.sent.first())
                && self.t0.elapsed() >= *at + d
            {
                self.alive = false;
            }
            self.alive
        }
    }

    #[tokio::test(start_paused = true)]
    async fn term_then_kill_after_grace() {
        let mut g = Fake {
            sent: vec![],
            dies_after_term: None,
            t0: tokio::time::Instant::now(),
            alive: true,
        };
        let out = stop_sequence(
            &mut g,
            Signal::SIGTERM,
            Duration::from_secs(30),
            Duration::from_secs(5),
            Duration::from_millis(100),
        )
        .await;
        assert!(out.killed && out.gone);
        assert_eq!(g.sent[0], (Signal::SIGTERM, Duration::ZERO));
        assert_eq!(g.sent[1].0, Signal::SIGKILL);
        assert!(
            g.sent[1].1 >= Duration::from_secs(30) && g.sent[1].1 < Duration::from_millis(30_200),
            "{:?}",
            g.sent
        );
    }

    #[tokio::test(start_paused = true)]
    async fn clean_exit_within_grace_needs_no_kill() {
        let mut g = Fake {
            sent: vec![],
            dies_after_term: Some(Duration::from_secs(3)),
            t0: tokio::time::Instant::now(),
            alive: true,
        };
        let out = stop_sequence(
            &mut g,
            Signal::SIGTERM,
            Duration::from_secs(30),
            Duration::from_secs(5),
            Duration::from_millis(100),
        )
        .await;
        assert!(!out.killed && out.gone);
        assert_eq!(g.sent.len(), 1);
        assert!(
            g.t0.elapsed() >= Duration::from_secs(3)
                && g.t0.elapsed() < Duration::from_millis(3_200)
        );
    }
}
