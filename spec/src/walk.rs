//! Typed, located access to a parsed TOML document.
//!
//! The spec is read by walking `toml::de::DeTable` (which keeps byte spans) rather than through
//! serde derive, because serde stops at the first problem while a user wants every problem of a
//! file at once, each with its line and field path.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::SpecError;

pub(crate) type Span = Range<usize>;
pub(crate) type Val<'i> = Spanned<DeValue<'i>>;

/// Collects the problems of one file.
pub(crate) struct Ctx {
    file: String,
    line_starts: Vec<usize>,
    pub(crate) errors: Vec<SpecError>,
}

impl Ctx {
    pub(crate) fn new(file: &str, text: &str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Ctx {
            file: file.to_string(),
            line_starts,
            errors: Vec::new(),
        }
    }

    /// 1-based line of a byte offset.
    pub(crate) fn line(&self, offset: usize) -> u32 {
        self.line_starts.partition_point(|&s| s <= offset) as u32
    }

    /// Records a problem; `span` None means the problem has no single line.
    pub(crate) fn error(&mut self, span: Option<&Span>, field: &str, message: impl Into<String>) {
        let line = span.map_or(0, |s| self.line(s.start));
        self.errors.push(SpecError {
            file: self.file.clone(),
            line,
            field: field.to_string(),
            message: message.into(),
        });
    }
}

/// `parent.key`, quoting the key unless it is a plain identifier.
pub(crate) fn key_path(parent: &str, key: &str) -> String {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let key = if plain {
        key.to_string()
    } else {
        format!("{key:?}")
    };
    if parent.is_empty() {
        key
    } else {
        format!("{parent}.{key}")
    }
}

/// Describes a value the way error messages show what was found.
pub(crate) fn describe(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => format!("{:?}", s.as_ref()),
        DeValue::Integer(i) => i.to_string(),
        DeValue::Float(f) => f.to_string(),
        DeValue::Boolean(b) => b.to_string(),
        DeValue::Datetime(d) => format!("a datetime ({d})"),
        DeValue::Array(_) => "a list".to_string(),
        DeValue::Table(_) => "a table".to_string(),
    }
}

/// The closest of `candidates` to `word`, when it is close enough to be a likely typo.
pub(crate) fn suggest<'c>(
    word: &str,
    candidates: impl IntoIterator<Item = &'c str>,
) -> Option<&'c str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A table of the document with its field path.
#[derive(Clone)]
pub(crate) struct Table<'t, 'i> {
    pub(crate) map: &'t DeTable<'i>,
    pub(crate) span: Span,
    pub(crate) path: String,
}

impl<'t, 'i> Table<'t, 'i> {
    pub(crate) fn get(&self, key: &str) -> Option<&'t Val<'i>> {
        self.map.get(key)
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The span of `key` itself (for "conflicts with" messages), falling back to the table's.
    pub(crate) fn key_span(&self, key: &str) -> Span {
        self.map
            .get_key_value(key)
            .map_or_else(|| self.span.clone(), |(k, _)| k.span())
    }

    pub(crate) fn field(&self, key: &str) -> String {
        key_path(&self.path, key)
    }

    /// Reports every key not in `known`, suggesting the nearest known key.
    pub(crate) fn check_keys(&self, ctx: &mut Ctx, known: &[&str]) {
        for (k, _) in self.map.iter() {
            let key = k.get_ref().as_ref();
            if known.contains(&key) {
                continue;
            }
            let msg = match suggest(key, known.iter().copied()) {
                Some(s) => format!("unknown key {key:?} (did you mean {s:?}?)"),
                None => format!(
                    "unknown key {key:?} (expected one of: {})",
                    known.join(", ")
                ),
            };
            ctx.error(Some(&k.span()), &self.field(key), msg);
        }
    }

    /// Reports a missing required key at the table's line.
    pub(crate) fn missing(&self, ctx: &mut Ctx, key: &str, what: &str) {
        let span = (!self.path.is_empty()).then_some(&self.span);
        ctx.error(span, &self.field(key), format!("missing: {what}"));
    }

    pub(crate) fn string(&self, ctx: &mut Ctx, key: &str) -> Option<String> {
        let v = self.get(key)?;
        as_string(ctx, &self.field(key), v)
    }

    pub(crate) fn required_string(&self, ctx: &mut Ctx, key: &str, what: &str) -> Option<String> {
        if !self.has(key) {
            self.missing(ctx, key, what);
            return None;
        }
        let s = self.string(ctx, key)?;
        if s.trim().is_empty() {
            ctx.error(
                Some(&self.get(key)?.span()),
                &self.field(key),
                "must not be empty",
            );
            return None;
        }
        Some(s)
    }

    pub(crate) fn u32(&self, ctx: &mut Ctx, key: &str, min: u32) -> Option<u32> {
        let v = self.get(key)?;
        as_u32(ctx, &self.field(key), v, min)
    }

    pub(crate) fn f64(&self, ctx: &mut Ctx, key: &str) -> Option<f64> {
        let v = self.get(key)?;
        as_f64(ctx, &self.field(key), v)
    }

    /// A number that must be greater than zero.
    pub(crate) fn positive_f64(&self, ctx: &mut Ctx, key: &str) -> Option<f64> {
        let v = self.get(key)?;
        positive_f64(ctx, &self.field(key), v)
    }

    pub(crate) fn bool(&self, ctx: &mut Ctx, key: &str) -> Option<bool> {
        let v = self.get(key)?;
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                let msg = format!("expected true or false, got {}", describe(other));
                ctx.error(Some(&v.span()), &self.field(key), msg);
                None
            }
        }
    }

    /// A sub-table (`[hosts]` or an inline table); None with an error if the key holds
    /// something else.
    pub(crate) fn table(&self, ctx: &mut Ctx, key: &str) -> Option<Table<'t, 'i>> {
        let v = self.get(key)?;
        as_table(ctx, &self.field(key), v)
    }

    /// A list; None with an error if the key holds something else or the list is empty.
    pub(crate) fn list(&self, ctx: &mut Ctx, key: &str) -> Option<&'t [Val<'i>]> {
        let v = self.get(key)?;
        as_list(ctx, &self.field(key), v)
    }

    /// A list of strings, each checked; None if the key is absent or any item is wrong.
    pub(crate) fn string_list(&self, ctx: &mut Ctx, key: &str) -> Option<Vec<String>> {
        let items = self.list(ctx, key)?;
        let path = self.field(key);
        let out: Vec<_> = items
            .iter()
            .enumerate()
            .map(|(i, v)| as_string(ctx, &format!("{path}[{i}]"), v))
            .collect();
        out.into_iter().collect()
    }
}

pub(crate) fn as_table<'t, 'i>(ctx: &mut Ctx, path: &str, v: &'t Val<'i>) -> Option<Table<'t, 'i>> {
    match v.get_ref() {
        DeValue::Table(map) => Some(Table {
            map,
            span: v.span(),
            path: path.to_string(),
        }),
        other => {
            ctx.error(
                Some(&v.span()),
                path,
                format!("expected a table, got {}", describe(other)),
            );
            None
        }
    }
}

pub(crate) fn as_list<'t, 'i>(ctx: &mut Ctx, path: &str, v: &'t Val<'i>) -> Option<&'t [Val<'i>]> {
    match v.get_ref() {
        DeValue::Array(a) if a.is_empty() => {
            ctx.error(Some(&v.span()), path, "must not be empty");
            None
        }
        DeValue::Array(a) => Some(a),
        other => {
            ctx.error(
                Some(&v.span()),
                path,
                format!("expected a list, got {}", describe(other)),
            );
            None
        }
    }
}

pub(crate) fn as_string(ctx: &mut Ctx, path: &str, v: &Val<'_>) -> Option<String> {
    match v.get_ref() {
        DeValue::String(s) => Some(s.to_string()),
        other => {
            ctx.error(
                Some(&v.span()),
                path,
                format!("expected a string, got {}", describe(other)),
            );
            None
        }
    }
}

pub(crate) fn as_u32(ctx: &mut Ctx, path: &str, v: &Val<'_>, min: u32) -> Option<u32> {
    let n = match v.get_ref() {
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix()).ok(),
        _ => None,
    };
    let Some(n) = n else {
        let msg = format!("expected an integer, got {}", describe(v.get_ref()));
        ctx.error(Some(&v.span()), path, msg);
        return None;
    };
    match u32::try_from(n) {
        Ok(n) if n >= min => Some(n),
        Ok(_) => {
            ctx.error(
                Some(&v.span()),
                path,
                format!("must be at least {min}, got {n}"),
            );
            None
        }
        Err(_) if n < 0 => {
            ctx.error(
                Some(&v.span()),
                path,
                format!("must be at least {min}, got {n}"),
            );
            None
        }
        Err(_) => {
            let msg = format!("must be at most {}, got {n}", u32::MAX);
            ctx.error(Some(&v.span()), path, msg);
            None
        }
    }
}

pub(crate) fn as_f64(ctx: &mut Ctx, path: &str, v: &Val<'_>) -> Option<f64> {
    let n = match v.get_ref() {
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .ok()
            .map(|n| n as f64),
        DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n.is_finite() => Some(n),
        _ => {
            let msg = format!("expected a number, got {}", describe(v.get_ref()));
            ctx.error(Some(&v.span()), path, msg);
            None
        }
    }
}

pub(crate) fn positive_f64(ctx: &mut Ctx, path: &str, v: &Val<'_>) -> Option<f64> {
    let n = as_f64(ctx, path, v)?;
    if n > 0.0 {
        Some(n)
    } else {
        ctx.error(
            Some(&v.span()),
            path,
            format!("must be greater than 0, got {n}"),
        );
        None
    }
}
