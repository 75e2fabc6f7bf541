//! Flag rules: which flags a kind accepts and what values they take.
//!
//! The agent refuses a flag its profile does not allow (INVALID_ARGUMENT naming it); the
//! controller checks job specs against the same rules so a typo is caught before any engine
//! restarts. The tables per kind are filled in by the engine-knowledge work.

use serde::{Deserialize, Serialize};

/// The type of a flag's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FlagType {
    /// A switch with no value (`--disable-cuda-graph`).
    Switch,
    /// An integer, optionally bounded.
    Int { min: Option<i64>, max: Option<i64> },
    /// A floating-point number, optionally bounded.
    Float { min: Option<f64>, max: Option<f64> },
    /// One of a fixed set of strings.
    Choice { values: Vec<String> },
    /// Any string.
    String,
}

/// One flag a caller may set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlagRule {
    pub name: String,
    #[serde(flatten)]
    pub ty: FlagType,
}

/// Why a flag was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FlagError {
    /// The flag is not in the allowed set.
    #[error("flag {flag:?} is not allowed (allowed: {allowed})")]
    NotAllowed { flag: String, allowed: String },
    /// The value does not fit the flag's type.
    #[error("flag {flag:?}: expected {expected}, got {got:?}")]
    BadValue {
        flag: String,
        expected: String,
        got: String,
    },
}
