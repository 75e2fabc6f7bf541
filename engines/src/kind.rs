use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A built-in engine kind. Each has its own defaults, log parsers and metric names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Sglang,
    Vllm,
    Llamacpp,
    Sim,
    Generic,
}

impl EngineKind {
    pub const ALL: [EngineKind; 5] = [
        EngineKind::Sglang,
        EngineKind::Vllm,
        EngineKind::Llamacpp,
        EngineKind::Sim,
        EngineKind::Generic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Sglang => "sglang",
            EngineKind::Vllm => "vllm",
            EngineKind::Llamacpp => "llamacpp",
            EngineKind::Sim => "sim",
            EngineKind::Generic => "generic",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kind name that is not one of the built-in kinds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown engine kind {0:?} (expected one of sglang, vllm, llamacpp, sim, generic)")]
pub struct UnknownKind(pub String);

impl FromStr for EngineKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EngineKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind(s.to_string()))
    }
}
