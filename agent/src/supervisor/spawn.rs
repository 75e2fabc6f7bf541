//! Starting the engine: its own process group, no shell, output captured line by line.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use fleetbench_engines::EngineKind;
use fleetbench_proto::agentpb::{LogFact, LogLine, LogStream};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::logs::{LogHub, RunLog};
use crate::profile::LaunchPlan;

/// Longest line kept; the rest is cut (an engine printing a huge JSON blob must not eat memory).
const MAX_LINE: usize = 16 * 1024;

/// A started engine and the tasks reading its output.
#[derive(Debug)]
pub struct Started {
    pub child: tokio::process::Child,
    pub pid: u32,
    pub facts: mpsc::UnboundedReceiver<LogFact>,
    /// Ends when stdout and stderr are both closed and every line is processed.
    pub output_done: JoinHandle<()>,
    pub log_path: PathBuf,
}

/// Spawns `plan.argv` directly (no shell) in a new process group, with stdout and stderr
/// captured into `logs`, the run's log file and the kind's log parser.
pub fn spawn(
    plan: &LaunchPlan,
    run_id: &str,
    data_dir: &Path,
    logs: &LogHub,
) -> std::io::Result<Started> {
    let log_path = data_dir.join("runs").join(format!("{run_id}.log"));
    let mut run_log = RunLog::create(&log_path)?;
    run_log.write(LogStream::Stdout, &format!("# argv: {:?}", plan.argv));

    let mut cmd = tokio::process::Command::new(&plan.argv[0]);
    cmd.args(&plan.argv[1..])
        .envs(&plan.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    let agent_pid = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
    // functions (prctl, getppid, kill on itself).
    unsafe {
        cmd.pre_exec(move || {
            // Backstop if the agent dies without stopping the engine: SIGTERM (which engines
            // handle by stopping their workers) rather than SIGKILL (which orphans them).
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The agent may have died between fork and prctl.
            if libc::getppid() != agent_pid {
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id().unwrap_or(0);
    let (line_tx, line_rx) = mpsc::channel::<(LogStream, String)>(4096);
    if let Some(out) = child.stdout.take() {
        tokio::spawn(read_lines(out, LogStream::Stdout, line_tx.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(read_lines(err, LogStream::Stderr, line_tx));
    }
    let (fact_tx, facts) = mpsc::unbounded_channel();
    let output_done = tokio::spawn(process_lines(
        line_rx,
        plan.kind,
        run_log,
        logs.clone(),
        run_id.to_string(),
        fact_tx,
    ));
    Ok(Started {
        child,
        pid,
        facts,
        output_done,
        log_path,
    })
}

async fn read_lines<R: AsyncRead + Unpin>(
    pipe: R,
    stream: LogStream,
    tx: mpsc::Sender<(LogStream, String)>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, pipe);
    let mut buf = Vec::with_capacity(1024);
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                while matches!(buf.last(), Some(b'\n' | b'\r')) {
                    buf.pop();
                }
                buf.truncate(MAX_LINE);
                let line = String::from_utf8_lossy(&buf).into_owned();
                if tx.send((stream, line)).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn process_lines(
    mut rx: mpsc::Receiver<(LogStream, String)>,
    kind: EngineKind,
    mut run_log: RunLog,
    logs: LogHub,
    run_id: String,
    facts: mpsc::UnboundedSender<LogFact>,
) {
    let mut parser = fleetbench_engines::logs::parser(kind);
    while let Some((stream, line)) = rx.recv().await {
        run_log.write(stream, &line);
        tracing::info!(target: "fleetbench_agent::engine_log", run_id = %run_id, stream = stream.as_str_name(), "{line}");
        for f in parser.parse_line(&line) {
            let _ = facts.send(LogFact {
                key: f.key,
                value: f.value,
            });
        }
        logs.push(LogLine {
            unix_ms: fleetbench_proto::now_unix_ms(),
            stream: stream as i32,
            line,
            run_id: run_id.clone(),
        });
    }
}
