//! Why an engine died: a class (`oom`, `nan`, `python_exception`, ...), the exception and its
//! last frames where there is a Python traceback, and a one-line summary for humans.
//!
//! Evidence in the log beats the manner of death: an engine that printed a CUDA OOM traceback
//! and was then killed by its own launcher is `oom`, not `killed_by_signal`. Among log evidence
//! the most specific cause wins (OOM before NCCL before NaN before other CUDA errors before a
//! port clash before a plain Python exception; a lost peer rank before NCCL's own errors, whose
//! lines it shares), because the specific one is what a user acts
//! on. SGLang's NaN check surfaces as a CUDA device-side assert, hence NaN before CUDA.
//!
//! A termination signal from outside fleetbench (neither its agent nor the kernel's OOM
//! killer) is `killed_externally`, not the config's doing, unless the log names a specific
//! cause or the engine's own lines show it sent the signal itself (SGLang SIGKILLs its own
//! tree after a child's failure): then the traceback before it decides.

mod patterns;
mod traceback;

pub use traceback::{Traceback, parse_tracebacks};

use crate::EngineKind;
use crate::logs::strip_prefix;

/// How the engine process ended (or why the agent gave up on it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExitInfo {
    /// Exit code, when it exited normally.
    pub code: Option<i32>,
    /// Signal that ended it, when one did.
    pub signal: Option<i32>,
    /// It did not become ready before the start deadline.
    pub startup_timed_out: bool,
    /// It is (or was) alive but failed its health probe.
    pub unhealthy: bool,
    /// The port was already taken before the engine started.
    pub port_in_use_before_start: bool,
    /// The termination signal that ended it (`signal`) came from outside: the agent was not
    /// stopping it, and the kernel's OOM killer did not kill it. [`classify`] still asks the
    /// engine's log whether the engine sent it to itself.
    pub from_outside: bool,
    /// The kernel's OOM killer ended it (the agent's cgroup counted an OOM kill meanwhile).
    pub oom_killer: bool,
}

/// The class of a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashClass {
    /// Out of (GPU) memory.
    Oom,
    /// NaN/Inf detected in logits or activations.
    Nan,
    /// A Python exception with a traceback, of no more specific class.
    PythonException,
    /// A CUDA runtime/driver error (illegal address, device-side assert, ...).
    CudaError,
    /// An NCCL error or a collective watchdog timeout.
    Nccl,
    /// A peer rank of an engine spanning hosts was lost (its process exited, its host was cut
    /// off) or never joined: this rank died of another's end, not of its own config. Read
    /// from torch.distributed's and NCCL's remote-error lines.
    RankLost,
    /// The HTTP port was already in use.
    PortInUse,
    /// Not ready before the start deadline.
    StartupTimeout,
    /// Ended by a signal, no other evidence.
    KilledBySignal,
    /// Ended by a termination signal from outside fleetbench (not the agent, not the kernel's
    /// OOM killer), no evidence in the log: not the config's doing.
    KilledExternally,
    /// Exited with a code, no other evidence.
    ExitCode,
    /// Alive but failing its health probe, no other evidence.
    Unhealthy,
}

impl CrashClass {
    pub const ALL: [CrashClass; 12] = [
        CrashClass::Oom,
        CrashClass::Nan,
        CrashClass::PythonException,
        CrashClass::CudaError,
        CrashClass::Nccl,
        CrashClass::RankLost,
        CrashClass::PortInUse,
        CrashClass::StartupTimeout,
        CrashClass::KilledBySignal,
        CrashClass::KilledExternally,
        CrashClass::ExitCode,
        CrashClass::Unhealthy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CrashClass::Oom => "oom",
            CrashClass::Nan => "nan",
            CrashClass::PythonException => "python_exception",
            CrashClass::CudaError => "cuda_error",
            CrashClass::Nccl => "nccl",
            CrashClass::RankLost => "rank_lost",
            CrashClass::PortInUse => "port_in_use",
            CrashClass::StartupTimeout => "startup_timeout",
            CrashClass::KilledBySignal => "killed_by_signal",
            CrashClass::KilledExternally => "killed_externally",
            CrashClass::ExitCode => "exit_code",
            CrashClass::Unhealthy => "unhealthy",
        }
    }

    /// The class named `s` (`as_str` form).
    pub fn parse(s: &str) -> Option<CrashClass> {
        CrashClass::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for CrashClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified crash.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Crash {
    pub class: CrashClass,
    /// The Python exception type (`torch.OutOfMemoryError`), or the engine's error kind for
    /// non-Python engines (`llama.cpp: failed to load model`); empty when unknown.
    pub exception_type: String,
    /// The exception message or the log line that gave the evidence.
    pub message: String,
    /// The last frames of the traceback, innermost last: `path/file.py:123 in func: code`.
    pub frames: Vec<String>,
    /// One line for humans.
    pub summary: String,
}

/// How many frames a [`Crash`] keeps.
pub const MAX_FRAMES: usize = 6;

/// Signals that end a process from outside (SIGHUP, SIGINT, SIGQUIT, SIGKILL, SIGTERM); a
/// process's own faults end it with others (SIGSEGV, SIGABRT, SIGBUS, ...).
pub const OUTSIDE_SIGNALS: [i32; 5] = [1, 2, 3, 9, 15];

/// Classifies an engine's end from how it exited and the tail of its log (raw lines, logger
/// prefixes and all).
pub fn classify(kind: EngineKind, exit: &ExitInfo, log_tail: &[String]) -> Crash {
    let lines: Vec<String> = log_tail
        .iter()
        .map(|l| strip_prefix(l).message.into_owned())
        .collect();
    let tracebacks = parse_tracebacks(&lines);
    let engine = crate::engine::spec(kind);
    // What the engine's own lines say about an out-of-memory without a traceback.
    let oom_what = engine.oom_detail(&lines);
    // A signal the engine sent itself (SGLang kills its own tree after a child's failure) is
    // no outsider's: the failure before it decides.
    let killed_itself = exit.signal.is_some_and(|s| engine.killed_itself(&lines, s));
    let evidence = patterns::find_evidence(kind, &lines);

    let (class, exc, message, frames) = if exit.port_in_use_before_start {
        let msg = evidence
            .iter()
            .find(|e| e.class == CrashClass::PortInUse)
            .map(|e| e.line.clone())
            .unwrap_or_else(|| "the port was in use before the engine started".to_string());
        (CrashClass::PortInUse, String::new(), msg, Vec::new())
    } else if exit.oom_killer {
        // The kernel says so: host memory, whatever the log shows before the kill.
        let msg = "killed by the kernel's OOM killer (host memory)".to_string();
        (CrashClass::Oom, String::new(), msg, Vec::new())
    } else if let Some(ev) = patterns::strongest(&evidence).filter(|ev| match ev.class {
        // NCCL errors (a lost peer's too) after another rank's Python error are its fallout,
        // not its cause.
        CrashClass::Nccl | CrashClass::RankLost => {
            !traceback::primary(&tracebacks).is_some_and(|t| {
                t.end < ev.index
                    && !evidence
                        .iter()
                        .any(|e| e.class == ev.class && t.contains_line(e.index))
            })
        }
        // An error line without a traceback says less than a traceback does.
        CrashClass::ExitCode => tracebacks.is_empty(),
        _ => true,
    }) {
        // The traceback that carries the evidence, else the primary one.
        let tb = tracebacks
            .iter()
            .find(|t| t.contains_line(ev.index))
            .or_else(|| traceback::primary(&tracebacks));
        match (ev.class, tb) {
            (CrashClass::PortInUse | CrashClass::ExitCode, _) if ev.engine_error.is_some() => (
                ev.class,
                ev.engine_error.clone().unwrap_or_default(),
                ev.line.clone(),
                Vec::new(),
            ),
            (class, Some(tb)) => (
                class,
                tb.exception.clone(),
                tb.message.clone(),
                last_frames(tb),
            ),
            (CrashClass::Oom, None) if oom_what.is_some() => (
                CrashClass::Oom,
                oom_what.clone().unwrap_or_default(),
                ev.line.clone(),
                Vec::new(),
            ),
            (class, None) => (
                class,
                ev.engine_error.clone().unwrap_or_default(),
                ev.line.clone(),
                Vec::new(),
            ),
        }
    } else if exit.from_outside && exit.signal.is_some() && !killed_itself {
        // A traceback before it is what a signal handler or a served request printed, not why
        // it died: a specific cause in the log (above) is what would make it the config's.
        let msg = "killed from outside fleetbench (not by its agent, not by the kernel's OOM \
                   killer)"
            .to_string();
        (CrashClass::KilledExternally, String::new(), msg, Vec::new())
    } else if let Some(tb) = traceback::primary(&tracebacks) {
        (
            CrashClass::PythonException,
            tb.exception.clone(),
            tb.message.clone(),
            last_frames(tb),
        )
    } else {
        let class = if exit.startup_timed_out {
            CrashClass::StartupTimeout
        } else if exit.unhealthy && exit.code.is_none() && exit.signal.is_none() {
            CrashClass::Unhealthy
        } else if exit.signal.is_some() {
            CrashClass::KilledBySignal
        } else if exit.code.is_some() {
            CrashClass::ExitCode
        } else if exit.unhealthy {
            CrashClass::Unhealthy
        } else {
            CrashClass::ExitCode
        };
        let msg = patterns::last_error_line(&lines).unwrap_or_default();
        (class, String::new(), msg, Vec::new())
    };

    let summary = summarize(class, &exc, &message, &frames, exit, killed_itself);
    Crash {
        class,
        exception_type: exc,
        message,
        frames,
        summary,
    }
}

fn last_frames(tb: &Traceback) -> Vec<String> {
    let n = tb.frames.len().saturating_sub(MAX_FRAMES);
    tb.frames[n..].to_vec()
}

fn summarize(
    class: CrashClass,
    exc: &str,
    message: &str,
    frames: &[String],
    exit: &ExitInfo,
    killed_itself: bool,
) -> String {
    let mut s = class.as_str().to_string();
    let what = match (exc.is_empty(), message.is_empty()) {
        (false, false) => format!("{exc}: {message}"),
        (false, true) => exc.to_string(),
        (true, false) => message.to_string(),
        (true, true) => String::new(),
    };
    if !what.is_empty() {
        s.push_str(": ");
        s.push_str(&truncate(&what, 200));
    }
    if let Some(f) = frames.last() {
        let at = f.split(": ").next().unwrap_or(f);
        s.push_str(&format!(" (at {at})"));
    }
    let how = match (exit.signal, exit.code) {
        (Some(sig), _) if killed_itself => format!("killed itself with {}", signal_name(sig)),
        (Some(sig), _) => format!("killed by {}", signal_name(sig)),
        (None, Some(code)) => format!("exit code {code}"),
        (None, None) if exit.startup_timed_out => "not ready before the start deadline".into(),
        (None, None) if exit.unhealthy => "failing its health check".into(),
        (None, None) => String::new(),
    };
    if !how.is_empty() {
        s.push_str("; ");
        s.push_str(&how);
    }
    s
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max).collect();
    t.push('…');
    t
}

/// `SIGKILL (9)` for well-known signals, `signal 42` otherwise.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    format!("{name} ({sig})")
}

#[cfg(test)]
mod tests;
