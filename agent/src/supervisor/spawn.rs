//! Starting the engine: its own process group, no shell, output captured line by line.

use fleetbench_proto::Word;
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
/// SGLang 0.5.23 prints its effective arguments as one `server_args={...}` line of about 19 KiB
/// (measured on the real server): a cut line cannot be parsed, so the limit sits well above it.
const MAX_LINE: usize = 64 * 1024;

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

/// Why the engine could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The run's log file could not be created: the data directory is read-only or full (the
    /// host's fault, not the config's).
    #[error("cannot create the engine's log {path}: {source}")]
    RunLog {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The engine's scratch directory (its TMPDIR and caches, under the data directory) could
    /// not be made: the host's fault too.
    #[error("cannot prepare the engine's scratch directory {path}: {source}")]
    Scratch {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The program could not be executed.
    #[error("could not start {program}: {source}")]
    Exec {
        program: String,
        source: std::io::Error,
    },
}

/// Spawns `plan.argv` directly (no shell) in a new process group, with stdout and stderr
/// captured into `logs`, the run's log file and the kind's log parser.
pub fn spawn(
    plan: &LaunchPlan,
    run_id: &str,
    data_dir: &Path,
    logs: &LogHub,
) -> Result<Started, SpawnError> {
    let log_path = data_dir.join("runs").join(format!("{run_id}.log"));
    let run_log =
        RunLog::create(&log_path, &format!("# argv: {:?}", plan.argv)).map_err(|source| {
            SpawnError::RunLog {
                path: log_path.clone(),
                source,
            }
        })?;

    let mut cmd = tokio::process::Command::new(&plan.argv[0]);
    scratch_env(&mut cmd, plan, data_dir, run_id).map_err(|source| SpawnError::Scratch {
        path: scratch_dir(data_dir, run_id),
        source,
    })?;
    if let Some(c) = &plan.run_as {
        // The engine user's own HOME and names, not root's (unless the profile sets them).
        cmd.env("HOME", &c.home)
            .env("USER", &c.user)
            .env("LOGNAME", &c.user);
    }
    for name in &plan.withheld_env {
        if !plan.env.contains_key(name) {
            cmd.env_remove(name);
        }
    }
    cmd.args(&plan.argv[1..])
        .envs(&plan.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    let agent_pid = std::process::id() as libc::pid_t;
    // Switched in the closure below rather than with Command::uid/gid: std switches before
    // running pre_exec closures and has no stable way to set supplementary groups, which must
    // be set while still root; the parent-death signal is set after the switch, which clears it.
    let run_as = plan.run_as.as_ref().map(crate::engine_user::SwitchIds::of);
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
    // functions (setgroups, setresgid, setresuid, prctl, getppid, kill on itself) on memory
    // allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(ids) = &run_as {
                ids.apply()?;
            }
            // Backstop if the agent dies without stopping the engine: SIGTERM (which engines
            // handle by stopping their workers) rather than SIGKILL (which orphans them).
            // The signal fires when the forking *thread* ends: spawns happen on a tokio worker
            // thread, which lives as long as the runtime (the agent never uses block_in_place).
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
    let mut child = cmd.spawn().map_err(|source| SpawnError::Exec {
        program: plan.argv[0].clone(),
        source,
    })?;
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

/// The run's own scratch directory (removed when the run is released): where a Python engine's
/// temporary files and compile caches go instead of `/tmp` and the user's home. Short on
/// purpose: vLLM and SGLang bind ZeroMQ IPC sockets at `$TMPDIR/<uuid>`, and a Unix socket path
/// holds at most 107 bytes (a longer one fails the start with `ZMQError: ipc path ... is longer
/// than 107 characters`). Under the data directory when that fits, else under the system's
/// temporary directory; the same function finds it again for the removal.
pub(crate) fn scratch_dir(data_dir: &Path, run_id: &str) -> PathBuf {
    // The run id ends in its random part (`TIME-CONFIG-RANDOM`).
    let short: String = run_id
        .rsplit('-')
        .next()
        .unwrap_or(run_id)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(12)
        .collect();
    let under_data = data_dir.join("s").join(&short);
    // "/tmp/" and a 36-character uuid after it must fit in 107 bytes.
    if under_data.as_os_str().len() + 5 + 36 <= 107 {
        under_data
    } else {
        std::env::temp_dir().join(format!("fleetbench-{short}"))
    }
}

/// Variables that, left unset, make vLLM and SGLang (and the torch, Triton and inductor
/// libraries under them) write outside the run: `~/.cache/vllm`, `/tmp/vllm_dist_<hex>` (left
/// behind after every vLLM run), `/tmp/torchinductor_<user>`, `~/.triton`.
pub(crate) const SCRATCH_VARS: [(&str, &str); 5] = [
    ("TMPDIR", "tmp"),
    ("VLLM_CACHE_ROOT", "vllm-cache"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor-cache"),
    ("TRITON_CACHE_DIR", "triton-cache"),
    ("XDG_CACHE_HOME", "cache"),
];

/// Points a Python engine's temporary and cache directories into [`scratch_dir`] (a profile's
/// own `env` setting one of them wins). Other kinds write nothing of the sort.
fn scratch_env(
    cmd: &mut tokio::process::Command,
    plan: &LaunchPlan,
    data_dir: &Path,
    run_id: &str,
) -> std::io::Result<()> {
    if !fleetbench_engines::defaults(plan.kind).python_scratch {
        return Ok(());
    }
    let dir = scratch_dir(data_dir, run_id);
    for (var, sub) in SCRATCH_VARS {
        if plan.env.contains_key(var) {
            continue;
        }
        let path = dir.join(sub);
        std::fs::create_dir_all(&path)?;
        cmd.env(var, &path);
    }
    if let Some(c) = &plan.run_as {
        // The engine user writes there, not the agent's.
        for entry in std::iter::once(dir.clone()).chain(
            SCRATCH_VARS
                .iter()
                .map(|(_, sub)| dir.join(sub))
                .filter(|p| p.exists()),
        ) {
            std::os::unix::fs::chown(&entry, Some(c.uid), Some(c.gid))?;
        }
    }
    Ok(())
}

/// Splits a pipe into lines at `\n` or `\r` (progress bars redraw with `\r` only, and would
/// otherwise grow one endless line), each cut at [`MAX_LINE`] bytes.
async fn read_lines<R: AsyncRead + Unpin>(
    pipe: R,
    stream: LogStream,
    tx: mpsc::Sender<(LogStream, String)>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, pipe);
    let mut line: Vec<u8> = Vec::with_capacity(1024);
    let mut after_cr = false;
    loop {
        let (consumed, delim) = match reader.fill_buf().await {
            Ok([]) | Err(_) => {
                if !line.is_empty() {
                    let _ = tx
                        .send((stream, String::from_utf8_lossy(&line).into_owned()))
                        .await;
                }
                return;
            }
            Ok(buf) => match buf.iter().position(|b| *b == b'\n' || *b == b'\r') {
                Some(i) => {
                    let room = MAX_LINE.saturating_sub(line.len());
                    line.extend_from_slice(&buf[..i.min(room)]);
                    (i + 1, Some(buf[i]))
                }
                None => {
                    let room = MAX_LINE.saturating_sub(line.len());
                    line.extend_from_slice(&buf[..buf.len().min(room)]);
                    (buf.len(), None)
                }
            },
        };
        reader.consume(consumed);
        let Some(d) = delim else { continue };
        // An empty piece after '\r' is the '\n' of "\r\n" or a repeated redraw, not a line;
        // a blank line ended by '\n' alone is kept (tracebacks have them).
        let emit = !line.is_empty() || (d == b'\n' && !after_cr);
        after_cr = d == b'\r';
        if emit {
            let text = String::from_utf8_lossy(&line).into_owned();
            line.clear();
            if tx.send((stream, text)).await.is_err() {
                return;
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
        tracing::info!(target: "fleetbench_agent::engine_log", run_id = %run_id, stream = stream.word(), "{line}");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_split_at_newline_and_carriage_return() {
        let input: &[u8] = b"a\r\nb\n\nLoading 10%\rLoading 50%\rLoading 100%\ndone";
        let (tx, mut rx) = mpsc::channel(16);
        read_lines(input, LogStream::Stdout, tx).await;
        let mut got = Vec::new();
        while let Some((_, l)) = rx.recv().await {
            got.push(l);
        }
        assert_eq!(
            got,
            [
                "a",
                "b",
                "",
                "Loading 10%",
                "Loading 50%",
                "Loading 100%",
                "done"
            ]
        );
    }

    #[tokio::test]
    async fn long_lines_are_cut() {
        let long = vec![b'x'; MAX_LINE * 3 + 5];
        let mut input = long.clone();
        input.extend_from_slice(b"\nnext\n");
        let (tx, mut rx) = mpsc::channel(16);
        read_lines(&input[..], LogStream::Stderr, tx).await;
        assert_eq!(rx.recv().await.unwrap().1.len(), MAX_LINE);
        assert_eq!(rx.recv().await.unwrap().1, "next");
    }
}
