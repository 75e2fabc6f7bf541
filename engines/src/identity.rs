use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::EngineKind;

/// A config's identity: a hash of its canonical engine spec (kind, model, flags sorted by name,
/// env sorted by key). Two specs that differ only in the order of their flags share an id.
///
/// `flags` are `(name, value)` with `None` for a switch. Returns 12 hex characters.
pub fn config_id(
    kind: EngineKind,
    model: &str,
    flags: &[(String, Option<String>)],
    env: &BTreeMap<String, String>,
) -> String {
    let mut sorted: Vec<_> = flags.iter().collect();
    sorted.sort();
    let canonical = serde_json::json!({
        "kind": kind.as_str(),
        "model": model,
        "flags": sorted,
        "env": env,
    });
    let digest = Sha256::digest(canonical.to_string().as_bytes());
    hex::encode(&digest[..6])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_order_does_not_change_identity_but_values_do() {
        let env = BTreeMap::new();
        let a = vec![
            ("--tp-size".to_string(), Some("2".to_string())),
            ("--disable-cuda-graph".to_string(), None),
        ];
        let b: Vec<_> = a.iter().rev().cloned().collect();
        assert_eq!(
            config_id(EngineKind::Sglang, "m", &a, &env),
            config_id(EngineKind::Sglang, "m", &b, &env)
        );
        let c = vec![("--tp-size".to_string(), Some("4".to_string()))];
        assert_ne!(
            config_id(EngineKind::Sglang, "m", &a, &env),
            config_id(EngineKind::Sglang, "m", &c, &env)
        );
        assert_ne!(
            config_id(EngineKind::Sglang, "m", &a, &env),
            config_id(EngineKind::Vllm, "m", &a, &env)
        );
    }
}
