//! The engine's output: a bounded ring of recent lines (for `StreamLogs` and crash
//! classification), a broadcast for followers, a log file per run and tracing events.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use fleetbench_proto::agentpb::{LogLine, LogStream};
use tokio::sync::broadcast;

/// Shared by the supervisor (writes) and the gRPC handlers (read, follow).
#[derive(Debug, Clone)]
pub struct LogHub {
    inner: Arc<Mutex<VecDeque<LogLine>>>,
    cap: usize,
    tx: broadcast::Sender<LogLine>,
}

impl LogHub {
    pub fn new(cap: usize) -> Self {
        let (tx, _) = broadcast::channel(1024);
        LogHub {
            inner: Arc::new(Mutex::new(VecDeque::with_capacity(cap.min(4096)))),
            cap,
            tx,
        }
    }

    pub fn push(&self, line: LogLine) {
        let mut ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if ring.len() == self.cap {
            ring.pop_front();
        }
        ring.push_back(line.clone());
        // Sent under the lock so a follower that took its tail under the same lock sees each
        // line exactly once.
        let _ = self.tx.send(line);
    }

    /// The last `n` lines, and (when `follow`) a receiver for the lines after them.
    pub fn tail(
        &self,
        n: usize,
        follow: bool,
    ) -> (Vec<LogLine>, Option<broadcast::Receiver<LogLine>>) {
        let ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let skip = ring.len().saturating_sub(n);
        let lines = ring.iter().skip(skip).cloned().collect();
        (lines, follow.then(|| self.tx.subscribe()))
    }

    /// The last `n` lines of run `run_id` as text (for crash classification).
    pub fn tail_text(&self, run_id: &str, n: usize) -> Vec<String> {
        let ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<String> = ring
            .iter()
            .rev()
            .filter(|l| l.run_id == run_id)
            .take(n)
            .map(|l| l.line.clone())
            .collect();
        v.reverse();
        v
    }
}

/// How much of one run's output its log file keeps. An engine at its default log level writes
/// a line per batch for as long as it runs; without a bound a long job fills the data disk
/// (and with it every later run's log and the agent's epoch file). Start-up facts, effective
/// arguments and early errors are at the head; the last lines before a crash are in the ring
/// (`StreamLogs`, crash classification) whatever the file holds.
pub const RUN_LOG_CAP: u64 = 64 * 1024 * 1024;

/// One run's log file: every line with its stream, unbuffered so a crash loses nothing, up to
/// [`RUN_LOG_CAP`] bytes, then one line saying it stopped there.
#[derive(Debug)]
pub struct RunLog {
    file: Option<std::fs::File>,
    written: u64,
    cap: u64,
}

impl RunLog {
    /// Creates the file and writes `header` (a stdout line) to it: an error when either fails,
    /// so a read-only or full data directory is found before the engine starts.
    pub fn create(path: &Path, header: &str) -> std::io::Result<RunLog> {
        Self::create_capped(path, header, RUN_LOG_CAP)
    }

    fn create_capped(path: &Path, header: &str, cap: u64) -> std::io::Result<RunLog> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = crate::private_file::append(path)?;
        writeln!(file, "O {header}")?;
        Ok(RunLog {
            file: Some(file),
            written: header.len() as u64 + 3,
            cap,
        })
    }

    pub fn write(&mut self, stream: LogStream, line: &str) {
        if let Some(f) = &mut self.file {
            let tag = if stream == LogStream::Stderr {
                "E"
            } else {
                "O"
            };
            let size = line.len() as u64 + 3;
            if self.written + size > self.cap {
                let _ = writeln!(
                    f,
                    "O # fleetbench-agent: this log stopped at {} bytes (its cap); later lines \
                     are in the agent's memory ring only (StreamLogs)",
                    self.written
                );
                self.file = None;
                return;
            }
            self.written += size;
            if writeln!(f, "{tag} {line}").is_err() {
                // A full disk must not stop the engine; the ring still has the lines.
                tracing::warn!("engine log file write failed; further lines kept in memory only");
                self.file = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(run: &str, s: &str) -> LogLine {
        LogLine {
            unix_ms: 0,
            stream: LogStream::Stdout as i32,
            line: s.into(),
            run_id: run.into(),
        }
    }

    #[test]
    fn a_run_log_stops_at_its_cap_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let mut log = RunLog::create_capped(&path, "# argv", 100).unwrap();
        for i in 0..50 {
            log.write(LogStream::Stderr, &format!("line {i}"));
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let body_lines: Vec<&str> = text.lines().collect();
        assert_eq!(body_lines[0], "O # argv");
        assert_eq!(body_lines[1], "E line 0");
        assert!(
            body_lines.last().unwrap().contains("this log stopped at"),
            "{text}"
        );
        let before_marker: usize = body_lines[..body_lines.len() - 1]
            .iter()
            .map(|l| l.len() + 1)
            .sum();
        assert!(
            before_marker <= 100,
            "{before_marker} bytes before the marker"
        );
        assert!(text.len() < 300, "{}", text.len());
    }

    #[test]
    fn ring_is_bounded_and_follow_sees_later_lines_once() {
        let hub = LogHub::new(3);
        for i in 0..5 {
            hub.push(line("a", &format!("l{i}")));
        }
        let (tail, rx) = hub.tail(10, true);
        assert_eq!(
            tail.iter().map(|l| l.line.as_str()).collect::<Vec<_>>(),
            ["l2", "l3", "l4"]
        );
        let mut rx = rx.unwrap();
        hub.push(line("b", "l5"));
        assert_eq!(rx.try_recv().unwrap().line, "l5");
        assert!(rx.try_recv().is_err());
        assert_eq!(hub.tail_text("a", 10), ["l3", "l4"]);
    }
}
