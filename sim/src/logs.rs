//! SGLang-style log lines on stderr: `[2026-11-29 14:00:00 TP0] message`.

use std::io::Write as _;

/// Writes one log line as SGLang's scheduler (rank TP0) would.
pub fn info(msg: &str) {
    line("TP0", msg);
}

/// Writes one log line without a rank tag, as SGLang's HTTP server does.
pub fn server(msg: &str) {
    let ts = chrono::Local::now().format("%Y-%m-%d %H:%M:%S");
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "[{ts}] {msg}");
}

fn line(rank: &str, msg: &str) {
    let ts = chrono::Local::now().format("%Y-%m-%d %H:%M:%S");
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "[{ts} {rank}] {msg}");
}

/// Writes raw text (tracebacks) to stderr and flushes it.
pub fn raw(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}
