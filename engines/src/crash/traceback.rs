//! Python tracebacks in a log tail: where each starts and ends, its exception and frames.

use std::sync::LazyLock;

use regex::Regex;

static FRAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^\s+File "([^"]+)", line (\d+), in (.+?)\s*$"#).expect("valid regex")
});

static EXCEPTION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$").expect("valid regex"));

static CARETS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*[\^~]+[\s\^~]*$").expect("valid regex"));

/// One traceback found in a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traceback {
    /// Index of the `Traceback (most recent call last):` line.
    pub start: usize,
    /// Index of the exception line (or the last line read).
    pub end: usize,
    /// Exception type as printed (`torch.OutOfMemoryError`); empty when the traceback was cut.
    pub exception: String,
    /// The message after `Type: `.
    pub message: String,
    /// Frames, outermost first: `path/file.py:123 in func: code`.
    pub frames: Vec<String>,
}

impl Traceback {
    /// Whether line `index` of the log is part of this traceback.
    pub fn contains_line(&self, index: usize) -> bool {
        (self.start..=self.end).contains(&index)
    }

    /// Wrappers that only report a failure whose cause was printed elsewhere.
    fn is_wrapper(&self) -> bool {
        let name = self.exception.rsplit('.').next().unwrap_or(&self.exception);
        matches!(
            name,
            "EngineDeadError"
                | "EngineGenerateError"
                | "SystemExit"
                | "KeyboardInterrupt"
                | "CancelledError"
                | "ChildProcessError"
        ) || self.message.contains("See root cause above")
            || self.message.contains("See stack trace (above)")
            || self.exception.is_empty()
    }
}

/// Finds every traceback in `lines` (already stripped of logger prefixes).
pub fn parse_tracebacks(lines: &[String]) -> Vec<Traceback> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].contains("Traceback (most recent call last):") {
            i += 1;
            continue;
        }
        let start = i;
        let mut tb = Traceback {
            start,
            end: start,
            exception: String::new(),
            message: String::new(),
            frames: Vec::new(),
        };
        i += 1;
        while i < lines.len() {
            let line = &lines[i];
            if let Some(c) = FRAME.captures(line) {
                let code = lines
                    .get(i + 1)
                    .filter(|n| !FRAME.is_match(n) && n.starts_with("    ") && !CARETS.is_match(n))
                    .map(|n| n.trim().to_string());
                let mut frame = format!("{}:{} in {}", short_path(&c[1]), &c[2], &c[3]);
                if let Some(code) = &code {
                    frame.push_str(": ");
                    frame.push_str(code);
                    i += 1;
                }
                tb.frames.push(frame);
                tb.end = i;
                i += 1;
                continue;
            }
            if line.starts_with(' ') || line.trim().is_empty() {
                // Code, caret lines, or an interleaved indented line: part of the traceback.
                i += 1;
                continue;
            }
            if line.contains("Traceback (most recent call last):") {
                break;
            }
            if let Some(c) = EXCEPTION.captures(line) {
                tb.exception = c[1].to_string();
                tb.message = c
                    .get(2)
                    .map(|m| m.as_str().trim().to_string())
                    .unwrap_or_default();
                tb.end = i;
                i += 1;
                break;
            }
            // A foreign line (another process's log) inside the traceback: skip it.
            i += 1;
        }
        out.push(tb);
    }
    out
}

/// The traceback that most likely names the cause: the first that is not a wrapper
/// (`EngineDeadError`, `SystemExit`, ...), else the first.
pub fn primary(tbs: &[Traceback]) -> Option<&Traceback> {
    tbs.iter().find(|t| !t.is_wrapper()).or_else(|| tbs.first())
}

/// `.../site-packages/sglang/srt/x.py` -> `sglang/srt/x.py`.
fn short_path(p: &str) -> &str {
    for marker in ["site-packages/", "dist-packages/"] {
        if let Some(i) = p.rfind(marker) {
            return &p[i + marker.len()..];
        }
    }
    p
}
