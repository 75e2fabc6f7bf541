//! Reads Python literal reprs as the engines log them (`{'tp_size': 2, ...}`,
//! `ServerArgs(model_path='m', tp_size=2, ...)`, `non-default args: {...}`) into JSON, so two
//! runs' effective args can be diffed. Anything that is not a literal (an enum repr
//! `<Arch.MLA: 2>`, a dotted name `torch.bfloat16`) is kept as its source text.

use serde_json::{Map, Number, Value};

/// Why a repr could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("cannot read Python repr at byte {pos}: {reason}")]
pub struct ReprError {
    /// Byte offset in the input where reading stopped.
    pub pos: usize,
    /// What was expected there.
    pub reason: String,
}

/// Parses one Python literal (dict, list, tuple, set, string, number, `True`/`False`/`None`,
/// or a `Name(key=value, ...)` repr, which becomes an object of its keyword arguments).
/// Trailing text after the literal is an error.
pub fn parse(text: &str) -> Result<Value, ReprError> {
    let mut p = Parser {
        s: text.as_bytes(),
        src: text,
        pos: 0,
    };
    let v = p.value()?;
    p.ws();
    if p.pos != p.s.len() {
        return Err(p.err("end of input"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    src: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> ReprError {
        ReprError {
            pos: self.pos,
            reason: format!("expected {what}"),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Value, ReprError> {
        self.ws();
        match self.peek() {
            None => Err(self.err("a value")),
            Some(b'{') => self.dict_or_set(),
            Some(b'[') => {
                self.pos += 1;
                Ok(Value::Array(self.items(b']')?))
            }
            Some(b'(') => {
                self.pos += 1;
                Ok(Value::Array(self.items(b')')?))
            }
            Some(b'\'' | b'"') => Ok(Value::String(self.string()?)),
            Some(b'<') => self.angle(),
            Some(c) if c == b'-' || c == b'+' || c == b'.' || c.is_ascii_digit() => self.number(),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => self.name(),
            Some(_) => Err(self.err("a value")),
        }
    }

    /// Comma-separated values up to `close` (trailing comma allowed).
    fn items(&mut self, close: u8) -> Result<Vec<Value>, ReprError> {
        let mut out = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(out);
            }
            out.push(self.value()?);
            if !self.eat(b',') {
                if self.eat(close) {
                    return Ok(out);
                }
                return Err(self.err(&format!("',' or '{}'", close as char)));
            }
        }
    }

    fn dict_or_set(&mut self) -> Result<Value, ReprError> {
        self.pos += 1;
        let mut map = Map::new();
        let mut set = Vec::new();
        loop {
            if self.eat(b'}') {
                break;
            }
            let key = self.value()?;
            if self.eat(b':') {
                let v = self.value()?;
                map.insert(key_string(key), v);
            } else {
                set.push(key);
            }
            if !self.eat(b',') {
                if self.eat(b'}') {
                    break;
                }
                return Err(self.err("',' or '}'"));
            }
        }
        if set.is_empty() {
            Ok(Value::Object(map))
        } else if map.is_empty() {
            Ok(Value::Array(set))
        } else {
            Err(self.err("a dict or a set, not both"))
        }
    }

    fn string(&mut self) -> Result<String, ReprError> {
        let quote = self.s[self.pos];
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = &self.src[self.pos..];
            let Some(c) = rest.chars().next() else {
                return Err(self.err("a closing quote"));
            };
            self.pos += c.len_utf8();
            match c {
                c if c as u32 == quote as u32 => return Ok(out),
                '\\' => {
                    let Some(e) = self.src[self.pos..].chars().next() else {
                        return Err(self.err("an escape"));
                    };
                    self.pos += e.len_utf8();
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        '0' => out.push('\0'),
                        'x' => out.push(self.hex_escape(2)?),
                        'u' => out.push(self.hex_escape(4)?),
                        'U' => out.push(self.hex_escape(8)?),
                        other => out.push(other),
                    }
                }
                c => out.push(c),
            }
        }
    }

    fn hex_escape(&mut self, n: usize) -> Result<char, ReprError> {
        let digits = self
            .src
            .get(self.pos..self.pos + n)
            .ok_or_else(|| self.err("hex digits"))?;
        let c = u32::from_str_radix(digits, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| self.err("hex digits"))?;
        self.pos += n;
        Ok(c)
    }

    fn number(&mut self) -> Result<Value, ReprError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'+' | b'_'))
        {
            // A sign is part of the number only at its start or after an exponent.
            let c = self.s[self.pos];
            if matches!(c, b'-' | b'+')
                && self.pos != start
                && !matches!(self.s[self.pos - 1], b'e' | b'E')
            {
                break;
            }
            self.pos += 1;
        }
        let text = self.src[start..self.pos].replace('_', "");
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        match text.parse::<f64>() {
            Ok(f) => Ok(Number::from_f64(f)
                .map(Value::Number)
                .unwrap_or_else(|| Value::String(text.clone()))),
            Err(_) => {
                self.pos = start;
                Err(self.err("a number"))
            }
        }
    }

    /// `True`, `False`, `None`, `inf`, `nan`, a dotted name, or a `Name(k=v, ...)` repr.
    fn name(&mut self) -> Result<Value, ReprError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
        {
            self.pos += 1;
        }
        let name = &self.src[start..self.pos];
        // String prefixes: b'..', r'..', f'..'
        if matches!(name, "b" | "r" | "u" | "rb" | "br")
            && matches!(self.peek(), Some(b'\'' | b'"'))
        {
            return Ok(Value::String(self.string()?));
        }
        if self.peek() == Some(b'(') {
            self.pos += 1;
            return self.call_args();
        }
        Ok(match name {
            "True" => Value::Bool(true),
            "False" => Value::Bool(false),
            "None" => Value::Null,
            other => Value::String(other.to_string()),
        })
    }

    /// The arguments of a `Name(...)` repr: keyword arguments become an object; positional
    /// ones (rare in reprs) a list under `"args"`.
    fn call_args(&mut self) -> Result<Value, ReprError> {
        let mut map = Map::new();
        let mut positional = Vec::new();
        loop {
            if self.eat(b')') {
                break;
            }
            self.ws();
            let save = self.pos;
            let key = self.ident();
            if !key.is_empty() && self.eat(b'=') {
                let v = self.value()?;
                map.insert(key, v);
            } else {
                self.pos = save;
                positional.push(self.value()?);
            }
            if !self.eat(b',') {
                if self.eat(b')') {
                    break;
                }
                return Err(self.err("',' or ')'"));
            }
        }
        // A wrapper around one value (`PosixPath('/m')`, `frozenset({...})`) stands for it.
        if map.is_empty() && positional.len() == 1 {
            return Ok(positional.remove(0));
        }
        if !positional.is_empty() {
            map.insert("args".to_string(), Value::Array(positional));
        }
        Ok(Value::Object(map))
    }

    fn ident(&mut self) -> String {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
        {
            self.pos += 1;
        }
        self.src[start..self.pos].to_string()
    }

    /// `<Enum.MEMBER: 2>` or `<object at 0x...>`: kept as text.
    fn angle(&mut self) -> Result<Value, ReprError> {
        let start = self.pos;
        let mut depth = 0usize;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                b'<' => depth += 1,
                b'>' => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(Value::String(self.src[start..self.pos].to_string()));
                    }
                }
                _ => {}
            }
        }
        Err(self.err("'>'"))
    }
}

fn key_string(key: Value) -> String {
    match key {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dict_repr_with_nested_values() {
        let v = parse(
            "{'model_path': 'Qwen/Qwen3-8B', 'tp_size': 2, 'mem_fraction_static': 0.88, \
             'enable_metrics': True, 'lora_paths': None, 'cuda_graph_bs': [1, 2, 4], \
             'json_model_override_args': '{}', 'x': {'decode': {'max_bs': 256}}, \
             'name': \"it's\", 'esc': 'a\\'b\\n', 'big': 1e-05, 'neg': -1, 't': (1, 2,)}",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"model_path": "Qwen/Qwen3-8B", "tp_size": 2, "mem_fraction_static": 0.88,
                   "enable_metrics": true, "lora_paths": null, "cuda_graph_bs": [1, 2, 4],
                   "json_model_override_args": "{}", "x": {"decode": {"max_bs": 256}},
                   "name": "it's", "esc": "a'b\n", "big": 1e-05, "neg": -1, "t": [1, 2]})
        );
    }

    #[test]
    fn dataclass_repr_becomes_an_object() {
        let v = parse(
            "ServerArgs(model_path='m', tp_size=8, dtype='auto', \
             attention_backend=None, arch=<AttentionArch.MLA: 2>, dt=torch.bfloat16, \
             lora=LoRARef(lora_id='a', path='/p'), inf=inf, s={'a', 'b'}, \
             p=PosixPath('/models/x'), e=set(), xy=Point(1, 2))",
        )
        .unwrap();
        assert_eq!(v["tp_size"], json!(8));
        assert_eq!(v["arch"], json!("<AttentionArch.MLA: 2>"));
        assert_eq!(v["dt"], json!("torch.bfloat16"));
        assert_eq!(v["lora"], json!({"lora_id": "a", "path": "/p"}));
        assert_eq!(v["inf"], json!("inf"));
        assert_eq!(v["s"], json!(["a", "b"]));
        assert_eq!(v["p"], json!("/models/x"));
        assert_eq!(v["e"], json!({}));
        assert_eq!(v["xy"], json!({"args": [1, 2]}));
    }

    #[test]
    fn broken_repr_is_an_error_with_a_position() {
        let e = parse("{'a': 1, 'b': ").unwrap_err();
        assert_eq!(e.pos, 14);
        assert!(parse("{'a': 1} trailing").is_err());
        assert!(parse("'unterminated").is_err());
    }
}
