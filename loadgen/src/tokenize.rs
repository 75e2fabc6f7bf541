//! Token counting for prompt shaping only: a local `tokenizer.json`, or the server's `/tokenize`
//! (sim/SGLang/vLLM take `{"prompt"}`, llama.cpp takes `{"content"}`). Reported token counts never
//! come from here; they come from the server's `usage`.

use std::path::PathBuf;

use bytes::Bytes;
use serde::Deserialize;

use crate::client::SetupClient;
use crate::error::LoadgenError;

/// Counts the tokens of a prompt the way the server will.
#[derive(Debug)]
pub(crate) enum Counter {
    Local {
        tokenizer: Box<tokenizers::Tokenizer>,
        path: PathBuf,
    },
    Server {
        client: SetupClient,
        url: String,
        style: Style,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// `{"prompt": …}` (fleetbench-sim, SGLang, vLLM).
    Prompt,
    /// `{"content": …, "add_special": true}` (llama.cpp, which otherwise leaves BOS out).
    Content,
}

#[derive(Deserialize)]
struct TokenizeResponse {
    #[serde(default)]
    tokens: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    count: Option<u64>,
}

impl Counter {
    pub fn local(path: PathBuf) -> Result<Counter, LoadgenError> {
        let tokenizer =
            tokenizers::Tokenizer::from_file(&path).map_err(|e| LoadgenError::Tokenizer {
                path: path.clone(),
                message: e.to_string(),
            })?;
        Ok(Counter::Local {
            tokenizer: Box::new(tokenizer),
            path,
        })
    }

    /// Probes the server's `/tokenize`; `Ok(None)` when it has none (404/405 to both shapes).
    pub async fn server(
        mut client: SetupClient,
        url: &str,
    ) -> Result<Option<Counter>, LoadgenError> {
        let mut last = String::new();
        for style in [Style::Prompt, Style::Content] {
            // llama.cpp answers `{"prompt"}` with an empty token list rather than an error.
            match tokenize(&mut client, style, "hello world").await {
                Ok(0) => last = format!("{style:?} style gave no tokens"),
                Ok(_) => {
                    return Ok(Some(Counter::Server {
                        client,
                        url: url.to_string(),
                        style,
                    }));
                }
                Err(TokErr::Unreachable(m)) => {
                    return Err(LoadgenError::Server {
                        url: url.to_string(),
                        message: format!("/tokenize: {m}"),
                    });
                }
                Err(TokErr::Rejected(m)) => last = m,
            }
        }
        tracing::warn!(
            url,
            "server has no usable /tokenize ({last}); prompt lengths are approximate"
        );
        Ok(None)
    }

    pub async fn count(&mut self, text: &str) -> Result<u32, LoadgenError> {
        match self {
            Counter::Local { tokenizer, path } => tokenizer
                .encode(text, true)
                .map(|e| e.len() as u32)
                .map_err(|e| LoadgenError::Tokenizer {
                    path: path.clone(),
                    message: e.to_string(),
                }),
            Counter::Server { client, url, style } => {
                tokenize(client, *style, text)
                    .await
                    .map_err(|e| LoadgenError::Server {
                        url: url.clone(),
                        message: match e {
                            TokErr::Unreachable(m) | TokErr::Rejected(m) => {
                                format!("/tokenize: {m}")
                            }
                        },
                    })
            }
        }
    }
}

enum TokErr {
    Unreachable(String),
    Rejected(String),
}

async fn tokenize(client: &mut SetupClient, style: Style, text: &str) -> Result<u32, TokErr> {
    let body = match style {
        Style::Prompt => serde_json::json!({ "prompt": text }),
        Style::Content => serde_json::json!({ "content": text, "add_special": true }),
    };
    let body = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
    let (status, bytes) = client
        .call(http::Method::POST, "/tokenize", body)
        .await
        .map_err(TokErr::Unreachable)?;
    if status != 200 {
        return Err(TokErr::Rejected(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        )));
    }
    let resp: TokenizeResponse =
        serde_json::from_slice(&bytes).map_err(|e| TokErr::Rejected(format!("bad JSON: {e}")))?;
    match (resp.count, resp.tokens) {
        (Some(c), _) => Ok(c as u32),
        (None, Some(t)) => Ok(t.len() as u32),
        (None, None) => Err(TokErr::Rejected(
            "answer has neither `count` nor `tokens`".into(),
        )),
    }
}
