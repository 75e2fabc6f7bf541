//! How SGLang ends itself. When a child process (scheduler, detokenizer) fails, it sends the
//! parent SIGQUIT; the parent logs that a child failed and `kill_process_tree(os.getpid())`
//! SIGKILLs the whole tree, itself last. To its supervisor that looks like a SIGKILL from
//! outside, so without this a start-up failure (a KV pool too small, a missing kernel) read
//! as someone else's kill. The parent does the same when a child merely died of a signal, so a
//! SIGTERM sent to the group from outside also ends in SGLang's own SIGKILL: only a child's
//! own failure before it makes the kill SGLang's.

use crate::crash::OUTSIDE_SIGNALS;

/// What the parent logs on a child's SIGQUIT, right before it kills its tree (0.5.23:
/// `entrypoints/engine.py` while launching, `tokenizer_manager.py` once serving).
const CHILD_FAILED: [&str; 2] = [
    "Received sigquit from a child process. It usually means the child failed.",
    "It usually means one child failed.",
];

/// A child's failure of its own: its exception (`Scheduler hit an exception: Traceback ...`,
/// `DetokenizerManager hit an exception: ...`), or its death by a signal of its own making
/// (`Subprocess scheduler_0 (pid=N) crashed with exit code -11. Triggering SIGQUIT ...`, from
/// `utils/watchdog.py`).
fn child_failed_on_its_own(line: &str) -> bool {
    if line.contains(" hit an exception: ") {
        return true;
    }
    let Some((_, rest)) = line.split_once(") crashed with exit code ") else {
        return false;
    };
    let code = rest.split(|c: char| c != '-' && !c.is_ascii_digit()).next();
    match code.and_then(|c| c.parse::<i32>().ok()) {
        // multiprocessing's exit code of a child ended by a signal is minus the signal.
        Some(c) if c < 0 => !OUTSIDE_SIGNALS.contains(&-c),
        // A child that exited with a code failed on its own.
        Some(_) => true,
        None => false,
    }
}

/// Whether SGLang sent `signal` to itself: SIGKILL, after it said a child failed, with that
/// child's own failure logged before it. `lines` are without logger prefixes.
pub(super) fn killed_itself(lines: &[String], signal: i32) -> bool {
    if signal != 9 {
        return false;
    }
    let Some(said) = lines
        .iter()
        .position(|l| CHILD_FAILED.iter().any(|s| l.contains(s)))
    else {
        return false;
    };
    lines[..said].iter().any(|l| child_failed_on_its_own(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn a_childs_exception_then_the_parents_word_is_a_kill_of_its_own() {
        let log = lines(
            "Scheduler hit an exception: Traceback (most recent call last):\n\
             AssertionError: max_running_request is zero\n\
             Received sigquit from a child process. It usually means the child failed.\n\
             kill_process_tree called: parent_pid=7, include_parent=True, pid=7",
        );
        assert!(killed_itself(&log, 9));
        // Only SIGKILL is what kill_process_tree sends.
        assert!(!killed_itself(&log, 15));
        // Without the parent's word the kill is not known to be SGLang's.
        assert!(!killed_itself(&log[..2], 9));
        // The parent's word with no failure before it (a child's traceback after it is the
        // fallout of the kill).
        let later = [log[2].clone(), log[0].clone()];
        assert!(!killed_itself(&later, 9));
    }

    #[test]
    fn a_child_ended_by_a_signal_counts_only_when_the_signal_was_its_own() {
        let after = |code: &str| {
            lines(&format!(
                "Subprocess scheduler_0 (pid=20670) crashed with exit code {code}. Triggering \
                 SIGQUIT for cleanup...\n\
                 SIGQUIT received. signum=None, frame=None. It usually means one child failed."
            ))
        };
        // SIGSEGV, SIGABRT, or an exit code: the child's own failure.
        assert!(killed_itself(&after("-11"), 9));
        assert!(killed_itself(&after("-6"), 9));
        assert!(killed_itself(&after("1"), 9));
        // SIGTERM or SIGKILL of the child: from outside (the recorded SIGTERM to the group).
        assert!(!killed_itself(&after("-15"), 9));
        assert!(!killed_itself(&after("-9"), 9));
    }
}
