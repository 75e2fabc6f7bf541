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

/// One run's log file: every line with its stream, unbuffered so a crash loses nothing.
#[derive(Debug)]
pub struct RunLog {
    file: Option<std::fs::File>,
}

impl RunLog {
    /// Creates the file and writes `header` (a stdout line) to it: an error when either fails,
    /// so a read-only or full data directory is found before the engine starts.
    pub fn create(path: &Path, header: &str) -> std::io::Result<RunLog> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = crate::private_file::append(path)?;
        writeln!(file, "O {header}")?;
        Ok(RunLog { file: Some(file) })
    }

    pub fn write(&mut self, stream: LogStream, line: &str) {
        if let Some(f) = &mut self.file {
            let tag = if stream == LogStream::Stderr {
                "E"
            } else {
                "O"
            };
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
