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
    /// An integer that may carry a size suffix, as vLLM's `human_readable_int` reads it:
    /// `8k` = 8000 and `25.6k` = 25600 (k, m, g, t: powers of 1000), `8K` = 8192 (K, M, G, T:
    /// powers of 1024, whole numbers only), and `8Ki` = 8192 (SGLang's IEC spelling).
    HumanInt { min: Option<i64> },
    /// A floating-point number, optionally bounded.
    Float { min: Option<f64>, max: Option<f64> },
    /// One of a fixed set of strings.
    Choice { values: Vec<String> },
    /// Any string.
    String,
    /// A flag passed through from the engine's own argument list whose form fleetbench does
    /// not know (the engine could not be asked): with or without a value.
    Any,
    /// A flat JSON object whose keys must be listed (see [`json`]).
    Json {
        #[serde(default)]
        keys: std::collections::BTreeMap<String, JsonKey>,
    },
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
    /// A flag that can load or run code or files, which the profile does not name.
    #[error(
        "flag {flag:?} is off: it can load code or files, so a profile must name {canonical:?} in allow_flags"
    )]
    Gated { flag: String, canonical: String },
    /// An abbreviation that fits more than one flag.
    #[error("flag {flag:?} is ambiguous: it abbreviates {candidates}")]
    Ambiguous { flag: String, candidates: String },
    /// A flag the profile's fixed arguments set, under any spelling.
    #[error("flag {flag:?} is set by the agent from the profile and cannot be given")]
    Pinned { flag: String },
    /// The same setting twice (an alias, a prefix, or `--no-x` after `--x`).
    #[error("flag {flag:?} is given more than once (as {canonical:?})")]
    Repeated { flag: String, canonical: String },
    /// A flag the engine's own argument list does not hold: this build would refuse it.
    #[error(
        "flag {flag:?} is not accepted by this engine build (its own --help does not list it{hint})"
    )]
    NotInEngine { flag: String, hint: String },
    /// A name that is not a flag at all (no leading '-', whitespace, too long).
    #[error("flag {flag:?} is malformed: {reason}")]
    Malformed { flag: String, reason: String },
}

pub mod help;
pub mod json;
mod policy;
pub(crate) mod tables;

pub use help::{EngineArgs, HelpOption};
pub use json::{JsonKey, check_json};
pub use policy::{Checked, FlagPolicy, MAX_FLAG_VALUE_LEN};

pub use crate::engine::sglang::flags::{
    SGLANG_ATTENTION_BACKENDS, SGLANG_KV_CACHE_DTYPES, SGLANG_MOE_A2A_BACKENDS,
    SGLANG_MOE_RUNNER_BACKENDS,
};
pub use tables::{builtin_rules, canonical_flag, replacement};

use crate::EngineKind;

impl FlagRule {
    /// A rule for `name` with type `ty`.
    pub fn new(name: impl Into<String>, ty: FlagType) -> Self {
        FlagRule {
            name: name.into(),
            ty,
        }
    }
}

impl FlagType {
    /// How the type reads in an error message ("an integer >= 1", "one of a, b").
    pub fn expected(&self) -> String {
        match self {
            FlagType::Switch => "no value (the flag is a switch)".to_string(),
            FlagType::Int { min, max } => format!("an integer{}", bounds(min, max)),
            FlagType::HumanInt { min } => format!(
                "an integer{} (a suffix k/m/g/t or K/M/G/T may scale it: 8k, 16K)",
                bounds(min, &None)
            ),
            FlagType::Float { min, max } => format!("a number{}", bounds(min, max)),
            FlagType::Choice { values } => format!("one of {}", values.join(", ")),
            FlagType::String => "a value".to_string(),
            FlagType::Any => "a value or none".to_string(),
            FlagType::Json { keys } if keys.is_empty() => {
                "a JSON object (the profile allows no keys yet)".to_string()
            }
            FlagType::Json { keys } => format!(
                "a JSON object with keys from {}",
                keys.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// Checks `value` (`None` = given without a value); the error says what was expected.
    pub(crate) fn check_value(&self, value: Option<&str>) -> Result<(), String> {
        match (self, value) {
            (FlagType::Json { keys }, Some(v)) => check_json(keys, v),
            (ty, v) if ty.accepts(v) => Ok(()),
            (FlagType::Switch, _) => Err(self.expected()),
            (ty, None) => Err(format!("{} (the flag needs a value)", ty.expected())),
            (ty, Some(_)) => Err(ty.expected()),
        }
    }

    /// Whether `value` fits this type (`None` = the flag was given without a value).
    fn accepts(&self, value: Option<&str>) -> bool {
        match (self, value) {
            (FlagType::Switch, v) => v.is_none(),
            (FlagType::Any, v) => v.is_none_or(|v| !v.is_empty()),
            (_, None) => false,
            (FlagType::HumanInt { min }, Some(v)) => {
                human_int(v).is_some_and(|n| min.is_none_or(|m| n >= m))
            }
            (FlagType::Int { min, max }, Some(v)) => v
                .trim()
                .parse::<i64>()
                .is_ok_and(|n| min.is_none_or(|m| n >= m) && max.is_none_or(|m| n <= m)),
            (FlagType::Float { min, max }, Some(v)) => v.trim().parse::<f64>().is_ok_and(|x| {
                x.is_finite() && min.is_none_or(|m| x >= m) && max.is_none_or(|m| x <= m)
            }),
            (FlagType::Choice { values }, Some(v)) => values.iter().any(|c| choice_matches(c, v)),
            (FlagType::String, Some(v)) => !v.is_empty(),
            (FlagType::Json { keys }, Some(v)) => check_json(keys, v).is_ok(),
        }
    }
}

/// The value of an integer with an optional size suffix (see [`FlagType::HumanInt`]).
pub fn human_int(v: &str) -> Option<i64> {
    let v = v.trim();
    if let Ok(n) = v.parse::<i64>() {
        return Some(n);
    }
    let split = v.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, suffix) = v.split_at(split);
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') {
        return None;
    }
    let decimal = |p: u32| 1000f64.powi(p as i32);
    let binary = |p: u32| 1024i64.checked_pow(p);
    let (scale, whole_only) = match suffix {
        "k" => (decimal(1), false),
        "m" => (decimal(2), false),
        "g" => (decimal(3), false),
        "t" => (decimal(4), false),
        "K" | "Ki" => (binary(1)? as f64, true),
        "M" | "Mi" => (binary(2)? as f64, true),
        "G" | "Gi" => (binary(3)? as f64, true),
        "T" | "Ti" => (binary(4)? as f64, true),
        _ => return None,
    };
    if whole_only {
        let n: i64 = num.parse().ok()?;
        return n.checked_mul(scale as i64);
    }
    let x: f64 = num.parse().ok()?;
    let n = (x * scale).trunc();
    (n.is_finite() && n < i64::MAX as f64).then_some(n as i64)
}

/// A choice written `name=N` accepts `name=` followed by a non-negative integer (the
/// simulator's `--fault hang-after-requests=5`); any other choice must match exactly.
fn choice_matches(choice: &str, value: &str) -> bool {
    if let Some(prefix) = choice.strip_suffix("=N") {
        return value
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('='))
            .is_some_and(|n| n.parse::<u64>().is_ok());
    }
    choice == value
}

fn bounds<T: std::fmt::Display>(min: &Option<T>, max: &Option<T>) -> String {
    match (min, max) {
        (Some(a), Some(b)) => format!(" between {a} and {b}"),
        (Some(a), None) => format!(" >= {a}"),
        (None, Some(b)) => format!(" <= {b}"),
        (None, None) => String::new(),
    }
}

/// Checks one flag against `rules`: the flag must be listed and its value must fit its type.
/// `value` is `None` for a flag given without a value (a switch).
///
/// The error names the flag and says what was expected, e.g.
/// `flag "--max-running-requests": expected an integer >= 1, got "lots"`.
pub fn check_flag(rules: &[FlagRule], name: &str, value: Option<&str>) -> Result<(), FlagError> {
    let Some(rule) = rules.iter().find(|r| r.name == name) else {
        let mut names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        return Err(FlagError::NotAllowed {
            flag: name.to_string(),
            allowed: if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            },
        });
    };
    rule.ty
        .check_value(value)
        .map_err(|expected| FlagError::BadValue {
            flag: name.to_string(),
            expected,
            got: value.unwrap_or_default().to_string(),
        })
}

/// Checks a whole flag set against the built-in rules of `kind`, stopping at the first error.
/// `generic` has no built-in rules: every flag is refused (its profile must list them).
pub fn check_flags(kind: EngineKind, flags: &[(String, Option<String>)]) -> Result<(), FlagError> {
    let rules = builtin_rules(kind);
    flags
        .iter()
        .try_for_each(|(n, v)| check_flag(&rules, n, v.as_deref()))
}

#[cfg(test)]
mod tests;
