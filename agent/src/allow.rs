//! What a caller may name besides flags: models, environment variables and dataset files.
//! Each is an allowlist of exact names (or paths under configured roots) because the agent runs
//! engines with access to the GPUs, the models and the network: a model repository with remote
//! code, an `LD_PRELOAD` or an `NCCL_DEBUG_FILE` would turn one call into code execution or a
//! file write on the host.

use std::path::{Component, Path, PathBuf};

use fleetbench_engines::EngineKind;
use fleetbench_engines::flags::{FlagRule, FlagType};
use serde::Deserialize;

/// The longest model name or path accepted.
const MAX_MODEL_LEN: usize = 1024;
/// The longest environment value accepted.
const MAX_ENV_VALUE_LEN: usize = 1024;
/// The most environment variables one request may set.
pub(crate) const MAX_ENV_VARS: usize = 64;

/// Models a profile may load: exact names (a repository such as `Qwen/Qwen3-8B`, or a path),
/// and paths under roots. Empty: none (every built-in profile of a real engine starts so; the
/// simulator's, whose model is only a label, allows any).
#[derive(Debug, Clone, Default)]
pub struct ModelAllow {
    pub names: Vec<String>,
    /// Canonical (symlinks resolved) directories a model path must lie under.
    pub roots: Vec<PathBuf>,
    /// `models = ["*"]`: any model. A profile names it on purpose; never a default.
    pub any: bool,
}

impl ModelAllow {
    /// Checks `model`; the error says why (the caller adds profile and list).
    pub fn check(&self, model: &str) -> Result<(), String> {
        if model.len() > MAX_MODEL_LEN {
            return Err(format!("longer than {MAX_MODEL_LEN} bytes"));
        }
        if model.starts_with('-') || model.chars().any(|c| c.is_control()) {
            return Err("a model name neither starts with '-' nor holds control characters".into());
        }
        if self.any || self.names.iter().any(|n| n == model) {
            return Ok(());
        }
        let path = Path::new(model);
        if !self.roots.is_empty() && path.is_absolute() {
            if path.components().any(|c| c == Component::ParentDir) {
                return Err("a model path may not contain '..'".into());
            }
            let real = path.canonicalize().map_err(|e| format!("{model}: {e}"))?;
            if self.roots.iter().any(|r| real.starts_with(r)) {
                return Ok(());
            }
            return Err(format!("{} is not under a model root", real.display()));
        }
        Err("not in the profile's models and not a path under its model_roots".into())
    }

    /// How the list reads in an error message.
    pub fn describe(&self) -> String {
        if self.any {
            return "any".into();
        }
        let mut parts: Vec<String> = self.names.clone();
        parts.extend(self.roots.iter().map(|r| format!("{}/...", r.display())));
        if parts.is_empty() {
            "none: list models or model_roots in the profile".into()
        } else {
            parts.join(", ")
        }
    }
}

/// One `allowed_env` entry as written: a bare name (plain values only) or a rule with a type
/// (`{ name = "NCCL_DEBUG", type = "choice", values = ["WARN", "INFO"] }`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawEnvEntry {
    Name(String),
    Rule(FlagRule),
}

/// An environment variable a caller may set, by exact name, with the values it may take.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvRule {
    pub name: String,
    /// `String` means a plain value: letters, digits and `_ . , : = + -`, no '/'.
    pub ty: FlagType,
}

impl EnvRule {
    fn new(name: &str, ty: FlagType) -> EnvRule {
        EnvRule {
            name: name.into(),
            ty,
        }
    }

    /// Validates an `allowed_env` entry of profile `field`.
    pub fn from_raw(entry: RawEnvEntry) -> Result<EnvRule, String> {
        let (name, ty) = match entry {
            RawEnvEntry::Name(n) => (n, FlagType::String),
            RawEnvEntry::Rule(r) => (r.name, r.ty),
        };
        if name.contains('*') {
            return Err(format!(
                "{name:?}: prefixes are not allowed, list exact names (a prefix such as NCCL_* \
                 admits NCCL_DEBUG_FILE, which writes files)"
            ));
        }
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(format!("{name:?}: a variable name uses A-Z, 0-9 and '_'"));
        }
        if matches!(ty, FlagType::Switch | FlagType::Json { .. } | FlagType::Any) {
            return Err(format!("{name:?}: an environment value cannot be a {ty:?}"));
        }
        Ok(EnvRule { name, ty })
    }

    /// Checks a value; the error says what was expected.
    pub fn check(&self, value: &str) -> Result<(), String> {
        if value.len() > MAX_ENV_VALUE_LEN {
            return Err(format!("a value of at most {MAX_ENV_VALUE_LEN} bytes"));
        }
        match &self.ty {
            FlagType::String => {
                let plain = value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.,:=+-".contains(c));
                if plain {
                    Ok(())
                } else {
                    Err("a plain value (letters, digits, '_.,:=+-'; no paths)".into())
                }
            }
            ty => fleetbench_engines::flags::check_flag(
                &[FlagRule::new(self.name.clone(), ty.clone())],
                &self.name,
                Some(value),
            )
            .map_err(|_| ty.expected()),
        }
    }
}

/// The environment a caller may set on a built-in profile: exact names with value rules, from
/// the kind's module. Nothing that names a file, a library or a Python module.
pub fn default_env_rules(kind: EngineKind) -> Vec<EnvRule> {
    fleetbench_engines::defaults(kind)
        .allowed_env
        .into_iter()
        .map(|(name, ty)| EnvRule::new(name, ty))
        .collect()
}

/// Directories dataset files must lie under; empty: no file datasets at all.
#[derive(Debug, Clone, Default)]
pub struct DatasetRoots(pub Vec<PathBuf>);

impl DatasetRoots {
    /// The canonical path of `path` when it is a file under a root; the error says why not.
    pub fn check(&self, path: &str) -> Result<PathBuf, String> {
        if self.0.is_empty() {
            return Err(format!(
                "{path:?}: this agent reads no dataset files (configure dataset_roots)"
            ));
        }
        let p = Path::new(path);
        if path.len() > MAX_MODEL_LEN || !p.is_absolute() {
            return Err(format!("{path:?} is not an absolute path"));
        }
        if p.components().any(|c| c == Component::ParentDir) {
            return Err(format!("{path:?} may not contain '..'"));
        }
        let real = p.canonicalize().map_err(|e| format!("{path:?}: {e}"))?;
        if !real.is_file() {
            return Err(format!("{path:?} is not a file"));
        }
        if self.0.iter().any(|r| real.starts_with(r)) {
            Ok(real)
        } else {
            Err(format!(
                "{path:?} is outside the dataset roots ({})",
                self.0
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    }
}

/// Canonicalises configured root directories; each must exist.
pub fn canonical_roots(
    field: &str,
    roots: &[PathBuf],
    base: &Path,
) -> Result<Vec<PathBuf>, String> {
    roots
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let abs = if r.is_absolute() {
                r.clone()
            } else {
                base.join(r)
            };
            abs.canonicalize()
                .map_err(|e| format!("{field}[{i}]: {}: {e}", abs.display()))
        })
        .collect()
}
