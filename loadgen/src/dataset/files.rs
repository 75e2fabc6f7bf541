//! Dataset file formats (traces: `mooncake`). Every error names the file and, for line formats,
//! the line.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::LoadgenError;

fn read(path: &Path) -> Result<String, LoadgenError> {
    std::fs::read_to_string(path).map_err(|source| LoadgenError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn bad(path: &Path, line: Option<usize>, message: impl Into<String>) -> LoadgenError {
    LoadgenError::Dataset {
        path: PathBuf::from(path),
        line,
        message: message.into(),
    }
}

#[derive(Deserialize)]
struct Conversation {
    #[serde(default)]
    conversations: Vec<Turn>,
}

#[derive(Deserialize)]
struct Turn {
    #[serde(default)]
    from: String,
    #[serde(default)]
    value: String,
}

/// ShareGPT: `(first human turn, the reply to it)` of every conversation that has both.
pub(super) fn sharegpt(path: &Path) -> Result<Vec<(String, String)>, LoadgenError> {
    let convs: Vec<Conversation> = serde_json::from_str(&read(path)?)
        .map_err(|e| bad(path, None, format!("not a ShareGPT JSON array: {e}")))?;
    let pairs: Vec<(String, String)> = convs
        .into_iter()
        .filter_map(|c| {
            let mut turns = c.conversations.into_iter();
            let human = turns.find(|t| t.from == "human" || t.from == "user")?;
            let reply = turns.next()?;
            (!human.value.trim().is_empty()).then_some((human.value, reply.value))
        })
        .collect();
    if pairs.is_empty() {
        return Err(bad(
            path,
            None,
            "no conversation with a human turn followed by a reply",
        ));
    }
    Ok(pairs)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JsonlLine {
    Text(String),
    Object {
        #[serde(alias = "text")]
        prompt: String,
        #[serde(default, alias = "max_tokens", alias = "output_length")]
        output_len: Option<u32>,
    },
}

/// JSONL prompts: `(prompt, optional output length)` per non-empty line.
pub(super) fn jsonl(path: &Path) -> Result<Vec<(String, Option<u32>)>, LoadgenError> {
    let mut out = Vec::new();
    for (i, line) in read(path)?.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<JsonlLine>(line) {
            Ok(JsonlLine::Text(t)) => out.push((t, None)),
            Ok(JsonlLine::Object { prompt, output_len }) => out.push((prompt, output_len)),
            Err(_) => {
                return Err(bad(
                    path,
                    Some(i + 1),
                    "expected a JSON string or an object with \"prompt\"",
                ));
            }
        }
    }
    if out.is_empty() {
        return Err(bad(path, None, "no prompts"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(content: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content.as_bytes()).unwrap();
        f
    }

    #[test]
    fn jsonl_accepts_strings_and_objects_and_names_bad_lines() {
        let f = file("\"a b\"\n{\"prompt\":\"c\",\"output_len\":5}\n\n{\"text\":\"d\"}\n");
        let v = jsonl(f.path()).unwrap();
        assert_eq!(
            v,
            vec![
                ("a b".into(), None),
                ("c".into(), Some(5)),
                ("d".into(), None)
            ]
        );
        let f = file("\"ok\"\n{\"nope\":1}\n");
        let err = jsonl(f.path()).unwrap_err().to_string();
        assert!(err.contains(":2:"), "{err}");
    }

    #[test]
    fn sharegpt_pairs() {
        let f = file(
            r#"[{"conversations":[{"from":"human","value":"hi there"},{"from":"gpt","value":"hello you"}]},{"conversations":[{"from":"human","value":"alone"}]}]"#,
        );
        assert_eq!(
            sharegpt(f.path()).unwrap(),
            vec![("hi there".to_string(), "hello you".to_string())]
        );
        let f = file("{}");
        assert!(
            sharegpt(f.path())
                .unwrap_err()
                .to_string()
                .contains("ShareGPT")
        );
    }
}
