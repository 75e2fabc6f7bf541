//! Building blocks of the built-in flag tables, and the queries over them. Each engine's own
//! rows live in its module (`crate::engine::<kind>::flags`); names and choices come from the
//! engines' own argument parsers. The agent reads the engine's own `--help` at start and
//! narrows or extends these (see `help`); they stand alone only when the engine cannot be
//! asked. Where a choice list changed between versions, the union is allowed: refusing a value
//! one supported version accepts would block a real experiment, while the engine itself still
//! rejects a value its version lacks.

use std::collections::BTreeMap;

use super::{FlagRule, FlagType, JsonKey};
use crate::EngineKind;
use crate::engine::spec;

/// One row: the flag's names (canonical first, then aliases) and its type.
pub(crate) type Row = (&'static [&'static str], FlagType);

pub(crate) fn int(min: i64) -> FlagType {
    FlagType::Int {
        min: Some(min),
        max: None,
    }
}

pub(crate) fn human_int(min: i64) -> FlagType {
    FlagType::HumanInt { min: Some(min) }
}

pub(crate) fn any_int() -> FlagType {
    FlagType::Int {
        min: None,
        max: None,
    }
}

pub(crate) fn float(min: f64, max: Option<f64>) -> FlagType {
    FlagType::Float {
        min: Some(min),
        max,
    }
}

pub(crate) fn choice(values: &[&str]) -> FlagType {
    FlagType::Choice {
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

pub(crate) const SW: FlagType = FlagType::Switch;
pub(crate) const STR: FlagType = FlagType::String;

pub(crate) fn json(keys: &[(&str, JsonKey)]) -> FlagType {
    FlagType::Json {
        keys: keys
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    }
}

pub(crate) fn jint(min: i64, max: i64) -> JsonKey {
    JsonKey::Int {
        min: Some(min),
        max: Some(max),
    }
}

pub(crate) fn jchoice(values: &[&str]) -> JsonKey {
    JsonKey::Choice {
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

/// Types a value may take in both Python engines' `--dtype`.
pub(crate) const DTYPES: &[&str] = &["auto", "half", "float16", "bfloat16", "float", "float32"];

/// The tuning flags of `kind`, from its module.
pub(super) fn rows(kind: EngineKind) -> Vec<Row> {
    spec(kind).flag_rows()
}

/// Flags that load code, weights or files, or take a JSON config that can name them. Known by
/// name (so no alias or prefix slips past) but off until a profile lists them in
/// `allow_flags`. A JSON flag's keys are a schema: only listed keys with values of their type.
pub(super) fn gated_rows(kind: EngineKind) -> Vec<Row> {
    spec(kind).gated_rows()
}

/// The risky flags both Python engines (SGLang, vLLM) share.
pub(crate) fn python_gated_rows() -> Vec<Row> {
    vec![
        (&["--trust-remote-code"][..], SW),
        (&["--enable-lora"][..], SW),
    ]
}

/// What replaced a deprecated flag of `kind`, if `name` is one: refused with the replacement
/// named, so that a spec moves on instead of breaking at the next engine upgrade.
pub fn replacement(kind: EngineKind, name: &str) -> Option<&'static str> {
    spec(kind)
        .deprecated()
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, r)| *r)
}

/// The tuning flags callers may set on a built-in kind, one rule per name (aliases included:
/// `-np` and `--parallel` both appear). `generic` has none: its profile lists them.
pub fn builtin_rules(kind: EngineKind) -> Vec<FlagRule> {
    rows(kind)
        .into_iter()
        .flat_map(|(names, ty)| names.iter().map(move |n| FlagRule::new(*n, ty.clone())))
        .collect()
}

/// The canonical spelling of a built-in flag (`-np` -> `--parallel`, `--tensor-parallel-size`
/// -> `--tp-size` for sglang), so two specs that spell one flag two ways can be compared.
/// `None` when the kind has no such flag.
pub fn canonical_flag(kind: EngineKind, name: &str) -> Option<&'static str> {
    rows(kind)
        .into_iter()
        .find(|(names, _)| names.contains(&name))
        .map(|(names, _)| names[0])
}
