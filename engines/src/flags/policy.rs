//! A profile's flag policy: every flag a caller gives is canonicalised before it is checked,
//! so that no spelling can get past a rule or override a pinned argument.
//!
//! Canonicalising means: `--a=b` becomes `--a` with value `b`; an alias becomes the flag's
//! canonical name (SGLang `--tensor-parallel-size` -> `--tp-size`, vLLM `-tp` ->
//! `--tensor-parallel-size`); for the Python engines, whose argparse accepts any unique prefix
//! of a long option, a prefix becomes the one flag it abbreviates (two or more: refused); and
//! `--no-x` counts as the same setting as `--x`. The agent then writes the canonical name into
//! the argv, so the engine sees exactly the flag that was checked. Two flags with one canonical
//! setting, or one that a profile's fixed arguments already set, are refused.
//!
//! Flags that can load code or files (`--trust-remote-code`, JSON config flags, LoRA loaders)
//! are known by name but off until a profile lists them in `allow_flags`.

use std::collections::BTreeSet;

use super::{EngineArgs, FlagError, FlagRule, FlagType, tables};
use crate::EngineKind;

/// The longest flag value accepted, in bytes.
pub const MAX_FLAG_VALUE_LEN: usize = 4096;
/// The longest flag name accepted, in bytes.
const MAX_FLAG_NAME_LEN: usize = 128;

#[derive(Debug, Clone)]
struct Entry {
    /// Canonical name first, then aliases.
    names: Vec<String>,
    ty: FlagType,
    /// A caller may give it.
    allowed: bool,
    /// It can load code or files: only `allow` turns it on.
    gated: bool,
    /// The engine's own argument list was read and does not hold it.
    absent: bool,
}

/// Which flags a caller may give one profile, under every spelling.
#[derive(Debug, Clone)]
pub struct FlagPolicy {
    kind: EngineKind,
    entries: Vec<Entry>,
    /// The engine's parser accepts unique prefixes of long options (Python argparse).
    abbrev: bool,
}

/// One flag after canonicalisation and checking.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The name written into the argv.
    pub canonical: String,
    pub value: Option<String>,
    /// Two flags with one key set the same thing (`--no-x` and `--x`).
    pub conflict_key: String,
}

fn conflict_key(canonical: &str) -> String {
    match canonical.strip_prefix("--no-") {
        Some(rest) => format!("--{rest}"),
        None => canonical.to_string(),
    }
}

/// Splits `--a=b`; `value` given as well is an error.
fn split_name(name: &str, value: Option<&str>) -> Result<(String, Option<String>), FlagError> {
    let name = name.trim();
    let malformed = |reason: &str| FlagError::Malformed {
        flag: name.chars().take(MAX_FLAG_NAME_LEN).collect(),
        reason: reason.into(),
    };
    let (n, v) = match name.split_once('=') {
        Some((_, _)) if value.is_some() => {
            return Err(malformed("a value is given both after '=' and on its own"));
        }
        Some((n, v)) => (n, Some(v.to_string())),
        None => (name, value.map(String::from)),
    };
    if n.len() > MAX_FLAG_NAME_LEN {
        return Err(malformed("longer than 128 bytes"));
    }
    if !n.starts_with('-') || n.trim_start_matches('-').is_empty() {
        return Err(malformed("a flag starts with '-' and has a name"));
    }
    if !n
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(malformed(
            "only letters, digits, '-', '_' and '.' may appear in a name",
        ));
    }
    Ok((n.to_string(), v))
}

impl FlagPolicy {
    /// The kind's built-in policy: its tuning flags allowed, its risky flags known but off.
    pub fn builtin(kind: EngineKind) -> FlagPolicy {
        let mut p = FlagPolicy::known(kind);
        for e in &mut p.entries {
            e.allowed = !e.gated;
        }
        p
    }

    /// Every flag of the kind known (so aliases and pins are recognised) and none allowed: a
    /// profile with `flags_mode = "replace"` starts here.
    pub fn known(kind: EngineKind) -> FlagPolicy {
        let mut entries: Vec<Entry> = tables::rows(kind)
            .into_iter()
            .map(|(names, ty)| Entry {
                names: names.iter().map(|n| n.to_string()).collect(),
                ty,
                allowed: false,
                gated: false,
                absent: false,
            })
            .collect();
        entries.extend(
            tables::gated_rows(kind)
                .into_iter()
                .map(|(names, ty)| Entry {
                    names: names.iter().map(|n| n.to_string()).collect(),
                    ty,
                    allowed: false,
                    gated: true,
                    absent: false,
                }),
        );
        FlagPolicy {
            kind,
            entries,
            abbrev: crate::engine::spec(kind).argparse_prefixes(),
        }
    }

    /// Adds or retypes a flag from a profile. A known flag keeps its aliases; a risky one stays
    /// off until [`allow`](Self::allow) names it.
    pub fn add_rule(&mut self, rule: FlagRule) -> Result<(), String> {
        let (name, v) = split_name(&rule.name, None).map_err(|e| e.to_string())?;
        if v.is_some() {
            return Err(format!("{:?}: a rule names a flag, without '='", rule.name));
        }
        match self.entries.iter_mut().find(|e| e.names.contains(&name)) {
            Some(e) => {
                e.ty = rule.ty;
                e.allowed = !e.gated || e.allowed;
            }
            None => self.entries.push(Entry {
                names: vec![name],
                ty: rule.ty,
                allowed: true,
                gated: false,
                absent: false,
            }),
        }
        Ok(())
    }

    /// Checks this policy against the engine's own argument list (`--help`, see
    /// [`EngineArgs`]): a known flag the build does not list is refused from now on, and the
    /// build's own aliases of a known flag are learnt (SGLang's `--tp`). Then the profile's
    /// `pass_through` names: flags unknown to fleetbench, or known flags whose values the build
    /// knows better, typed from the build's list (a switch, its choices, or a value). A
    /// pass-through name the build does not list is refused here.
    pub fn apply_engine_args(
        &mut self,
        args: &EngineArgs,
        pass_through: &[String],
    ) -> Result<(), String> {
        for e in &mut self.entries {
            match e.names.iter().find_map(|n| args.find(n)) {
                Some(o) => {
                    for n in &o.names {
                        if !e.names.contains(n) {
                            e.names.push(n.clone());
                        }
                    }
                }
                None => e.absent = true,
            }
        }
        for name in pass_through {
            let Some(o) = args.find(name) else {
                return Err(format!(
                    "{name:?} is not in the engine's own argument list: it cannot be passed through"
                ));
            };
            let ty = if !o.takes_value {
                FlagType::Switch
            } else if let Some(c) = &o.choices {
                FlagType::Choice { values: c.clone() }
            } else {
                FlagType::String
            };
            self.pass(name, o.names.clone(), ty)?;
        }
        Ok(())
    }

    /// The profile's `pass_through` names when the engine's own list could not be read: a
    /// known flag's choices widen to any value, an unknown flag takes a value or none.
    pub fn pass_through_unread(&mut self, pass_through: &[String]) -> Result<(), String> {
        for name in pass_through {
            let (names, ty) = match self.entries.iter().find(|e| e.names.contains(name)) {
                Some(e) => (
                    e.names.clone(),
                    match &e.ty {
                        FlagType::Choice { .. } => FlagType::String,
                        t => t.clone(),
                    },
                ),
                None => (vec![name.clone()], FlagType::Any),
            };
            self.pass(name, names, ty)?;
        }
        Ok(())
    }

    fn pass(&mut self, name: &str, names: Vec<String>, ty: FlagType) -> Result<(), String> {
        let (n, v) = split_name(name, None).map_err(|e| e.to_string())?;
        if v.is_some() || n != name {
            return Err(format!("{name:?}: pass_through names a flag, without '='"));
        }
        match self
            .entries
            .iter_mut()
            .find(|e| e.names.iter().any(|x| names.contains(x)))
        {
            Some(e) if e.gated => Err(format!(
                "{name:?} can load code or files: name it in allow_flags, not pass_through"
            )),
            Some(e) => {
                e.ty = ty;
                e.allowed = true;
                e.absent = false;
                for x in names {
                    if !e.names.contains(&x) {
                        e.names.push(x);
                    }
                }
                Ok(())
            }
            None => {
                // The canonical name is the one the profile wrote.
                let mut all = vec![name.to_string()];
                all.extend(names.into_iter().filter(|x| x != name));
                self.entries.push(Entry {
                    names: all,
                    ty,
                    allowed: true,
                    gated: false,
                    absent: false,
                });
                Ok(())
            }
        }
    }

    /// Turns on a flag by name (any of its spellings): how a profile allows a risky flag.
    pub fn allow(&mut self, name: &str) -> Result<(), String> {
        match self
            .entries
            .iter_mut()
            .find(|e| e.names.iter().any(|n| n == name))
        {
            Some(e) => {
                e.allowed = true;
                Ok(())
            }
            None => Err(format!(
                "{name:?} is not a known flag of kind {}: describe it under [[flags]] first",
                self.kind
            )),
        }
    }

    /// The flags a caller may give, one rule per spelling.
    pub fn rules(&self) -> Vec<FlagRule> {
        self.entries
            .iter()
            .filter(|e| e.allowed && !e.absent)
            .flat_map(|e| {
                e.names
                    .iter()
                    .map(|n| FlagRule::new(n.clone(), e.ty.clone()))
            })
            .collect()
    }

    /// The canonical names of the risky flags this policy has turned on.
    pub fn allowed_risky(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| e.gated && e.allowed)
            .map(|e| e.names[0].clone())
            .collect()
    }

    fn allowed_list(&self) -> String {
        let mut names: Vec<&str> = self
            .entries
            .iter()
            .filter(|e| e.allowed && !e.absent)
            .flat_map(|e| e.names.iter().map(String::as_str))
            .collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }

    /// The entry `name` means: an exact spelling, or for argparse engines a unique prefix of a
    /// long name.
    fn lookup(&self, name: &str) -> Result<&Entry, FlagError> {
        if let Some(e) = self
            .entries
            .iter()
            .find(|e| e.names.iter().any(|n| n == name))
        {
            return Ok(e);
        }
        if self.abbrev && name.starts_with("--") {
            let hits: Vec<&Entry> = self
                .entries
                .iter()
                .filter(|e| {
                    e.names
                        .iter()
                        .any(|n| n.starts_with("--") && n.starts_with(name))
                })
                .collect();
            match hits.as_slice() {
                [one] => return Ok(one),
                [] => {}
                many => {
                    return Err(FlagError::Ambiguous {
                        flag: name.to_string(),
                        candidates: many
                            .iter()
                            .map(|e| e.names[0].as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
            }
        }
        Err(FlagError::NotAllowed {
            flag: name.to_string(),
            allowed: self.allowed_list(),
        })
    }

    /// The setting `name` stands for when it appears in a profile's fixed arguments, known or
    /// not (`--port` is not a tuning flag but is still pinned).
    fn key_of(&self, name: &str) -> String {
        match self.lookup(name) {
            Ok(e) => conflict_key(&e.names[0]),
            Err(_) => conflict_key(name),
        }
    }

    /// The settings a profile's fixed arguments pin: a caller may not give any of them under
    /// any spelling.
    pub fn pinned(&self, fixed_args: &[String]) -> BTreeSet<String> {
        fixed_args
            .iter()
            .filter(|a| a.starts_with('-') && a.len() > 1 && a.parse::<f64>().is_err())
            .map(|a| {
                let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
                self.key_of(name)
            })
            .collect()
    }

    /// Canonicalises and checks one flag. `pinned` is what [`pinned`](Self::pinned) returned.
    pub fn check(
        &self,
        name: &str,
        value: Option<&str>,
        pinned: &BTreeSet<String>,
    ) -> Result<Checked, FlagError> {
        let (name, value) = split_name(name, value)?;
        if pinned.contains(&conflict_key(&name)) {
            return Err(FlagError::Pinned { flag: name });
        }
        let entry = self.lookup(&name)?;
        let canonical = entry.names[0].clone();
        let key = conflict_key(&canonical);
        if pinned.contains(&key) {
            return Err(FlagError::Pinned { flag: name });
        }
        if entry.absent {
            let hint = if canonical != name {
                format!(", nor {canonical}")
            } else {
                String::new()
            };
            return Err(FlagError::NotInEngine { flag: name, hint });
        }
        if !entry.allowed {
            return Err(if entry.gated {
                FlagError::Gated {
                    flag: name,
                    canonical,
                }
            } else {
                FlagError::NotAllowed {
                    flag: name,
                    allowed: self.allowed_list(),
                }
            });
        }
        if let Some(v) = &value {
            let bad = |expected: &str| FlagError::BadValue {
                flag: name.clone(),
                expected: expected.into(),
                got: v.chars().take(200).collect(),
            };
            if v.len() > MAX_FLAG_VALUE_LEN {
                return Err(bad("a value of at most 4096 bytes"));
            }
            if v.chars().any(|c| c.is_control()) {
                return Err(bad("a value without control characters"));
            }
            // The engine would read a value that starts with '-' as another flag.
            if v.starts_with('-') && v.parse::<f64>().is_err() {
                return Err(bad("a value that does not start with '-'"));
            }
        }
        entry
            .ty
            .check_value(value.as_deref())
            .map_err(|expected| FlagError::BadValue {
                flag: name.clone(),
                expected,
                got: value
                    .clone()
                    .unwrap_or_default()
                    .chars()
                    .take(200)
                    .collect(),
            })?;
        Ok(Checked {
            canonical,
            value,
            conflict_key: key,
        })
    }

    /// Checks a whole flag list: each flag, then that no two set the same thing.
    pub fn check_all<'a>(
        &self,
        flags: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
        pinned: &BTreeSet<String>,
    ) -> Result<Vec<Checked>, FlagError> {
        let mut out: Vec<Checked> = Vec::new();
        for (n, v) in flags {
            let c = self.check(n, v, pinned)?;
            if let Some(prev) = out.iter().find(|p| p.conflict_key == c.conflict_key) {
                return Err(FlagError::Repeated {
                    flag: n.trim().to_string(),
                    canonical: prev.canonical.clone(),
                });
            }
            out.push(c);
        }
        Ok(out)
    }
}
