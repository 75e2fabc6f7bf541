//! An engine's own argument list, read from its `--help`: engines gain flags and choice values
//! every week, and a table compiled into fleetbench is always some versions behind. The agent
//! asks the engine it will start (`llama-server --help`, `python3 -m sglang.launch_server
//! --help`, `vllm serve --help=all`), and checks flags against what that build accepts; when the
//! engine cannot be asked, the built-in tables stand alone.
//!
//! Two formats are read, line by line, each an option row whose help text is ignored:
//!
//! ```text
//! -c,    --ctx-size N                     size of the prompt context      (llama.cpp, column 0)
//! -fa,   --flash-attn [on|off|auto]       set Flash Attention use
//!   --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE                     (argparse: SGLang, vLLM)
//!   --moe-a2a-backend {none,deepep,mooncake}
//!   --enable-prefix-caching, --no-enable-prefix-caching
//! ```
//!
//! A row's names are aliases of one option, except `--no-x`, which is the opposite setting and
//! becomes an option of its own (merging it would make `--no-x` an alias of `--x`).

use std::collections::BTreeSet;

/// One option of the engine's argument list.
#[derive(Debug, Clone, PartialEq)]
pub struct HelpOption {
    /// Every spelling, long names first.
    pub names: Vec<String>,
    /// It takes a value (else it is a switch). An optional value (`[on|off|auto]`) counts.
    pub takes_value: bool,
    /// The values it accepts, when the help lists them (`{a,b}`, `[a|b]`, `<0|1>`).
    pub choices: Option<Vec<String>>,
}

/// The options an engine build says it accepts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineArgs {
    pub options: Vec<HelpOption>,
}

/// Options fewer than this: the output was not a help page (an import error, a usage line).
const MIN_OPTIONS: usize = 5;

impl EngineArgs {
    /// Parses `--help` output of llama.cpp's or argparse's format. `Err` when the text holds
    /// too few option rows to be a help page (the caller falls back to the built-in tables).
    pub fn parse(text: &str) -> Result<EngineArgs, String> {
        let mut options: Vec<HelpOption> = Vec::new();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        // A shell example in a description (`sglang-router launch --help`: `  --policy
        // cache_aware` after a line continued with `\`) is not an option row.
        let mut continued = false;
        for line in text.lines() {
            let example = continued;
            continued = line.contains(" \\");
            if example || continued {
                continue;
            }
            for o in parse_row(line) {
                if o.names.iter().any(|n| seen.contains(n)) {
                    continue;
                }
                seen.extend(o.names.iter().cloned());
                options.push(o);
            }
        }
        if options.len() < MIN_OPTIONS {
            return Err(format!(
                "{} option rows found; not an argument list (first line: {:?})",
                options.len(),
                text.lines().next().unwrap_or_default()
            ));
        }
        Ok(EngineArgs { options })
    }

    /// The option one of whose spellings is `name`.
    pub fn find(&self, name: &str) -> Option<&HelpOption> {
        self.options
            .iter()
            .find(|o| o.names.iter().any(|n| n == name))
    }
}

fn valid_name(n: &str) -> bool {
    let body = n.trim_start_matches('-');
    let dashes = n.len() - body.len();
    (1..=2).contains(&dashes)
        && body
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

/// The choices a metavar lists, if it is a list.
fn choices(metavar: &str) -> Option<Vec<String>> {
    let m = metavar.split_whitespace().next().unwrap_or_default();
    let (inner, sep) = if let Some(i) = m.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        (i, ',')
    } else if let Some(i) = m.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        (i, '|')
    } else if let Some(i) = m.strip_prefix('<').and_then(|r| r.strip_suffix('>')) {
        (i, '|')
    } else {
        return None;
    };
    if !inner.contains(sep) {
        return None;
    }
    let v: Vec<String> = inner
        .split(sep)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    (v.len() >= 2).then_some(v)
}

/// The options one line declares (none for help text, headings and usage lines).
fn parse_row(line: &str) -> Vec<HelpOption> {
    let trimmed = line.trim_start();
    let indent = line.len() - trimmed.len();
    // Option rows sit at column 0 (llama.cpp) or 2-6 (argparse); help text is indented further.
    if indent > 6 || !trimmed.starts_with('-') {
        return Vec::new();
    }
    // llama.cpp pads short names (`-c,    --ctx-size N`): one space after each comma, then the
    // invocation ends at the first run of two spaces, where the help text starts.
    let mut packed = String::with_capacity(trimmed.len());
    let mut prev = '\0';
    for c in trimmed.chars() {
        // Runs of spaces after a comma shrink to one; a comma inside a metavar
        // (`{none,layer}`, `N0,N1,...`) keeps no space.
        if c == ' ' && (prev == ',' || (prev == ' ' && packed.ends_with(", "))) {
            if prev == ',' {
                packed.push(' ');
            }
            prev = ' ';
            continue;
        }
        packed.push(c);
        prev = c;
    }
    let invocation = packed.split("  ").next().unwrap_or_default().trim();
    let mut names = Vec::new();
    let mut metavars = Vec::new();
    for part in invocation.split(", ") {
        let part = part.trim();
        let (name, metavar) = match part.split_once(' ') {
            Some((n, m)) => (n, m.trim()),
            None => (part, ""),
        };
        if !valid_name(name) {
            return Vec::new();
        }
        names.push(name.to_string());
        if !metavar.is_empty() {
            metavars.push(metavar.to_string());
        }
    }
    if names.is_empty() {
        return Vec::new();
    }
    let takes_value = !metavars.is_empty();
    let choice_list = metavars.iter().find_map(|m| choices(m));
    let (mut negative, positive): (Vec<String>, Vec<String>) = names
        .into_iter()
        .partition(|n| n.starts_with("--no-") || n.starts_with("-no-"));
    let mut out = Vec::new();
    if !positive.is_empty() {
        let mut names = positive;
        // Long names first: the canonical spelling of a row is its first long name.
        names.sort_by_key(|n| !n.starts_with("--"));
        out.push(HelpOption {
            names,
            takes_value,
            choices: choice_list,
        });
    }
    if !negative.is_empty() {
        negative.sort_by_key(|n| !n.starts_with("--"));
        out.push(HelpOption {
            names: negative,
            takes_value: false,
            choices: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_both_formats() {
        let o = parse_row("-fa,   --flash-attn [on|off|auto]       set Flash Attention use");
        assert_eq!(o[0].names, vec!["--flash-attn", "-fa"]);
        assert_eq!(
            o[0].choices.as_deref(),
            Some(&["on".to_string(), "off".into(), "auto".into()][..])
        );
        let o = parse_row("-c,    --ctx-size N                     size of the prompt context");
        assert_eq!(o[0].names, vec!["--ctx-size", "-c"]);
        let o = parse_row("-kvu,  --kv-unified, -no-kvu, --no-kv-unified");
        assert_eq!(o[1].names, vec!["--no-kv-unified", "-no-kvu"]);
        let o = parse_row("--perf, --no-perf                       whether to enable");
        assert_eq!(o.len(), 2);
        assert!(!o[0].takes_value && o[1].names == vec!["--no-perf"]);
        let o = parse_row("  --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE");
        assert_eq!(o[0].names, vec!["--tp-size", "--tensor-parallel-size"]);
        assert!(o[0].takes_value && o[0].choices.is_none());
        let o = parse_row("  --moe-a2a-backend {none,deepep}  The backend.");
        assert_eq!(o[0].choices.as_ref().unwrap().len(), 2);
        assert!(parse_row("                                        - none: text").is_empty());
        assert!(parse_row("usage: launch_server.py [-h] [--model-path MODEL_PATH]").is_empty());
        assert!(parse_row("----- common params -----").is_empty());
        assert!(EngineArgs::parse("ModuleNotFoundError: No module named 'sglang'").is_err());
    }

    #[test]
    fn shell_examples_in_a_description_are_not_options() {
        // `sglang-router launch --help`: an example command before the option list would
        // otherwise declare `--policy` with a value and no choices.
        let text = "Examples:\n  python -m sglang_router.launch_router --pd-disaggregation \\\n    \
                    --prefill http://p:8000 9000 \\    # With bootstrap port\n    \
                    --policy cache_aware\n\noptions:\n  -h, --help  show this help\n  \
                    --policy {random,round_robin}\n  --prefill PREFILL [PREFILL ...]\n  \
                    --host HOST\n  --port PORT\n  --dp-aware\n";
        let args = EngineArgs::parse(text).unwrap();
        let p = args.find("--policy").unwrap();
        assert_eq!(p.choices.as_deref().unwrap(), ["random", "round_robin"]);
        assert_eq!(args.options.len(), 6);
    }
}
