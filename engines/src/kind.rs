use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Declares [`EngineKind`] with its words, so that the enum, [`EngineKind::ALL`] and
/// [`EngineKind::as_str`] cannot drift apart: a kind is one line here, and the compiler then
/// asks for its module's arm in `crate::engine::spec`.
macro_rules! engine_kinds {
    ($($(#[$meta:meta])* $variant:ident => $word:literal,)+) => {
        /// A built-in engine kind. Each has its own module (`crate::engine`): defaults, flag
        /// tables, log parser, crash messages, metric names and cache reset.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(rename_all = "lowercase")]
        pub enum EngineKind {
            $($(#[$meta])* $variant,)+
        }

        impl EngineKind {
            /// Every kind, in declaration order.
            pub const ALL: [EngineKind; [$($word),+].len()] = [$(EngineKind::$variant),+];

            /// The kind's word (as in a profile's `kind` and a job spec's `engine`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(EngineKind::$variant => $word,)+
                }
            }
        }
    };
}

engine_kinds! {
    /// SGLang.
    Sglang => "sglang",
    /// vLLM.
    Vllm => "vllm",
    /// llama.cpp's `llama-server`.
    Llamacpp => "llamacpp",
    /// fleetbench's simulated engine.
    Sim => "sim",
    /// A program fleetbench has no module for; its profile says everything.
    Generic => "generic",
    /// SGLang's router (`sglang-router`): not an engine but the front of a deployment, routing
    /// to replicas the agent names from `EngineSpec.workers`.
    #[serde(rename = "sglang-router")]
    SglangRouter => "sglang-router",
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kind name that is not one of the built-in kinds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown engine kind {0:?} (expected one of {expected})",
    expected = EngineKind::ALL.map(EngineKind::as_str).join(", ")
)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_through_str_and_serde() {
        for kind in EngineKind::ALL {
            assert_eq!(kind.as_str().parse::<EngineKind>(), Ok(kind));
            let json = serde_json::to_string(&kind).expect("serialises");
            assert_eq!(json, format!("\"{kind}\""));
        }
        let e = "tgi".parse::<EngineKind>().unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown engine kind \"tgi\" (expected one of sglang, vllm, llamacpp, sim, generic, \
             sglang-router)"
        );
    }
}
