//! OpenAI-compatible response bodies, rendered from per-request templates so that a streamed
//! token costs a few copies, not a JSON serialisation.

use bytes::{BufMut, BytesMut};

/// Which endpoint a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Completions,
    Chat,
}

/// The words the simulator "generates"; one word is one token (the `/tokenize` rule).
const WORDS: [&str; 32] = [
    " the",
    " model",
    " answer",
    " is",
    " simulated",
    " token",
    " stream",
    " of",
    " fleet",
    " bench",
    " and",
    " a",
    " server",
    " batch",
    " with",
    " latency",
    " to",
    " GPU",
    " in",
    " cache",
    " for",
    " each",
    " request",
    " step",
    " on",
    " by",
    " tuning",
    " flag",
    " run",
    " result",
    " level",
    " time",
];

/// The text of output token `k` of a request seeded with `salt` (`"NaN"` under the NaN fault).
pub fn token_text(k: u32, salt: u64, nan: bool) -> &'static str {
    if nan {
        return " NaN";
    }
    let i = (k as u64).wrapping_mul(7).wrapping_add(salt) % WORDS.len() as u64;
    WORDS[i as usize]
}

/// Prompt/completion counts for a `usage` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt: u32,
    pub completion: u32,
}

/// Pre-rendered pieces of one response.
#[derive(Debug, Clone)]
pub struct Renderer {
    api: Api,
    /// `{"id":"…","object":"…","created":…,"model":"…"` without the closing brace.
    meta: Vec<u8>,
    /// `data: ` + meta + `,"choices":[{"index":0,` + the field opener.
    event_head: Vec<u8>,
    salt: u64,
    nan: bool,
    prompt_tokens: u32,
    continuous_usage: bool,
    include_usage: bool,
}

fn push_u32(buf: &mut BytesMut, mut n: u32) {
    let mut tmp = [0u8; 10];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.put_slice(&tmp[i..]);
}

fn put_usage(buf: &mut BytesMut, u: Usage) {
    buf.put_slice(b"\"usage\":{\"prompt_tokens\":");
    push_u32(buf, u.prompt);
    buf.put_slice(b",\"completion_tokens\":");
    push_u32(buf, u.completion);
    buf.put_slice(b",\"total_tokens\":");
    push_u32(buf, u.prompt + u.completion);
    buf.put_slice(b"}");
}

/// Per-request options read from the request body.
#[derive(Debug, Clone)]
pub struct StreamOpts {
    pub include_usage: bool,
    pub continuous_usage: bool,
}

impl Renderer {
    /// Templates for request number `id`.
    pub fn new(
        api: Api,
        id: u64,
        created: u64,
        model_json: &str,
        prompt_tokens: u32,
        opts: &StreamOpts,
        nan: bool,
    ) -> Self {
        let (prefix, object) = match api {
            Api::Completions => ("cmpl", "text_completion"),
            Api::Chat => ("chatcmpl", "chat.completion.chunk"),
        };
        let meta = format!(
            "{{\"id\":\"{prefix}-{id:016x}\",\"object\":\"{object}\",\"created\":{created},\"model\":{model_json}"
        )
        .into_bytes();
        let mut event_head = b"data: ".to_vec();
        event_head.extend_from_slice(&meta);
        event_head.extend_from_slice(b",\"choices\":[{\"index\":0,");
        Renderer {
            api,
            meta,
            event_head,
            salt: id,
            nan,
            prompt_tokens,
            continuous_usage: opts.continuous_usage,
            include_usage: opts.include_usage,
        }
    }

    /// Bytes an event takes, for reserving buffers.
    pub fn event_size_hint(&self) -> usize {
        self.event_head.len() + 140
    }

    /// Appends the SSE event of output token `k` (0-based).
    pub fn push_token(&self, buf: &mut BytesMut, k: u32) {
        self.push_tokens(buf, k, k + 1);
    }

    /// Appends one SSE event carrying output tokens `from..to` (SGLang's `--stream-interval`).
    pub fn push_tokens(&self, buf: &mut BytesMut, from: u32, to: u32) {
        buf.put_slice(&self.event_head);
        match self.api {
            Api::Completions => buf.put_slice(b"\"text\":\""),
            Api::Chat if from == 0 => {
                buf.put_slice(b"\"delta\":{\"role\":\"assistant\",\"content\":\"")
            }
            Api::Chat => buf.put_slice(b"\"delta\":{\"content\":\""),
        }
        for k in from..to {
            buf.put_slice(token_text(k, self.salt, self.nan).as_bytes());
        }
        match self.api {
            Api::Completions => buf.put_slice(b"\",\"logprobs\":null,\"finish_reason\":null}]"),
            Api::Chat => buf.put_slice(b"\"},\"logprobs\":null,\"finish_reason\":null}]"),
        }
        self.close_event(buf, to);
    }

    fn close_event(&self, buf: &mut BytesMut, completion: u32) {
        if self.continuous_usage {
            buf.put_slice(b",");
            put_usage(
                buf,
                Usage {
                    prompt: self.prompt_tokens,
                    completion,
                },
            );
        }
        buf.put_slice(b"}\n\n");
    }

    /// Appends the finish event, the usage event (when asked for) and `data: [DONE]`.
    pub fn push_tail(&self, buf: &mut BytesMut, completion: u32, finish: &str) {
        buf.put_slice(&self.event_head);
        match self.api {
            Api::Completions => {
                buf.put_slice(b"\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"")
            }
            Api::Chat => buf.put_slice(b"\"delta\":{},\"logprobs\":null,\"finish_reason\":\""),
        }
        buf.put_slice(finish.as_bytes());
        buf.put_slice(b"\"}]");
        self.close_event(buf, completion);
        if self.include_usage {
            buf.put_slice(b"data: ");
            buf.put_slice(&self.meta);
            buf.put_slice(b",\"choices\":[],");
            put_usage(
                buf,
                Usage {
                    prompt: self.prompt_tokens,
                    completion,
                },
            );
            buf.put_slice(b"}\n\n");
        }
        buf.put_slice(b"data: [DONE]\n\n");
    }

    /// The whole non-streamed JSON response.
    pub fn full_response(&self, completion: u32, finish: &str) -> BytesMut {
        let mut text = String::new();
        for k in 0..completion {
            text.push_str(token_text(k, self.salt, self.nan));
        }
        let text = serde_json::to_string(&text).unwrap_or_else(|_| "\"\"".into());
        let mut buf = BytesMut::with_capacity(text.len() + 400);
        let meta = String::from_utf8_lossy(&self.meta);
        // Non-streamed objects are named without the `.chunk` suffix.
        let meta = meta.replace("chat.completion.chunk", "chat.completion");
        buf.put_slice(meta.as_bytes());
        match self.api {
            Api::Completions => {
                buf.put_slice(b",\"choices\":[{\"index\":0,\"text\":");
                buf.put_slice(text.as_bytes());
                buf.put_slice(b",\"logprobs\":null,\"finish_reason\":\"");
            }
            Api::Chat => {
                buf.put_slice(
                    b",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":",
                );
                buf.put_slice(text.as_bytes());
                buf.put_slice(b"},\"logprobs\":null,\"finish_reason\":\"");
            }
        }
        buf.put_slice(finish.as_bytes());
        buf.put_slice(b"\"}],");
        put_usage(
            &mut buf,
            Usage {
                prompt: self.prompt_tokens,
                completion,
            },
        );
        buf.put_slice(b"}");
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(buf: &[u8]) -> Vec<serde_json::Value> {
        let s = std::str::from_utf8(buf).unwrap();
        s.split("\n\n")
            .filter(|e| !e.is_empty() && *e != "data: [DONE]")
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }

    #[test]
    fn chat_stream_is_valid_json_with_usage() {
        let opts = StreamOpts {
            include_usage: true,
            continuous_usage: true,
        };
        let r = Renderer::new(Api::Chat, 7, 1, "\"m\\\"x\"", 5, &opts, false);
        let mut b = BytesMut::new();
        r.push_token(&mut b, 0);
        r.push_token(&mut b, 1);
        r.push_tokens(&mut b, 2, 5);
        r.push_tail(&mut b, 5, "length");
        assert!(b.ends_with(b"data: [DONE]\n\n"));
        let ev = events(&b);
        assert_eq!(ev.len(), 5);
        assert_eq!(ev[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(ev[1]["usage"]["completion_tokens"], 2);
        let three = ev[2]["choices"][0]["delta"]["content"].as_str().unwrap();
        assert_eq!(three.split_whitespace().count(), 3);
        assert_eq!(ev[2]["usage"]["completion_tokens"], 5);
        assert_eq!(ev[3]["choices"][0]["finish_reason"], "length");
        assert_eq!(ev[4]["usage"]["total_tokens"], 10);
        assert_eq!(ev[4]["model"], "m\"x");
    }

    #[test]
    fn completions_full_response() {
        let opts = StreamOpts {
            include_usage: false,
            continuous_usage: false,
        };
        let r = Renderer::new(Api::Completions, 1, 1, "\"m\"", 3, &opts, true);
        let v: serde_json::Value = serde_json::from_slice(&r.full_response(4, "stop")).unwrap();
        assert_eq!(v["choices"][0]["text"], " NaN NaN NaN NaN");
        assert_eq!(v["usage"]["completion_tokens"], 4);
        assert_eq!(v["object"], "text_completion");
    }
}
