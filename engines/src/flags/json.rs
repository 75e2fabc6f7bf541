//! JSON-valued flags (vLLM `--speculative-config`, `--compilation-config`, ...): the value is
//! parsed and every key checked against a schema of allowed keys, so a caller cannot smuggle a
//! draft-model path, a remote-code switch or a custom pass into an engine through one string.
//!
//! Only a flat object is accepted: scalar values and lists of integers. Nested objects are
//! where file paths and class names hide; a profile that needs one names a `string` flag instead.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The longest JSON value accepted, in bytes.
pub const MAX_JSON_LEN: usize = 4096;

/// The type of one key of a JSON-valued flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum JsonKey {
    Bool,
    Int {
        min: Option<i64>,
        max: Option<i64>,
    },
    Float {
        min: Option<f64>,
        max: Option<f64>,
    },
    Choice {
        values: Vec<String>,
    },
    /// A list of integers (`cudagraph_capture_sizes`), each in range, at most `max_len` long.
    IntList {
        min: Option<i64>,
        max: Option<i64>,
        max_len: usize,
    },
}

impl JsonKey {
    fn check(&self, v: &serde_json::Value) -> Result<(), String> {
        use serde_json::Value;
        let in_range = |n: i64, min: &Option<i64>, max: &Option<i64>| {
            min.is_none_or(|m| n >= m) && max.is_none_or(|m| n <= m)
        };
        match (self, v) {
            (JsonKey::Bool, Value::Bool(_)) => Ok(()),
            (JsonKey::Int { min, max }, Value::Number(n))
                if n.as_i64().is_some_and(|n| in_range(n, min, max)) =>
            {
                Ok(())
            }
            (JsonKey::Float { min, max }, Value::Number(n))
                if n.as_f64().is_some_and(|x| {
                    x.is_finite() && min.is_none_or(|m| x >= m) && max.is_none_or(|m| x <= m)
                }) =>
            {
                Ok(())
            }
            (JsonKey::Choice { values }, Value::String(s)) if values.iter().any(|c| c == s) => {
                Ok(())
            }
            (JsonKey::IntList { min, max, max_len }, Value::Array(items))
                if items.len() <= *max_len
                    && items
                        .iter()
                        .all(|i| i.as_i64().is_some_and(|n| in_range(n, min, max))) =>
            {
                Ok(())
            }
            _ => Err(self.expected()),
        }
    }

    /// How the type reads in an error message.
    pub fn expected(&self) -> String {
        let r = |min: String, max: String| match (min.is_empty(), max.is_empty()) {
            (false, false) => format!(" between {min} and {max}"),
            (false, true) => format!(" >= {min}"),
            (true, false) => format!(" <= {max}"),
            (true, true) => String::new(),
        };
        let s = |o: &Option<i64>| o.map(|v| v.to_string()).unwrap_or_default();
        match self {
            JsonKey::Bool => "true or false".into(),
            JsonKey::Int { min, max } => format!("an integer{}", r(s(min), s(max))),
            JsonKey::Float { min, max } => format!(
                "a number{}",
                r(
                    min.map(|v| v.to_string()).unwrap_or_default(),
                    max.map(|v| v.to_string()).unwrap_or_default()
                )
            ),
            JsonKey::Choice { values } => format!("one of {}", values.join(", ")),
            JsonKey::IntList { min, max, max_len } => {
                format!("a list of at most {max_len} integers{}", r(s(min), s(max)))
            }
        }
    }
}

/// Parses `value` as a flat JSON object and checks each key against `keys`. The error says
/// which key broke which rule, or lists the allowed keys.
pub fn check_json(keys: &BTreeMap<String, JsonKey>, value: &str) -> Result<(), String> {
    if value.len() > MAX_JSON_LEN {
        return Err(format!(
            "a JSON object of at most {MAX_JSON_LEN} bytes (got {} bytes)",
            value.len()
        ));
    }
    let parsed: serde_json::Value =
        serde_json::from_str(value).map_err(|e| format!("a JSON object ({e})"))?;
    let serde_json::Value::Object(map) = parsed else {
        return Err("a JSON object like {\"key\": value}".into());
    };
    let allowed = || {
        if keys.is_empty() {
            "none: the profile lists the keys it allows".to_string()
        } else {
            keys.keys().cloned().collect::<Vec<_>>().join(", ")
        }
    };
    for (k, v) in &map {
        let Some(rule) = keys.get(k) else {
            return Err(format!(
                "key {k:?} is not allowed (allowed keys: {})",
                allowed()
            ));
        };
        rule.check(v)
            .map_err(|e| format!("key {k:?}: {e}, got {v}"))?;
    }
    Ok(())
}
