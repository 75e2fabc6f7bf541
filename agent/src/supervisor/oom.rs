//! The kernel's OOM kills in the agent's memory cgroup, which its engines share: how an
//! engine's SIGKILL from the kernel (host memory: the config's doing) is told from one sent by
//! an operator or another program (not the config's doing, and not to decide a verdict).
//!
//! cgroup v2 counts them in `memory.events` (`oom_kill N`), v1 in `memory.oom_control`. Where
//! neither is readable (no memory controller, a root cgroup without the files) the count is
//! unknown and an outside SIGKILL cannot be told from the kernel's: the agent then calls it
//! external, which costs a retry on another host, never a wrong verdict.

use std::path::{Path, PathBuf};

/// The OOM kills counted so far in this process's memory cgroup, if readable.
pub(crate) fn kills() -> Option<u64> {
    let table = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    counters(&table, Path::new("/sys/fs/cgroup"))
        .into_iter()
        .find_map(|f| read_count(&f))
}

/// The files that may hold the count, most specific first: the v1 memory hierarchy's, then the
/// unified hierarchy's (mounted at the root, or beside v1 under `unified/`).
fn counters(table: &str, root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in table.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            out.insert(0, root.join("memory").join(rel).join("memory.oom_control"));
        } else if controllers.is_empty() {
            out.push(root.join(rel).join("memory.events"));
            out.push(root.join("unified").join(rel).join("memory.events"));
        }
    }
    out
}

fn read_count(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_counters_are_found_and_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let v1 = "4:memory:/jobs/a\n0::/\n";
        let files = counters(v1, root);
        assert_eq!(files[0], root.join("memory/jobs/a/memory.oom_control"));
        std::fs::create_dir_all(root.join("memory/jobs/a")).unwrap();
        std::fs::write(
            root.join("memory/jobs/a/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        )
        .unwrap();
        assert_eq!(files.iter().find_map(|f| read_count(f)), Some(3));

        let v2 = "0::/system.slice/fleetbench-agent.service\n";
        let files = counters(v2, root);
        let unit = root.join("system.slice/fleetbench-agent.service");
        assert_eq!(files[0], unit.join("memory.events"));
        std::fs::create_dir_all(&unit).unwrap();
        std::fs::write(
            unit.join("memory.events"),
            "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\noom_group_kill 0\n",
        )
        .unwrap();
        assert_eq!(files.iter().find_map(|f| read_count(f)), Some(1));
        // Nothing readable: unknown, not zero.
        assert_eq!(
            counters("0::/gone\n", root)
                .iter()
                .find_map(|f| read_count(f)),
            None
        );
    }
}
